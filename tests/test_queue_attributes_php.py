"""Laravel 13's queue attributes through a Python dispatch, against PHP's own ``dispatch()`` on 13 and on
13 with Horizon 5.48.

* ``AttributeJob`` (``#[Tries]``, ``#[Backoff]``, ``#[Timeout]``, ``#[MaxExceptions]``, ``#[FailOnTimeout]``,
  ``#[Queue(QueueName::Emails)]``) dispatched with no queue: both land on ``emails`` with the same payload
  (the command's own ``queue`` left null), and PHP's worker runs laraq's job with the attribute settings;
* ``RoutedAttributeJob`` (``#[Connection]``, ``#[Queue]``, ``#[Delay(5)]``, ``#[DeleteWhenMissingModels]``)
  dispatched naming nothing: the same delayed payload on the same queue; a ``#[Connection]`` other than
  the dispatcher's is refused;
* ``DebouncedJob`` (``#[DebounceFor(2)]``): the Redis a dispatch leaves (the cache's debounce owner, its
  TTL, the delayed job) is PHP's, keys and values, the random owner and the times aside; two Python
  dispatches of one debounce id leave PHP's worker running only the newer, deleting the superseded one;
* ``DebouncedWaitJob`` (``#[DebounceFor(2, maxWait: 0)]``, its id a property): the first dispatch's time
  key and the second dispatch's undelayed push, as PHP's.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import require_laravel
from horizon_support import horizon_app, laraq_horizon_settings
from phpapp import PhpApp
from test_schema_php import dispatcher
from test_typed_jobs_php import generate

from laraq.bus.schema import SchemaError
from laraq.bus.typed import schema_of

pytestmark = pytest.mark.php

LINES = ["13", "13-h548"]


def setup(line: str, redis_server: Any, redis_client: Any, tmp_path: Path) -> tuple[PhpApp, Any, Any]:
    """The app of ``line``, the typed classes of the two attribute jobs, and a dispatcher into the app."""
    require_laravel(line)
    app = horizon_app(line, redis_server.port) if line == "13-h548" else PhpApp(redis_server.port, version=line,
                                                                                   workdir=tmp_path)
    jobs = generate(app, tmp_path, f"attribute_jobs_{line.replace('-', '_')}", "App\\Jobs\\AttributeJob",
                    "App\\Jobs\\DebouncedJob", "App\\Jobs\\DebouncedWaitJob",
                    "App\\Jobs\\RoutedAttributeJob")
    d = dispatcher(app, redis_client, {})
    if line == "13-h548":
        d.horizon = laraq_horizon_settings(app)
    return app, jobs, d


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def blanked(text: str) -> str:
    """A payload or Redis value with what differs by nature blanked: ids, times, a debounce owner."""
    text = UUID.sub("<uuid>", text)
    text = re.sub(r'(debounceOwner\\?";s:40:\\?")[A-Za-z0-9]{40}', r"\1-", text)
    text = re.sub(r'"(uuid|id)":"[^"]*"', r'"\1":"-"', text)
    return re.sub(r'"(createdAt|pushedAt)":"?[0-9.]+"?', r'"\1":0', text)


def redis_state(redis_client: Any) -> dict[str, Any]:
    """Every key of the queue's and the cache's database (``db:key``) and its value (lists and sorted sets
    as their members, scores aside), blanked, and whether it has a TTL no longer than the debounce lock's
    300 s."""
    out: dict[str, Any] = {}
    for db in (0, 1):  # REDIS_DB, REDIS_CACHE_DB of the fixture apps
        out |= {f"{db}:{k}": v for k, v in _db_state(redis_client if db == 0 else redis.Redis(
            connection_pool=redis.ConnectionPool(**(redis_client.connection_pool.connection_kwargs | {"db": db}))))
                .items()}
    return out


def _db_state(redis_client: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(redis_client.keys("*")):
        kind = redis_client.type(key).decode()
        if kind == "string":
            value: Any = redis_client.get(key).decode()
        elif kind == "list":
            value = [blanked(v.decode()) for v in redis_client.lrange(key, 0, -1)]
        elif kind == "zset":
            value = sorted(blanked(v.decode()) for v in redis_client.zrange(key, 0, -1))
        elif kind == "hash":
            value = sorted(k.decode() for k in redis_client.hkeys(key))  # Horizon's records: their fields
        else:
            value = kind
        ttl = redis_client.ttl(key)
        out[UUID.sub("<uuid>", key.decode())] = (value, ttl > 0 and ttl <= 300)
    return out


def owners(redis_client: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with a debounce owner replaced by the label of the queued job holding it, and a stored
    time (``first_dispatched_at``) blanked."""
    bodies = [b for k in state if k.endswith(":delayed") or k.endswith(":dq")
              for b in (redis_client.zrange(k.split(":", 1)[1], 0, -1) if k.endswith(":delayed")
                        else redis_client.lrange(k.split(":", 1)[1], 0, -1))]
    held = {}
    for body in bodies:
        command = json.loads(body)["data"]["command"]
        owner = re.search(r'debounceOwner";s:40:"([A-Za-z0-9]{40})"', command)
        label = re.search(r'"label";s:\d+:"([^"]*)"', command)
        assert owner is not None and label is not None, command
        held[f's:40:"{owner.group(1)}";'] = f"owner of the job labelled {label.group(1)!r}"
    def value(v: Any) -> Any:
        if not isinstance(v, str):
            return v
        return held.get(v) or ("<time>" if v.isdigit() else v)

    return {k: (value(v[0]), v[1]) for k, v in state.items()}


