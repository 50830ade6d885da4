"""Each object the worker is made of, built and run alone against the real ``redis-server``.

The loop (:class:`laraq.worker.worker.Worker`) builds a :class:`~laraq.worker.lifecycle.Lifecycle`, a
:class:`~laraq.worker.reservation.Reservation` and an :class:`~laraq.worker.execution.Executor` and
calls them through declared interfaces; here each is built with only what its constructor asks for
(a :class:`~laraq.worker.context.WorkerContext` and small stand-ins for its collaborators' interfaces,
never for Redis), to show that none of them reaches into another's state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from laraq.app import App
from laraq.bus.callqueued import CallQueued
from laraq.bus.dispatch import Dispatcher
from laraq.bus.job import Job
from laraq.protocol.payload import Payload
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import WorkerContext, WorkerOptions
from laraq.worker.events import Listeners, WorkerListener
from laraq.worker.execution import Executor
from laraq.worker.lifecycle import Lifecycle
from laraq.worker.output import Output
from laraq.worker.reservation import Reservation
from laraq.worker.running import Running

PREFIX = "objects_"
ECHO = "App\\Jobs\\EchoJob"
VERSION = LaravelVersion.parse("8.83.27")
T = TypeVar("T")


class Recorder(WorkerListener):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def job_processed(self, job: Job, runtime: float) -> None:
        self.seen.append(("processed", job.name))

    def job_released(self, job: Job, delay: int, exc: BaseException | None) -> None:
        self.seen.append(("released", job.name))

    def job_failed(self, job: Job, exc: BaseException | None, runtime: float | None) -> None:
        self.seen.append(("failed", job.name))


@pytest.fixture
def queue(redis_server: Any, redis_client: Any) -> Iterator[RedisQueue]:
    redis_client.flushdb()
    yield RedisQueue(redis_server.client(), prefix=PREFIX, version=VERSION, retry_after=90)
    redis_client.flushdb()


def _context(queue: RedisQueue, app: App, name: str, recorder: Recorder | None = None,
             **options: Any) -> WorkerContext:
    events = Listeners([recorder] if recorder is not None else [])
    return WorkerContext(app=app, queue=queue, queues=[name], options=WorkerOptions(**options), version=VERSION,
                         connection_name="redis", events=events, output=Output(VERSION, quiet=True),
                         callqueued=CallQueued(queue, VERSION, cache=None, signing_key=None, connection_name="redis"))


def _dispatch(queue: RedisQueue, name: str, count: int, mode: str = "ok") -> None:
    d = Dispatcher(queue)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i}, "mode": mode}, queue=name, connection="redis")
            for i in range(count)])


def _pop(queue: RedisQueue, name: str, on_fail: Any = None) -> Job:
    reserved = queue.pop(name)
    assert reserved is not None
    return Job(queue, reserved, Payload.parse(reserved.body, version=VERSION), on_fail=on_fail)


def test_the_lifecycle_alone_runs_deletes_and_fails(queue: RedisQueue, redis_client: Any) -> None:
    ran: list[Any] = []
    app = App("objects-lifecycle")

    @app.handler(ECHO)
    def echo(command: Any, job: Any) -> None:
        ran.append(command["args"]["n"])
        if command["mode"] == "fail":
            raise RuntimeError("failed on purpose")

    recorder = Recorder()
    lifecycle = Lifecycle(_context(queue, app, "lc", recorder, max_tries=1), AsyncBridge())
    _dispatch(queue, "lc", 1)
    _dispatch(queue, "lc", 1, mode="fail")
    lifecycle.process(_pop(queue, "lc", lifecycle.job_failed))
    lifecycle.process(_pop(queue, "lc", lifecycle.job_failed))
    assert ran == [0, 0]
    assert recorder.seen == [("processed", ECHO), ("failed", ECHO)]
    assert redis_client.zcard(PREFIX + "queues:lc:reserved") == 0
    assert redis_client.llen(PREFIX + "queues:lc") == 0


class _Failures:
    """The lifecycle's side the reservation source calls (no Redis involved)."""

    def __init__(self) -> None:
        self.rows: list[str] = []

    def job_failed(self, job: Job, exc: BaseException | None) -> None:
        self.rows.append(job.name)

    def log_failed(self, connection: str, queue: str, body: bytes, text: str) -> None:
        self.rows.append(text)

    def retrying(self, action: Callable[[], T], attempts: int = 4) -> T | None:
        return action()


