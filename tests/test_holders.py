"""What is running now (:mod:`laraq.production.holders`, ``laraq status --reserved``) on a real Redis with
a real worker: the job it runs shows as held by its heartbeat id; a reservation no live worker holds (a
dead worker's) is an orphan that comes back at its lease end, one whose lease ended is ``expired``; the
same counts go to Prometheus (``laraq_reserved_jobs``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.cli import main
from laraq.cli.work import build_worker, default_params
from laraq.production.heartbeat import live_workers
from laraq.production.metrics import QueueSampler
from laraq.protocol.queue import RedisQueue

PREFIX = "run_"
JOB = "App\\Jobs\\Slow"


def wait_until(predicate: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_reserved_jobs_by_holder_and_orphans(redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
           "LARAQ_LARAVEL_VERSION": "13.26", "REDIS_QUEUE_RETRY_AFTER": "90", "COLUMNS": "250"}
    queue = RedisQueue(redis_client, prefix=PREFIX, version="13.26", retry_after=90)
    d = Dispatcher(queue)
    running = d.dispatch_job(JOB, {"n": 1}, queue="default")
    dead = d.dispatch_job(JOB, {"n": 2}, queue="other")
    lapsed = d.dispatch_job(JOB, {"n": 3}, queue="other")
    # two reservations whose worker is gone: popped with nobody's heartbeat; one lease already over
    assert queue.pop("other") is not None and queue.pop("other") is not None
    reserved_key = queue.keys("other").reserved
    (member,) = [m for m in redis_client.zrange(reserved_key, 0, -1) if json.loads(m)["id"] == lapsed.id]
    redis_client.zadd(reserved_key, {member: int(time.time()) - 5})

    started, release = threading.Event(), threading.Event()
    app = App("running")

    @app.handler(JOB)
    def slow(command: Any, job: Any) -> None:
        started.set()
        release.wait(120)

    worker = build_worker(default_params(sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                                         queue="default"), env=env, app=app)
    workers.append(worker)
    thread = threading.Thread(target=worker.daemon, daemon=True)
    thread.start()
    try:
        assert started.wait(60)

        def status() -> dict[str, Any]:
            result = CliRunner().invoke(main, ["status", "--reserved", "--json", "default", "other"], env=env)
            assert result.exit_code == 0, result.output
            return json.loads(result.output)

        doc = wait_until(lambda: (s := status()) and any(r["state"] == "held" for r in s["reserved"]) and s)
        assert doc, status()
        (record,) = live_workers(redis_client, PREFIX)
        by_id = {r["id"]: r for r in doc["reserved"]}
        held = by_id[running.id]
        assert (held["state"], held["worker"], held["pid"], held["orphan"], held["job"]) == (
            "held", record.id, record.pid, False, JOB)
        assert held["since"] <= doc["now"] and held["lease_ends_at"] > doc["now"]
        assert (by_id[dead.id]["state"], by_id[dead.id]["orphan"], by_id[dead.id]["since_estimated"]) == (
            "unattributed", True, True)
        assert "retry_after" in by_id[dead.id]["comes_back"]
        assert by_id[lapsed.id]["state"] == "expired" and "lease ended" in by_id[lapsed.id]["comes_back"]
        assert doc["orphans"] == 2
        table = CliRunner().invoke(main, ["status", "--reserved", "default", "other"], env=env)
        assert record.id in table.output and "(expired)" in table.output, table.output

        registry = CollectorRegistry()
        QueueSampler(registry).update(queue, ["default", "other"])
        counts = {(s.labels["queue"], s.labels["state"]): s.value
                  for f in text_string_to_metric_families(generate_latest(registry).decode())
                  for s in f.samples if s.name == "laraq_reserved_jobs"}
        assert counts == {("default", "held"): 1, ("default", "unattributed"): 0, ("default", "expired"): 0,
                          ("other", "held"): 0, ("other", "unattributed"): 1, ("other", "expired"): 1}
    finally:
        release.set()
        thread.join(60)
    # the orphan whose lease ended comes back at the next pop, as the view said
    assert json.loads(queue.pop("other").body)["id"] == lapsed.id  # type: ignore[union-attr]



def test_buffered_jobs_are_held_and_leave_the_record_as_they_finish(redis_server: Any, redis_client: Any,
                                                                     workers: list[Any]) -> None:
    """A worker's record names every reservation it holds: the running job and the ones it reserved ahead
    (buffered, not started), each with the time its reserve call was sent; a finished job leaves it."""
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
           "LARAQ_LARAVEL_VERSION": "13.26", "REDIS_QUEUE_RETRY_AFTER": "90", "COLUMNS": "250"}
    queue = RedisQueue(redis_client, prefix=PREFIX, version="13.26", retry_after=90)
    d = Dispatcher(queue)
    before = time.time()
    # a quick job first: once the worker knows its pace it reserves ahead, and takes the three after it at once
    quick = d.dispatch_job(JOB, {"n": 0}, queue="ahead").id
    ids = [d.dispatch_job(JOB, {"n": n}, queue="ahead").id for n in range(1, 4)]
    gates = {job_id: threading.Event() for job_id in ids}
    started: list[str] = []
    app = App("ahead")

    @app.handler(JOB)
    async def slow(command: Any, job: Any) -> None:  # waits without holding the loop, which reserves ahead
        started.append(job.id)
        gate = gates.get(job.id)
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.01)

    worker = build_worker(default_params(sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, timeout=0,
                                         queue="ahead"), env=env, app=app)
    workers.append(worker)
    thread = threading.Thread(target=worker.daemon, daemon=True)
    thread.start()

    def holding() -> dict[str, float]:
        records = live_workers(redis_client, PREFIX)
        return json.loads(records[0].extra["holding"]) if records else {}

    try:
        assert wait_until(lambda: started == [quick, ids[0]])
        held = wait_until(lambda: (h := holding()) and set(h) == set(ids) and h)
        assert held, holding()
        assert all(before - 1 <= since <= time.time() for since in held.values())
        assert wait_until(lambda: live_workers(redis_client, PREFIX)[0].in_flight == 1)
        gates[ids[0]].set()
        assert wait_until(lambda: started == [quick, *ids[:2]])
        assert wait_until(lambda: set(holding()) == set(ids[1:]))
    finally:
        for gate in gates.values():
            gate.set()
        thread.join(60)
    assert (worker.held().jobs, worker.held().running) == ({}, 0)
