"""artisan and laraq on one queue, laraq SIGKILLed with a full buffer, on real Laravel.

Both run the fixture's ``EchoJob`` with ``--tries=1``. laraq is killed while it has a prefetched
buffer and started again; artisan works on throughout. Its never-started jobs come back through
laraq's reclaim (attempts unspent) unless Laravel's own migrate of expired ``:reserved`` entries gets
them first; either way exactly one of the two gives each job back. So: nothing lost, nothing run
twice, and no job failed "attempted too many times" without ever having run (before laraq's unstarted
records, the buffered jobs came back with their attempt spent and were failed unrun). Only the one job
laraq had started may fail, as artisan's would: it may have run, or have been killed after its start was
written (its record removed with the previous job's ack) and before its handler wrote its line, as a job
artisan popped and was killed before ``handle()`` fails with its attempt spent.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from typing import Any

import pytest
from conftest import queue_count
from phpapp import PhpApp
from test_worker_support import popen_laraq, wait_for

pytestmark = pytest.mark.php

QUEUE = "kills"


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel, retry_after=6)


def _stop(*procs: subprocess.Popen[Any]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_a_killed_laraq_beside_artisan_loses_nothing_and_runs_nothing_twice(php: PhpApp, redis_client: Any) -> None:
    php.tool("dispatch", "echo", f"--queue={QUEUE}", "--count=400",
             "--args=" + json.dumps({"mode": "sleep", "seconds": 0.01}), timeout=300)
    key = php.prefix + "queues:" + QUEUE
    pushed = {json.loads(m)["uuid"] for m in redis_client.lrange(key, 0, -1)}
    assert len(pushed) == 400
    laraq_flags = ("--queue=" + QUEUE, "--tries=1", "--retry-after=6", "--no-supervise")
    artisan = php.popen_artisan("queue:work", "redis", f"--queue={QUEUE}", "--sleep=0", "--tries=1")
    laraq = popen_laraq(php, *laraq_flags)
    again = None
    try:
        # laraq has run jobs (so it has measured their pace and prefetches a buffer): kill it mid-stream
        wait_for(lambda: sum(r["runner"] == "python" for r in php.runs()) >= 30, timeout=180)
        laraq.send_signal(signal.SIGKILL)
        laraq.communicate(timeout=60)
        again = popen_laraq(php, *laraq_flags)
        # everything ran or failed: the list, :reserved and :delayed are empty
        wait_for(lambda: queue_count(redis_client, key) == 0, timeout=300, interval=0.2)
    finally:
        _stop(artisan, laraq, *(p for p in (again,) if p is not None))
    runs = php.runs()
    ran: dict[str, int] = {}
    for r in runs:
        ran[r["uuid"]] = ran.get(r["uuid"], 0) + 1
    failed = [json.loads(row[0])["uuid"] for row in
              sqlite3.connect(php.db_path).execute("select payload from failed_jobs")]
    assert [u for u, n in ran.items() if n > 1] == []          # nothing ran twice
    assert set(ran) | set(failed) == pushed                   # nothing lost
    assert len(failed) <= 1                                   # at most the job laraq had started
    assert not redis_client.exists(key + ":laraq-unstarted")
