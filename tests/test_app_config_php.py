"""laraq on an app configured the way teams configure real apps, against artisan on the same app.

The ``fixtures/laravel{8..13}-custom`` apps write their values as literals in ``config/*.php`` and not in
``.env`` (their README lists them: Redis ``options.prefix``, a cache store on another Redis database with
its own prefix, a renamed queue connection with its own queue and ``retry_after``, a renamed failed-job
table, ``app.timezone`` Europe/Paris). Their ``.env`` even holds the stock values (``REDIS_PREFIX``,
``REDIS_QUEUE``, ``CACHE_PREFIX``, ``QUEUE_CONNECTION=redis``) that the config files ignore.

laraq runs as a process with only ``--env-file`` and ``--app`` and a clean environment; each scenario is
done by ``php artisan`` and by laraq and the Redis and database end states are compared: the queue worked
and its keys (a release lands in the same ``:delayed`` set), ``queue:restart``, ``queue:pause`` /
``queue:continue`` (12/13), a ``ShouldBeUnique`` lock released, a failed row in the renamed table that
``queue:retry`` pushes back, ``maxExceptions`` counted in the cache store's database, ``failed_at`` in the
app's timezone. One variant runs ``config:cache`` first, so laraq reads ``bootstrap/cache/config.php``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import skip_without_queue_pause
from phpapp import APP_ENV_PREFIXES, PhpApp
from test_worker_support import ROOT

pytestmark = pytest.mark.php

PREFIX = "acme_q:"
QUEUE = "acme-work"
CONNECTION = "jobs"
FAILED_TABLE = "acme_failed_jobs"
CACHE_DB = 3
CACHE_REDIS_PREFIX = "acme_c:"  # the cache-store connection's own options.prefix
TZ = ZoneInfo("Europe/Paris")


def cache_prefix(app: PhpApp) -> str:
    """The cache store's key prefix as Laravel applies it (up to 10 ``RedisStore`` adds a colon)."""
    return "acme-cache:" if app.version in ("8", "9", "10") else "acme-cache-"


@pytest.fixture(params=["booted", "cached"])
def app(laravel: str, redis_server: Any, request: pytest.FixtureRequest) -> PhpApp:
    for db in (0, 1, CACHE_DB):
        redis_server.client(db).flushall()
    php = PhpApp(redis_server.port, version=laravel, variant="custom")
    if request.param == "cached":
        php.artisan("config:cache", check=True)
        assert (php.path / "bootstrap" / "cache" / "config.php").is_file()
    return php


