"""The banner, ``laraq config`` and ``laraq doctor`` warn when real PHP workers share laraq's queue.

A real Horizon supervisor (``php artisan horizon:supervisor`` on the live 12/13 fixture apps with Horizon)
records the queues it works in Redis; laraq reads that record and warns for a queue it takes Python jobs
from, and not for one the supervisor does not work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app
from phpapp import PhpApp
from test_worker_support import ROOT

pytestmark = pytest.mark.php


@pytest.fixture(params=HORIZON_LINES)
def supervised(request: pytest.FixtureRequest, redis_client: Any, redis_server: Any) -> Iterator[PhpApp]:
    app = horizon_app(request.param, redis_server.port)
    proc = app.popen_artisan("horizon:supervisor", "host-abcd:supervisor-1", "redis", "--queue=default,shared",
                             "--max-processes=1", "--min-processes=1", "--workers-name=default", "--balance=off")
    try:
        deadline = time.monotonic() + 60
        while not redis_client.zcard(f"{HORIZON_PREFIX}supervisors") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        assert redis_client.zcard(f"{HORIZON_PREFIX}supervisors") == 1
        yield app
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def laraq(app: PhpApp, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(app.env, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", "from laraq.cli import main; main()", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_config_and_doctor_warn_about_php_workers_on_laraqs_queue(supervised: PhpApp) -> None:
    info = json.loads(laraq(supervised, "config", "--json", "--queue", "shared").stdout)
    shared = [w for w in info["warnings"] if "host-abcd:supervisor-1" in w]
    assert len(shared) == 1 and "shared" in shared[0] and "PHP workers" in shared[0]
    info = json.loads(laraq(supervised, "config", "--json", "--queue", "python").stdout)
    assert not [w for w in info["warnings"] if "supervisor" in w]
    findings = json.loads(laraq(supervised, "doctor", "--json", "--queue", "shared").stdout)
    assert [f["level"] for f in findings if "PHP workers share" in f["title"]] == ["warn"]
    findings = json.loads(laraq(supervised, "doctor", "--json", "--queue", "python").stdout)
    assert not [f for f in findings if "PHP workers share" in f["title"]]
