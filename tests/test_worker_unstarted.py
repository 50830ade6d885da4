"""After a SIGKILL, a laraq worker's buffered, never-started jobs come back at once and unspent.

The reserve records each buffered job in ``queues:NAME:laraq-unstarted`` with a short lease; a job's
record is removed before it starts; any laraq batch reserve gives back the jobs whose record expired.
So after a kill only the running job is left as artisan leaves its own (in ``:reserved``, attempt spent,
back after ``retry_after``); the buffered ones go back to the head of the list as they were pushed.

Nothing here is timed: the kill comes from the handler of job 30 itself, and the test waits for the
records' leases to run out on Redis' own clock before the second worker starts (no wait on main, where
there are no records: the second worker then finds the buffered jobs still reserved for 90 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from laraq.app import App
from laraq.bus.job import Job
from laraq.protocol.payload import build_string_payload
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import Reserving
from laraq.stores.failed import FileFailedJobStore
from laraq.worker.worker import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent
NAME = "App\\Handlers\\Count@run"

KILL_SCRIPT = r"""
import os, signal, sys
from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import Reserving
from laraq.worker.worker import Worker, WorkerOptions

log, port = sys.argv[1], int(sys.argv[2])
app = App()

@app.handler("App\\Handlers\\Count@run")
def run(data, job):
    with open(log, "a") as fh:
        fh.write(f"{data['n']} {job.attempts}\n")
    if data["n"] == 30:
        os.kill(os.getpid(), signal.SIGKILL)  # killed while this job runs, the rest of the batch buffered

queue = RedisQueue(f"redis://127.0.0.1:{port}/0", prefix="k_", retry_after=90, version="13.0.0")
worker = Worker(app, queue, "default", options=WorkerOptions(sleep=0, batch=100, max_tries=1, memory=1 << 20,
                                                             unstarted_lease=2.0))
worker.context.pace.average = 0.001
worker.daemon()
"""


def _push(queue: RedisQueue, count: int) -> None:
    for n in range(count):
        queue.push_raw(build_string_payload("13.0.0", NAME, {"n": n}))


def _redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def _wait_for_leases_to_run_out(client: redis.Redis, key: str) -> None:
    """Until no unstarted record's lease is still running (on Redis' clock); at once if there is none."""
    deadline = time.monotonic() + 60
    while True:
        last = client.zrange(key, -1, -1, withscores=True)
        if not last or last[0][1] < _redis_now(client):
            return
        assert time.monotonic() < deadline, f"unstarted leases still running after 60 s: {last}"
        time.sleep(0.1)


def test_a_sigkill_gives_the_unstarted_buffer_back_unspent(redis_server: Any, redis_client: redis.Redis,
                                                           tmp_path: Path) -> None:
    """Job 30 of 100 SIGKILLs its worker (``--tries 1``) with the rest of the batch buffered. A second
    worker then runs each of jobs 31-99 exactly once, with ``attempts`` 1 as if they had never been
    reserved, and fails none; job 30 stays reserved with its attempt spent, as artisan's running job."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    _push(queue, 100)
    log = tmp_path / "runs.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(log), str(redis_server.port)], env=env,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL
    first = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    assert first == [(n, 1) for n in range(31)]
    keys = queue.keys()
    _wait_for_leases_to_run_out(redis_client, keys.unstarted)

    second: list[tuple[int, int]] = []
    app = App()

    @app.handler(NAME)
    def run(data: Any, job: Job) -> None:
        second.append((data["n"], job.attempts))

    failed = FileFailedJobStore(tmp_path / "failed-jobs.json")
    worker = Worker(app, queue, "default", failer=failed,
                    options=WorkerOptions(sleep=0, batch=100, max_tries=1, stop_when_empty=True,
                                         memory=1 << 20, unstarted_lease=2.0))
    worker.daemon()

    # every never-started job ran once, unspent; none failed without running
    assert sorted(second) == [(n, 1) for n in range(31, 100)]
    assert failed.all() == []
    # the running job: still reserved, its attempt spent (back after retry_after, as artisan's would be)
    reserved = [json.loads(m) for m in redis_client.zrange(keys.reserved, 0, -1)]
    assert [(r["data"]["n"], r["attempts"]) for r in reserved] == [(30, 1)]
    assert redis_client.llen(keys.list) == 0
    assert not redis_client.exists(keys.unstarted)


