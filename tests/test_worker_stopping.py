"""How a worker stops: over ``--memory`` it runs what it already reserved instead of cycling, every stop
and pause is one log line saying why, and a SIGKILL with a full buffer loses nothing and runs again at
most the jobs that were running.

Nothing here is timed: the memory limit is one no process can stay under (1 MB), the pace that makes
the worker prefetch is set by hand, and the kill comes after a job has signalled that it is running.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from laraq.app import App
from laraq.bus.job import Job
from laraq.protocol.payload import build_string_payload
from laraq.protocol.queue import RedisQueue
from laraq.worker.worker import EXIT_MEMORY_LIMIT, Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent


def _push(queue: RedisQueue, count: int, name: str = "App\\Handlers\\Count@run", big: int = 0) -> None:
    for n in range(count):
        data: dict[str, Any] = {"n": n}
        if big and n == count - 1:
            data["blob"] = "x" * big
        queue.push_raw(build_string_payload("13.0.0", name, data))


def test_over_memory_runs_the_reserved_batch_then_stops(redis_client: redis.Redis,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A batch that holds a big job pushes the worker over --memory: the batch is run, the big job too,
    and the worker exits 12 having given nothing back; the next worker has nothing to cycle."""
    queue = RedisQueue(redis_client, prefix="m_", retry_after=90, version="13.0.0")
    _push(queue, 51, big=5_000_000)
    ran: list[int] = []
    app = App()

    @app.handler("App\\Handlers\\Count@run")
    def count(data: Any, job: Job) -> None:
        ran.append(int(data["n"]))

    worker = Worker(app, queue, "default", options=WorkerOptions(memory=1, sleep=0, batch=100))
    worker.context.pace.average = 0.001  # as if jobs had been measured: the first round prefetches a batch
    try:
        with caplog.at_level(logging.INFO, logger="laraq.worker.worker"):
            status = worker.daemon()
    finally:
        worker.close()
    assert status == EXIT_MEMORY_LIMIT
    assert sorted(ran) == list(range(51))
    keys = queue.keys()
    assert redis_client.llen(keys.list) == 0 and redis_client.zcard(keys.reserved) == 0
    lines = [r.getMessage() for r in caplog.records]
    stop = [line for line in lines if line.startswith("worker default stopping")]
    assert len(stop) == 1 and "resident when checked" in stop[0], lines
    assert not any("gave" in line and "back" in line for line in lines), lines