def clean_env(app: PhpApp) -> dict[str, str]:
    """The process environment laraq gets: nothing of the app's settings, only the test's log file."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(APP_ENV_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    env["LARAQ_LOG"] = str(app.log_path)
    return env


def laraq_cmd(app: PhpApp, command: str, *args: str) -> list[str]:
    extra = ["--app", "test_worker_support:app", "--sleep", "0"] if command == "work" else []
    return [sys.executable, "-c", "from laraq.cli import main; main()", command,
            "--env-file", str(app.path / ".env"), *extra, *args]


def laraq(app: PhpApp, *args: str, command: str = "work") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(laraq_cmd(app, command, *args), env=clean_env(app), cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    return proc


def dispatch_echo(app: PhpApp, mode: str = "ok", seconds: float = 0, **settings: Any) -> str:
    """An EchoJob on the app's default connection and queue (as a controller's dispatch() does; on 11+ the
    framework's own ``redis`` connection is merged into the app's, so the tool is told the name)."""
    app.tool("dispatch", "echo", f"--connection={CONNECTION}", "--args=" + json.dumps({"args": {}, "mode": mode, "seconds": seconds,
                                                          "settings": settings}))
    client = app_redis(app)
    return str(json.loads(client.lrange(f"{PREFIX}queues:{QUEUE}", -1, -1)[0])["uuid"])


def app_redis(app: PhpApp, db: int = 0) -> Any:
    import redis

    return redis.Redis(port=app.redis_port, db=db)


def failed_rows(app: PhpApp) -> list[dict[str, Any]]:
    conn = sqlite3.connect(app.db_path)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute(f"SELECT * FROM {FAILED_TABLE} ORDER BY id")]
    conn.close()
    return rows


def runners(app: PhpApp) -> list[tuple[str, str]]:
    return [(r["runner"], r.get("queue") or QUEUE) for r in app.runs()]


# -- what laraq reads ---------------------------------------------------------------------------------------

def test_laraq_config_reads_the_apps_config(app: PhpApp) -> None:
    proc = laraq(app, "--json", command="config")
    info = json.loads(proc.stdout)
    facts = {f["setting"]: f for f in info["settings"]}
    php = app.tool("config", "app.timezone", "database.redis.options.prefix", "queue.default", "cache.prefix",
                   "queue.failed.table", f"queue.connections.{CONNECTION}")
    assert facts["app.timezone"]["value"] == php["app.timezone"] == "Europe/Paris"
    assert facts["redis.prefix"]["value"] == php["database.redis.options.prefix"] == PREFIX
    assert facts["queue.connection"]["value"] == php["queue.default"] == CONNECTION
    assert facts["queue.queue"]["value"] == php[f"queue.connections.{CONNECTION}"]["queue"] == QUEUE
    assert facts["queue.retry_after"]["value"] == php[f"queue.connections.{CONNECTION}"]["retry_after"] == 300
    assert facts["cache.prefix"]["value"] == php["cache.prefix"]
    assert facts["cache.connection"]["value"] == "cache-store"
    assert facts["redis.cache"]["value"].endswith(f"/{CACHE_DB}")
    assert facts["failed.table"]["value"] == php["queue.failed.table"] == FAILED_TABLE
    cached = (app.path / "bootstrap" / "cache" / "config.php").exists()
    expected = "cached config" if cached else "booted app"
    assert info["config"].startswith(expected)
    for key in ("app.timezone", "redis.prefix", "queue.queue", "cache.prefix", "failed.table"):
        assert facts[key]["source"] == expected and not facts[key]["assumed"], facts[key]
    assert info["prefix"] == PREFIX and info["queues"] == [QUEUE]
    # the cache keys' start, as Laravel writes them: the cache connection's own prefix, then the store's
    assert f"keys {CACHE_REDIS_PREFIX + cache_prefix(app) + '…'!r}" in info["cache_store"], info["cache_store"]


# -- the queue and its keys ---------------------------------------------------------------------------------

def test_both_work_the_apps_queue_and_release_into_the_same_keys(app: PhpApp) -> None:
    client = app_redis(app)
    dispatch_echo(app, "release", 30)
    app.artisan("queue:work", "--once", check=True)
    dispatch_echo(app, "release", 30)
    proc = laraq(app, "--once")
    assert proc.returncode == 0, proc.stderr
    assert [r["runner"] for r in app.runs()] == ["php", "python"]
    assert {r["queue"] for r in app.runs() if r["runner"] == "python"} == {QUEUE}
    delayed = client.zrange(f"{PREFIX}queues:{QUEUE}:delayed", 0, -1)
    assert sorted(json.loads(m)["attempts"] for m in delayed) == [1, 1]
    assert client.llen(f"{PREFIX}queues:{QUEUE}") == 0
    assert client.zcard(f"{PREFIX}queues:{QUEUE}:reserved") == 0
    # nothing under the stock names the .env suggests
    assert not client.keys(f"{app.prefix}*")


# -- queue:restart ------------------------------------------------------------------------------------------

def test_queue_restart_stops_laraq(app: PhpApp) -> None:
    worker = subprocess.Popen(laraq_cmd(app, "work"), env=clean_env(app), cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        dispatch_echo(app)
        deadline = time.monotonic() + 90
        while not app.runs() and time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.1)
        assert app.runs(), "laraq never ran the job"  # the worker is up and on the app's queue
        out = app.artisan("queue:restart", check=True)
        assert "restart" in (out.stdout + out.stderr).lower()
        assert worker.wait(timeout=90) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stamp = app_redis(app, CACHE_DB).get(f"{CACHE_REDIS_PREFIX}{cache_prefix(app)}illuminate:queue:restart")
    assert stamp is not None  # where Laravel wrote it: the cache store's database and prefixes


# -- queue:pause / queue:continue ---------------------------------------------------------------------------

def test_pause_and_continue(app: PhpApp) -> None:
    skip_without_queue_pause(app.version)
    client = app_redis(app)
    app.artisan("queue:pause", f"{CONNECTION}:{QUEUE}", check=True)
    dispatch_echo(app)
    app.artisan("queue:work", "--once", check=True)
    proc = laraq(app, "--once")
    assert proc.returncode == 0, proc.stderr
    assert app.runs() == [] and client.llen(f"{PREFIX}queues:{QUEUE}") == 1  # neither ran it
    app.artisan("queue:continue", f"{CONNECTION}:{QUEUE}", check=True)
    proc = laraq(app, "--once")
    assert proc.returncode == 0, proc.stderr
    assert [r["runner"] for r in app.runs()] == ["python"]


# -- ShouldBeUnique -----------------------------------------------------------------------------------------

def test_unique_lock_released_where_laravel_took_it(app: PhpApp) -> None:
    lock_client = app_redis(app, 0)  # the store's lock_connection is 'default'
    for runner in ("php", "python"):
        app.tool("dispatch", "unique-property", f"--connection={CONNECTION}", "--pending",
                 "--args=" + json.dumps({"id": "u1"}))
        locks = lock_client.keys("*laravel_unique_job*")
        assert len(locks) == 1 and locks[0].startswith(f"{PREFIX}{cache_prefix(app)}".encode()), locks
        assert not app_redis(app, CACHE_DB).keys("*laravel_unique_job*")
        if runner == "php":
            app.artisan("queue:work", "--once", check=True)
        else:
            proc = laraq(app, "--once")
            assert proc.returncode == 0, proc.stderr
        assert not lock_client.exists(locks[0]), f"{runner} left the lock {locks[0]!r}"
    assert [r["runner"] for r in app.runs()] == ["php", "python"]


# -- the console lines: dated in the app's timezone, as artisan's -------------------------------------------

def test_job_lines_read_as_artisans_in_the_apps_timezone(app: PhpApp) -> None:
    """artisan's ``Processing``/``RUNNING`` lines are dated in the app's timezone (Europe/Paris); laraq's
    are the same lines, in the same zone, once dates, ids, dots and run times are set aside."""

    def run(command: Any) -> tuple[list[str], list[datetime]]:
        dispatch_echo(app)
        before = datetime.now(TZ).replace(microsecond=0, tzinfo=None)
        out = command()
        after = datetime.now(TZ).replace(tzinfo=None)
        dates = [datetime.strptime(d, "%Y-%m-%d %H:%M:%S") for d in re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", out)]
        assert len(dates) == 2 and all(before <= d <= after for d in dates), (out, before, after)
        shape = [re.sub(r"\[[^]]*\]\[\w*\]|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\.{2,}|[\d.]+ms", "_", line)
                 for line in out.splitlines()]
        return shape, dates

    artisan, _ = run(lambda: app.artisan("queue:work", CONNECTION, f"--queue={QUEUE}", "--once", check=True).stdout)
    ours, _ = run(lambda: laraq(app, "--once").stdout)
    assert ours == artisan and len(artisan) == 2, (ours, artisan)


# -- failed jobs: the renamed table, queue:retry, the timezone -------------------------------------------

def test_failed_rows_in_the_renamed_table_in_the_apps_timezone(app: PhpApp) -> None:
    client = app_redis(app)
    dispatch_echo(app, "fail", tries=1)
    app.artisan("queue:work", "--once", check=True)
    dispatch_echo(app, "fail", tries=1)
    proc = laraq(app, "--once")
    assert proc.returncode == 0, proc.stderr
    rows = failed_rows(app)
    assert [(r["connection"], r["queue"]) for r in rows] == [(CONNECTION, QUEUE)] * 2
    now = datetime.now(TZ).replace(tzinfo=None)
    stamps = [datetime.strptime(r["failed_at"], "%Y-%m-%d %H:%M:%S") for r in rows]
    # Europe/Paris is 1 or 2 hours from UTC: a UTC stamp would be that far off
    for stamp in stamps:
        assert abs(stamp - now) < timedelta(minutes=30), (stamps, now)
    assert abs(stamps[0] - stamps[1]) < timedelta(minutes=30)
    app.artisan("queue:retry", "all", check=True)
    assert failed_rows(app) == []
    assert client.llen(f"{PREFIX}queues:{QUEUE}") == 2


def test_max_exceptions_counted_in_the_cache_stores_database(app: PhpApp) -> None:
    uuid = dispatch_echo(app, "fail", tries=10, maxExceptions=2)
    counter = f"{CACHE_REDIS_PREFIX}{cache_prefix(app)}job-exceptions:{uuid}"
    cache = app_redis(app, CACHE_DB)
    app.artisan("queue:work", "--once", check=True)  # exception 1: released
    assert cache.get(counter) == b"1"
    proc = laraq(app, "--once")  # exception 2: maxExceptions reached
    assert proc.returncode == 0, proc.stderr
    assert [r["runner"] for r in app.runs()] == ["php", "python"]
    assert cache.get(counter) is None  # maxExceptions reached: failed, counter forgotten
    assert [r["queue"] for r in failed_rows(app)] == [QUEUE]


# -- Dispatcher.from_app: the README's example --------------------------------------------------------------

def blank_ids(payload: bytes) -> dict[str, Any]:
    """A payload with what differs by nature blanked (its ids, its dispatch time)."""
    decoded = json.loads(payload)
    decoded["uuid"] = decoded["id"] = "-"
    for clock in ("createdAt", "pushedAt"):
        if clock in decoded:
            decoded[clock] = 0
    return decoded


def test_readme_dispatch_example_runs_under_artisan(app: PhpApp, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Any) -> None:
    from click.testing import CliRunner

    from laraq.cli import main

    for name in list(os.environ):
        if name.startswith(("REDIS_", "DB_", "APP_", "CACHE_", "QUEUE_", "LARAQ_")):
            monkeypatch.delenv(name)
    schema = tmp_path / "schema.json"
    exported = CliRunner().invoke(main, ["schema", "--from", str(app.path), "--class", "App\\Jobs\\GenerateReport",
                                         "-o", str(schema)], env=app.env)
    assert exported.exit_code == 0, exported.output
    # the README's example as written, with this app's .env and schema in place of /var/www/app's
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(from laraq import Dispatcher\n.*?Dispatcher\.from_app.*?)```", readme, re.S)
    assert block, "the README's Dispatcher.from_app example is gone"
    exec(block.group(1).replace('"/var/www/app/.env"', repr(str(app.path / ".env")))  # noqa: S102
         .replace('schema="schema.json"', f"schema={str(schema)!r}"), {})
    # and PHP's own dispatch of the same job: the same payload, byte for byte but its ids and time (the
    # fixture's tool names the connection, onConnection('jobs'); the README's PHP line does not: null)
    app.tool("dispatch", "report", f"--connection={CONNECTION}", "--queue=python",
             "--args=" + json.dumps({"document": "q3.pdf", "options": {"pages": 12}}))
    client = app_redis(app)
    assert client.llen(f"{PREFIX}queues:python") == 2
    python_body, php_body = client.lrange(f"{PREFIX}queues:python", 0, -1)
    php_body = php_body.replace(b'\\"connection\\";s:4:\\"jobs\\";', b'\\"connection\\";N;', 1)
    # The custom apps carry config/horizon.php, so Dispatcher.from_app pushes as Horizon does (its fields
    # are proven byte for byte in tests/test_dispatch_from_app_horizon_php.py); the fixture's PHP registers
    # Horizon's provider only when asked, so its push has none of them: the rest is compared whole
    python_fields = blank_ids(python_body)
    if "pushedAt" not in json.loads(php_body):
        for name in ("type", "tags", "silenced", "pushedAt"):
            python_fields.pop(name, None)
    assert python_fields == blank_ids(php_body), (python_body, php_body)
    python_payload, php_payload = json.loads(python_body), json.loads(php_body)
    # PHP's worker reads both the same way: GenerateReport uses the RunsInPython trait, so a PHP worker
    # that picks either up unserializes its command and hands it on to `python`, untouched, unrun
    for _ in range(2):
        app.artisan("queue:work", "--once", "--queue=python", check=True)
    assert app.runs() == [] and failed_rows(app) == []
    handed = [json.loads(m) for m in client.lrange(f"{PREFIX}queues:python", 0, -1)]
    assert sorted(p["uuid"] for p in handed) == sorted([python_payload["uuid"], php_payload["uuid"]])
    assert all(p["displayName"] == "App\\Jobs\\GenerateReport" for p in handed)


# -- an exported file, on a host without the app ------------------------------------------------------------

def test_exported_config_serves_a_host_without_the_app(app: PhpApp, tmp_path: Any) -> None:
    exported = tmp_path / "laraq-config.json"
    proc = laraq(app, "--from", str(app.path), "-o", str(exported), command="config")
    assert proc.returncode == 0, proc.stderr
    assert oct(exported.stat().st_mode & 0o777) == "0o600"
    # elsewhere: no .env, no app, only the file
    cmd = [sys.executable, "-c", "from laraq.cli import main; main()"]
    env = clean_env(app)
    info = json.loads(subprocess.run([*cmd, "config", "--json", "--app-config", str(exported)], env=env,
                                     cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout)
    facts = {f["setting"]: f for f in info["settings"]}
    assert info["config"] == f"exported file ({exported})"
    assert (facts["redis.prefix"]["value"], facts["queue.queue"]["value"]) == (PREFIX, QUEUE)
    assert facts["failed.table"]["source"] == "exported file"
    dispatch_echo(app, "fail", tries=1)
    run = subprocess.run([*cmd, "work", "--app", "test_worker_support:app", "--sleep", "0", "--once",
                          "--app-config", str(exported)], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert [(r["connection"], r["queue"]) for r in failed_rows(app)] == [(CONNECTION, QUEUE)]