def test_the_reservation_source_alone_reserves_buffers_and_gives_back(queue: RedisQueue, redis_client: Any) -> None:
    app = App("objects-reservation")
    app.handler(ECHO)(lambda command, job: None)  # the reserve takes only jobs with a handler
    reservation = Reservation(_context(queue, app, "rs", batch=100), AsyncBridge(), _Failures())
    _dispatch(queue, "rs", 3)
    assert reservation.reserve_round(10) == 3
    assert len(reservation.buffer) == 3 and reservation.took_reservation
    assert redis_client.zcard(PREFIX + "queues:rs:reserved") == 3
    assert all(reservation.lease_ok(item) for item in list(reservation.buffer))
    reservation.give_back_buffer()
    assert not reservation.buffer
    assert redis_client.llen(PREFIX + "queues:rs") == 3
    assert redis_client.zcard(PREFIX + "queues:rs:reserved") == 0
    job = reservation.next_job()  # the classic pop, attempts not burned by the give-back
    assert job is not None and job.attempts == 1


class _Rules:
    """The lifecycle's side the executor calls: deletes the job, or sleeps past its timeout."""

    def __init__(self) -> None:
        self.processed: list[str | None] = []
        self.timed_out_jobs: list[str | None] = []

    def process(self, job: Job, running: Running | None = None, handler: Any = None) -> None:
        if job.payload.decoded["data"]["command"].find("sleep") >= 0:
            time.sleep(1.6)
        if running is None or running.claim("finishing"):
            job.delete()
            self.processed.append(job.id)

    async def process_async(self, job: Job, handler: Any, running: Running) -> None:
        raise AssertionError("no async handler here")

    def php_only(self, job: Job) -> str | None:
        return None

    def precheck_fails(self, job: Job) -> bool:
        return False

    def timed_out(self, job: Job, exc: BaseException) -> None:
        self.timed_out_jobs.append(job.id)


class _Housekeeping:
    def flush_acks(self, *, force: bool = False) -> None:
        pass

    def flush_stale_acks(self) -> None:
        pass

    def housekeeping(self) -> None:
        pass


def test_the_executor_alone_runs_jobs_and_kills_at_a_timeout(queue: RedisQueue, redis_client: Any) -> None:
    rules = _Rules()
    kills: list[int] = []
    executor = Executor(_context(queue, App("objects-executor"), "ex", concurrency=2, timeout=1), rules,
                        AsyncBridge(), _Housekeeping(), kill=lambda: kills.append(1))
    try:
        _dispatch(queue, "ex", 2)
        first, second = _pop(queue, "ex"), _pop(queue, "ex")
        executor.submit(first)
        executor.submit(second)
        executor.drain()
        assert sorted(rules.processed) == sorted([first.id, second.id])
        assert redis_client.zcard(PREFIX + "queues:ex:reserved") == 0
        # a sync job past its timeout cannot be interrupted: bookkeeping, then the self-kill
        _dispatch(queue, "ex", 1, mode="sleep")
        slow = _pop(queue, "ex")
        executor.submit(slow)
        deadline = time.monotonic() + 10
        while not kills and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kills and rules.timed_out_jobs == [slow.id] and executor.kill_pending
        assert slow.id not in rules.processed  # the watchdog's claim won: the handler's outcome is dropped
    finally:
        executor.close()
        for thread in threading.enumerate():
            if thread.name.startswith("laraq-slot"):
                thread.join(3)
