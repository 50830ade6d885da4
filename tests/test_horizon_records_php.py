"""laraq's Horizon job records against Horizon's own listeners, event by event (live Laravel 9 to 13 with
Horizon 5.29.1, Laravel 13 with Horizon 5.48.1, whose job hash also records a release's ``delay``).

A job is dispatched by PHP into a Horizon app (so Horizon itself writes the pending record and the
payload carries its fields); the Redis state is snapshotted. Then the same lifecycle (reserve, release,
complete, fail) is written once by Horizon's real listeners (``tool.php horizon-events`` fires
``JobReserved``/``JobReleased``/``JobDeleted``/``JobFailed`` through the app's dispatcher) and, from the
same snapshot, once by :class:`laraq.horizon.HorizonRecords`. Both end states must be the same key for
key: statuses, fields, sorted-set membership and order, tags, metrics and TTLs (times compared by
presence, TTLs to 10 s). laraq writes with the settings it reads from the app (its Horizon release). Then
Horizon's repositories read laraq's records back.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from horizon_support import (
    HORIZON_LINES,
    HORIZON_PREFIX,
    horizon_app,
    horizon_state,
    laraq_horizon_settings,
    restore,
    snapshot,
)
from phpapp import PhpApp

from laraq.horizon import HorizonPayload, HorizonRecords
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port)


def _dispatch(hz: PhpApp, kind: str, **args: Any) -> str:
    [uuid] = hz.tool("dispatch", kind, "--args=" + json.dumps(args))["ids"]
    return str(uuid)


def _run_php(hz: PhpApp, steps: list[dict[str, Any]]) -> None:
    hz.tool("horizon-events", stdin=json.dumps(steps).encode())


def _run_laraq(hz: PhpApp, client: Any, steps: list[dict[str, Any]]) -> None:
    records = HorizonRecords(client, laraq_horizon_settings(hz))
    reserved_at = time.monotonic()
    for step in steps:
        if step.get("sleep_ms"):
            time.sleep(step["sleep_ms"] / 1000)
        body = base64.b64decode(step["job_b64"])
        reserved = HorizonPayload.parse(base64.b64decode(step.get("reserved_b64", step["job_b64"])))
        queue = step["queue"]
        if step["event"] == "pushed":
            records.pushed("redis", queue, HorizonPayload.parse(body))
        elif step["event"] == "reserved":
            reserved_at = time.monotonic()
            records.reserved("redis", queue, reserved)
        elif step["event"] == "released":
            records.released("redis", queue, reserved, delay=step.get("delay", 0))
        elif step["event"] == "deleted":
            records.completed("redis", queue, reserved, (time.monotonic() - reserved_at) * 1000)
        elif step["event"] == "failed":
            records.failed("redis", queue, reserved, f"RuntimeException: {step['message']} in /app/x.php:1")


def _steps(client: Any, hz: PhpApp, events: list[str], queue: str = "default") -> list[dict[str, Any]]:
    """Reserve the queued job the way Laravel's pop script does and name the events of its lifecycle."""
    reserved = RedisQueue(client, prefix=hz.prefix, version=hz.release).pop(queue)
    assert reserved is not None
    base = {"job_b64": base64.b64encode(reserved.body).decode(),
            "reserved_b64": base64.b64encode(reserved.reserved).decode(), "queue": queue}
    steps = []
    for e in events:
        event, _, delay = e.partition(":")  # "released:7": released with a 7 s delay
        steps.append(dict(base, event=event, sleep_ms=20 if event in ("deleted", "failed") else 0,
                          message="it broke", delay=int(delay or 0)))
    return steps


def _both(hz: PhpApp, client: Any, ids: dict[str, str], events: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    start = snapshot(client)
    _run_php(hz, _steps(client, hz, events))
    php_state = horizon_state(client, ids)
    restore(client, start)
    _run_laraq(hz, client, _steps(client, hz, events))
    return php_state, horizon_state(client, ids)


CASES = {
    "success": ("echo", {}, ["reserved", "deleted"]),
    "release-then-success": ("echo", {}, ["reserved", "released", "reserved", "deleted"]),
    "release-with-delay": ("echo", {}, ["reserved", "released:7", "reserved", "deleted"]),
    "failure": ("tagged", {"tags": ["team:a", "watched"]}, ["reserved", "failed"]),
    "monitored-tag": ("tagged", {"tags": ["watched", "other"]}, ["reserved", "deleted"]),
    "silenced": ("silenced", {}, ["reserved", "deleted"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_records_match_horizon_listeners(hz: PhpApp, redis_client: Any, case: str) -> None:
    kind, args, events = CASES[case]
    redis_client.sadd(HORIZON_PREFIX + "monitoring", "watched")
    uuid = _dispatch(hz, kind, **args)
    php_state, laraq_state = _both(hz, redis_client, {uuid: "<job>"}, events)
    assert laraq_state == php_state
    # the record really moved
    status = php_state["<job>"][1]["status"]
    assert status == {"failure": "failed"}.get(case, "completed")
    # Horizon 5.45.1+ records the release delay in the job hash; 5.29 has no such field
    if "released" in " ".join(events):
        expected = events[1].partition(":")[2] or "0" if hz.horizon_release == "5.48.1" else None
        assert php_state["<job>"][1].get("delay") == expected


def test_horizon_repositories_read_laraq_records(hz: PhpApp, redis_client: Any) -> None:
    redis_client.sadd(HORIZON_PREFIX + "monitoring", "watched")
    ok = _dispatch(hz, "tagged", tags=["watched"])
    _run_laraq(hz, redis_client, _steps(redis_client, hz, ["reserved", "deleted"]))
    bad = _dispatch(hz, "tagged", tags=["team:b"])
    _run_laraq(hz, redis_client, _steps(redis_client, hz, ["reserved", "failed"]))
    quiet = _dispatch(hz, "silenced")
    _run_laraq(hz, redis_client, _steps(redis_client, hz, ["reserved", "deleted"]))
    waiting = _dispatch(hz, "echo")

    dump = hz.tool("horizon-dump", "--tags=team:b")
    assert [j["id"] for j in dump["recent"]] == [waiting, quiet, bad, ok]
    assert [(j["id"], j["status"]) for j in dump["completed"]] == [(ok, "completed")]
    assert [(j["id"], j["status"]) for j in dump["silenced"]] == [(quiet, "completed")]
    assert [(j["id"], j["status"]) for j in dump["failed"]] == [(bad, "failed")]
    assert [(j["id"], j["status"]) for j in dump["pending"]] == [(waiting, "pending")]
    done = dump["completed"][0]
    assert float(done["reserved_at"]) <= float(done["completed_at"])
    failed = dump["failed"][0]
    assert failed["exception"].startswith("RuntimeException: it broke")
    assert float(failed["reserved_at"]) <= float(failed["failed_at"])
    assert dump["counts"] == {"recent": 4, "pending": 1, "completed": 1, "silenced": 1, "failed": 1,
                              "recent_failed": 1}
    assert dump["throughput"] == 2
    [queue] = dump["queues"]
    assert queue["name"] == "default" and queue["throughput"] == 2 and queue["runtime"] > 0
    assert sorted(j["name"] for j in dump["jobs"]) == ["App\\Jobs\\SilencedJob", "App\\Jobs\\TaggedJob"]
    assert dump["tagged"] == {"watched": [ok]}
    assert dump["failed_tags"] == {"team:b": [bad]}
