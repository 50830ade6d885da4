"""An idle worker with ``block_for``: the ``BLPOP :notify`` and the reserve written together.

The worker writes its reserve call right behind the ``BLPOP`` on one connection
(``Reservation._wait_then_reserve``), so Redis reserves the moment a token comes. What must hold, and
is checked here (correctness only, nothing timed):

- against artisan, on each live Laravel line: a job pushed to an idle, blocked worker leaves the same
  Redis state, and its ``:reserved`` score counts ``retry_after`` from the pickup, not from the moment
  the wait began (the reserve was written then: its stale lease is renewed as the job starts);
- the renewal is not waited for (the job starts at once) and no synchronous one is made;
- a wait that times out still runs a job that came without a token, and a delayed job that fell due
  during the wait is taken by the fresh reserve round after it (not one wait later);
- a stop during the wait, a connection killed during it and a ``SCRIPT FLUSH`` during it lose nothing
  and run nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import in_process_worker
from phpapp import PhpApp
from test_worker_support import popen_laraq, wait_for

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.protocol import acks as acks_module
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
QUEUE = "wait"
KEY = PREFIX + "queues:" + QUEUE


def _blocked_on_notify(client: redis.Redis) -> bool:
    """Some client is blocked in ``BLPOP`` on this queue's ``:notify``."""
    return any(c.get("cmd") == "blpop" and "b" in c.get("flags", "") for c in client.client_list())


def _dispatcher(client: redis.Redis) -> Dispatcher:
    return Dispatcher(RedisQueue(client, prefix=PREFIX, version=LaravelVersion.parse("8.83.27")))


def _push(client: redis.Redis, n: int, *, delay: int | None = None) -> None:
    d = _dispatcher(client)
    d.push(d.prepare_job(ECHO, {"args": {"n": n}, "mode": "ok", "seconds": 0}, queue=QUEUE, connection="redis",
                         delay=delay))


# -- against artisan ------------------------------------------------------------------------------

def _pickup_while_blocked(app: PhpApp, redis_client: redis.Redis, start: Any) -> dict[str, Any]:
    """Start a worker (``start()``), let it block on ``:notify`` across a second boundary, push one
    3-second job, and read Redis while it runs and after it ends."""
    redis_client.flushall()
    proc = start()
    try:
        wait_for(lambda: _blocked_on_notify(redis_client), timeout=60)
        time.sleep(1.6)  # the wait began in an earlier second than the pickup
        before = len(app.runs())
        pushed_at = time.time()
        app.tool("dispatch", "echo", f"--queue={QUEUE}", "--count=1", "--args=" + json.dumps({"mode": "sleep", "seconds": 3}))
        wait_for(lambda: len(app.runs()) > before, timeout=30)
        seen_at = time.time()
        # Laravel's score: floor(time of its pop) + retry_after, the pop falling between push and seen
        low, high = math.floor(pushed_at) + 90, math.floor(seen_at) + 90

        def reserved() -> list[tuple[bytes, float]] | None:
            members = redis_client.zrange(KEY + ":reserved", 0, -1, withscores=True)
            return members if members and all(low <= s <= high for _m, s in members) else None

        members = wait_for(reserved, timeout=2.5, interval=0.02)
        during = {
            "reserved": [(json.loads(m)["attempts"], low <= s <= high) for m, s in members],
            "notify": redis_client.llen(KEY + ":notify"),
            "waiting": redis_client.llen(KEY),
        }
        wait_for(lambda: redis_client.zcard(KEY + ":reserved") == 0, timeout=30)
        after = {"reserved": redis_client.zcard(KEY + ":reserved"), "notify": redis_client.llen(KEY + ":notify"),
                 "waiting": redis_client.llen(KEY), "delayed": redis_client.zcard(KEY + ":delayed")}
    finally:
        proc.terminate()
        proc.wait(30)
    return {"during": during, "after": after, "attempts": app.runs()[-1]["attempts"]}


