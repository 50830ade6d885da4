"""The worker's batch reserves (batch reserve, deferred acks, prefetch, lease renewal, give-back).

Correctness only, nothing timed. Next to ``php artisan queue:work`` on each live Laravel line: a SIGKILL
mid-batch in a mixed artisan + laraq fleet loses nothing; lease renewal keeps a prefetched job reserved past
``retry_after`` (artisan, polling the same queue, would run any job whose lease lapsed). laraq's own
mechanics, with the fixture app's jobs pushed from Python (``pyapp.PyApp``): a job taken back from
``:reserved`` is never run from the buffer; SIGTERM and ``queue:restart`` hand buffered jobs back to the head
of the list untouched (byte for byte, attempts not burned), and a worker then runs each as its first
attempt. Every app is on the 8-style ``laravel_database_`` prefix here: the prefix is not the subject.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import test_worker_support as support
from conftest import queue_count
from phpapp import PhpApp
from pyapp import PyApp
from test_worker_support import popen_laraq, wait_for

from laraq.cli.work import build_worker, default_params
from laraq.config.settings import LaravelSettings
from laraq.stores.cache import make_cache
from laraq.worker.worker import Worker

PREFIX = "laravel_database_"
KEY = PREFIX + "queues:fast"


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.close()


def _app(laravel: str, redis_server: Any, monkeypatch: pytest.MonkeyPatch, retry_after: int = 90) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel, retry_after=retry_after, prefix=PREFIX)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def _dispatch(app: PhpApp, count: int, seconds: float) -> None:
    app.tool("dispatch", "echo", "--queue=fast", f"--count={count}",
             "--args=" + json.dumps({"mode": "sleep", "seconds": seconds}), timeout=120)


def _pyapp(redis_server: Any, monkeypatch: pytest.MonkeyPatch, retry_after: int = 90) -> PyApp:
    app = PyApp(redis_server.port, retry_after=retry_after, prefix=PREFIX)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def _push(app: PyApp, count: int, seconds: float) -> None:
    app.dispatch("echo", "fast", count=count, mode="sleep", seconds=seconds)


def _queue_restart(app: PyApp) -> None:
    """``queue:restart``: the stamp laraq's ``restart`` writes in the app's cache (artisan's and laraq's stamps
    stop each other's workers: ``test_worker_signals.py``, ``test_cli_work.py``)."""
    cache = make_cache(LaravelSettings.from_env(app.env, version=app.release))
    try:
        cache.set_restart()
    finally:
        cache.close()


def _drain(app: PyApp, workers: list[Worker]) -> None:
    """Run what is left on the queue to the end (a worker's first look at each job)."""
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="fast", concurrency=8)
    worker = build_worker(params, env=app.env, app=support.async_app)
    workers.append(worker)
    assert worker.daemon() == 0


def _left(redis_client: Any) -> int:
    return queue_count(redis_client, KEY)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.php
@pytest.mark.parametrize(("spec", "extra"), [("test_worker_support:async_app", ()),
                                             ("test_worker_support:app", ("--concurrency=4",))],
                         ids=["async", "def-threads"])
def test_sigkill_mid_batch_in_a_mixed_fleet_loses_nothing(laravel: str, redis_client: Any, redis_server: Any,
                                                          monkeypatch: pytest.MonkeyPatch, spec: str,
                                                          extra: tuple[str, ...]) -> None:
    # def-threads: pool threads that take their next jobs themselves, beside artisan on the same queue
    app = _app(laravel, redis_server, monkeypatch, retry_after=2)
    _dispatch(app, 600, 0.005)
    uuids = {json.loads(m)["uuid"] for m in redis_client.lrange(KEY, 0, -1)}
    laraq = popen_laraq(app, "--queue=fast", "--tries=0", "--retry-after=2", "--quiet", "--no-supervise",
                        "--batch=100", *extra, app_spec=spec)
    artisan = app.popen_artisan("queue:work", "redis", "--queue=fast", "--sleep=0", "--tries=0", "--quiet")
    try:
        wait_for(lambda: sum(r["runner"] == "python" for r in app.runs()) >= 50, timeout=60)
        laraq.send_signal(signal.SIGKILL)
        laraq.wait()

        def all_done() -> bool:
            return {r["uuid"] for r in app.runs()} >= uuids and _left(redis_client) == 0

        wait_for(all_done, timeout=120, interval=0.2)
        artisan.send_signal(signal.SIGTERM)
        assert artisan.wait(30) == 0
    finally:
        _stop([laraq, artisan])
    assert {r["uuid"] for r in app.runs()} == uuids  # every job ran at least once
    assert {r["runner"] for r in app.runs()} == {"php", "python"}
    assert _left(redis_client) == 0
    assert app.artisan("queue:failed").stdout.count("EchoJob") == 0


