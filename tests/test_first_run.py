"""First contact: ``bash scripts/run`` with no arguments, and the worker's start-up banner and faults.

``scripts/run`` is run for real: it sets up a virtualenv (``$LARAQ_VENV``, a temp dir here so the
checkout is not touched), starts its own ``redis-server`` on the free port given by ``REDIS_PORT``, prints
the banner, and keeps running ``laraq work`` with the example handlers on the stock Laravel 13 profile
with no Laravel project: it must say what it cannot see and still take a job.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from conftest import ROOT, free_port

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue


def _read_until(proc: subprocess.Popen[bytes], needle: bytes, seen: bytearray, timeout: float = 120) -> None:
    """Read the merged output until ``needle`` shows (bounded wait; no timing is asserted)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while needle not in seen:
        if time.monotonic() > deadline or proc.poll() is not None:
            more = proc.stdout.read() if proc.poll() is not None else b""
            raise AssertionError(f"{needle!r} not seen; output so far:\n{(seen + (more or b'')).decode(errors='replace')}")
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            seen += os.read(proc.stdout.fileno(), 65536)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("venv") / "v"


def test_scripts_run_without_arguments(venv: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "DB_", "APP_", "CACHE_", "LARAQ_"))}
    env.update(LARAQ_VENV=str(venv), REDIS_PORT=str(port), TMPDIR=str(tmp_path), HOME=str(tmp_path),
               LARAQ_STATE_DIR=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(["bash", "scripts/run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    seen = bytearray()
    pidfile = tmp_path / f"laraq-redis-{port}.pid"
    try:
        _read_until(proc, b"handlers", seen)
        text = seen.decode()
        assert "Laravel profile  13." in text and "default (no Laravel project given" in text
        assert f"redis://127.0.0.1:{port}/0" in text and "'laravel-database-'" in text
        # the stock 13 cache store (database/database.sqlite) is not there: said once, in one line
        assert text.count("cache store is not available") == 1
        assert "failed jobs go to" in text and "--env-file" in text
        assert "Traceback" not in text

        client = redis.Redis(port=port)
        queue = RedisQueue(client, prefix="laravel-database-", version="13")
        Dispatcher(queue).dispatch_string("App\\Handlers\\Foo@bar", {"n": 1})
        _read_until(proc, b"DONE", seen)
        assert client.llen("laravel-database-queues:default") == 0
        assert proc.poll() is None  # it keeps running

        # a second run's set-up is quiet: nothing to install
        again = subprocess.run(["bash", "scripts/setup"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=120)
        assert again.returncode == 0 and again.stdout == "" and again.stderr == ""
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        if pidfile.exists():
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
    assert code == 0, seen.decode(errors="replace")
    assert not (ROOT / "database" / "database.sqlite").exists()  # never created in the checkout
