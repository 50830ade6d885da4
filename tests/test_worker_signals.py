"""The worker's cache and maintenance signals, with real PHP (each live Laravel line) and real Redis.

* ``queue:restart`` through the ``file`` and ``database`` cache stores (the 8–10 and 11+ defaults):
  ``php artisan queue:restart`` stops a running ``laraq work``, ``laraq restart`` stops a running
  ``php artisan queue:work``; the ``maxExceptions`` counter is shared by PHP and Python in both stores.
* ``queue:pause`` keys (12.40+) and the global pause (13.25+): ``php artisan queue:pause`` /
  ``queue:resume`` of the real 12.67 and 13.26 apps, on the Redis and the database cache store, write what
  laraq writes, and a running ``laraq work`` skips a paused queue and takes it again after resume;
  12.39 and 13.24 ignore the keys.
* Maintenance mode: ``php artisan down`` / ``up`` (``storage/framework/down``) and the 9+ cache flag;
  ``--force``; ``--once`` while down sleeps and pops nothing.
* ``--stop-when-empty-for`` (artisan and laraq both take it where the line has it) and ``--stop-when-empty``
  after a payload was moved to ``failed_jobs``.

What only laraq decides (the cache maintenance flag by version, the pause keys by version, the version
rule of ``--stop-when-empty-for``, what a bad payload and ``--unhandled requeue`` leave) runs with the fixture
app's jobs pushed from Python (``pyapp.PyApp``), once: the Laravel line of the app does not change it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import click
import pytest
import redis
import test_worker_support as support
from conftest import ROOT, corpus_dir, require_laravel, skip_without_queue_pause
from phpapp import PhpApp
from pyapp import PyApp
from test_worker_support import laraq_env, popen_laraq, run_laraq, wait_for

from laraq.cli.work import build_worker, default_params
from laraq.config.settings import LaravelSettings
from laraq.stores.cache import LaravelCache, make_cache
from laraq.stores.cache_stores import FileCache
from laraq.worker.worker import Worker

App = PhpApp | PyApp


def qkey(php: App, queue: str) -> str:
    return php.prefix + "queues:" + queue


def stop(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def env_for(php: App, **extra: str) -> dict[str, str]:
    """``laraq work``'s environment: the app's own, plus its project dir (for ``storage/``)."""
    return laraq_env(php, LARAQ_BASE_PATH=str(php.workdir), **extra)


def runs_on(php: App, queue: str) -> list[dict[str, Any]]:
    return [r for r in php.runs() if r["queue"] == queue]


def failed_rows(php: App) -> list[dict[str, Any]]:
    conn = sqlite3.connect(php.db_path)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM failed_jobs ORDER BY id")]
    conn.close()
    return rows


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.close()


def make_worker(php: App, workers: list[Worker], env: dict[str, str] | None = None, **overrides: Any) -> Worker:
    params = default_params(laravel=php.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20)
    params.update(overrides)
    worker = build_worker(params, env=env or env_for(php), app=support.app)
    workers.append(worker)
    return worker


# -- restart and maxExceptions through the file and database stores ------------------------------------


@pytest.fixture(params=["file", "database"])
def store_app(request: pytest.FixtureRequest, laravel: str, redis_client: Any, redis_server: Any,
              monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel, cache_store=request.param)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


@pytest.mark.php
def test_artisan_queue_restart_stops_laraq(store_app: PhpApp) -> None:
    worker = popen_laraq(store_app, "--queue=py", "--sleep=0.2", env=env_for(store_app))
    try:
        store_app.tool("dispatch", "python", "--queue=py")
        wait_for(store_app.runs)  # up and working (it has read the restart stamp)
        store_app.artisan("queue:restart", check=True)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "not redis" not in worker.stderr.read()


@pytest.mark.php
def test_laraq_restart_stops_artisan(store_app: PhpApp) -> None:
    artisan = store_app.popen_artisan("queue:work", "redis", "--queue=php", "--sleep=1")
    try:
        store_app.tool("dispatch", "echo", "--queue=php")
        wait_for(store_app.runs)  # PHP is up and has read the (missing) restart stamp
        proc = subprocess.run([sys.executable, "-c", "from laraq.cli import main; main()", "restart", "--laravel", store_app.release],
                              env=env_for(store_app), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "Broadcasting queue restart signal" in proc.stdout
        assert artisan.wait(30) == 0
    finally:
        if artisan.poll() is None:
            artisan.kill()
    stamp = store_app.tool("cache-get", "illuminate:queue:restart")["value"]
    assert isinstance(stamp, int) and abs(stamp - time.time()) < 60


@pytest.mark.php
def test_max_exceptions_counted_across_php_and_python(store_app: PhpApp, redis_client: Any) -> None:
    store_app.tool("dispatch", "echo", "--queue=mx", "--args=" + json.dumps(
        {"mode": "fail", "settings": {"tries": 10, "maxExceptions": 2}}))
    uuid = json.loads(redis_client.lrange(qkey(store_app, "mx"), 0, -1)[0])["uuid"]
    cache = make_cache(LaravelSettings.from_env(env_for(store_app), version=store_app.release))
    assert cache.driver == store_app.cache_store

    store_app.artisan("queue:work", "redis", "--once", "--queue=mx", check=True)  # exception 1: released
    assert cache.get(f"job-exceptions:{uuid}") == 1
    if isinstance(cache, FileCache):
        raw = cache.path(f"job-exceptions:{uuid}").read_bytes()
        assert raw[10:] == b"i:1;" and 0 < int(raw[:10]) - time.time() <= 86400
    for member in redis_client.zrange(qkey(store_app, "mx:delayed"), 0, -1):  # make the released job due now
        redis_client.zadd(qkey(store_app, "mx:delayed"), {member: 0})
    proc = run_laraq(store_app, "--once", "--queue=mx", env=env_for(store_app))  # exception 2: the limit
    assert proc.returncode == 0, proc.stderr

    assert [(r["runner"], r["attempts"]) for r in store_app.runs()] == [("php", 1), ("python", 2)]
    (row,) = failed_rows(store_app)
    assert row["exception"].startswith("RuntimeError: echo job failed on purpose")
    assert cache.get(f"job-exceptions:{uuid}") is None  # forgotten at the limit, as PHP does
    assert store_app.tool("cache-get", f"job-exceptions:{uuid}") == {"value": None}


# -- queue:pause (12.40+) and the global pause (13.25+) ----------------------------------------------------


def _corpus_entry(version: str, kind: str) -> dict[str, Any]:
    path = corpus_dir() / "manifest.json"
    if not path.exists():
        pytest.skip(f"wire corpus not found at {corpus_dir()}")
    (entry,) = [e for e in json.loads(path.read_text()) if e["version"] == version and e["kind"] == kind]
    return entry


@pytest.fixture(params=["12", "13"])
def modern(request: pytest.FixtureRequest, redis_client: Any, redis_server: Any) -> PhpApp:
    """The real Laravel 12.67 / 13.26 app (stock hyphenated prefixes) on its Redis cache store."""
    require_laravel(request.param)
    return PhpApp(redis_server.port, version=request.param, cache_store="redis")


def _modern_py(version: str, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PyApp:
    """The Laravel ``version`` fixture app (stock hyphenated prefixes) on its Redis cache store, jobs from Python."""
    app = PyApp(redis_server.port, version=version, cache_store="redis")
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def _modern_cache(app: App, version: str, redis_server: Any) -> LaravelCache:
    settings = LaravelSettings.from_env({**app.env, "CACHE_STORE": "redis"}, version=version)
    cache = make_cache(settings)
    assert isinstance(cache, LaravelCache)
    return cache


@pytest.mark.php
@pytest.mark.parametrize("store", ["redis", "database"])
@pytest.mark.parametrize("version", ["9", "10", "11", "12", "13"])
def test_artisan_pause_is_what_laraq_writes_and_reads(version: str, store: str, redis_client: Any,
                                                      redis_server: Any) -> None:
    """``php artisan queue:pause``/``queue:resume`` of the real 12.67/13.26 app against laraq's pause."""
    skip_without_queue_pause(version)
    require_laravel(version)
    app = PhpApp(redis_server.port, version=version, cache_store=store)
    settings = LaravelSettings.from_env(app.env, version=app.release)
    cache = make_cache(settings)
    try:
        app.artisan("queue:pause", "redis:default", check=True)
        assert cache.is_paused("redis", "default") and not cache.is_paused("redis", "b")
        php_paused = app.tool("cache-get", "illuminate:queue:paused:redis:default")["value"]
        cache.resume("redis", "default")
        assert app.tool("cache-get", "illuminate:queue:paused:redis:default")["value"] is None
        cache.pause("redis", "default")
        assert app.tool("cache-get", "illuminate:queue:paused:redis:default")["value"] == php_paused is True
        if isinstance(cache, LaravelCache):
            assert redis_server.client(1).ttl(cache.key("illuminate:queue:paused:redis:default")) == -1

        app.tool("dispatch", "python", "--queue=default")
        app.tool("dispatch", "python", "--queue=b")
        # artisan and laraq both skip the paused queue and take the other one
        app.artisan("queue:work", "redis", "--queue=default,b", "--stop-when-empty", check=True)
        assert [r["queue"] for r in app.runs()] == ["b"]
        app.tool("dispatch", "python", "--queue=b")
        proc = run_laraq(app, "--queue=default,b", "--stop-when-empty")
        assert proc.returncode == 0, proc.stderr
        assert [(r["runner"], r["queue"]) for r in app.runs()] == [("php", "b"), ("python", "b")]
        assert redis_client.llen(qkey(app, "default")) == 1
        app.artisan("queue:resume", "redis:default", check=True)
        assert not cache.is_paused("redis", "default")
        proc = run_laraq(app, "--queue=default,b", "--stop-when-empty")
        assert proc.returncode == 0, proc.stderr
        assert [r["queue"] for r in app.runs()][-1] == "default"

        if version == "13":
            # the global pause (13.25+): `queue:pause --all` stops every queue for both workers
            app.artisan("queue:pause", "--all", check=True)
            app.tool("dispatch", "python", "--queue=a")
            before = len(app.runs())
            app.artisan("queue:work", "redis", "--queue=a", "--stop-when-empty", check=True)
            proc = run_laraq(app, "--queue=a", "--stop-when-empty")
            assert proc.returncode == 0, proc.stderr
            assert len(app.runs()) == before and redis_client.llen(qkey(app, "a")) == 1
            php_all = app.tool("cache-get", "illuminate:queues:paused")["value"]
            cache.resume_all()
            assert app.tool("cache-get", "illuminate:queues:paused")["value"] is None
            cache.pause_all()
            assert app.tool("cache-get", "illuminate:queues:paused")["value"] == php_all
            app.artisan("queue:resume", "--all", check=True)
            proc = run_laraq(app, "--queue=a", "--stop-when-empty")
            assert proc.returncode == 0, proc.stderr
            assert [r["queue"] for r in app.runs()][-1] == "a"
    finally:
        cache.close()


