"""Dispatcher unit tests (real Redis, no PHP): command bytes per version, payload fields, delays, bulk."""

from __future__ import annotations

import json

import pytest

from laraq.bus.dispatch import Dispatcher, serialize_command
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.protocol.serializer import loads

KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="


def make(redis_client, version="8.83.26", now=1_800_000_000.0):
    q = RedisQueue(redis_client, prefix="p_", version=version, clock=lambda: now)
    return q, Dispatcher(q, encrypter=Encrypter.from_app_key(KEY))


def test_command_bytes_match_the_reference_examples():
    # laravel-internals.md §11: PlainJob with public $a=1; protected $b='x'; private $c=[1,2].
    ours = serialize_command("App\\Jobs\\PlainJob", {"a": 1}, protected={"b": "x"}, private={"c": [1, 2]},
                             version="8.83")
    assert ours == (
        b'O:17:"App\\Jobs\\PlainJob":13:{s:1:"a";i:1;s:4:"\0*\0b";s:1:"x";s:20:"\0App\\Jobs\\PlainJob\0c";'
        b'a:2:{i:0;i:1;i:1;i:2;}s:3:"job";N;s:10:"connection";N;s:5:"queue";N;s:15:"chainConnection";N;'
        b's:10:"chainQueue";N;s:19:"chainCatchCallbacks";N;s:5:"delay";N;s:11:"afterCommit";N;'
        b's:10:"middleware";a:0:{}s:7:"chained";a:0:{}}'
    )
    v13 = serialize_command("App\\Jobs\\PlainJob", {"a": 1}, protected={"b": "x"}, private={"c": [1, 2]},
                            version="13.26.1")
    assert v13.endswith(
        b's:3:"job";N;s:10:"connection";N;s:5:"queue";N;s:12:"messageGroup";N;s:12:"deduplicator";N;'
        b's:13:"debounceOwner";s:0:"";s:15:"uniqueLockOwner";s:0:"";s:5:"delay";N;s:11:"afterCommit";N;'
        b's:10:"middleware";a:0:{}s:7:"chained";a:0:{}s:15:"chainConnection";N;s:10:"chainQueue";N;'
        b's:19:"chainCatchCallbacks";N;}'
    )
    assert v13.startswith(b'O:17:"App\\Jobs\\PlainJob":17:{')


def test_skip_defaults_and_queueable_values():
    cmd = serialize_command("App\\Jobs\\X", {"userId": 42}, version="13", queue="emails", delay=30,
                            skip_defaults=True)
    obj = loads(cmd)
    assert list(obj.properties()) == ["userId", "queue", "delay"]
    assert obj["queue"] == "emails" and obj["delay"] == 30
    bare = serialize_command("App\\Jobs\\X", {"a": 1}, queueable_defaults=False)
    assert bare == b'O:10:"App\\Jobs\\X":1:{s:1:"a";i:1;}'
    with pytest.raises(ValueError):
        serialize_command("App\\Jobs\\X", {"\0*\0a": 1}, protected={"a": 2})


def test_the_reused_trait_part_gives_the_same_bytes(monkeypatch):
    # serialize_command keeps the job + Queueable part per (version, connection, queue, delay, overrides) and
    # reuses it; every call must give what a fresh build gives, whatever came before it
    from laraq.bus import dispatch
    calls = [
        ("App\\Jobs\\A", {"a": 1}, {"version": "8.83", "queue": "q"}),
        ("App\\Jobs\\B", {"b": [1, 2]}, {"version": "8.83", "queue": "q"}),
        ("App\\Jobs\\A", {"a": 1, "queue": "mine"}, {"version": "8.83", "queue": "q"}),  # redeclares queue
        ("App\\Jobs\\A", {"a": 1}, {"version": "8.83", "queue": "q", "queueable": {"afterCommit": True}}),
        ("App\\Jobs\\A", {"a": 1}, {"version": "8.83", "queue": "q", "queueable": {"afterCommit": 1}}),
        ("App\\Jobs\\A", {"a": 1}, {"version": "8.83", "queue": "q", "delay": 5}),
        ("App\\Jobs\\A", {"a": 1}, {"version": "13.26.1", "queue": "q", "skip_defaults": True}),
        ("App\\Jobs\\A", {"a": 1}, {"version": "13.26.1", "queue": "q"}),
        ("App\\Jobs\\A", {"a": 1}, {"version": "13.26.1", "queue": "q", "queueable": {"middleware": ["m"]}}),
    ]
    fresh = []
    for cls, props, kw in calls:
        monkeypatch.setattr(dispatch, "_TRAIT_CHUNKS", {})
        fresh.append(serialize_command(cls, props, **kw))
    monkeypatch.setattr(dispatch, "_TRAIT_CHUNKS", {})
    for _ in range(2):  # the second round reads every part from the cache
        assert [serialize_command(cls, props, **kw) for cls, props, kw in calls] == fresh
    assert b's:11:"afterCommit";b:1;' in fresh[3] and b's:11:"afterCommit";i:1;' in fresh[4]
    assert fresh[2].count(b's:5:"queue";') == 1 and b's:5:"queue";s:4:"mine";' in fresh[2]


