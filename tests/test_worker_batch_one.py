"""``--batch 1`` (Laravel's own pop, one job per reserve step) still fills ``--concurrency`` slots: after a
step that took a job the next one comes at once while slots are free, instead of waiting for a running
job to finish (nothing timed: the test counts handlers in flight)."""

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


@pytest.mark.parametrize("batch", [1, 32])
def test_every_slot_fills_whatever_the_batch(redis_server: Any, redis_client: Any, workers: list[Any],
                                             batch: int) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": n}, "mode": "sleep", "seconds": 0.05}, queue="one",
                          connection="redis") for n in range(40)])
    app = App("batch-one")
    in_flight = {"now": 0, "most": 0}
    ran: list[int] = []

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        try:
            await asyncio.sleep(float(command["seconds"]))
        finally:
            in_flight["now"] -= 1
        ran.append(int(command["args"]["n"]))

    worker = in_process_worker(redis_server, app, workers, queue="one", concurrency=10, batch=batch)
    assert worker.daemon() == 0
    assert sorted(ran) == list(range(40))
    assert in_flight["most"] == 10
    assert redis_client.zcard(PREFIX + "queues:one:reserved") == 0
