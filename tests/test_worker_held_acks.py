"""Acks held on the worker's loop (``laraq.protocol.acks.Acks.send_held``): a finished job's ``ZREM`` waits
for the loop's next start or wait and goes in the same write as the starting jobs' unstarted records.

* No job starts while an ack is held, so finished-and-unacked jobs plus running ones never outnumber
  ``--concurrency`` (what a SIGKILL can re-run), and the jobs that finish in one pass of the loop share
  one write.
* A held ack rides on the worker's own next reserve call, ahead of its migrate: a job that finished after
  its lease ran out is not migrated back and run again by the worker that ran it.

Nothing is timed: the tests count writes and runs.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any

from conftest import in_process_worker

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.protocol.acks import AckPipe
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.worker.executor import Executor

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
KEY = PREFIX + "queues:held"


def _dispatch(redis_server: Any, seconds: list[float], first: int = 0) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": n}, "mode": "sleep", "seconds": s}, queue="held",
                          connection="redis") for n, s in enumerate(seconds, first)])


def _app(ran: list[int]) -> App:
    app = App("held-acks")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        await asyncio.sleep(float(command["seconds"]))
        ran.append(int(command["args"]["n"]))

    return app


def _worker(redis_server: Any, app: App, workers: list[Any], **opts: Any) -> Any:
    return in_process_worker(redis_server, app, workers, queue="held", **opts)


def test_no_job_starts_while_an_ack_is_held_and_a_pass_shares_one_write(
        redis_server: Any, redis_client: Any, workers: list[Any], monkeypatch: Any) -> None:
    _dispatch(redis_server, [0.02] * 400)
    ran: list[int] = []
    worker = _worker(redis_server, _app(ran), workers, concurrency=50)
    loop_thread: list[int] = []
    held_at_start: list[int] = []
    start = Executor.start

    def checked_start(self: Executor, job: Any) -> None:
        loop_thread.append(threading.get_ident())
        if worker.acks.holding:
            held_at_start.append(job.attempts)
        start(self, job)

    writes: collections.Counter[str] = collections.Counter()
    members: list[int] = []
    write = AckPipe.write

    def counted_write(self: AckPipe, acks: dict[str, list[bytes]], *rest: Any) -> None:
        writes["writes"] += 1
        members.append(sum(map(len, acks.values())))
        write(self, acks, *rest)

    monkeypatch.setattr(Executor, "start", checked_start)
    monkeypatch.setattr(AckPipe, "write", counted_write)
    assert worker.daemon() == 0
    assert sorted(ran) == list(range(400))
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
    assert held_at_start == []
    assert len(set(loop_thread)) == 1
    # 400 acks (those not riding on a reserve call) and 400 unstarted removals: jobs finishing together
    # share writes
    assert sum(members) <= 400
    assert writes["writes"] < 400, writes
    assert max(members) > 1


def test_a_slot_threads_ack_rides_with_the_next_start(
        redis_server: Any, redis_client: Any, workers: list[Any], monkeypatch: Any) -> None:
    """A ``def`` handler on the thread pool: its job's ack is held too and goes in the write of the next
    start (the thread's own next job, or the loop's once the thread's end wakes it), not in a write of
    its own."""
    _dispatch(redis_server, [0.002] * 400)
    ran: list[int] = []
    app = App("held-acks-threads")

    @app.handler(ECHO)
    def echo(command: Any, job: Any) -> None:
        time.sleep(float(command["seconds"]))
        ran.append(int(command["args"]["n"]))

    worker = _worker(redis_server, app, workers, concurrency=10)
    alone: list[int] = []
    write = AckPipe.write

    def counted_write(self: AckPipe, acks: dict[str, list[bytes]], starts: Any = None, *rest: Any) -> None:
        if any(acks.values()) and not starts:
            alone.append(sum(map(len, acks.values())))
        write(self, acks, starts, *rest)

    monkeypatch.setattr(AckPipe, "write", counted_write)
    assert worker.daemon() == 0
    assert sorted(ran) == list(range(400))
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
    # acks go alone only with no start to ride with: the last jobs, or a wait the loop began while a slot
    # thread's job was ending (its ack held, its slot not yet freed). Written by each slot thread, all 400
    # would
    assert len(alone) < 100, alone


def test_a_job_done_after_its_lease_is_not_migrated_back_by_its_own_worker(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    # retry_after 1 and a job of 1.5 s: its reservation has expired when it finishes. The queue is empty
    # then, so the worker's next step is a reserve call whose migrate would bring the job back; the held
    # ack rides on that call, ahead of the migrate
    _dispatch(redis_server, [1.5])
    ran: list[int] = []
    worker = _worker(redis_server, _app(ran), workers, retry_after=1, tries=0, max_jobs=20)

    def push_more() -> None:
        time.sleep(0.5)
        _dispatch(redis_server, [0.0] * 3, first=1)

    pusher = threading.Thread(target=push_more)
    pusher.start()
    try:
        assert worker.daemon() == 0
    finally:
        pusher.join()
    assert sorted(ran) == [0, 1, 2, 3], ran
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
