"""A pool thread whose ``def`` job ended runs the next buffered job itself (``Executor._slot``), as long as
the loop would start that job at once too (``Worker._next_for_slot``).

* Every job runs once, and the loop counts the jobs the threads started (the supervisor's report). The
  acks ride with the next start, the thread's own among them: ``tests/test_worker_held_acks.py``.
* With ``--max-jobs`` every job goes through the loop, so the count is exact.
* An ``async def`` job at the head of the buffer stays for the loop: it runs on the loop's thread.
* Told to quit, no thread takes another job; the buffer goes back to the list.

Nothing is timed: the tests count runs, threads and writes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from conftest import in_process_worker

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
OTHER = "App\\Jobs\\OtherJob"
KEY = PREFIX + "queues:slots"


def _dispatch(redis_server: Any, jobs: list[tuple[str, float]]) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(name, {"args": {"n": n}, "mode": "sleep", "seconds": seconds}, queue="slots",
                          connection="redis") for n, (name, seconds) in enumerate(jobs)])


def _sync_app(ran: list[tuple[int, int]], on_run: Any = None) -> App:
    app = App("slot-threads")

    @app.handler(ECHO)
    def echo(command: Any, job: Any) -> None:
        time.sleep(float(command["seconds"]))
        n = int(command["args"]["n"])
        ran.append((n, threading.get_ident()))
        if on_run is not None:
            on_run(n)

    return app


def test_a_slot_thread_runs_the_next_job_and_the_loop_counts_it(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    _dispatch(redis_server, [(ECHO, 0.002)] * 300)
    ran: list[tuple[int, int]] = []
    worker = in_process_worker(redis_server, _sync_app(ran), workers, queue="slots", concurrency=4)
    reported: list[int] = []
    worker.on_jobs_popped = reported.append
    assert worker.daemon() == 0
    assert sorted(n for n, _ in ran) == list(range(300))
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
    assert threading.get_ident() not in {t for _, t in ran}
    # most jobs started on the thread that ran the one before; the loop counted them all
    assert worker.executor.continued > 150, worker.executor.continued
    assert sum(reported) == 300


def test_with_max_jobs_the_loop_starts_every_job(redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    _dispatch(redis_server, [(ECHO, 0.002)] * 100)
    ran: list[tuple[int, int]] = []
    worker = in_process_worker(redis_server, _sync_app(ran), workers, queue="slots", concurrency=4, max_jobs=30)
    assert worker.daemon() == 0
    assert len(ran) == 30 and len({n for n, _ in ran}) == 30
    assert worker.executor.continued == 0
    assert redis_client.llen(KEY) == 70 and redis_client.zcard(KEY + ":reserved") == 0


def test_an_async_job_next_in_the_buffer_runs_on_the_loop(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    _dispatch(redis_server, [(ECHO if n % 3 else OTHER, 0.002) for n in range(150)])
    ran: list[tuple[int, int]] = []
    app = _sync_app(ran)
    on_loop: list[tuple[int, int]] = []

    @app.handler(OTHER)
    async def other(command: Any, job: Any) -> None:
        await asyncio.sleep(float(command["seconds"]))
        on_loop.append((int(command["args"]["n"]), threading.get_ident()))

    worker = in_process_worker(redis_server, app, workers, queue="slots", concurrency=4)
    assert worker.daemon() == 0
    assert sorted(n for n, _ in ran + on_loop) == list(range(150))
    assert {t for _, t in on_loop} == {threading.get_ident()}
    assert threading.get_ident() not in {t for _, t in ran}
    assert worker.executor.continued > 0
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0


def test_told_to_quit_no_slot_thread_takes_another_job(
        redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    _dispatch(redis_server, [(ECHO, 0.002)] * 200)
    ran: list[tuple[int, int]] = []
    box: list[Any] = []

    def quit_at(n: int) -> None:
        if n == 40:
            box[0].signals.quit(0, "test")

    worker = in_process_worker(redis_server, _sync_app(ran, quit_at), workers, queue="slots", concurrency=4)
    box.append(worker)
    assert worker.daemon() == 0
    done = sorted(n for n, _ in ran)
    assert len(done) == len(set(done))
    # the jobs running when the signal came end; none starts after it
    assert 40 in done and len(done) <= 41 + 4, len(done)
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert redis_client.llen(KEY) + len(done) == 200
