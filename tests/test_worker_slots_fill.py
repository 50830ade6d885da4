"""A free slot takes the next job at once while jobs wait to start: buffered, or asked for ahead.

The loop waits for a running job to finish only when every slot is taken or no job waits. Two rounds
are at stake: the buffer runs dry while the next batch is asked for ahead (that batch is landed at once,
not after a running job ends), and jobs finish during the round's own step of the tasks (the slots are
counted after that step). Nothing timed: the test records, at every wait, the slots taken and the jobs
waiting to start.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import in_process_worker

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"


@pytest.mark.parametrize("sync", [False, True], ids=["async", "threads"])
def test_no_wait_with_a_slot_free_and_a_job_waiting(redis_server: Any, redis_client: Any, workers: list[Any],
                                                    sync: bool) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    # every fourth job yields once and ends; the others sleep a little: some end within the round's step
    d.bulk([d.prepare_job(ECHO, {"args": {"n": n}, "mode": "sleep", "seconds": 0 if n % 4 == 0 else 0.005},
                          queue="fill", connection="redis") for n in range(120)])
    app = App("slots-fill")
    ran: list[int] = []

    if sync:
        import time

        @app.handler(ECHO)
        def echo_sync(command: Any, job: Any) -> None:
            time.sleep(float(command["seconds"]))
            ran.append(int(command["args"]["n"]))
    else:
        @app.handler(ECHO)
        async def echo(command: Any, job: Any) -> None:
            await asyncio.sleep(float(command["seconds"]))
            ran.append(int(command["args"]["n"]))

    worker = in_process_worker(redis_server, app, workers, queue="fill", concurrency=4, batch=8)
    executor, reserver = worker.executor, worker.reserver
    waits: list[tuple[int, int]] = []
    wait_changed = executor.wait_changed

    async def recorded(timeout: float) -> None:
        waits.append((executor.active, reserver.buffered))
        await wait_changed(timeout)

    executor.wait_changed = recorded
    assert worker.daemon() == 0
    assert sorted(ran) == list(range(120))
    assert waits, "the loop never waited: the handlers did not hold their slots"
    idle_slot = [(active, waiting) for active, waiting in waits if active < 4 and waiting > 0]
    assert idle_slot == [], f"waited with a slot free and jobs waiting to start (running, waiting): {idle_slot}"
    assert redis_client.zcard(PREFIX + "queues:fill:reserved") == 0