def outcome(app: PhpApp, queue: str) -> tuple[list[dict[str, Any]], list[str]]:
    app.artisan("queue:work", "redis", f"--queue={queue}", "--stop-when-empty", "--sleep=0", check=True)
    runs = [{k: v for k, v in r.items() if k in ("class", "key", "label", "mode")}
            for r in app.runs() if r.get("queue") == queue]
    conn = sqlite3.connect(app.db_path)
    failed = [json.loads(p)["displayName"] for (p,) in conn.execute("SELECT payload FROM failed_jobs")]
    conn.close()
    return runs, failed


@pytest.mark.parametrize("line", LINES)
def test_attribute_job_dispatch_is_phps(line: str, redis_server: Any, redis_client: Any, tmp_path: Path) -> None:
    app, jobs, d = setup(line, redis_server, redis_client, tmp_path)
    app.tool("dispatch", "attribute", "--pending=1", "--args=" + json.dumps({"mode": "ok"}))
    (theirs,) = redis_client.lrange(app.prefix + "queues:emails", 0, -1)  # #[Queue(QueueName::Emails)]
    php = redis_state(redis_client)
    redis_client.flushall()
    result = d.dispatch(jobs.AttributeJob(mode="ok"), connection="redis")
    (ours,) = redis_client.lrange(app.prefix + "queues:emails", 0, -1)
    assert result.queue == app.prefix + "queues:emails" or result.queue == "emails"
    payload = json.loads(ours)
    assert (payload["maxTries"], payload["backoff"], payload["timeout"], payload["maxExceptions"],
            payload["failOnTimeout"]) == (4, "1,3", 20, 3, True)
    assert "emails" not in payload["data"]["command"]  # the attribute routes it; the command's queue stays unset
    assert blanked(ours.decode()) == blanked(theirs.decode())
    assert redis_state(redis_client) == php
    # PHP's worker runs it, with the attribute's settings read from laraq's payload
    runs, failed = outcome(app, "emails")
    assert runs == [{"class": "App\\Jobs\\AttributeJob", "mode": "ok"}] and failed == []


@pytest.mark.parametrize("line", LINES)
def test_debounced_dispatch_leaves_phps_redis(line: str, redis_server: Any, redis_client: Any,
                                              tmp_path: Path) -> None:
    app, jobs, d = setup(line, redis_server, redis_client, tmp_path)
    app.tool("dispatch", "debounced", "--queue=dq", "--args=" + json.dumps({"key": "dk", "label": "a"}))
    php = owners(redis_client, redis_state(redis_client))
    # PHP's owner in the cache, under the app's cache prefix, for 300 s (max(2 * 10, 300))
    assert [v for k, v in php.items() if k.endswith("laravel_debounced_job:App\\Jobs\\DebouncedJob:dk")] == [
        ("owner of the job labelled 'a'", True)], php
    redis_client.flushall()
    d.dispatch(jobs.DebouncedJob(key="dk", label="a"), queue="dq", connection="redis", debounce_id="dk")
    assert owners(redis_client, redis_state(redis_client)) == php


@pytest.mark.parametrize("line", LINES)
def test_php_runs_only_the_newest_python_debounced_dispatch(line: str, redis_server: Any, redis_client: Any,
                                                            tmp_path: Path) -> None:
    app, jobs, d = setup(line, redis_server, redis_client, tmp_path)
    for label in ("a", "b"):
        d.dispatch(jobs.DebouncedJob(key="dk", label=label), queue="dq", connection="redis", debounce_id="dk")
    delayed = app.prefix + "queues:dq:delayed"
    assert redis_client.zcard(delayed) == 2
    redis_client.zadd(delayed, dict.fromkeys(redis_client.zrange(delayed, 0, -1), 0))  # both due now
    runs, failed = outcome(app, "dq")
    assert runs == [{"class": "App\\Jobs\\DebouncedJob", "key": "dk", "label": "b"}] and failed == []
    assert redis_client.zcard(delayed) == 0 and redis_client.llen(app.prefix + "queues:dq") == 0


