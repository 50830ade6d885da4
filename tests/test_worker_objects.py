"""Each object the worker is made of, built and run alone against the real ``redis-server``.

The loop (:class:`laraq.worker.worker.Worker`) builds a :class:`~laraq.worker.reserver.Reserver`, an
:class:`~laraq.worker.executor.Executor`, ``Worker::process`` (:class:`~laraq.worker.process.Process`) and
the settle step (:class:`~laraq.worker.settle.Settle`); here each is built with only what its constructor
asks for (a :class:`~laraq.worker.context.WorkerContext` and small stand-ins for its collaborators, never
for Redis), to show that each hands back values and none reaches into another's state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import require_modules

from laraq.app import App
from laraq.bus.callqueued import CallQueuedHandler
from laraq.bus.dispatch import Dispatcher
from laraq.bus.job import Job
from laraq.bus.phpsteps import PhpSteps
from laraq.protocol.acks import Acks
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import Reserving
from laraq.protocol.timers import Timers
from laraq.protocol.versions import LaravelVersion
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import WorkerContext, WorkerOptions
from laraq.worker.eager import running_loop_name
from laraq.worker.events import JobFailed, JobProcessed, JobReleased, Listeners, WorkerListener
from laraq.worker.executor import Executor
from laraq.worker.process import Process
from laraq.worker.reserver import Reserver
from laraq.worker.running import Running
from laraq.worker.settle import DONE, Outcome, Settle

PREFIX = "objects_"
ECHO = "App\\Jobs\\EchoJob"
VERSION = LaravelVersion.parse("8.83.27")


class Recorder(WorkerListener):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def job_processed(self, event: JobProcessed) -> None:
        self.seen.append(("processed", event.job.name))

    def job_released(self, event: JobReleased) -> None:
        self.seen.append(("released", event.job.name))

    def job_failed(self, event: JobFailed) -> None:
        self.seen.append(("failed", event.job.name))


@pytest.fixture
def queue(redis_server: Any, redis_client: Any) -> Iterator[RedisQueue]:
    redis_client.flushdb()
    yield RedisQueue(redis_server.client(), prefix=PREFIX, version=VERSION, retry_after=90)
    redis_client.flushdb()


def _context(queue: RedisQueue, app: App, name: str, recorder: Recorder | None = None,
             **options: Any) -> WorkerContext:
    events = Listeners([recorder] if recorder is not None else [])
    steps = PhpSteps(queue, VERSION, cache=None, signing_key=None, connection_name="redis")
    return WorkerContext(app=app, queue=queue, queues=[name], options=WorkerOptions(**options), version=VERSION,
                         connection_name="redis", events=events, callqueued=CallQueuedHandler(app, VERSION, steps))


def _dispatch(queue: RedisQueue, name: str, count: int, mode: str = "ok") -> None:
    d = Dispatcher(queue)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i}, "mode": mode}, queue=name, connection="redis")
            for i in range(count)])


def _reserver(queue: RedisQueue, context: WorkerContext, acks: Acks) -> Reserver:
    return Reserver(context, AsyncBridge(), acks, Reserving(queue), Timers(queue, context.queues))


def test_process_alone_returns_outcomes_and_settle_carries_them_out(queue: RedisQueue, redis_client: Any) -> None:
    ran: list[Any] = []
    app = App("objects-process")

    @app.handler(ECHO)
    def echo(command: Any, job: Any) -> None:
        ran.append(command["args"]["n"])
        if command["mode"] == "fail":
            raise RuntimeError("failed on purpose")

    recorder = Recorder()
    context = _context(queue, app, "pr", recorder, max_tries=2)
    acks = Acks(queue, "sync")
    settle = Settle(context, acks, Reserving(queue), AsyncBridge())
    process = Process(context, AsyncBridge(), settle)
    _dispatch(queue, "pr", 1)
    _dispatch(queue, "pr", 1, mode="fail")
    reserver = _reserver(queue, context, acks)
    assert reserver.take(2).count == 2
    ok, failing = reserver.next_job(), reserver.next_job()
    assert ok is not None and failing is not None
    # the outcome is a value: nothing has happened in Redis yet
    assert process._outcome(ok, None, app.resolve(ok.payload)) is DONE
    assert redis_client.zcard(PREFIX + "queues:pr:reserved") == 2
    outcome = process._outcome(failing, None, app.resolve(failing.payload))
    assert outcome is not None and outcome.kind == "released" and isinstance(outcome.error, RuntimeError)
    assert recorder.seen == []
    settle.settle(ok, DONE)
    settle.settle(failing, outcome)
    assert ran == [0, 0]
    assert recorder.seen == [("processed", ECHO), ("released", ECHO)]
    assert redis_client.zcard(PREFIX + "queues:pr:reserved") == 0
    assert redis_client.zcard(PREFIX + "queues:pr:delayed") == 1
    # the last attempt's exception fails it (no failed store here: the callbacks and the event still run)
    redis_client.rpush(PREFIX + "queues:pr", redis_client.zrange(PREFIX + "queues:pr:delayed", 0, 0)[0])
    redis_client.delete(PREFIX + "queues:pr:delayed")
    assert reserver.take(1).count == 1
    again = reserver.next_job()
    assert again is not None and again.attempts == 2
    process.run(again)
    assert recorder.seen[-1] == ("failed", ECHO) and again.has_failed
    assert redis_client.zcard(PREFIX + "queues:pr:reserved") == 0


def test_settle_is_every_jobs_actions_a_handlers_own_release_goes_through_it(queue: RedisQueue,
                                                                              redis_client: Any) -> None:
    app = App("objects-settle")
    app.handler(ECHO)(lambda command, job: job.release(30))
    recorder = Recorder()
    context = _context(queue, app, "st", recorder)
    acks = Acks(queue, "sync")
    settle = Settle(context, acks, Reserving(queue), AsyncBridge())
    _dispatch(queue, "st", 1)
    reserver = _reserver(queue, context, acks)
    reserver.take(1)
    job = reserver.next_job()
    assert job is not None
    Process(context, AsyncBridge(), settle).run(job)
    assert job.is_released and job.release_delay == 30
    assert recorder.seen == [("released", ECHO), ("processed", ECHO)]
    assert redis_client.zcard(PREFIX + "queues:st:delayed") == 1
    settle.settle(job, Outcome("released", delay=5))  # once released, a second release changes nothing
    assert redis_client.zcard(PREFIX + "queues:st:delayed") == 1


def test_the_reserver_alone_hands_back_batches_and_gives_back(queue: RedisQueue, redis_client: Any) -> None:
    app = App("objects-reserver")
    app.handler(ECHO)(lambda command, job: None)  # the reserve takes only jobs with a handler
    context = _context(queue, app, "rs", batch=100)
    reserver = _reserver(queue, context, Acks(queue))
    _dispatch(queue, "rs", 3)
    redis_client.rpush(PREFIX + "queues:rs", b'{"job":"App\\\\Jobs\\\\EchoJob","attempts":0,"data":{}, "uuid":')
    taken = reserver.take(10, idle=False)
    assert taken.count == 3 and taken.fault is None and taken.popped
    assert reserver.buffered == 3
    assert redis_client.zcard(PREFIX + "queues:rs:reserved") == 3
    reserver.give_back()
    assert reserver.buffered == 0
    assert redis_client.llen(PREFIX + "queues:rs") == 3
    assert redis_client.llen(PREFIX + "queues:rs:poison") == 1  # not JSON: set aside by the reserve, not lost
    assert redis_client.zcard(PREFIX + "queues:rs:reserved") == 0
    # one job per step with --batch 1: Laravel's own pop, attempts not burned by the give-back
    per_job = _reserver(queue, _context(queue, app, "rs", batch=1), Acks(queue, "sync"))
    assert per_job.take(5).count == 1
    job = per_job.next_job()
    assert job is not None and job.attempts == 1
    # a step that fails is a fault in the value, never an empty queue
    down = RedisQueue("redis://127.0.0.1:1/0", prefix=PREFIX, version=VERSION)
    faulty = _reserver(down, _context(down, app, "rs", batch=100), Acks(down))
    taken = faulty.take(1)
    assert taken.fault is not None and taken.fault.status == 3 and taken.fault.rounds == 1 and not taken.popped


class _Process:
    """``Worker::process``'s side the executor calls: deletes the job, or sleeps past its timeout."""

    def __init__(self) -> None:
        self.processed: list[str | None] = []
        self.timed_out_jobs: list[str | None] = []

    def run(self, job: Job, running: Running | None = None, handler: Any = None) -> None:
        if job.payload.decoded["data"]["command"].find("sleep") >= 0:
            time.sleep(1.6)
        if running is None or running.claim("finishing"):
            job.delete()
            self.processed.append(job.id)

    async def run_async(self, job: Job, handler: Any, running: Running) -> None:
        raise AssertionError("no async handler here")

    def precheck_fails(self, job: Job) -> bool:
        return False

    def timed_out(self, job: Job, exc: BaseException) -> None:
        self.timed_out_jobs.append(job.id)


