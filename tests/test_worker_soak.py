"""Soak: artisan and laraq on one queue at once, two workers each, one of each SIGKILLed mid-run.

``LARAQ_SOAK_JOBS`` EchoJobs (PHP-dispatched; 600 by default, e.g. 5000 for a long soak) on each live
Laravel line (8, 12, 13) are worked by two ``php artisan queue:work`` and two
``laraq work`` processes. One worker of each language is SIGKILLed while jobs are running (for laraq,
the supervisor: the kernel then kills its worker child). With a short ``retry_after`` the jobs the
killed workers held come back, so: every job ran at least once, none was lost or failed, and
nothing is left in ``:reserved``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

import pytest
from conftest import queue_count
from phpapp import PhpApp
from test_worker_support import popen_laraq, wait_for

pytestmark = pytest.mark.php

JOBS = int(os.environ.get("LARAQ_SOAK_JOBS", "600"))
RETRY_AFTER = 3


@pytest.mark.slow
def test_php_and_python_workers_share_a_queue_through_crashes(laravel: str, redis_client: Any,
                                                              redis_server: Any) -> None:
    app = PhpApp(redis_server.port, version=laravel, retry_after=RETRY_AFTER)
    KEY = app.prefix + "queues:soak"
    app.tool("dispatch", "echo", "--queue=soak", f"--count={JOBS}",
             '--args={"mode": "sleep", "seconds": 0.01}', timeout=120)
    uuids = {json.loads(m)["uuid"] for m in redis_client.lrange(KEY, 0, -1)}
    assert len(uuids) == JOBS

    artisan = [app.popen_artisan("queue:work", "redis", "--queue=soak", "--sleep=0", "--tries=0", "--quiet")
               for _ in range(2)]
    laraq = [popen_laraq(app, "--queue=soak", "--tries=0", f"--retry-after={RETRY_AFTER}", "--quiet")
             for _ in range(2)]
    workers: list[subprocess.Popen[str]] = artisan + laraq
    try:
        # both languages are working, then one worker of each dies without any clean-up
        wait_for(lambda: {"php", "python"} <= {r["runner"] for r in app.runs()} and len(app.runs()) > JOBS // 4,
                 timeout=60)
        artisan[0].send_signal(signal.SIGKILL)
        laraq[0].send_signal(signal.SIGKILL)
        killed_at = len(app.runs())

        def all_done() -> bool:
            ran = {r["uuid"] for r in app.runs()}
            left = queue_count(redis_client, KEY)
            return ran >= uuids and left == 0

        wait_for(all_done, timeout=120, interval=0.2)
        for survivor in (artisan[1], laraq[1]):
            survivor.send_signal(signal.SIGTERM)
            assert survivor.wait(30) == 0
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    runs = app.runs()
    assert killed_at < JOBS  # the kills happened while jobs were still being worked
    assert {r["uuid"] for r in runs} == uuids  # every job ran
    assert {r["runner"] for r in runs} == {"php", "python"}
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0
    assert app.tool("size", "--queue=soak")["size"] == 0
    assert app.artisan("queue:failed").stdout.count("EchoJob") == 0  # nothing failed