@pytest.mark.php
def test_lease_renewal_keeps_prefetched_jobs_reserved_past_retry_after(
        laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch,
        workers: list[Worker]) -> None:
    app = _app(laravel, redis_server, monkeypatch, retry_after=3)
    _dispatch(app, 4, 1.2)  # the last one waits 3.6 s in the buffer; none runs longer than retry_after
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="fast", retry_after="3")
    worker = build_worker(params, env=app.env, app=support.async_app)
    workers.append(worker)
    worker.context.pace.average = 0.001  # as if short jobs had been measured: prefetch from the first call
    # once laraq has reserved all four, a PHP worker polls the same queue the whole time: it would run
    # any job whose lease lapsed (started earlier, it could take the first job before laraq's first reserve)
    started: list[subprocess.Popen[str]] = []

    def start_artisan() -> None:
        wait_for(lambda: redis_client.llen(KEY) == 0, timeout=60, interval=0.01)
        started.append(app.popen_artisan("queue:work", "redis", "--queue=fast", "--sleep=0.1", "--tries=0",
                                         "--quiet"))

    starter = threading.Thread(target=start_artisan)
    starter.start()
    try:
        assert worker.daemon() == 0
    finally:
        starter.join(60)
        for artisan in started:
            artisan.send_signal(signal.SIGTERM)
            artisan.wait(30)
        _stop(started)
    assert started, "laraq never reserved the four jobs"
    runs = app.runs()
    assert [(r["runner"], r["attempts"]) for r in runs] == [("python", 1)] * 4
    assert _left(redis_client) == 0


def test_a_job_taken_back_from_reserved_is_not_run_from_the_buffer(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, workers: list[Worker]) -> None:
    app = _pyapp(redis_server, monkeypatch, retry_after=2)
    _push(app, 1, 1.5)
    _push(app, 2, 0)
    bodies = redis_client.lrange(KEY, 0, -1)
    victim = json.loads(bodies[1])["uuid"]
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="fast", retry_after="2")
    worker = build_worker(params, env=app.env, app=support.async_app)
    workers.append(worker)
    worker.context.pace.average = 0.001

    def steal() -> None:  # another worker's migrate took the buffered reservation back
        member = wait_for(lambda: [m for m in redis_client.zrange(KEY + ":reserved", 0, -1)
                                   if json.loads(m)["uuid"] == victim], timeout=10)[0]
        redis_client.zrem(KEY + ":reserved", member)

    thief = threading.Thread(target=steal)
    thief.start()
    assert worker.daemon() == 0
    thief.join()
    ran = [r["uuid"] for r in app.runs()]
    assert victim not in ran and len(ran) == 2
    assert _left(redis_client) == 0


def _buffering_worker(app: PyApp, *extra: str) -> subprocess.Popen[str]:
    return popen_laraq(app, "--queue=fast", "--tries=0", "--quiet", "--no-supervise", "--batch=100", *extra,
                       app_spec="test_worker_support:async_app")


def test_sigterm_gives_buffered_jobs_back_to_the_head_untouched(redis_client: Any, redis_server: Any,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                workers: list[Worker]) -> None:
    app = _pyapp(redis_server, monkeypatch)
    _push(app, 3, 0.01)  # short jobs first: the worker measures them and starts prefetching
    _push(app, 1, 2)
    _push(app, 20, 0)
    bodies = redis_client.lrange(KEY, 0, -1)
    long_uuid = json.loads(bodies[3])["uuid"]
    worker = _buffering_worker(app)
    try:
        wait_for(lambda: long_uuid in {r["uuid"] for r in app.runs()}, timeout=30)
        assert redis_client.llen(KEY) == 0  # everything is reserved: running or buffered
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        _stop([worker])
    ran = [r["uuid"] for r in app.runs()]
    assert ran[-1] == long_uuid  # the running job finished; nothing else started
    left = redis_client.lrange(KEY, 0, -1)
    assert left == bodies[len(ran):]  # original bodies, original order, at the head: attempts not burned
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert redis_client.llen(KEY + ":notify") >= len(left)
    _drain(app, workers)
    later = app.runs()[len(ran):]
    assert sorted(r["uuid"] for r in later) == sorted(json.loads(b)["uuid"] for b in left)
    assert [r["attempts"] for r in later] == [1] * len(left)
    assert _left(redis_client) == 0


def test_restart_is_honoured_promptly_with_a_full_buffer(redis_client: Any, redis_server: Any,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         workers: list[Worker]) -> None:
    app = _pyapp(redis_server, monkeypatch)
    _push(app, 300, 0.02)
    bodies = redis_client.lrange(KEY, 0, -1)
    worker = _buffering_worker(app, "--concurrency=2")
    try:
        wait_for(lambda: len(app.runs()) >= 20, timeout=30)
        _queue_restart(app)
        assert worker.wait(30) == 0
    finally:
        _stop([worker])
    ran = len(app.runs())
    assert ran < 300
    left = redis_client.lrange(KEY, 0, -1)
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert len(left) == 300 - ran and set(left) <= set(bodies)  # handed back untouched
    _drain(app, workers)
    assert sorted(r["uuid"] for r in app.runs()) == sorted(json.loads(b)["uuid"] for b in bodies)
    assert [r["attempts"] for r in app.runs()[ran:]] == [1] * len(left)
