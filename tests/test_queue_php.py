"""Differential tests: laraq's RedisQueue against real Laravel 8.83 (Debian's framework), 12.67 and 13.26
(the live trees), each through its fixture app on its stock prefix, on the same redis-server, plus the
six-version wire corpus.

Each operation is done once by PHP and once by laraq, both starting from the same Redis state; the
resulting states must match modulo the clock (scores compared relative to the time of the operation,
±2 s) and, where members were built separately, random ``uuid``/``id`` values. Reserved members are
compared as parsed JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import RedisServer, corpus_dir, dump_redis
from phpapp import PhpApp

from laraq.protocol.queue import RedisQueue, ReservedJob

#: The corpus folder holding each live line's captured payloads.
CORPUS_OF = {"8": "8.83.26", "9": "9.52.22", "10": "10.50.3", "11": "11.56.0", "12": "12.67.0", "13": "13.x"}
KINDS = ["plain", "configured", "string", "encrypted", "enum", "carbon", "delayed", "failing", "echo"]

State = dict[str, Any]


# -- fixtures and helpers -------------------------------------------------------------------------

@pytest.fixture
def app(laravel: str, redis_server: RedisServer, redis_client: redis.Redis) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel, queue="default", retry_after=90)


@pytest.fixture
def lq(app: PhpApp, redis_client: redis.Redis) -> Iterator[RedisQueue]:
    yield RedisQueue(redis_client, prefix=app.prefix, version=app.release, retry_after=90)


def member_key(member: bytes, drop_ids: bool) -> Any:
    try:
        doc = json.loads(member)
    except ValueError:
        return member
    if isinstance(doc, dict) and drop_ids:
        doc = {k: v for k, v in doc.items() if k not in ("uuid", "id")}
    return json.dumps(doc, sort_keys=True)


Window = tuple[float, float]


def assert_same_state(php_state: State, php_t: Window, py_state: State, py_t: Window, *,
                      drop_ids: bool = False) -> None:
    """Same keys and types; lists equal member by member (parsed JSON); ZSETs equal as sets of
    members with scores equal relative to when each operation ran.

    ``php_t``/``py_t`` are the (start, end) wall-clock window around each side's operation: a score
    stamped inside the window (whole seconds) may differ by the windows' lengths plus a second of
    rounding, however long a loaded machine took to start PHP.
    """
    slack = 2 + (php_t[1] - php_t[0]) + (py_t[1] - py_t[0])
    php_t0, py_t0 = php_t[0], py_t[0]
    assert sorted(php_state) == sorted(py_state)
    for key, (kind, php_value) in php_state.items():
        py_kind, py_value = py_state[key]
        assert kind == py_kind, key
        if kind == "list":
            assert [member_key(m, drop_ids) for m in php_value] == [member_key(m, drop_ids) for m in py_value], key
        elif kind == "zset":
            a = sorted((member_key(m, drop_ids), s - php_t0) for m, s in php_value)
            b = sorted((member_key(m, drop_ids), s - py_t0) for m, s in py_value)
            assert [m for m, _ in a] == [m for m, _ in b], key
            for (_, sa), (_, sb) in zip(a, b, strict=True):
                assert abs(sa - sb) <= slack, (key, sa, sb, slack)
        else:
            assert php_value == py_value, key


def restore(client: redis.Redis, state: State) -> None:
    """Put a ``dump_redis`` state back into db 0 of a flushed server."""
    client.flushall()
    for full_key, (kind, value) in state.items():
        key = full_key.split(":", 1)[1]
        if kind == "list":
            client.rpush(key, *value)
        elif kind == "zset":
            client.zadd(key, dict(value))
        elif kind == "string":
            client.set(key, value)


def pushed_state(app: PhpApp, client: redis.Redis, kinds: list[str]) -> State:
    client.flushall()
    for kind in kinds:
        app.tool("dispatch", kind, "--queue=default")
    return dump_redis(client)


def _cjson_shape(value: Any, drop: str = "") -> Any:
    """What cjson makes of decoded JSON: empty arrays become objects, numbers keep 14 significant
    digits; ``drop`` removes a top-level key."""
    if isinstance(value, dict):
        return {k: _cjson_shape(v) for k, v in value.items() if k != drop}
    if isinstance(value, list):
        return [_cjson_shape(v) for v in value] if value else {}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(f"{value:.14g}")
    return value


def as_job(res: dict[str, Any], queue: str = "default") -> ReservedJob:
    return ReservedJob(queue, res["job"], res["reserved"])


# -- writing --------------------------------------------------------------------------------------

@pytest.mark.php
@pytest.mark.parametrize("kind", KINDS)
def test_dispatch_vs_laraq_push(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis, kind: str) -> None:
    K = app.prefix + "queues:default"
    t_php = (time.time(), 0.0)
    php_state = pushed_state(app, redis_client, [kind])
    t_php = (t_php[0], time.time())
    redis_client.flushall()
    t_py = (time.time(), 0.0)
    if kind == "delayed":
        ((member, _score),) = php_state[f"0:{K}:delayed"][1]
        assert lq.later(30, member) == json.loads(member)["id"]
    else:
        (member,) = php_state[f"0:{K}"][1]
        assert lq.push(member) == json.loads(member)["id"]
    t_py = (t_py[0], time.time())
    assert_same_state(php_state, t_php, dump_redis(redis_client), t_py)


@pytest.mark.php
def test_push_raw_and_later_raw_identical(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    body = Path(corpus_dir() / CORPUS_OF[app.version] / "plain.pushed.json").read_bytes()
    for queue in ("default", "q"):
        redis_client.flushall()
        t_php = (time.time(), 0.0)
        assert app.tool("push-raw", f"--queue={queue}", stdin=body)["id"] == json.loads(body)["id"]
        app.tool("later-raw", f"--queue={queue}", "--delay=30", stdin=body)
        t_php = (t_php[0], time.time())
        php_state = dump_redis(redis_client)
        redis_client.flushall()
        t_py = (time.time(), 0.0)
        lq.push_raw(body, queue)
        lq.later(30, body, queue)
        t_py = (t_py[0], time.time())
        py_state = dump_redis(redis_client)
        assert_same_state(php_state, t_php, py_state, t_py)
        assert php_state[f"0:{app.prefix}queues:{queue}"] == py_state[f"0:{app.prefix}queues:{queue}"]  # bytes


@pytest.mark.php
def test_bulk_vs_laravel_bulk(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    K = app.prefix + "queues:default"
    redis_client.flushall()
    app.tool("bulk", "--queue=default", "--count=3")
    php_state = dump_redis(redis_client)
    members = php_state[f"0:{K}"][1]
    assert len(members) == 3
    redis_client.flushall()
    lq.bulk([(m, None) for m in members])
    assert dump_redis(redis_client) == php_state


# -- pop / release / delete -----------------------------------------------------------------------

@pytest.mark.php
def test_pop_same_state_as_laravel(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    start = pushed_state(app, redis_client, [k for k in KINDS if k != "delayed"])
    for _ in range(len(KINDS) - 1):
        t_php = (time.time(), 0.0)
        res = app.pop("default")
        t_php = (t_php[0], time.time())
        php_state = dump_redis(redis_client)
        restore(redis_client, start)
        t_py = (time.time(), 0.0)
        job = lq.pop()
        t_py = (t_py[0], time.time())
        py_state = dump_redis(redis_client)
        assert res is not None and job is not None
        assert job.body == res["job"]
        assert json.loads(job.reserved) == json.loads(res["reserved"])
        assert json.loads(job.reserved)["attempts"] == res["attempts"] == 1
        assert_same_state(php_state, t_php, py_state, t_py)
        start = php_state
        restore(redis_client, start)
    assert app.pop("default") is None and lq.pop() is None


@pytest.mark.php
@pytest.mark.parametrize("kind", KINDS[:-1])
def test_php_pushed_popped_by_laraq(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis, kind: str) -> None:
    K = app.prefix + "queues:default"
    state = pushed_state(app, redis_client, [kind])
    if kind == "delayed":
        ((pushed, _),) = state[f"0:{K}:delayed"][1]
        redis_client.zadd(K + ":delayed", {pushed: 0})  # make it due now
    else:
        (pushed,) = state[f"0:{K}"][1]
    job = lq.pop()
    assert job is not None
    assert job.body == pushed
    assert redis_client.zrange(K + ":reserved", 0, -1) == [job.reserved]
    assert json.loads(job.reserved)["attempts"] == 1
    assert _cjson_shape(json.loads(job.reserved), "attempts") == _cjson_shape(json.loads(pushed), "attempts")


@pytest.mark.php
def test_laraq_pushed_popped_by_php(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    K = app.prefix + "queues:default"
    for path in sorted((corpus_dir() / CORPUS_OF[app.version]).glob("*.pushed*.json")):
        redis_client.flushall()
        body = path.read_bytes()
        lq.push_raw(body)
        res = app.pop("default")
        assert res is not None, path.name
        assert res["job"] == body
        assert res["attempts"] == 1
        assert redis_client.zrange(K + ":reserved", 0, -1) == [res["reserved"]]


@pytest.mark.php
def test_release_delete_crossed(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    redis_client.flushall()
    app.tool("dispatch", "echo", "--queue=default")
    # laraq reserves and releases; PHP pops it with attempts 2
    job = lq.pop()
    assert job is not None
    lq.release(job, 0)
    res = app.pop("default")
    assert res is not None and res["attempts"] == 2 and res["job"] == job.reserved
    # PHP releases; laraq pops it with attempts 3
    app.tool("release", "--queue=default", "--delay=0", stdin=PhpApp.job_stdin(res["job"], res["reserved"]))
    again = lq.pop()
    assert again is not None and again.body == res["reserved"]
    assert json.loads(again.reserved)["attempts"] == 3
    # PHP deletes the laraq-reserved job
    app.tool("delete", "--queue=default", stdin=PhpApp.job_stdin(again.body, again.reserved))
    assert dump_redis(redis_client) == {}
    # laraq deletes a PHP-reserved job
    app.tool("dispatch", "plain", "--queue=default")
    res = app.pop("default")
    assert res is not None
    assert lq.delete_reserved(as_job(res)) == 1
    assert dump_redis(redis_client) == {}


@pytest.mark.php
@pytest.mark.parametrize("delay", [0, 5])
def test_release_same_state_as_laravel(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis, delay: int) -> None:
    pushed_state(app, redis_client, ["plain", "echo"])
    res = app.pop("default")
    assert res is not None
    start = dump_redis(redis_client)
    t_php = (time.time(), 0.0)
    app.tool("release", "--queue=default", f"--delay={delay}", stdin=PhpApp.job_stdin(res["job"], res["reserved"]))
    t_php = (t_php[0], time.time())
    php_state = dump_redis(redis_client)
    restore(redis_client, start)
    t_py = (time.time(), 0.0)
    lq.release(as_job(res), delay)
    t_py = (t_py[0], time.time())
    assert_same_state(php_state, t_php, dump_redis(redis_client), t_py)
    restore(redis_client, start)
    app.tool("delete", "--queue=default", stdin=PhpApp.job_stdin(res["job"], res["reserved"]))
    php_state = dump_redis(redis_client)
    restore(redis_client, start)
    lq.delete_reserved(as_job(res))
    assert dump_redis(redis_client) == php_state


# -- migrate / clear / size -----------------------------------------------------------------------

@pytest.mark.php
def test_migrate_same_state_as_laravel(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    K = app.prefix + "queues:default"
    now = int(time.time())
    redis_client.flushall()
    redis_client.rpush(K, b'{"id":"head","attempts":0}')
    redis_client.rpush(K + ":notify", 1)
    redis_client.zadd(K + ":delayed", {b'{"id":"d1","attempts":0}': now - 5, b'{"id":"d2","attempts":0}': now - 100,
                                         b'{"id":"later","attempts":0}': now + 500})
    redis_client.zadd(K + ":reserved", {b'{"id":"r1","attempts":1}': now - 1, b'{"id":"r-live","attempts":1}': now + 80})
    start = dump_redis(redis_client)
    app.tool("migrate", "--queue=default")
    php_state = dump_redis(redis_client)
    restore(redis_client, start)
    lq.migrate()
    py_state = dump_redis(redis_client)
    assert py_state == php_state
    assert [m for m in py_state[f"0:{K}"][1]] == [
        b'{"id":"head","attempts":0}', b'{"id":"d2","attempts":0}', b'{"id":"d1","attempts":0}',
        b'{"id":"r1","attempts":1}',
    ]


@pytest.mark.php
def test_clear_and_size_same_as_laravel(app: PhpApp, lq: RedisQueue, redis_client: redis.Redis) -> None:
    start = pushed_state(app, redis_client, ["plain", "echo", "delayed", "string"])
    app.pop("default")
    start = dump_redis(redis_client)
    assert app.tool("size", "--queue=default")["size"] == lq.size() == 4
    php_cleared = app.tool("clear", "--queue=default")["cleared"]
    php_state = dump_redis(redis_client)
    restore(redis_client, start)
    assert lq.clear() == php_cleared == 4
    assert dump_redis(redis_client) == php_state == {}
    # PHP clears what laraq wrote, and the other way round
    lq.push_raw(b'{"id":"x","attempts":0}')
    lq.later(10, b'{"id":"y","attempts":0}')
    assert app.tool("clear", "--queue=default")["cleared"] == 2
    app.tool("dispatch", "plain", "--queue=default")
    assert lq.clear() == 1 and dump_redis(redis_client) == {}


# -- the wire corpus (no PHP needed) ---------------------------------------------------------------

CORPUS_VERSIONS = ["8.83.26", "9.52.22", "10.50.3", "11.56.0", "12.67.0", "13.x"]


def _without_ids(member: bytes) -> dict[str, Any]:
    doc = json.loads(member)
    return {k: v for k, v in doc.items() if k not in ("uuid", "id")}


def _with_ids_of(member: bytes, other: bytes) -> bytes:
    """``member`` with its uuid/id/createdAt values replaced, as JSON text, by those of ``other``."""
    mine, theirs = json.loads(member), json.loads(other)
    for key in ("uuid", "id", "createdAt"):
        if key in mine:
            member = member.replace(json.dumps(mine[key]).encode(), json.dumps(theirs[key]).encode())
    return member


@pytest.mark.parametrize("folder", CORPUS_VERSIONS)
def test_corpus_reserved_and_released(redis_client: redis.Redis, folder: str) -> None:
    base = corpus_dir() / folder
    if not base.is_dir():
        pytest.skip(f"wire corpus not found at {base}")
    version = "13" if folder == "13.x" else folder
    queue = RedisQueue(redis_client, version=version, retry_after=90)
    checked = 0
    for reserved_file in sorted(base.glob("*.reserved.json")):
        kind = reserved_file.name.split(".")[0]
        redis_client.flushall()
        pushed = (base / f"{kind}.pushed.json").read_bytes()
        queue.push_raw(pushed)
        job = queue.pop()
        assert job is not None and job.body == pushed
        assert json.loads(job.reserved)["attempts"] == 1
        assert _without_ids(job.reserved) == _without_ids(reserved_file.read_bytes()), (folder, kind)
        # Byte for byte: the corpus job was dispatched separately, so only its random fields differ;
        # with those swapped in, laraq's pop wrote exactly the member Laravel's pop wrote.
        assert _with_ids_of(job.reserved, reserved_file.read_bytes()) == reserved_file.read_bytes(), (folder, kind)
        queue.release(job, 0)
        (delayed_member,) = redis_client.zrange(queue.keys().delayed, 0, -1)
        assert delayed_member == job.reserved
        released = base / f"{kind}.released.json"
        if released.exists():
            assert _without_ids(delayed_member) == _without_ids(released.read_bytes()), (folder, kind)
        checked += 1
    assert checked >= 2
    # every pushed payload of this version can be reserved (none is poison)
    for path in sorted(base.glob("*.pushed*.json")):
        redis_client.flushall()
        queue.push_raw(path.read_bytes())
        job = queue.pop()
        assert job is not None and queue.poison_size() == 0, path.name


@pytest.mark.php
def test_retry_after_null_in_config_means_60(laravel: str, redis_server: RedisServer,
                                             redis_client: redis.Redis) -> None:
    """Laravel's RedisConnector reads ``retry_after ?? 60``: a null in config/queue.php is 60 seconds.

    Only a RedisQueue constructed directly has a null retry_after (reservations never expire); laraq's
    RedisQueue(retry_after=None) is that direct form, checked in test_queue.py.
    """
    app = PhpApp(redis_server.port, version=laravel, queue="default", retry_after=None)
    K = app.prefix + "queues:default"
    lq = RedisQueue(redis_client, prefix=app.prefix, version=app.release, retry_after=60)
    for pop in (lambda: app.pop("default"), lq.pop):
        redis_client.flushall()
        app.tool("dispatch", "plain", "--queue=default")
        before = int(time.time())
        assert pop() is not None
        after = time.time()
        ((_, score),) = redis_client.zrange(K + ":reserved", 0, -1, withscores=True)
        assert before + 60 <= score <= after + 61  # reserved (whole seconds) while pop() ran, plus 60
