"""Horizon on another Redis server: the shared-queue warning reads the supervisors where ``horizon.use`` says.

A private copy of ``fixtures/laravel13-custom`` whose ``config/horizon.php`` names ``'use' =>
'horizon-store'``, a Redis connection on a second redis-server. A real ``php artisan horizon:supervisor``
works the app's queue (``acme-work`` on ``jobs``) and records itself on that second server only. ``laraq
config`` (given only ``--env-file``) must still warn that PHP workers share the queue
(:mod:`laraq.config.phpworkers`), and stay silent for a queue the supervisor does not work.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RedisServer, require_laravel
from phpapp import FIXTURES, PhpApp
from test_app_config_php import CONNECTION, QUEUE, laraq

pytestmark = pytest.mark.php

HORIZON_PREFIX = "acme_horizon:"


def _with_horizon_on(app: PhpApp, port: int) -> None:
    """Give the app's private copy its own config/ with Horizon on a Redis connection at ``port``."""
    config = app.path / "config"
    config.unlink()
    shutil.copytree(FIXTURES / "laravel13-custom" / "config", config)
    horizon = (config / "horizon.php").read_text()
    (config / "horizon.php").write_text(horizon.replace("'use' => 'default'", "'use' => 'horizon-store'"))
    database = (config / "database.php").read_text()
    marker = "        'cache-store' => ["
    assert marker in database
    (config / "database.php").write_text(database.replace(marker, (
        "        'horizon-store' => ['host' => '127.0.0.1', 'port' => " + str(port) + ", 'database' => 0],\n"
        + marker)))


@pytest.fixture
def supervised(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[PhpApp, Any, Any]]:
    require_laravel("13")
    (tmp_path / "horizon-redis").mkdir()
    other = RedisServer(tmp_path / "horizon-redis")
    queue_redis, horizon_redis = redis_server.client(), other.client()
    queue_redis.flushall()
    app = PhpApp(redis_server.port, version="13", variant="custom", horizon=True)
    _with_horizon_on(app, other.port)
    proc = app.popen_artisan("horizon:supervisor", "host-elsewhere:supervisor-1", CONNECTION, f"--queue={QUEUE}",
                             "--max-processes=1", "--min-processes=1", "--workers-name=default", "--balance=off")
    try:
        deadline = time.monotonic() + 60
        while not horizon_redis.zcard(f"{HORIZON_PREFIX}supervisors") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        yield app, queue_redis, horizon_redis
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        other.stop()


def test_warning_reads_horizons_own_server(supervised: tuple[PhpApp, Any, Any]) -> None:
    app, queue_redis, horizon_redis = supervised
    assert horizon_redis.zcard(f"{HORIZON_PREFIX}supervisors") == 1
    assert not queue_redis.keys(f"{HORIZON_PREFIX}*")  # nothing of Horizon's on the queue's server
    proc = laraq(app, "--json", command="config")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert {f["setting"]: f["value"] for f in info["settings"]}["horizon.use"] == "horizon-store"
    shared = [w for w in info["warnings"] if "host-elsewhere:supervisor-1" in w]
    assert len(shared) == 1 and QUEUE in shared[0] and "PHP workers" in shared[0], info["warnings"]
    other = json.loads(laraq(app, "--json", "--queue", "python", command="config").stdout)
    assert not [w for w in other["warnings"] if "supervisor" in w]
