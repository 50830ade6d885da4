"""Delayed jobs that come due and run leave the same Horizon job records whether Horizon or laraq migrated and
ran them (live Horizon 5.29.1 and 5.48.1).

Horizon's ``RedisQueue::migrateExpiredJobs`` fires ``JobsMigrated``, whose listener
(``RedisJobRepository::migrated``) sets each moved job's record back to pending and, from 5.45.1, its
``delay`` to 0; the reservation that follows keeps that ``delay``. laraq's pop migrates inside its reserve
script, with no such event, and writes the same ``delay`` with the reservation. PHP dispatches delayed jobs
(and one that fails once and is released with a backoff), which are then migrated and run once by ``php
artisan horizon`` and, from the same start, once by ``laraq work``: every job hash is the same field for
field (times by presence, the payload without its ids and clock readings), and Horizon's ``JobRepository``
gives each job the same ``delay``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from horizon_support import HORIZON_PREFIX, HORIZON_RELEASE_LINES, horizon_app, popen_horizon_laraq
from phpapp import PhpApp
from test_worker_support import wait_for

pytestmark = pytest.mark.php

#: (name, tool.php dispatch arguments): two delayed jobs, and a delayed one released once with a backoff
JOBS = [
    ("late-1", ["--delay=1", "--args=" + json.dumps({"args": {"n": "late-1"}})]),
    ("late-2", ["--delay=2", "--args=" + json.dumps({"args": {"n": "late-2"}})]),
    ("retried", ["--delay=1", "--args=" + json.dumps({"args": {"n": "retried"}, "mode": "fail-until",
                                                       "seconds": 2, "settings": {"tries": 3, "backoff": 1}})]),
]


@pytest.fixture(params=HORIZON_RELEASE_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port, HORIZON_BALANCE="false", HORIZON_TRIES="1")


def _stop(hz: PhpApp, proc: subprocess.Popen[str]) -> None:
    hz.artisan("horizon:terminate")
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def _record(fields: dict[bytes, bytes], names: dict[str, str]) -> dict[str, Any]:
    """One job hash as both runs must agree on it."""
    out: dict[str, Any] = {}
    for raw_key, raw_value in fields.items():
        key, value = raw_key.decode(), raw_value.decode()
        if key.endswith("_at"):
            out[key] = "<time>" if value else ""
        elif key == "payload":
            payload = json.loads(value)
            for clock in ("uuid", "id", "pushedAt", "createdAt"):
                payload.pop(clock, None)
            out[key] = payload
        else:
            out[key] = names.get(value, value)
    return out


def _round(hz: PhpApp, redis_client: Any, start: Callable[[PhpApp], subprocess.Popen[str]]
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """From an empty Redis: each job's hash and the ``delay`` Horizon's repository gives it, by name."""
    redis_client.flushall()
    hz.log_path.write_text("")
    names = {hz.tool("dispatch", "echo", *args)["ids"][0]: name for name, args in JOBS}
    proc = start(hz)
    try:
        def done() -> dict[str, Any] | None:
            dump = hz.tool("horizon-dump")
            ended = [j for j in dump["completed"] if j["completed_at"]]
            return dump if len(ended) == len(JOBS) else None

        dump = wait_for(done, timeout=120, interval=0.5)
    finally:
        _stop(hz, proc)
    records = {names[job_id]: _record(redis_client.hgetall(HORIZON_PREFIX + job_id), names) for job_id in names}
    delays = {names[j["id"]]: j["delay"] for j in dump["completed"]}
    return records, delays


def test_migrated_delayed_jobs_leave_horizons_records(hz: PhpApp, redis_client: Any) -> None:
    php, php_delays = _round(hz, redis_client, lambda app: app.popen_artisan("horizon"))
    py, py_delays = _round(hz, redis_client, lambda app: popen_horizon_laraq(
        app, "--queue=default", "--sleep=3"))
    assert py == php
    assert py_delays == php_delays
    # 5.45.1+ writes the delay (0 once migrated); 5.29.1's records have no such field
    expected = "0" if hz.horizon_release == "5.48.1" else None
    assert php_delays == {name: expected for name, _ in JOBS}
