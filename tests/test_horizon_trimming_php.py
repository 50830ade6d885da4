"""laraq trims what Horizon's master trims, and only while no PHP Horizon master is alive (live 12, 13).

The same Redis state (entries of every age in each of Horizon's sorted sets, live and stale master and
supervisor entries) is trimmed once by Horizon's own repositories (``tool.php horizon-trim``: the
``trim*Jobs`` and ``flushExpired`` methods its master loop calls) and once by
:class:`laraq.horizon.trimming.Trimmer`; the results must be identical.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app, restore, snapshot
from phpapp import PhpApp

from laraq.horizon import HorizonSettings
from laraq.horizon.listener import HorizonListener
from laraq.horizon.trimming import Trimmer

pytestmark = pytest.mark.php

SETS = ("recent_jobs", "recent_failed_jobs", "pending_jobs", "completed_jobs", "silenced_jobs", "failed_jobs",
        "monitored_jobs")


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port)


def _fill(client: Any) -> None:
    now = time.time()
    for zset in SETS:
        # ages in minutes around every trim boundary (60 and 10080)
        for age in (0, 30, 59, 61, 120, 10079, 10081, 20000):
            client.zadd(HORIZON_PREFIX + zset, {f"{zset}-{age}": -(now - age * 60)})
    for kind in ("masters", "supervisors"):
        for age in (0, 10, 16, 100):
            client.zadd(HORIZON_PREFIX + kind, {f"{kind}-{age}": int(now) - age})


def _sets(client: Any) -> dict[str, list[bytes]]:
    return {k: client.zrange(HORIZON_PREFIX + k, 0, -1) for k in (*SETS, "masters", "supervisors")}


def test_trims_like_horizons_master(hz: PhpApp, redis_client: Any) -> None:
    _fill(redis_client)
    start = snapshot(redis_client)
    hz.tool("horizon-trim")
    php = _sets(redis_client)
    restore(redis_client, start)
    assert Trimmer(redis_client, HorizonSettings()).tick() == ["recent", "failed", "monitored"]
    assert _sets(redis_client) == php
    assert b"recent_jobs-59" in php["recent_jobs"] and b"recent_jobs-61" not in php["recent_jobs"]


def test_trim_schedule_follows_horizons_listeners(redis_client: Any) -> None:
    clock = [1_000_000.0]
    trimmer = Trimmer(redis_client, HorizonSettings(), clock=lambda: clock[0])
    assert trimmer.tick() == ["recent", "failed", "monitored"]
    clock[0] += 30
    assert trimmer.tick() == []
    clock[0] += 30
    assert trimmer.tick() == ["recent"]
    clock[0] += 840 * 60  # trim.failed / 12 = 840 minutes
    assert trimmer.tick() == ["recent", "failed", "monitored"]


def test_no_trimming_while_a_php_master_is_alive(redis_client: Any) -> None:
    _fill(redis_client)
    redis_client.zremrangebyscore(HORIZON_PREFIX + "masters", "-inf", "+inf")
    from laraq.protocol.versions import DEFAULT_VERSION
    from laraq.worker.context import WorkerOptions
    from laraq.worker.events import Looping, WorkerStarting, WorkerStopping

    listener = HorizonListener(redis_client, HorizonSettings())
    looping = Looping("redis", ["default"], paused=False)
    # a PHP master (no laraq marker in its hash), alive in Horizon's window
    redis_client.hset(HORIZON_PREFIX + "master:php-host-AbCd", mapping={"name": "php-host-AbCd", "pid": "1"})
    redis_client.zadd(HORIZON_PREFIX + "masters", {"php-host-AbCd": int(time.time())})
    listener.worker_starting(WorkerStarting("redis", ["default"], WorkerOptions(), DEFAULT_VERSION))
    before = _sets(redis_client)["recent_jobs"]
    listener.worker_looping(looping)
    assert _sets(redis_client)["recent_jobs"] == before
    # the PHP master goes away: laraq takes over
    redis_client.delete(HORIZON_PREFIX + "master:php-host-AbCd")
    redis_client.zrem(HORIZON_PREFIX + "masters", "php-host-AbCd")
    listener.worker_looping(looping)
    assert b"recent_jobs-61" not in _sets(redis_client)["recent_jobs"]
    listener.worker_stopping(WorkerStopping(0, "told to quit", WorkerOptions()))
