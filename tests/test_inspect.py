"""Queue discovery (SCAN), status counters and decoded job views, on a real Redis."""

from __future__ import annotations

import json

from laraq.bus.dispatch import Dispatcher, retry_payload
from laraq.ops.inspect import discover_queues, find_job, list_jobs, queue_status, split_queue_key
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue

KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="
NOW = 1_800_000_000.0


def make(client, version="12.67", now=NOW):
    q = RedisQueue(client, prefix="app_", version=version, clock=lambda: now)
    return q, Dispatcher(q, encrypter=Encrypter.from_app_key(KEY))


def test_discovery_uses_scan_and_names_queues(redis_client):
    q, d = make(redis_client)
    d.dispatch_job("App\\Jobs\\A", {}, queue="emails:high")
    d.dispatch_job("App\\Jobs\\A", {}, queue="later", delay=10)
    redis_client.rpush("app_queues:{tagged}:poison", b"x")
    redis_client.set("other_queues:nope", 1)
    redis_client.sadd("app_queues:emails:high:laraq-transfer:abc:done", "x")
    assert discover_queues(redis_client, "app_") == ["emails:high", "later", "{tagged}"]
    assert split_queue_key("app_queues:x:reserved", "app_") == ("x", ":reserved")
    assert split_queue_key("app_cache:x", "app_") is None


def test_status_counters(redis_client):
    q, d = make(redis_client)
    old_q, old_d = make(redis_client, now=NOW - 120)
    old_d.dispatch_job("App\\Jobs\\A", {})
    d.dispatch_job("App\\Jobs\\A", {})
    d.dispatch_job("App\\Jobs\\A", {}, delay=30)
    old_d.dispatch_job("App\\Jobs\\A", {}, delay=10)  # already due
    old_q.pop()  # reserved until NOW - 120 + 90: expired
    redis_client.rpush("app_queues:default:poison", b"junk")
    s = queue_status(q)
    assert (s.pending, s.delayed, s.reserved, s.due_delayed, s.expired_reserved, s.poison) == (1, 2, 1, 1, 1, 1)
    assert s.oldest_pending_age == 0 and s.total == 4 and s.next_delayed_at == NOW - 110
    assert s.notify == 1


def test_list_and_find_decode_commands(redis_client):
    q, d = make(redis_client)
    plain = d.dispatch_job("App\\Jobs\\EchoJob", {"args": {"k": "é"}}, protected={"note": "n"},
                           private={"hidden": "h"}, tries=3)
    secret = d.dispatch_job("App\\Jobs\\EncryptedJob", {"secret": "s"}, encrypt=True)
    d.dispatch_string("App\\Handlers\\Foo@bar", {"x": 1})
    redis_client.rpush("app_queues:default", b"not json")
    views = list_jobs(q, limit=10, encrypter=Encrypter.from_app_key(KEY))
    assert [v.name for v in views[:3]] == ["App\\Jobs\\EchoJob", "App\\Jobs\\EncryptedJob", "App\\Handlers\\Foo"]
    first = views[0]
    assert first.properties == {"@class": "App\\Jobs\\EchoJob", "args": {"k": "é"}, "note": "n", "hidden": "h"}
    assert first.max_tries == 3 and first.uuid == plain.uuid and first.attempts == 0
    assert views[1].encrypted and views[1].properties["secret"] == "s"
    assert views[2].data == {"x": 1} and views[2].properties is None
    assert views[3].error and views[3].to_dict()["body"] == "not json"
    locked = list_jobs(q, limit=2)[1]
    assert locked.properties == {"@encrypted": True}
    assert [v.uuid for v in list_jobs(q, class_filter="*EchoJob")] == [plain.uuid]
    assert [v.index for v in list_jobs(q, offset=1, limit=2)] == [1, 2]
    [found] = find_job(q, secret.id)
    assert (found.queue, found.state, found.uuid) == ("default", "pending", secret.uuid)
    assert find_job(q, "missing") == []
    json.dumps([v.to_dict(raw=True) for v in views])  # --json output is serializable


def test_retry_payload_policies():
    raw = json.dumps({"uuid": "u", "retryUntil": NOW + 600, "createdAt": NOW, "data": {"command": "O:1:\"A\":0:{}"},
                      "x": {}, "id": "i", "attempts": 3, "t": "é"}, separators=(",", ":"))
    later = NOW + 1000
    auto = json.loads(retry_payload(raw, now=later))
    assert auto["attempts"] == 0 and auto["retryUntil"] == later + 600 and auto["x"] == []
    assert b"\\u00e9" in retry_payload(raw, now=later)
    assert json.loads(retry_payload(raw, now=later, retry_until="keep"))["retryUntil"] == NOW + 600
    with_prop = raw.replace('O:1:\\"A\\":0:{}', 'O:1:\\"A\\":1:{s:10:\\"retryUntil\\";i:5;}')
    assert json.loads(retry_payload(with_prop, now=later))["retryUntil"] == NOW + 600
    no_created = json.dumps({"retryUntil": 5, "attempts": 1})
    assert json.loads(retry_payload(no_created, now=later))["retryUntil"] == 5
