"""Cross-version migration, live: ``laraq move`` between two Laravel lines' layouts (8 and 13 both ways,
9 to 12 and back, 10 and 11 to 13), then the destination's own ``php artisan queue:work`` runs the
jobs. Python dispatch to each line is covered by ``test_dispatch_php.py``.

Both apps share one Redis db and ``APP_KEY`` (so encrypted commands decrypt on either side); the layout
differs: ``laravel_database_`` (8 to 11) against ``laravel-database-`` (12, 13), and the payload form each
line writes (``createdAt`` from 12.11). Payloads move byte for byte. Where the destination cannot honour a job (a 13.6+ debounced
job moved to 8), ``laraq move`` refuses, names the jobs and moves nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import require_laravel
from phpapp import PhpApp
from test_worker_support import ROOT, laraq_env

pytestmark = pytest.mark.php

LARAQ_CLI = [sys.executable, "-c", "from laraq.cli import main; main()"]
#: Job kinds both fixture apps know (the 12/13 apps load the Laravel 8 app's job classes too).
SHARED_KINDS = ["echo", "plain", "encrypted", "rich", "string", "configured", "python"]


#: (source, destination) pairs: the two ends both ways, then 9 to 12 and back, 10 and 11 to 13 (every pair
#: crosses the 11 | 12 change of stock prefix, so source and destination keys never coincide).
PAIRS = [("8", "13"), ("13", "8"), ("9", "12"), ("12", "9"), ("11", "13"), ("10", "13")]


@pytest.fixture
def apps(redis_server: Any, redis_client: Any) -> tuple[PhpApp, PhpApp]:
    require_laravel("8")
    require_laravel("13")
    return PhpApp(redis_server.port, version="8"), PhpApp(redis_server.port, version="13")


def move(src: PhpApp, dst: PhpApp, queue: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LARAQ_CLI, "move", queue, "--laravel", src.release, "--to-laravel", dst.release,
         "--to-prefix", dst.prefix, *extra],
        env=laraq_env(src), cwd=ROOT, capture_output=True, text=True, timeout=120)


def work(app: PhpApp, queue: str) -> None:
    proc = app.artisan("queue:work", "redis", f"--queue={queue}", "--stop-when-empty", "--sleep=0")
    assert proc.returncode == 0, proc.stderr + proc.stdout


def dispatched(app: PhpApp, redis_client: Any, queue: str) -> list[bytes]:
    key = app.prefix + "queues:" + queue
    return redis_client.lrange(key, 0, -1) + redis_client.zrange(key + ":delayed", 0, -1)


@pytest.mark.parametrize(("src_line", "dst_line"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_jobs_moved_between_lines_run_on_the_destination(redis_server: Any, redis_client: Any, src_line: str,
                                                         dst_line: str) -> None:
    require_laravel(src_line)
    require_laravel(dst_line)
    src, dst = PhpApp(redis_server.port, version=src_line), PhpApp(redis_server.port, version=dst_line)
    assert src.prefix != dst.prefix  # each pair crosses the 11 | 12 prefix change
    for kind in SHARED_KINDS:
        src.tool("dispatch", kind, "--queue=moving")
    src.tool("dispatch", "echo", "--queue=moving", "--delay=1", "--args=" + json.dumps({"args": ["late"]}))
    bodies = dispatched(src, redis_client, "moving")
    uuids = {json.loads(b)["uuid"] for b in bodies}
    assert ("createdAt" in json.loads(bodies[0])) == (int(src.version) >= 12)  # each line's own payload form

    proc = move(src, dst, "moving")
    assert proc.returncode == 0, proc.stderr
    assert "moved 8 jobs (7 pending, 1 delayed)" in proc.stdout
    assert dispatched(src, redis_client, "moving") == []
    assert sorted(dispatched(dst, redis_client, "moving")) == sorted(bodies)  # byte for byte

    time.sleep(1.1)  # the delayed one comes due
    work(dst, "moving")
    runs = dst.runs()
    assert {r["uuid"] for r in runs} == uuids and len(runs) == len(uuids)
    assert all(r["attempts"] == 1 and r.get("queue", "moving") == "moving" for r in runs)
    secret = next(r for r in runs if r["class"] == "App\\Jobs\\EncryptedJob")["secret"]
    assert secret == "top secret ✓"
    assert src.runs() == []
    assert dst.tool("size", "--queue=moving")["size"] == 0
    assert "No failed jobs" in dst.artisan("queue:failed").stdout


def test_debounced_jobs_are_refused_for_laravel_8_and_nothing_moves(apps: tuple[PhpApp, PhpApp],
                                                                    redis_client: Any) -> None:
    app8, app13 = apps
    app13.tool("dispatch", "echo", "--queue=deb")
    app13.tool("dispatch", "debounced", "--queue=deb", '--args={"key": "k1", "label": "newest"}')
    before = dispatched(app13, redis_client, "deb")
    proc = move(app13, app8, "deb")
    assert proc.returncode == 1
    assert "refusing to move to Laravel 8.83.26" in proc.stderr
    assert "App\\Jobs\\DebouncedJob (uuid " in proc.stderr and "13.6+" in proc.stderr
    assert "App\\Jobs\\EchoJob" not in proc.stderr
    assert dispatched(app13, redis_client, "deb") == before  # nothing moved
    assert dispatched(app8, redis_client, "deb") == []
    # the jobs 8 can run can still go, selected by class
    ok = move(app13, app8, "deb", "--filter", "App\\Jobs\\EchoJob")
    assert ok.returncode == 0, ok.stderr
    work(app8, "deb")
    assert [r["class"] for r in app8.runs()] == ["App\\Jobs\\EchoJob"]
    # and to another 13 layout the debounced job moves and 13 honours it