def test_each_stop_says_why_in_one_line(redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    queue = RedisQueue(redis_client, prefix="w_", retry_after=90)
    for options, why in ((WorkerOptions(stop_when_empty=True, sleep=0, memory=1 << 20), "--stop-when-empty"),
                         (WorkerOptions(stop_when_empty=True, sleep=0, batch=1, memory=1 << 20), "--stop-when-empty"),
                         (WorkerOptions(max_jobs=2, sleep=0, memory=1 << 20), "--max-jobs reached")):
        _push(queue, 3)
        app = App()
        app.handler("App\\Handlers\\Count@run")(lambda data, job: None)
        caplog.clear()
        worker = Worker(app, queue, "default", options=options)
        with caplog.at_level(logging.INFO, logger="laraq.worker.worker"):
            worker.daemon()
        worker.close()
        lines = [r.getMessage() for r in caplog.records if "stopping (exit" in r.getMessage()]
        assert len(lines) == 1 and why in lines[0], lines
        redis_client.flushdb()


KILL_SCRIPT = r"""
import os, signal, sys
from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.worker.worker import Worker, WorkerOptions

log, port = sys.argv[1], int(sys.argv[2])
app = App()

@app.handler("App\\Handlers\\Count@run")
def run(data, job):
    with open(log, "a") as fh:
        fh.write(f"{data['n']}\n")
    if data["n"] == 30:
        os.kill(os.getpid(), signal.SIGKILL)  # killed while this job runs, the rest of the batch buffered

queue = RedisQueue(f"redis://127.0.0.1:{port}/0", prefix="k_", retry_after=90, version="13.0.0")
worker = Worker(app, queue, "default", options=WorkerOptions(sleep=0, batch=100, max_tries=0, memory=1 << 20))
worker.context.pace.average = 0.001
worker.daemon()
"""


def test_sigkill_with_a_full_buffer_reruns_only_the_running_job(redis_server: Any, redis_client: redis.Redis,
                                                                 tmp_path: Path) -> None:
    """Job 30 of 100 SIGKILLs its own worker while it runs, with the rest of the batch buffered behind
    it. Every finished job's ZREM was written already, so of the jobs that ran only job 30 is still
    reserved (to run again after retry_after, as artisan's running job would); the buffered jobs are
    all still there, unrun."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    _push(queue, 100)
    log = tmp_path / "runs.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(log), str(redis_server.port)], env=env,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert [int(x) for x in log.read_text().split()] == list(range(31))
    keys = queue.keys()
    reserved = [json.loads(m)["data"]["n"] for m in redis_client.zrange(keys.reserved, 0, -1)]
    listed = [json.loads(m)["data"]["n"] for m in redis_client.lrange(keys.list, 0, -1)]
    # of the 31 jobs that ran, only the running one can run again
    assert [n for n in reserved if n <= 30] == [30]
    # nothing lost: every job that did not finish is in the list or reserved
    assert sorted(listed + reserved) == list(range(30, 100))


@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
def test_a_pause_and_a_quit_are_each_one_line(redis_client: redis.Redis, caplog: pytest.LogCaptureFixture,
                                              batch: int) -> None:
    queue = RedisQueue(redis_client, prefix="s_", retry_after=90)
    worker = Worker(App(), queue, "default", options=WorkerOptions(sleep=0, batch=batch, memory=1 << 20))
    worker.signals.paused = True
    worker.signals.quit(0, "SIGTERM received")  # seen on the loop's first stop check, after the pause
    with caplog.at_level(logging.INFO, logger="laraq.worker.worker"):
        assert worker.daemon() == 0
    worker.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("worker default ")]
    paused = [line for line in lines if "paused" in line]
    assert paused == ["worker default paused (SIGUSR2; SIGCONT resumes)"]
    assert [line for line in lines if "stopping" in line] == ["worker default stopping (exit 0): SIGTERM received"]


@pytest.mark.parametrize("batch", [100, 1], ids=["fast-loop", "batch-1"])
def test_stop_when_empty_never_takes_a_failed_reserve_for_an_empty_queue(
        redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        batch: int) -> None:
    """A reserve that fails (here ``:reserved`` is a string: every reserve script is refused) is
    retried, then the worker stops with exit 1 naming the failed rounds: never 0 for "no job to take"
    while a job waits. Fixed, the same worker takes the job and then stops empty."""
    from laraq.worker import stoprules

    monkeypatch.setattr(stoprules, "STOP_WHEN_EMPTY_TRIES", 2)
    queue = RedisQueue(redis_client, prefix=f"f{batch}_", retry_after=90, version="13.0.0")
    _push(queue, 1)
    redis_client.set(queue.keys().reserved, "not a sorted set")
    ran: list[int] = []
    app = App()
    app.handler("App\\Handlers\\Count@run")(lambda data, job: ran.append(int(data["n"])))
    options = WorkerOptions(stop_when_empty=True, sleep=0, batch=batch, memory=1 << 20)
    worker = Worker(app, queue, "default", options=options)
    try:
        with caplog.at_level(logging.INFO, logger="laraq.worker.worker"):
            status = worker.daemon()
    finally:
        worker.close()
    assert status == 1 and ran == []
    assert redis_client.llen(queue.keys().list) == 1
    stop = [r.getMessage() for r in caplog.records if r.getMessage().startswith("worker default stopping")]
    assert len(stop) == 1 and "reserve rounds failed in a row" in stop[0], stop
    redis_client.delete(queue.keys().reserved)
    worker = Worker(app, queue, "default", options=options)
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert ran == [0]


def test_a_buffered_job_whose_renewal_is_not_answered_is_kept_not_stranded(
        redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The second job of a batch waits while the first runs into the next second, so its lease is
    renewed before it starts (synchronously: this client is made one that cannot split a call, as on
    Redis Cluster), and Redis does not answer that renewal once. The job stays at the head of the
    buffer and starts when Redis answers; it is not dropped to sit in ``:reserved`` until
    ``retry_after`` (and come back with an attempt spent, or fail unrun with ``tries=1``)."""
    import time as time_module

    queue = RedisQueue(redis_client, prefix="rn_", retry_after=30, version="13.0.0")
    _push(queue, 2)
    ran: list[int] = []
    app = App()

    @app.handler("App\\Handlers\\Count@run")
    def count(data: Any, job: Job) -> None:
        ran.append(int(data["n"]))
        if int(data["n"]) == 0:
            time_module.sleep(1.1)  # the second job now starts in a later second than it was reserved in

    # no unstarted record: the jobs rely on the lease alone
    worker = Worker(app, queue, "default", options=WorkerOptions(stop_when_empty=True, sleep=0, batch=2,
                                                                 memory=1 << 20, unstarted_lease=0))
    reserving = worker.reserver.reserving
    real_renew = reserving.renew
    refused: list[int] = []

    def renew_once_unanswered(name: str, members: list[bytes]) -> list[bool]:
        if not refused:
            refused.append(len(members))
            raise redis.exceptions.ConnectionError("Connection reset by peer (injected)")
        return real_renew(name, members)

    monkeypatch.setattr(reserving, "renew_send", lambda name, members: None)
    monkeypatch.setattr(reserving, "renew", renew_once_unanswered)
    worker.context.pace.average = 0.001  # the first round takes both jobs
    try:
        with caplog.at_level(logging.INFO, logger="laraq.worker.worker"):
            assert worker.daemon() == 0
    finally:
        worker.close()
    assert refused, "the renewal was never needed: the test did not exercise the fault"
    assert ran == [0, 1]
    assert redis_client.llen(queue.keys().list) == 0 and redis_client.zcard(queue.keys().reserved) == 0
    assert any("kept, not started yet" in r.getMessage() for r in caplog.records)