def test_the_executor_alone_runs_jobs_and_kills_at_a_timeout(queue: RedisQueue, redis_client: Any) -> None:
    process = _Process()
    kills: list[int] = []
    app = App("objects-executor")
    app.handler(ECHO)(lambda command, job: None)  # what _Process stands in for
    context = _context(queue, app, "ex", concurrency=2, timeout=1)
    executor = Executor(context, process, AsyncBridge(), Acks(queue, "sync"),  # type: ignore[arg-type]
                        lambda: None, kill=lambda: kills.append(1))
    reserver = _reserver(queue, context, Acks(queue, "sync"))
    loop = asyncio.new_event_loop()
    executor.bridge.attach(loop)

    async def run(count: int, mode: str = "ok") -> list[Job]:
        _dispatch(queue, "ex", count, mode=mode)
        reserver.take(count)
        jobs = [job for job in (reserver.next_job() for _ in range(count)) if job is not None]
        for job in jobs:
            executor.start(job)
        deadline = time.monotonic() + 10
        while (executor.active or (mode == "sleep" and not kills)) and time.monotonic() < deadline:
            await executor.wait_changed(0.05)
        return jobs

    try:
        executor.start_watchdog()
        first, second = loop.run_until_complete(run(2))
        assert sorted(process.processed) == sorted([first.id, second.id])
        assert redis_client.zcard(PREFIX + "queues:ex:reserved") == 0
        # a sync job past its timeout cannot be interrupted: bookkeeping, then the self-kill
        (slow,) = loop.run_until_complete(run(1, "sleep"))
        assert kills and process.timed_out_jobs == [slow.id] and executor.kill_pending
        assert slow.id not in process.processed  # the watchdog's claim won: the handler's outcome is dropped
    finally:
        executor.close()
        executor.shutdown_pool()
        executor.bridge.detach()
        loop.close()


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_outside_the_daemon_an_async_handler_runs_on_a_loop_of_the_kind_asked(queue: RedisQueue, kind: str) -> None:
    """``Worker.process`` from an embedding program: the bridge starts its own loop thread, of ``--loop``'s kind."""
    if kind == "uvloop":
        require_modules("uvloop")
    loops: list[str] = []
    app = App("objects-bridge")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        await asyncio.sleep(0)
        loops.append(running_loop_name(asyncio.get_running_loop()))

    context = _context(queue, app, "br")
    acks = Acks(queue, "sync")
    bridge = AsyncBridge(kind)  # type: ignore[arg-type]
    settle = Settle(context, acks, Reserving(queue), bridge)
    _dispatch(queue, "br", 1)
    reserver = _reserver(queue, context, acks)
    reserver.take(1)
    job = reserver.next_job()
    assert job is not None
    try:
        Process(context, bridge, settle).run(job)
    finally:
        bridge.close()
    assert loops == [kind]
    assert job.is_deleted