@pytest.mark.php
def test_paused_queue_is_skipped_until_resumed(modern: PhpApp, redis_server: Any) -> None:
    cache = _modern_cache(modern, modern.release, redis_server)
    entry = _corpus_entry("12.67.0", "queue-pause")
    cache.pause("redis", "default")
    db1 = redis_server.client(1)
    assert db1.get(entry["redis_key"]) == (corpus_dir() / entry["file"]).read_bytes() == b"b:1;"
    assert db1.ttl(entry["redis_key"]) == -1

    modern.tool("dispatch", "python", "--queue=default")
    modern.tool("dispatch", "python", "--queue=b")
    worker = popen_laraq(modern, "--queue=default,b", "--sleep=0.2", env=laraq_env(modern, CACHE_STORE="redis"))
    try:
        wait_for(lambda: runs_on(modern, "b"))
        time.sleep(1.5)  # several loops: the paused first queue is skipped every time
        assert runs_on(modern, "default") == []
        assert redis_server.client(0).llen("laravel-database-queues:default") == 1
        modern.artisan("queue:resume", "redis:default", check=True)
        wait_for(lambda: runs_on(modern, "default"))
    finally:
        assert stop(worker) == 0


def test_global_pause_stops_every_queue(redis_client: Any, redis_server: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    modern = _modern_py("13", redis_server, monkeypatch)
    cache = _modern_cache(modern, "13.26", redis_server)
    entry = _corpus_entry("13.x", "queue-pause-all")
    cache.pause_all()
    assert redis_server.client(1).get(entry["redis_key"]) == (corpus_dir() / entry["file"]).read_bytes()

    modern.dispatch("python", "a")
    modern.dispatch("python", "b")
    env = laraq_env(modern, CACHE_STORE="redis")
    paused = run_laraq(modern, "--laravel", "13.26", "--queue=a,b", "--stop-when-empty", env=env)
    assert paused.returncode == 0, paused.stderr
    assert modern.runs() == []
    # 13.24 has no global pause: the key means nothing there
    older = run_laraq(modern, "--laravel", "13.24", "--queue=a", "--stop-when-empty", env=env)
    assert older.returncode == 0, older.stderr
    assert [r["queue"] for r in modern.runs()] == ["a"]
    cache.resume_all()
    resumed = run_laraq(modern, "--laravel", "13.26", "--queue=a,b", "--stop-when-empty", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert [r["queue"] for r in modern.runs()] == ["a", "b"]


def test_pause_keys_are_ignored_before_12_40(redis_client: Any, redis_server: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    modern = _modern_py("12", redis_server, monkeypatch)
    db1 = redis_server.client(1)
    for key in ("illuminate:queue:paused:redis:a", "illuminate:queue:paused:redis:b", "illuminate:queues:paused"):
        db1.set("laravel-database-laravel-cache-" + key, b"b:1;")
    modern.dispatch("python", "a")
    modern.dispatch("python", "b")
    proc = run_laraq(modern, "--laravel", "12.39", "--queue=a,b", "--stop-when-empty",
                     env=laraq_env(modern, CACHE_STORE="redis"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["queue"] for r in modern.runs()) == ["a", "b"]
    # ... and honoured from 12.40
    modern.dispatch("python", "a")
    proc = run_laraq(modern, "--laravel", "12.40", "--queue=a,b", "--stop-when-empty",
                     env=laraq_env(modern, CACHE_STORE="redis"))
    assert proc.returncode == 0 and len(modern.runs()) == 2


# -- maintenance mode ------------------------------------------------------------------------------------


@pytest.fixture
def app8(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    """Each live app in turn (the name is historical: it was the Laravel 8 app only)."""
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


@pytest.mark.php
def test_artisan_down_stops_popping_until_up(app8: PhpApp, redis_client: Any) -> None:
    app8.artisan("down", check=True)
    assert (app8.storage / "framework" / "down").exists()
    app8.tool("dispatch", "python", "--queue=py")
    clients = {c["id"] for c in redis_client.client_list()}
    worker = popen_laraq(app8, "--queue=py", "--sleep=0.2", env=env_for(app8))
    try:
        # the worker is up (it reads Redis): a connection that was not there before (a count could miss it
        # while the dispatching PHP process's connection is still being closed)
        wait_for(lambda: any(c["id"] not in clients for c in redis_client.client_list()))
        time.sleep(2)  # several down loops
        assert app8.runs() == [] and redis_client.llen(qkey(app8, "py")) == 1
        assert redis_client.zcard(qkey(app8, "py:reserved")) == 0
        app8.artisan("up", check=True)
        wait_for(app8.runs)
    finally:
        assert stop(worker) == 0


@pytest.mark.php
def test_once_while_down_sleeps_and_pops_nothing(app8: PhpApp, redis_client: Any) -> None:
    app8.artisan("down", check=True)
    app8.tool("dispatch", "python", "--queue=py")
    started = time.monotonic()
    proc = run_laraq(app8, "--once", "--queue=py", "--sleep=1", env=env_for(app8))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started >= 1
    assert app8.runs() == [] and redis_client.llen(qkey(app8, "py")) == 1
    # artisan agrees
    app8.artisan("queue:work", "redis", "--once", "--queue=py", "--sleep=0", check=True)
    assert app8.runs() == [] and redis_client.llen(qkey(app8, "py")) == 1
    # --force works while down
    forced = run_laraq(app8, "--once", "--force", "--queue=py", env=env_for(app8))
    assert forced.returncode == 0, forced.stderr
    assert [r["runner"] for r in app8.runs()] == ["python"]


def test_cache_maintenance_flag_9_plus(pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    env = env_for(pyapp, APP_MAINTENANCE_DRIVER="cache", APP_MAINTENANCE_STORE="file", CACHE_STORE="redis")
    store = make_cache(LaravelSettings.from_env(env, version="11"), "file")
    down = {"except": [], "redirect": None, "retry": None, "secret": None, "status": 503, "template": None}
    # what CacheBasedMaintenanceMode::activate writes: the down payload, forever
    store.put("illuminate:foundation:down", down)
    pyapp.dispatch("python", "py")
    assert make_worker(pyapp, workers, env=env, laravel="11", queue="py").daemon() == 0
    assert pyapp.runs() == [] and redis_client.llen(qkey(pyapp, "py")) == 1
    # 8.x only knows the file: the cache flag means nothing there
    assert make_worker(pyapp, workers, env=env, laravel="8", queue="py").daemon() == 0
    assert len(pyapp.runs()) == 1
    # with the cache driver the file does not count (artisan down's file: test_artisan_down_stops_popping_until_up);
    # forgetting the flag lets the worker pop again
    pyapp.dispatch("python", "py")
    (pyapp.storage / "framework" / "down").write_text(json.dumps(down))
    store.forget("illuminate:foundation:down")
    assert make_worker(pyapp, workers, env=env, laravel="11", queue="py").daemon() == 0
    assert len(pyapp.runs()) == 2


# -- --stop-when-empty-for and --stop-when-empty ---------------------------------------------------------


def test_stop_when_empty_for(pyapp: PyApp, workers: list[Worker]) -> None:
    pyapp.dispatch("python", "py")
    worker = make_worker(pyapp, workers, laravel="12.60", queue="py", stop_when_empty=False,
                         stop_when_empty_for=1, sleep=0.1)
    started = time.monotonic()
    assert worker.daemon() == 0
    assert time.monotonic() - started >= 1  # waited the empty second out (and then stopped by itself)
    assert len(pyapp.runs()) == 1
    for older in ("8.83.26", "9.52.22", "10.50.3", "11.52", "12.59", "13.9"):  # 11.53+, 12.60+, 13.10+ only
        with pytest.raises(click.UsageError, match="stop-when-empty-for"):
            make_worker(pyapp, workers, laravel=older, queue="py", stop_when_empty_for=1)
    assert run_laraq(pyapp, "--laravel", "10.50.3", "--stop-when-empty-for=1", "--queue=py").returncode == 2
    proc = run_laraq(pyapp, "--laravel", "11.53", "--stop-when-empty-for=1", "--sleep=0.2", "--queue=py",
                     env=laraq_env(pyapp, CACHE_STORE="redis"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.php
def test_stop_when_empty_for_as_artisan_takes_it(app8: PhpApp) -> None:
    """11.53+ / 12.60+ / 13.10+: artisan and laraq both take it and stop once idle that long."""
    if not app8.profile.has_stop_when_empty_for:
        pytest.skip(f"Laravel {app8.release}'s queue:work has no --stop-when-empty-for (11.53, 12.60, 13.10)")
    app8.tool("dispatch", "python", "--queue=py")
    assert run_laraq(app8, "--stop-when-empty-for=1", "--sleep=0.2", "--queue=py").returncode == 0
    app8.tool("dispatch", "echo", "--queue=py")
    php = app8.artisan("queue:work", "redis", "--queue=py", "--stop-when-empty-for=1", "--sleep=0.2")
    assert php.returncode == 0, php.stderr
    assert [r["runner"] for r in app8.runs()] == ["python", "php"]


def test_stop_when_empty_after_a_payload_moved_to_failed_jobs(pyapp: PyApp, redis_client: Any,
                                                              workers: list[Worker]) -> None:
    # reservable by the pop script (Lua reads "0x1" as 1) but not a payload Python accepts; named for a
    # class Python handles, so that the reserve takes it (--unhandled leave leaves other names to PHP)
    bad = (b'{"uuid":"bad-1","displayName":"App\\\\Jobs\\\\PythonJob","job":"Illuminate\\\\Queue\\\\'
           b'CallQueuedHandler@call","attempts":"0x1","data":{"commandName":"App\\\\Jobs\\\\PythonJob","command":"x"}}')
    redis_client.rpush(qkey(pyapp, "py"), bad)
    pyapp.dispatch("python", "py")
    assert make_worker(pyapp, workers, queue="py").daemon() == 0
    (row,) = failed_rows(pyapp)
    assert row["uuid"] == "bad-1" and "laraq cannot read the job payload" in row["exception"]
    assert [r["class"] for r in pyapp.runs()] == ["App\\Jobs\\PythonJob"]  # the loop went on
    assert not redis_client.exists(qkey(pyapp, "py"), qkey(pyapp, "py:reserved"))


def test_requeue_goes_through_the_shared_script(pyapp: PyApp, redis_client: redis.Redis,
                                                workers: list[Worker]) -> None:
    pyapp.dispatch("plain", "py")
    body = redis_client.lrange(qkey(pyapp, "py"), 0, -1)[0]
    worker = make_worker(pyapp, workers, queue="py", unhandled="requeue", unhandled_delay=30)
    assert worker.daemon() == 0
    assert redis_client.zrange(qkey(pyapp, "py:delayed"), 0, -1) == [body]
    assert redis_client.script_exists(worker.queue.scripts.sha("requeue")) == [True]
