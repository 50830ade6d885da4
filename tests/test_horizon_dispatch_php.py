"""``laraq dispatch`` into a Horizon app writes what Horizon's ``RedisQueue`` writes (live Laravel 12 and 13).

PHP dispatches a job through Horizon's queue and laraq dispatches the same kind of job with Horizon
settings: the payloads have the same keys in the same order with the same Horizon fields (``id`` =
``uuid``, ``type``, ``tags``, ``silenced``, ``pushedAt``), and the pending records (hash, ``recent_jobs``,
``pending_jobs``, monitored tags) are the same key for key. Horizon's repositories then list laraq's job.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app, horizon_state
from phpapp import PhpApp

from laraq.bus.dispatch import Dispatcher
from laraq.horizon import HorizonSettings
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port)


def _dispatcher(hz: PhpApp, client: Any, **settings: Any) -> Dispatcher:
    queue = RedisQueue(client, prefix=hz.prefix, version=hz.release)
    return Dispatcher(queue, horizon=HorizonSettings(**settings))


def test_payload_fields_and_pending_record_match_horizon(hz: PhpApp, redis_client: Any) -> None:
    redis_client.sadd(HORIZON_PREFIX + "monitoring", "watched")
    [php_id] = hz.tool("dispatch", "tagged", "--args=" + json.dumps({"tags": ["watched", "x"]}))["ids"]
    php_payload = json.loads(redis_client.lpop(hz.prefix + "queues:default"))
    php_state = horizon_state(redis_client, {php_id: "<job>"})
    redis_client.flushdb()
    redis_client.sadd(HORIZON_PREFIX + "monitoring", "watched")

    result = _dispatcher(hz, redis_client).dispatch_job(
        "App\\Jobs\\TaggedJob", {"labels": ["watched", "x"]}, tags=["watched", "x"])
    raw = redis_client.lpop(hz.prefix + "queues:default")
    py_payload = json.loads(raw)
    assert list(py_payload) == list(php_payload)
    for payload, job_id in ((php_payload, php_id), (py_payload, result.uuid)):
        assert payload["id"] == payload["uuid"] == job_id
        assert (payload["type"], payload["tags"], payload["silenced"]) == ("job", ["watched", "x"], False)
        assert isinstance(payload["pushedAt"], str) and float(payload["pushedAt"]) > 0
    py_state = horizon_state(redis_client, {result.uuid: "<job>"})
    # the stored payloads differ in the serialized command, uuid and times only
    php_state["<job>"][1].pop("payload")
    stored = py_state["<job>"][1].pop("payload")
    assert json.loads(stored) == {**py_payload, "id": "<job>", "uuid": "<job>"}
    assert py_state == php_state


def test_silenced_classes_and_string_jobs(hz: PhpApp, redis_client: Any) -> None:
    d = _dispatcher(hz, redis_client, silenced=("App\\Jobs\\EchoJob",))
    d.dispatch_job("App\\Jobs\\EchoJob", {"args": []})
    d.dispatch_string("App\\Handlers\\Foo@bar", {"n": 1})
    first, second = (json.loads(m) for m in redis_client.lrange(hz.prefix + "queues:default", 0, -1))
    assert (first["silenced"], first["tags"]) == (True, [])
    assert (second["silenced"], second["tags"], second["type"]) == (False, [], "job")
    dump = hz.tool("horizon-dump")
    assert [j["status"] for j in dump["pending"]] == ["pending", "pending"]
    assert {j["name"] for j in dump["recent"]} == {"App\\Jobs\\EchoJob", "App\\Handlers\\Foo"}