def test_a_reclaimed_job_goes_back_byte_for_byte_to_the_head(redis_client: redis.Redis) -> None:
    """The body given back is the one that was pushed (PHP's bytes, attempts 0), ahead of the rest."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    reserving = Reserving(queue, unstarted_lease=1.0)
    bodies = [b'{"uuid":"u%d","job":"X@run","data":{"s":"caf\\u00e9 \\/ %d"},"attempts":0}' % (n, n) for n in range(4)]
    for body in bodies:
        queue.push_raw(body)
    keys = queue.keys()
    taken = reserving.reserve_batch(count=2, record=True).jobs
    assert [t.body for t in taken] == bodies[:2]
    assert redis_client.zcard(keys.unstarted) == 2
    _wait_for_leases_to_run_out(redis_client, keys.unstarted)
    assert reserving.reclaim() == 2
    assert sorted(redis_client.lrange(keys.list, 0, 1)) == bodies[:2]
    assert redis_client.lrange(keys.list, 2, -1) == bodies[2:]
    assert redis_client.zcard(keys.reserved) == 0
    assert redis_client.llen(keys.notify) == 4


def test_laravels_migrate_and_the_reclaim_give_a_job_back_once(redis_client: redis.Redis) -> None:
    """A buffered job whose ``:reserved`` entry Laravel's own migrate moved back (PHP's pop) is only
    forgotten by the reclaim; one the reclaim gave back is not found by the migrate: one copy either way."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    reserving = Reserving(queue, unstarted_lease=1.0)
    queue.push_raw(build_string_payload("13.0.0", NAME, {"n": 1}))
    queue.push_raw(build_string_payload("13.0.0", NAME, {"n": 2}))
    keys = queue.keys()
    first, second = reserving.reserve_batch(count=2, record=True).jobs
    # PHP's migrate of an expired reservation (Laravel's script, as laraq's pop runs it) takes job 1 back
    redis_client.zadd(keys.reserved, {first.reserved: 0}, xx=True)
    queue.migrate(keys)
    assert redis_client.lrange(keys.list, 0, -1) == [first.reserved]
    _wait_for_leases_to_run_out(redis_client, keys.unstarted)
    assert reserving.reclaim() == 1  # job 2 only; job 1 is already back
    assert redis_client.lrange(keys.list, 0, -1) == [second.body, first.reserved]
    assert redis_client.zcard(keys.unstarted) == 0
    queue.migrate(keys)  # nothing left for it
    assert redis_client.llen(keys.list) == 2


def test_a_started_job_is_never_reclaimed(redis_client: redis.Redis) -> None:
    """Once its record is removed (the start), a job whose lease would have run out stays reserved."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    reserving = Reserving(queue, unstarted_lease=1.0)
    queue.push_raw(build_string_payload("13.0.0", NAME, {"n": 1}))
    queue.push_raw(build_string_payload("13.0.0", NAME, {"n": 2}))
    keys = queue.keys()
    from laraq.protocol.lua_laraq import unstarted_member
    started, buffered = reserving.reserve_batch(count=2, record=True).jobs
    assert reserving.unstarted("default", [unstarted_member(started.reserved, started.body)]) == [True]
    _wait_for_leases_to_run_out(redis_client, keys.unstarted)
    assert reserving.reclaim() == 1
    assert redis_client.zrange(keys.reserved, 0, -1) == [started.reserved]
    assert redis_client.lrange(keys.list, 0, -1) == [buffered.body]
    # starting the reclaimed one now says it is gone: the worker does not run it
    assert reserving.unstarted("default", [unstarted_member(buffered.reserved, buffered.body)]) == [False]


def test_a_graceful_stop_clears_the_records(redis_client: redis.Redis) -> None:
    """Jobs handed back on a stop leave no record behind."""
    queue = RedisQueue(redis_client, prefix="k_", retry_after=90, version="13.0.0")
    reserving = queue.reserving
    for n in range(5):
        queue.push_raw(build_string_payload("13.0.0", NAME, {"n": n}))
    taken = reserving.reserve_batch(count=5, record=True).jobs
    assert reserving.give_back("default", taken) == 5
    keys = queue.keys()
    assert not redis_client.exists(keys.unstarted)
    assert not redis_client.exists(keys.reserved)


def _drain_250(redis_client: redis.Redis, prefix: str, acks: str) -> tuple[RedisQueue, list[int], int]:
    """250 jobs run by one worker with ``acks``; the queue, the jobs run, and the ``ZREM`` calls Redis saw."""
    queue = RedisQueue(redis_client, prefix=prefix, retry_after=90, version="13.0.0")
    _push(queue, 250)
    ran: list[int] = []
    app = App()
    app.handler(NAME)(lambda data, job: ran.append(int(data["n"])))
    worker = Worker(app, queue, "default", options=WorkerOptions(sleep=0, batch=100, stop_when_empty=True,
                                                                 memory=1 << 20, acks=acks))
    worker.context.pace.average = 0.001
    redis_client.config_resetstat()
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    keys = queue.keys()
    assert not redis_client.exists(keys.list, keys.reserved, keys.unstarted)
    return queue, ran, int(redis_client.info("commandstats").get("cmdstat_zrem", {}).get("calls", 0))


def test_batched_acks_write_nothing_per_job(redis_client: redis.Redis) -> None:
    """``--acks batched`` (the throughput trade): no unstarted records and no per-job ``ZREM``; the acks
    ride on the next reserve call or a flush, and the queue drains to the same end state."""
    _queue, ran, zrem_calls = _drain_250(redis_client, "b_", "batched")
    assert ran == list(range(250))
    assert zrem_calls < 50  # acks in bulk (inside the reserve script or one ZREM per flush), not 250


def test_acks_at_once_write_each_finished_job(redis_client: redis.Redis) -> None:
    """The default: a ZREM per finished job, written the moment it is done (and the next job's record
    removal with it)."""
    _queue, ran, zrem_calls = _drain_250(redis_client, "a_", "at-once")
    assert ran == list(range(250))
    assert zrem_calls >= 250
