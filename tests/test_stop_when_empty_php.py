"""``--stop-when-empty`` drains the queue, as ``php artisan queue:work --stop-when-empty`` does.

Differential on each live Laravel line: the same jobs (string ``Class@method`` jobs, command jobs Python
handles, EchoJobs) dispatched by real PHP onto a real Redis; artisan runs them all and stops, then laraq
(as a process with its default batch and prefetch, and in-process from ``default_params``) must run every
one of them too, in the same order, and leave the same (empty) queue keys behind.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import test_worker_support as support
from phpapp import STOCK_PREFIX, PhpApp
from test_worker_support import laraq_env, run_laraq

from laraq.cli.work import build_worker, default_params

pytestmark = pytest.mark.php

KINDS = ("string", "python", "echo")
N = 3


def dispatch_all(app: PhpApp, queue: str) -> None:
    for kind in KINDS:
        app.tool("dispatch", kind, f"--queue={queue}", f"--count={N}")


def queue_keys(client: Any, prefix: str, queue: str) -> dict[str, int]:
    base = f"{prefix}queues:{queue}"
    return {"list": client.llen(base), "reserved": client.zcard(base + ":reserved"),
            "delayed": client.zcard(base + ":delayed")}


def ran(app: PhpApp, runner: str, queue_jobs: int) -> list[str]:
    rows = [r for r in app.runs() if r["runner"] == runner]
    assert len(rows) == queue_jobs, rows
    return [r["class"].split("@")[0] for r in rows]  # a string job: PHP logs Class@method, the helper Class


def test_stop_when_empty_runs_every_queued_job_like_artisan(laravel: str, redis_server: Any, redis_client: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))  # the in-process worker's handlers record there too
    prefix = STOCK_PREFIX[laravel]
    empty = {"list": 0, "reserved": 0, "delayed": 0}

    dispatch_all(app, "cmp")
    assert queue_keys(redis_client, prefix, "cmp")["list"] == N * len(KINDS)
    proc = app.artisan("queue:work", "redis", "--queue=cmp", "--stop-when-empty", "--sleep=0")
    assert proc.returncode == 0, proc.stderr
    php_order = ran(app, "php", N * len(KINDS))
    assert Counter(php_order) == Counter({c: N for c in set(php_order)}) and len(set(php_order)) == len(KINDS)
    assert queue_keys(redis_client, prefix, "cmp") == empty

    # laraq work as a process, default batch/prefetch
    dispatch_all(app, "cmp")
    proc = run_laraq(app, "--stop-when-empty", "--queue=cmp", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert ran(app, "python", N * len(KINDS)) == php_order
    assert queue_keys(redis_client, prefix, "cmp") == empty

    # an in-process worker built from default_params (its --memory would count this whole pytest process,
    # and Laravel's memory rule stops a worker after the job that crossed it: exit 12)
    dispatch_all(app, "cmp")
    worker = build_worker(default_params(laravel=app.release, queue="cmp", stop_when_empty=True, sleep=0,
                                         quiet=True, memory=1 << 20), env=laraq_env(app), app=support.app)
    try:
        assert worker.run() == 0
    finally:
        worker.close()
    assert ran(app, "python", 2 * N * len(KINDS)) == php_order * 2
    assert queue_keys(redis_client, prefix, "cmp") == empty