def test_a_refused_debounced_dispatch_writes_nothing(redis_server: Any, redis_client: Any, tmp_path: Path) -> None:
    """``debounceId()`` is PHP code: without ``debounce_id`` the dispatch refuses, naming it; a refused
    dispatch leaves no debounce owner behind."""
    _, jobs, d = setup("13", redis_server, redis_client, tmp_path)
    with pytest.raises(SchemaError, match=r"DebouncedJob: PHP computes its payload from debounceId\(\) "
                                          r"\(give debounce_id=\)"):
        d.dispatch(jobs.DebouncedJob(key="dk"), queue="dq")
    assert redis_state(redis_client) == {}  # nothing taken, nothing pushed
    # a dispatch refused for another reason takes no debounce ownership either
    d.schemas["App\\Jobs\\DebouncedWaitJob"] = schema_of(jobs.DebouncedWaitJob)
    with pytest.raises(SchemaError, match="DebouncedWaitJob declares no property nope"):
        d.dispatch_job("App\\Jobs\\DebouncedWaitJob", {"debounceId": "w", "nope": 1}, queue="dq")
    assert redis_state(redis_client) == {}


@pytest.mark.parametrize("line", LINES)
def test_debounce_max_wait_is_phps(line: str, redis_server: Any, redis_client: Any, tmp_path: Path) -> None:
    app, jobs, d = setup(line, redis_server, redis_client, tmp_path)
    php = []
    for label in ("a", "b"):
        app.tool("dispatch", "debounced-wait", "--queue=dq", "--args=" + json.dumps({"key": "w", "label": label}))
        php.append(owners(redis_client, redis_state(redis_client)))
    first = [k for k in php[0] if k.endswith("laravel_debounced_job:App\\Jobs\\DebouncedWaitJob:w:first_dispatched_at")]
    assert [php[0][k] for k in first] == [("<time>", True)]
    assert not any(k in php[1] for k in first)  # stored by the first dispatch, cleared by the second
    # the second pushed with delay 0 (later(0): the delayed set, due at once) ...
    assert sorted(json.loads(b)["delay"] for b in redis_client.zrange(app.prefix + "queues:dq:delayed", 0, -1)) \
        == [0, 2]
    redis_client.flushall()
    for label, theirs in zip(("a", "b"), php, strict=True):
        d.dispatch(jobs.DebouncedWaitJob(debounceId="w", label=label), queue="dq", connection="redis")
        assert owners(redis_client, redis_state(redis_client)) == theirs
    # ... as laraq's second is
    assert sorted(json.loads(b)["delay"] for b in redis_client.zrange(app.prefix + "queues:dq:delayed", 0, -1)) \
        == [0, 2]


@pytest.mark.parametrize("line", LINES)
def test_routing_attributes_are_phps(line: str, redis_server: Any, redis_client: Any, tmp_path: Path) -> None:
    app, jobs, d = setup(line, redis_server, redis_client, tmp_path)
    app.tool("dispatch", "routed-attribute", "--pending=1", "--no-connection=1", "--args=" + json.dumps({"label": "r"}))
    php = redis_state(redis_client)
    (theirs,) = redis_client.zrange(app.prefix + "queues:routed:delayed", 0, -1)
    assert json.loads(theirs)["delay"] == 5 and json.loads(theirs)["deleteWhenMissingModels"] is True
    redis_client.flushall()
    d.dispatch(jobs.RoutedAttributeJob(label="r"))
    assert redis_state(redis_client) == php
    (ours,) = redis_client.zrange(app.prefix + "queues:routed:delayed", 0, -1)
    assert blanked(ours.decode()) == blanked(theirs.decode())
    redis_client.zadd(app.prefix + "queues:routed:delayed", {ours: 0})  # due now
    runs, failed = outcome(app, "routed")
    assert runs == [{"class": "App\\Jobs\\RoutedAttributeJob", "label": "r"}] and failed == []
    # a #[Connection] naming another connection than the dispatcher's: refused, nothing written
    redis_client.flushall()
    d.schemas["App\\Jobs\\RoutedAttributeJob"].queue_attributes["connection"] = "sqs"
    with pytest.raises(SchemaError, match=r"RoutedAttributeJob: its #\[Connection\] attribute pushes it to "
                                          r"connection 'sqs'; dispatch it with a Dispatcher of that connection"):
        d.dispatch(jobs.RoutedAttributeJob(label="r"))
    assert redis_state(redis_client) == {}