def test_payload_fields_and_push(redis_client):
    q, d = make(redis_client)
    res = d.dispatch_job("App\\Jobs\\EchoJob", {"args": [1]}, queue="emails", tries=3, backoff=[1, 5, 10],
                         timeout=20, retry_until=1_800_000_600, max_exceptions=2, fail_on_timeout=True)
    members = redis_client.lrange("p_queues:emails", 0, -1)
    assert members == [res.payload]
    assert redis_client.lrange("p_queues:emails:notify", 0, -1) == [b"1"]
    p = json.loads(res.payload)
    assert list(p) == ["uuid", "displayName", "job", "maxTries", "maxExceptions", "failOnTimeout", "backoff",
                       "timeout", "retryUntil", "data", "id", "attempts"]
    assert (p["maxTries"], p["backoff"], p["timeout"], p["retryUntil"], p["maxExceptions"], p["failOnTimeout"]) == (
        3, "1,5,10", 20, 1_800_000_600, 2, True)
    assert p["attempts"] == 0 and len(p["id"]) == 32 and p["id"] == res.id and p["uuid"] == res.uuid
    assert loads(p["data"]["command"].encode())["queue"] == "emails"


def test_laravel13_payload_and_delay(redis_client):
    q, d = make(redis_client, version="13", now=1_800_000_000.5)
    res = d.dispatch_job("App\\Jobs\\DelayedJob", {"label": "x"}, delay=30)
    assert res.available_at == 1_800_000_030
    assert redis_client.llen("p_queues:default") == 0
    assert redis_client.zrange("p_queues:default:delayed", 0, -1, withscores=True) == [(res.payload, 1_800_000_030)]
    p = json.loads(res.payload)
    assert p["delay"] == 30 and p["createdAt"] == 1_800_000_000 and p["deleteWhenMissingModels"] is False
    assert p["data"]["batchId"] is None
    assert loads(p["data"]["command"].encode())["delay"] == 30


def test_encrypted_command_round_trips(redis_client):
    q, d = make(redis_client)
    res = d.dispatch_job("App\\Jobs\\PythonJob", {"document": "a"}, encrypt=True)
    command = json.loads(res.payload)["data"]["command"]
    assert command.startswith("eyJpdiI6")
    obj = loads(Encrypter.from_app_key(KEY).decrypt(command))
    assert obj.class_name == "App\\Jobs\\PythonJob" and obj["document"] == "a"
    _, plain = make(redis_client)
    plain.encrypter = None
    with pytest.raises(ValueError):
        plain.dispatch_job("App\\Jobs\\PythonJob", {}, encrypt=True)


def test_string_job(redis_client):
    q, d = make(redis_client, version="12.67")
    res = d.dispatch_string("App\\Handlers\\Foo@bar", {"x": 1, "y": []}, queue="s")
    p = json.loads(res.payload)
    assert p["job"] == "App\\Handlers\\Foo@bar" and p["displayName"] == "App\\Handlers\\Foo"
    assert "retryUntil" not in p and p["data"] == {"x": 1, "y": []} and p["delay"] is None
    with pytest.raises(ValueError):
        d.dispatch_string("NoMethod", {})


def test_bulk_one_transaction_across_queues(redis_client):
    q, d = make(redis_client, version="12.67")
    jobs = [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i]}, queue="a" if i % 2 else "b") for i in range(6)]
    jobs.append(d.prepare_string("App\\Handlers\\Foo@bar", {"n": 1}, delay=60))
    results = d.bulk(jobs)
    assert [r.queue for r in results] == ["b", "a", "b", "a", "b", "a", "default"]
    assert redis_client.llen("p_queues:a") == 3 and redis_client.llen("p_queues:b") == 3
    assert redis_client.llen("p_queues:a:notify") == 3
    assert redis_client.zcard("p_queues:default:delayed") == 1
    assert d.bulk([]) == []


def test_datetime_and_timedelta_delays_and_the_13_cluster_key_layout(redis_client):
    from datetime import UTC, datetime, timedelta

    q = RedisQueue(redis_client, prefix="laravel-database-", version="13.26", cluster=True,
                   clock=lambda: 1_800_000_000.25)
    d = Dispatcher(q)
    at = d.dispatch_job("App\\Jobs\\X", {}, queue="mail", delay=datetime(2030, 1, 1, tzinfo=UTC))
    span = d.dispatch_string("App\\Handlers\\Foo@bar", {"x": 1}, queue="mail", delay=timedelta(minutes=5))
    now = d.dispatch_job("App\\Jobs\\X", {}, queue="mail")
    assert at.available_at == 1_893_456_000 and span.available_at == 1_800_000_300
    assert redis_client.zrange("laravel-database-queues:{mail}:delayed", 0, -1, withscores=True) == [
        (span.payload, 1_800_000_300), (at.payload, 1_893_456_000)]
    assert redis_client.lrange("laravel-database-queues:{mail}", 0, -1) == [now.payload]
    assert redis_client.llen("laravel-database-queues:{mail}:notify") == 1
    assert loads(json.loads(at.payload)["data"]["command"].encode())["delay"] == 1_893_456_000 - 1_800_000_000
