"""``laraq dispatch`` into a Horizon app writes what Horizon's ``RedisQueue`` writes (live Laravel 9 to 13
with Horizon 5.29.1, and Laravel 13 with Horizon 5.48.1).

PHP dispatches a job through Horizon's queue and laraq dispatches the same kind of job with the Horizon
settings it reads from the app (the Horizon release from ``vendor/composer/installed.json``): the payloads
have the same keys in the same order with the same Horizon fields (``id`` = ``uuid``, ``type``, ``tags``,
``silenced``, ``pushedAt``, and a delayed job's ``delay``), the pending records (hash, ``recent_jobs``,
``pending_jobs``, monitored tags) are the same key for key, the pending record is written before or after
the push as that Horizon does (Redis ``MONITOR``), and 5.48's ``silenced_tags`` silence the same jobs.
Horizon's repositories then list laraq's job.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app, horizon_state, laraq_horizon_settings
from phpapp import PhpApp

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port)


def _dispatcher(hz: PhpApp, client: Any, **settings: Any) -> Dispatcher:
    queue = RedisQueue(client, prefix=hz.prefix, version=hz.release)
    found = laraq_horizon_settings(hz)
    assert str(found.version) == hz.horizon_release, found.version_source
    return Dispatcher(queue, horizon=dataclasses.replace(found, **settings) if settings else found)


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


def _delayed(client: Any, hz: PhpApp) -> dict[str, Any]:
    [(raw, _score)] = client.zrange(hz.prefix + "queues:default:delayed", 0, -1, withscores=True)
    return dict(json.loads(raw))


def test_delayed_dispatch_payload_follows_the_horizon_release(hz: PhpApp, redis_client: Any) -> None:
    # Horizon 5.45.6+ passes a later() job's delay to createPayload (Laravel 12.11+ payloads have the key)
    hz.tool("dispatch", "tagged", "--delay=30", "--args=" + json.dumps({"tags": ["x"]}))
    php_payload = _delayed(redis_client, hz)
    redis_client.flushdb()
    _dispatcher(hz, redis_client).dispatch_job("App\\Jobs\\TaggedJob", {"labels": ["x"]}, tags=["x"], delay=30)
    py_payload = _delayed(redis_client, hz)
    assert list(py_payload) == list(php_payload)
    assert py_payload.get("delay", "absent") == php_payload.get("delay", "absent")
    if "delay" in php_payload:
        assert php_payload["delay"] == (30 if hz.horizon_release == "5.48.1" else None)


def test_silenced_tags_follow_the_horizon_release(hz: PhpApp, redis_client: Any) -> None:
    # 5.34+: a job carrying a tag listed in horizon.silenced_tags ('quiet' in the 5.48 app) is silenced
    hz.tool("dispatch", "tagged", "--args=" + json.dumps({"tags": ["quiet"]}))
    _dispatcher(hz, redis_client).dispatch_job("App\\Jobs\\TaggedJob", {"labels": ["quiet"]}, tags=["quiet"])
    php, py = (json.loads(m) for m in redis_client.lrange(hz.prefix + "queues:default", 0, -1))
    assert php["silenced"] == py["silenced"] == (hz.horizon_release == "5.48.1")


class Monitor:
    """Redis ``MONITOR``: the commands every client sent, in the order the server ran them."""

    def __init__(self, client: Any) -> None:
        self.commands: list[str] = []
        self._monitor = client.monitor()
        self._conn = self._monitor.__enter__()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for item in self._conn.listen():
                self.commands.append(item["command"])
                if "laraq-monitor-stop" in item["command"]:
                    return
        except Exception:
            return

    def stop(self, client: Any) -> list[str]:
        client.get("laraq-monitor-stop")
        self._thread.join(10)
        self._monitor.__exit__(None, None, None)
        return self.commands


def _order(commands: list[str], hz: PhpApp) -> list[str]:
    """``record`` (the job hash's first write) and ``push`` (the list push), in the order they ran."""
    out: list[str] = []
    for command in commands:
        verb = command.split(" ", 1)[0].upper()
        if "record" not in out and verb in ("HMSET", "HSET") and HORIZON_PREFIX in command:
            out.append("record")
        elif "push" not in out and verb in ("EVAL", "EVALSHA", "RPUSH") and "queues:default" in command:
            out.append("push")
    return out


def test_pending_record_before_or_after_the_push_as_horizon_does(hz: PhpApp, redis_client: Any) -> None:
    # 5.42+ fires JobPending (StoreJob) before the push; 5.29 stored the job on JobPushed, after it
    monitor = Monitor(redis_client)
    hz.tool("dispatch", "tagged", "--args=" + json.dumps({"tags": ["x"]}))
    php = _order(monitor.stop(redis_client), hz)
    redis_client.flushdb()
    monitor = Monitor(redis_client)
    _dispatcher(hz, redis_client).dispatch_job("App\\Jobs\\TaggedJob", {"labels": ["x"]}, tags=["x"])
    py = _order(monitor.stop(redis_client), hz)
    assert py == php
    assert php == (["record", "push"] if hz.horizon_release == "5.48.1" else ["push", "record"])