@pytest.mark.php
def test_a_job_pushed_to_a_blocked_worker_matches_artisan(laravel: str, redis_server: Any, redis_client: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    app = PhpApp(redis_server.port, version=laravel, prefix=PREFIX, block_for=5, queue=QUEUE)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    artisan = _pickup_while_blocked(app, redis_client, lambda: app.popen_artisan(
        "queue:work", "redis", f"--queue={QUEUE}", "--sleep=0", "--quiet"))
    laraq = _pickup_while_blocked(app, redis_client, lambda: popen_laraq(
        app, f"--queue={QUEUE}", "--block-for=5", "--quiet", "--no-supervise", app_spec="test_worker_support:async_app"))
    assert artisan["during"]["reserved"] == [(1, True)]  # the fixture: Laravel's own lease, from the pickup
    assert laraq == artisan
    assert [r["runner"] for r in app.runs()] == ["php", "python"]


# -- in process -----------------------------------------------------------------------------------

def _app(ran: list[int], started: list[float] | None = None) -> App:
    app = App("wait")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        if started is not None:
            started.append(time.time())
        ran.append(command["args"]["n"])

    return app


def _worker(redis_server: Any, app: App, workers: list[Any], **opts: Any) -> Any:
    return in_process_worker(redis_server, app, workers, queue=QUEUE, **{"block_for": 5, **opts})


class _Running:
    """A worker's daemon loop on a thread of its own."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.status: list[int] = []
        self.thread = threading.Thread(target=lambda: self.status.append(worker.daemon()), daemon=True)
        self.thread.start()

    def stop(self, client: redis.Redis | None = None) -> int | None:
        """Stop the worker; with ``client`` a ``:notify`` token ends a wait it is blocked in, as a pushed job
        would, instead of at ``block_for`` (the list stays empty: nothing is reserved)."""
        self.worker.signals.quit()
        self.worker.signals.wake.set()
        if client is not None:
            client.rpush(KEY + ":notify", 1)
        self.thread.join(30)
        return self.status[0] if self.status else None


def _count(obj: Any, name: str, calls: dict[str, int]) -> None:
    original = getattr(obj, name)
    calls[name] = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return original(*args, **kwargs)

    setattr(obj, name, counted)


@contextlib.contextmanager
def _waiting_worker(redis_server: Any, redis_client: Any, workers: list[Any], ran: list[int], *,
                    count: tuple[str, ...] = (), started: list[float] | None = None,
                    **opts: Any) -> Iterator[tuple[Any, dict[str, int]]]:
    """A worker on a thread of its own, blocked on ``:notify`` when the block begins (``count``: its
    queue's methods to count calls of); stopped after it, exit 0, with nothing left in the queue."""
    worker = _worker(redis_server, _app(ran, started), workers, stop_when_empty=False, **opts)
    calls: dict[str, int] = {}
    for name in count:
        _count(worker.reserver.reserving, name, calls)
    running = _Running(worker)
    try:
        wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
        yield worker, calls
    finally:
        status = running.stop(redis_client)
    assert status == 0
    assert redis_client.llen(KEY) == 0 and redis_client.zcard(KEY + ":reserved") == 0


def test_the_reserve_rides_with_the_wait_and_the_lease_is_renewed_without_waiting(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    ran: list[int] = []
    started: list[float] = []
    with _waiting_worker(redis_server, redis_client, workers, ran, started=started,
                         count=("reserve_wait", "renew", "renew_send")) as (worker, calls):
        for n in range(3):
            wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
            time.sleep(1.1)  # every pickup comes in a later second than its wait began
            pushed_at = time.time()
            _push(redis_client, n)
            wait_for(lambda n=n: len(ran) > n, timeout=30)
            assert math.floor(started[-1]) >= math.floor(pushed_at)
    assert ran == [0, 1, 2]
    assert calls["reserve_wait"] >= 3  # each job came through the wait's own reserve
    assert calls["renew_send"] == 3 and calls["renew"] == 0  # renewed as it started, never waited for
    assert worker.reserver.leases.renewal is None  # its reply was read


def test_a_timed_out_wait_still_runs_a_job_pushed_without_a_token(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran, block_for=1):
        d = _dispatcher(redis_client)
        job = d.prepare_job(ECHO, {"args": {"n": 7}, "mode": "ok", "seconds": 0}, queue=QUEUE, connection="redis")
        redis_client.rpush(KEY, job.payload)  # no :notify token
        wait_for(lambda: ran == [7], timeout=30)


def test_a_delayed_job_due_during_the_wait_is_taken_right_after_it(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    # the reserve written with the wait carries the time the wait began, too early to migrate a job
    # that fell due during it: the fresh round after the timeout (Laravel's next pop) must take it
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran, block_for=3, count=("reserve_wait",)) as (_w, waits):
        before = waits["reserve_wait"]
        _push(redis_client, 5, delay=1)
        wait_for(lambda: ran == [5], timeout=30)
        assert waits["reserve_wait"] - before <= 1  # taken after the wait it fell due in, not a second one
    assert redis_client.zcard(KEY + ":delayed") == 0


def test_a_stop_during_the_wait_hands_a_job_that_arrives_back_untouched(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    ran: list[int] = []
    worker = _worker(redis_server, _app(ran), workers, block_for=2, stop_when_empty=False)
    calls: dict[str, int] = {}
    _count(worker.reserver.reserving, "give_back", calls)
    running = _Running(worker)
    wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
    worker.signals.quit()  # SIGTERM's flag: the wait goes on until a token or its timeout
    _push(redis_client, 3)
    running.thread.join(30)
    assert running.status == [0]
    assert ran == [] and calls["give_back"] == 1  # reserved behind the BLPOP, then handed back
    waiting = [json.loads(m) for m in redis_client.lrange(KEY, 0, -1)]
    assert [p["attempts"] for p in waiting] == [0]  # as dispatched: no attempt burned
    assert redis_client.zcard(KEY + ":reserved") == 0


def test_a_connection_killed_during_the_wait_loses_nothing(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran):
        assert redis_client.client_kill_filter(_type="normal", skipme=True) >= 1
        _push(redis_client, 1)
        _push(redis_client, 2)
        wait_for(lambda: sorted(ran) == [1, 2], timeout=60)


def test_a_script_flush_during_the_wait_loses_nothing(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran):
        redis_client.script_flush()  # the reserve behind the BLPOP meets NOSCRIPT: loaded and run again
        _push(redis_client, 4)
        wait_for(lambda: ran == [4], timeout=30)


def test_a_wait_longer_than_the_socket_timeout_runs_its_course(
        redis_server: Any, redis_client: Any, workers: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    # the client reads with a 0.3 s socket timeout, the wait is 1 s: no TimeoutError, no "unreachable"
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran, block_for=1, count=("reserve_wait",),
                         redis_url=redis_server.url + "?socket_timeout=0.3") as (worker, waits):
        wait_for(lambda: waits["reserve_wait"] >= 3, timeout=30)  # two waits ran to their timeout
        _push(redis_client, 9)
        wait_for(lambda: ran == [9], timeout=30)
    assert worker.reserver.faults.down_since is None
    assert "unreachable" not in caplog.text


def _renewal_meets(worker: Any, before_send: Any) -> None:
    """Run ``before_send(members)`` just before each lease renewal is sent without waiting."""
    original = worker.reserver.reserving.renew_send

    def renew_send(queue: str, members: list[bytes]) -> Any:
        before_send(members)
        return original(queue, members)

    worker.reserver.reserving.renew_send = renew_send


def test_a_renewal_answered_after_our_own_ack_is_not_reported_as_lost(
        redis_server: Any, redis_client: Any, workers: list[Any], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the renewal is sent as the job starts, on a connection of its own; the deferred ack of the
    # finished job must not overtake it (the loop reads the renewal's reply before sending acks), or
    # the reply says "gone" for a job no one else touched. Forced here: acks are due at once, and the
    # script cache is flushed as the renewal is sent, so Redis runs it only when its reply is read.
    monkeypatch.setattr(acks_module, "ACK_MAX_AGE", 0.0)
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran, count=("renew_send",)) as (worker, calls):
        _renewal_meets(worker, lambda members: redis_client.script_flush())
        for n in range(2):
            wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
            time.sleep(1.1)  # a later second than the wait began: the lease is renewed as the job starts
            _push(redis_client, n)
            wait_for(lambda n=n: len(ran) > n, timeout=30)
        wait_for(lambda: worker.reserver.leases.renewal is None, timeout=30)
    assert ran == [0, 1] and calls["renew_send"] == 2
    assert "left :reserved" not in caplog.text and "taken back" not in caplog.text


def test_a_renewal_answered_after_our_own_release_is_not_reported_as_lost(
        redis_server: Any, redis_client: Any, workers: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    # a release leaves :reserved at once, before the renewal sent as the job started can be read: the
    # worker knows the job left by its own doing and reports nothing
    attempts: list[int] = []
    app = App("wait")

    @app.handler(ECHO)
    async def release_once(command: Any, job: Any) -> None:
        attempts.append(job.attempts)
        if job.attempts == 1:
            job.release()

    worker = _worker(redis_server, app, workers, stop_when_empty=False, tries=2)
    _renewal_meets(worker, lambda members: redis_client.script_flush())
    running = _Running(worker)
    try:
        wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
        time.sleep(1.1)
        _push(redis_client, 1)
        wait_for(lambda: attempts == [1, 2], timeout=30)
        wait_for(lambda: redis_client.zcard(KEY + ":reserved") == 0 and worker.reserver.leases.renewal is None, timeout=30)
    finally:
        assert running.stop(redis_client) == 0
    assert redis_client.llen(KEY) == 0 and redis_client.zcard(KEY + ":delayed") == 0
    assert "left :reserved" not in caplog.text and "taken back" not in caplog.text


def test_a_started_job_someone_else_deleted_is_reported(
        redis_server: Any, redis_client: Any, workers: list[Any], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the job is taken off :reserved by another client just before its renewal is sent; this
    # worker's own ack is still deferred when the reply comes, so the reply can only mean that
    monkeypatch.setattr(acks_module, "ACK_MAX_AGE", 60.0)
    ran: list[int] = []
    with _waiting_worker(redis_server, redis_client, workers, ran) as (worker, _calls):
        worker.acks.pipe = None  # acks deferred (as on Redis Cluster): a "gone" can only be someone else
        _renewal_meets(worker, lambda members: redis_client.zrem(KEY + ":reserved", *members))
        wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
        time.sleep(1.1)
        _push(redis_client, 9)
        wait_for(lambda: ran == [9], timeout=30)
        wait_for(lambda: _blocked_on_notify(redis_client), timeout=30)
        _push(redis_client, 10)  # the next job's start reads the first renewal's reply
        wait_for(lambda: ran == [9, 10], timeout=30)
    assert "App\\Jobs\\EchoJob (id " in caplog.text and "left :reserved as it started" in caplog.text


def test_the_stop_waits_for_an_ack_the_watchdog_is_still_sending(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    # a job's deferred ack goes stale while the next job of its batch (a def handler, run inline) keeps
    # the loop busy, so the watchdog sends it (slowly, here); the queue is then empty and the worker
    # stops: only once that ZREM is in Redis, or the process would exit with the job left in :reserved.
    # (The first round reserves one job; the second takes jobs 2 and 3 together.)
    app = App("wait")
    ran: list[int] = []

    @app.handler(ECHO)
    def echo(command: Any, job: Any) -> None:
        ran.append(command["args"]["n"])
        if command["args"]["n"] == 3:
            time.sleep(0.5)

    # no blocking wait on the empty queue: the stop comes while the watchdog is still sending
    worker = _worker(redis_server, app, workers, stop_when_empty=True, block_for=None)
    original = worker.acks.send
    from_watchdog: list[int] = []

    def slow_from_watchdog(acks: dict[str, list[bytes]]) -> None:
        if threading.current_thread().name == "laraq-watchdog":
            from_watchdog.append(sum(map(len, acks.values())))
            time.sleep(1.0)
        original(acks)

    worker.acks.send = slow_from_watchdog
    worker.acks.pipe = None  # acks deferred, as on Redis Cluster (no AckPipe): the path under test
    for n in (1, 2, 3):
        _push(redis_client, n)
    assert worker.daemon() == 0
    assert ran == [1, 2, 3]
    assert from_watchdog == [1]  # the path under test was taken
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
