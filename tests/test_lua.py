"""laraq's Lua scripts on a real redis-server: exact effects, poison handling, script-cache fallback.

Where Debian's Laravel 8 is installed, the pop and migrate scripts are also run side by side with
Laravel's own scripts (read from the installed ``LuaScripts.php`` at test time) on identical input,
and must leave identical Redis state and return identical bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import redis
from conftest import corpus_dir, dump_redis, require

from laraq.protocol.lua import SCRIPT_TEXTS, Scripts
from laraq.protocol.lua_laraq import ACK_CHUNK
from laraq.protocol.lua_laravel import MIGRATE_CHUNK, POISON_SKIPS_PER_CALL

L, D, R, N, P = "p_queues:q", "p_queues:q:delayed", "p_queues:q:reserved", "p_queues:q:notify", "p_queues:q:poison"

LARAVEL_LUA = Path("/usr/share/php/Illuminate/Queue/LuaScripts.php")


def job(attempts: object = 0, **extra: object) -> bytes:
    doc = {"uuid": "u-1", "displayName": "App\\Jobs\\X", "data": {"k": "v"}, **extra, "attempts": attempts}
    return json.dumps(doc, separators=(",", ":")).encode()


@pytest.fixture
def scripts(redis_client: redis.Redis) -> Scripts:
    return Scripts(redis_client)


def laravel_script(name: str) -> str:
    """One of Laravel 8.83's scripts, read from the installed framework (never stored in laraq)."""
    require(LARAVEL_LUA.exists(), "Debian's Laravel 8 is not installed; no reference scripts to compare with")
    m = re.search(r"function " + name + r"\(\).*?<<<'LUA'\n(.*?)\nLUA;", LARAVEL_LUA.read_text(), re.S)
    assert m, name
    return m.group(1)


# -- push / later / size / clear ------------------------------------------------------------------

def test_push_appends_payload_and_one_notify(scripts: Scripts, redis_client: redis.Redis) -> None:
    assert scripts.push(L, N, b"a") is None
    scripts.push(L, N, b"b")
    assert redis_client.lrange(L, 0, -1) == [b"a", b"b"]
    assert redis_client.lrange(N, 0, -1) == [b"1", b"1"]
    assert set(dump_redis(redis_client)) == {"0:" + L, "0:" + N}


def test_later_is_a_zadd_without_notify(scripts: Scripts, redis_client: redis.Redis) -> None:
    scripts.later(D, 1700000030, b"x")
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"x", 1700000030.0)]
    assert set(dump_redis(redis_client)) == {"0:" + D}


def test_size_counts_list_delayed_reserved_not_notify(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.rpush(L, b"a", b"b")
    redis_client.rpush(N, 1, 1, 1)
    redis_client.zadd(D, {b"d": 5})
    redis_client.zadd(R, {b"r1": 5, b"r2": 6})
    redis_client.rpush(P, b"poison")
    assert scripts.size(L, D, R) == 5


@pytest.mark.parametrize("with_notify", [False, True])
def test_clear_variants(scripts: Scripts, redis_client: redis.Redis, with_notify: bool) -> None:
    redis_client.rpush(L, b"a", b"b")
    redis_client.rpush(N, 1, 1)
    redis_client.zadd(D, {b"d": 5})
    redis_client.zadd(R, {b"r": 5})
    redis_client.rpush(P, b"poison")
    assert scripts.clear(L, D, R, N if with_notify else None) == 4
    remaining = set(dump_redis(redis_client))
    assert remaining == ({"0:" + P} if with_notify else {"0:" + N, "0:" + P})


# -- pop ------------------------------------------------------------------------------------------

def test_pop_reserves_with_attempts_plus_one(scripts: Scripts, redis_client: redis.Redis) -> None:
    body = job(0)
    redis_client.rpush(L, body, job(5))
    redis_client.rpush(N, 1, 1)
    res = scripts.pop(L, R, N, P, 1700000090)
    assert res.job == body
    assert json.loads(res.reserved) == {**json.loads(body), "attempts": 1}
    assert res.poisoned == 0
    assert redis_client.zrange(R, 0, -1, withscores=True) == [(res.reserved, 1700000090.0)]
    assert redis_client.lrange(L, 0, -1) == [job(5)]
    assert redis_client.lrange(N, 0, -1) == [b"1"]
    res2 = scripts.pop(L, R, N, P, 1700000091)
    assert json.loads(res2.reserved)["attempts"] == 6
    assert not redis_client.exists(N)


def test_pop_empty_returns_nothing_and_writes_nothing(scripts: Scripts, redis_client: redis.Redis) -> None:
    res = scripts.pop(L, R, N, P, 100)
    assert (res.job, res.reserved, res.poisoned) == (None, None, 0)
    assert dump_redis(redis_client) == {}


def test_pop_consumes_notify_even_if_list_and_notify_drifted(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.rpush(L, job(0))
    res = scripts.pop(L, R, N, P, 100)  # no notify tokens at all: LPOP of a missing list is harmless
    assert res.job is not None and not redis_client.exists(N)


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [("3", 4), (" 3 ", 4), (2.5, 3.5), (0, 1), (-1, 0), ("0x10", 17), (1e13, 10000000000001)],
)
def test_pop_numeric_coercion_like_lua(scripts: Scripts, redis_client: redis.Redis, attempts: object, expected: object) -> None:
    redis_client.rpush(L, job(attempts))
    res = scripts.pop(L, R, N, P, 100)
    assert res.job == job(attempts)
    assert json.loads(res.reserved)["attempts"] == expected
    assert not redis_client.exists(P)


POISON = [
    b"not json",
    b"",
    b"{\"noattempts\":1}",
    b"{\"attempts\":\"abc\"}",
    b"{\"attempts\":true}",
    b"{\"attempts\":null}",
    b"{\"attempts\":\"inf\"}",
    b"{\"attempts\":1e400}",
    b"{\"attempts\":1,\"x\":-1e999}",
    b"5",
    b"\"string\"",
    b"[1,2]",
    b"null",
    b"\xff\xfe binary \x00",
    b"{\"attempts\":1",
]


@pytest.mark.parametrize("bad", POISON)
def test_poison_member_is_parked_and_next_job_popped(scripts: Scripts, redis_client: redis.Redis, bad: bytes) -> None:
    good = job(0)
    redis_client.rpush(L, bad, good)
    redis_client.rpush(N, 1, 1)
    res = scripts.pop(L, R, N, P, 100)
    assert res.job == good
    assert json.loads(res.reserved)["attempts"] == 1
    assert res.poisoned == 1
    assert redis_client.lrange(P, 0, -1) == [bad]  # byte-identical
    assert not redis_client.exists(L)
    assert not redis_client.exists(N)  # one token for the poison member, one for the job


def test_poison_only_queue_returns_nothing(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.rpush(L, b"x", b"{}")
    redis_client.rpush(N, 1, 1, 1)
    res = scripts.pop(L, R, N, P, 100)
    assert (res.job, res.reserved, res.poisoned) == (None, None, 2)
    assert redis_client.lrange(P, 0, -1) == [b"x", b"{}"]
    assert redis_client.lrange(N, 0, -1) == [b"1"]
    assert not redis_client.exists(R)


def test_poison_budget_bounds_one_call(scripts: Scripts, redis_client: redis.Redis) -> None:
    bad = [f"bad {i}".encode() for i in range(POISON_SKIPS_PER_CALL + 5)]
    redis_client.rpush(L, *bad, job(0))
    first = scripts.pop(L, R, N, P, 100)
    assert (first.job, first.poisoned) == (None, POISON_SKIPS_PER_CALL)
    assert redis_client.llen(L) == 6
    second = scripts.pop(L, R, N, P, 100)
    assert second.job == job(0) and second.poisoned == 5
    assert redis_client.lrange(P, 0, -1) == bad


def test_pop_matches_laravel_byte_for_byte_on_corpus(scripts: Scripts, redis_client: redis.Redis) -> None:
    """Same input, same Redis, same cjson: laraq's reserved string equals Laravel's exactly."""
    reference = laravel_script("pop")
    files = sorted(corpus_dir().glob("*/*.pushed*.json"))
    if not files:
        pytest.skip(f"wire corpus not found at {corpus_dir()}")
    extras = [
        job(0, tags=[], nested=[[]], uni="\u00e9\u2028", big=123456789012345, f=0.30000000000000004),
        b'{"b":1,"a":[null,1],"o":{"0":"a","1":"b"},"attempts":"2","s":"x\\/y\\u00e9","e":1e5,"z":-0.0}',
    ]
    for body in [f.read_bytes() for f in files] + extras:
        states = []
        results = []
        for run in ("laravel", "laraq"):
            redis_client.flushall()
            redis_client.rpush(L, body, b"tail")
            redis_client.rpush(N, 1, 1)
            if run == "laravel":
                out = redis_client.eval(reference, 3, L, R, N, 1700000090)
                results.append((out[0], out[1]))
            else:
                res = scripts.pop(L, R, N, P, 1700000090)
                results.append((res.job, res.reserved))
            states.append(dump_redis(redis_client))
        assert results[0] == results[1], body[:80]
        assert states[0] == states[1], body[:80]


@pytest.mark.parametrize("member", [*POISON[:4], job("3"), job(1.5), job(0)])
def test_pop_equals_laravel_when_laravel_succeeds_and_keeps_what_laravel_loses(
    scripts: Scripts, redis_client: redis.Redis, member: bytes
) -> None:
    reference = laravel_script("pop")
    redis_client.rpush(L, member)
    redis_client.rpush(N, 1)
    try:
        out = redis_client.eval(reference, 3, L, R, N, 100)
        laravel_ok = True
    except redis.ResponseError:
        laravel_ok = False
        assert not redis_client.exists(L)  # Laravel lost the member
    laravel_state = dump_redis(redis_client)
    redis_client.flushall()
    redis_client.rpush(L, member)
    redis_client.rpush(N, 1)
    res = scripts.pop(L, R, N, P, 100)
    if laravel_ok:
        assert (res.job, res.reserved) == (out[0], out[1])
        assert dump_redis(redis_client) == laravel_state
    else:
        assert res.job is None and redis_client.lrange(P, 0, -1) == [member]


# -- pop_many -------------------------------------------------------------------------------------

def test_pop_many_pairs_in_order_with_poison(scripts: Scripts, redis_client: redis.Redis) -> None:
    members = [job(0, n=1), b"junk", job(2, n=2), job(0, n=3), job(0, n=4)]
    redis_client.rpush(L, *members)
    redis_client.rpush(N, *[1] * 5)
    res = scripts.pop_many(L, R, N, P, 500, 3)
    assert [j for j, _ in res.jobs] == [members[0], members[2], members[3]]
    assert [json.loads(r)["attempts"] for _, r in res.jobs] == [1, 3, 1]
    assert res.poisoned == 1
    assert redis_client.lrange(L, 0, -1) == [members[4]]
    assert redis_client.lrange(N, 0, -1) == [b"1"]
    assert redis_client.lrange(P, 0, -1) == [b"junk"]
    assert sorted(redis_client.zrange(R, 0, -1)) == sorted(r for _, r in res.jobs)
    assert {s for _, s in redis_client.zrange(R, 0, -1, withscores=True)} == {500.0}
    rest = scripts.pop_many(L, R, N, P, 500, 10)
    assert len(rest.jobs) == 1 and scripts.pop_many(L, R, N, P, 500, 10).jobs == []
    assert scripts.pop_many(L, R, N, P, 500, 0).jobs == []


def test_pop_many_reserved_equals_single_pop(scripts: Scripts, redis_client: redis.Redis) -> None:
    body = job(0, tags=[], x="\u2028")
    redis_client.rpush(L, body)
    single = scripts.pop(L, R, N, P, 9).reserved
    redis_client.flushall()
    redis_client.rpush(L, body)
    assert scripts.pop_many(L, R, N, P, 9, 5).jobs == [(body, single)]


# -- reserve_batch / renew / give_back (the worker's batch reserves) -------------------------------

def test_reserve_batch_acks_migrates_both_then_reserves(scripts: Scripts, redis_client: redis.Redis) -> None:
    listed, due, expired = job(0, n=1), job(1, n=2), job(2, n=3)
    redis_client.rpush(L, listed)
    redis_client.rpush(N, 1)
    redis_client.zadd(D, {due: 100, b"not-yet": 101})
    redis_client.zadd(R, {expired: 99, b"done-1": 500, b"done-2": 500, b"running": 500})
    res = scripts.reserve_batch(L, R, N, P, D, expires_at=190, count=10, now=100,
                                acks=[b"done-1", b"done-2", b"never-there"])
    # acks first, then :delayed then :reserved migrated (appended in that order), then the pops
    assert [j for j, _ in res.jobs] == [listed, due, expired]
    assert [json.loads(r)["attempts"] for _, r in res.jobs] == [1, 2, 3]
    assert res.poisoned == 0
    assert redis_client.zrange(R, 0, -1, withscores=True) == sorted(
        [(b"running", 500.0)] + [(r, 190.0) for _, r in res.jobs], key=lambda x: (x[1], x[0]))
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"not-yet", 101.0)]
    assert not redis_client.exists(L) and not redis_client.exists(N)
    assert set(dump_redis(redis_client)) == {"0:" + R, "0:" + D}


def test_reserve_batch_equals_acks_migrates_and_consecutive_pops(
    scripts: Scripts, redis_client: redis.Redis
) -> None:
    def setup() -> None:
        redis_client.flushall()
        redis_client.rpush(L, job(0, n=1), b"junk", job(0, n=2), job(0, n=3))
        redis_client.rpush(N, 1, 1, 1, 1)
        redis_client.zadd(D, {job(0, n=4): 50})
        redis_client.zadd(R, {b"ack-me": 70, job(1, n=5): 60})

    setup()
    res = scripts.reserve_batch(L, R, N, P, D, expires_at=160, count=3, now=70, acks=[b"ack-me"])
    batched = dump_redis(redis_client)
    setup()
    redis_client.zrem(R, b"ack-me")
    scripts.migrate(D, L, N, 70)
    scripts.migrate(R, L, N, 70)
    singles = [scripts.pop(L, R, N, P, 160) for _ in range(3)]
    assert dump_redis(redis_client) == batched
    assert [(s.job, s.reserved) for s in singles] == res.jobs
    assert res.poisoned == 1


def test_reserve_batch_without_reserved_migration_and_limited(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.zadd(D, {b"d1": 1, b"d2": 2, b"d3": 3})
    redis_client.zadd(R, {job(1): 1})
    res = scripts.reserve_batch(L, R, N, P, D, expires_at=9, count=0, now=5, migrate_limit=2,
                                migrate_reserved=False)
    assert res.jobs == [] and res.poisoned == 0
    assert redis_client.lrange(L, 0, -1) == [b"d1", b"d2"]  # LIMIT 2, :reserved untouched
    assert redis_client.llen(N) == 2
    assert redis_client.zrange(D, 0, -1) == [b"d3"]
    assert redis_client.zrange(R, 0, -1, withscores=True) == [(job(1), 1.0)]


def test_reserve_batch_acks_beyond_one_unpack_chunk(scripts: Scripts, redis_client: redis.Redis) -> None:
    members = {f"r{i:05d}".encode(): 10 for i in range(ACK_CHUNK * 2 + 7)}
    redis_client.zadd(R, {**members, b"keep": 10})
    res = scripts.reserve_batch(L, R, N, P, D, expires_at=99, count=5, now=1, acks=list(members))
    assert res.jobs == []
    assert redis_client.zrange(R, 0, -1) == [b"keep"]
    assert set(dump_redis(redis_client)) == {"0:" + R}


def test_renew_pushes_only_members_still_reserved(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.zadd(R, {b"a": 10, b"b": 10, b"other": 10})
    assert scripts.renew(R, [b"a", b"gone", b"b"], 200) == [True, False, True]
    assert redis_client.zrange(R, 0, -1, withscores=True) == [(b"other", 10.0), (b"a", 200.0), (b"b", 200.0)]
    assert redis_client.zscore(R, b"gone") is None  # XX: never resurrected
    assert scripts.renew(R, [], 300) == []
    assert set(dump_redis(redis_client)) == {"0:" + R}


def test_give_back_puts_bodies_at_the_head_in_order(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.rpush(L, b"waiting")
    redis_client.rpush(N, 1)
    redis_client.zadd(R, {b"r1": 10, b"r3": 10, b"running": 10})
    given = scripts.give_back(L, R, N, [(b"r1", b"body1"), (b"r2-gone", b"body2"), (b"r3", b"body3")])
    assert given == 2
    assert redis_client.lrange(L, 0, -1) == [b"body1", b"body3", b"waiting"]  # attempts not burned
    assert redis_client.lrange(N, 0, -1) == [b"1"] * 3
    assert redis_client.zrange(R, 0, -1) == [b"running"]
    assert scripts.give_back(L, R, N, [(b"r1", b"body1")]) == 0  # already given back: no duplicate
    assert scripts.give_back(L, R, N, []) == 0
    assert redis_client.llen(L) == 3


# -- release --------------------------------------------------------------------------------------

def test_release_moves_reserved_member_to_delayed(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.zadd(R, {b"member": 100, b"other": 100})
    assert scripts.release(D, R, b"member", 1700000005) == 1
    assert redis_client.zrange(R, 0, -1) == [b"other"]
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"member", 1700000005.0)]


def test_release_adds_even_if_reservation_is_gone(scripts: Scripts, redis_client: redis.Redis) -> None:
    assert scripts.release(D, R, b"gone", 7) == 1
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"gone", 7.0)]
    assert not redis_client.exists(R)


# -- requeue (laraq's own: unhandled jobs go back untouched) -------------------------------------

def test_requeue_swaps_the_reservation_for_the_original_body(scripts: Scripts, redis_client: redis.Redis) -> None:
    body, reserved = job(0), job(1)
    redis_client.zadd(R, {reserved: 100, b"other": 100})
    assert scripts.requeue(R, D, reserved, 1700000010, body) == 1
    assert redis_client.zrange(R, 0, -1) == [b"other"]
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(body, 1700000010.0)]  # attempts not burned
    assert set(dump_redis(redis_client)) == {"0:" + R, "0:" + D}


def test_requeue_does_nothing_without_the_reservation(scripts: Scripts, redis_client: redis.Redis) -> None:
    # the reservation expired and another worker took the job: putting it back would duplicate it
    assert scripts.requeue(R, D, job(1), 7, job(0)) == 0
    assert dump_redis(redis_client) == {}


def test_requeue_in_a_pipeline(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.zadd(R, {b"r": 1})
    pipe = redis_client.pipeline()
    scripts.requeue(R, D, b"r", 5, b"body", client=pipe)
    assert pipe.execute() == [1]
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"body", 5.0)]


# -- migrate --------------------------------------------------------------------------------------

def test_migrate_moves_due_members_in_score_order_inclusive(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.rpush(L, b"existing")
    redis_client.zadd(D, {b"c": 99, b"a": 100, b"b": 100, b"late": 101})
    moved = scripts.migrate(D, L, N, 100)
    assert moved == [b"c", b"a", b"b"]
    assert redis_client.lrange(L, 0, -1) == [b"existing", b"c", b"a", b"b"]
    assert redis_client.lrange(N, 0, -1) == [b"1"] * 3
    assert redis_client.zrange(D, 0, -1, withscores=True) == [(b"late", 101.0)]
    assert scripts.migrate(D, L, N, 100) == []
    assert redis_client.llen(N) == 3


def test_migrate_chunks_beyond_unpack_limit(scripts: Scripts, redis_client: redis.Redis) -> None:
    count = MIGRATE_CHUNK * 2 + 37
    members = {f"m{i:04d}".encode(): i for i in range(count)}
    redis_client.zadd(R, members)
    moved = scripts.migrate(R, L, N, count)
    assert moved == sorted(members)
    assert redis_client.lrange(L, 0, -1) == sorted(members)
    assert redis_client.llen(N) == count
    assert not redis_client.exists(R)


@pytest.mark.parametrize(("limit", "moved"), [(2, 2), (-1, 5), (0, 0), (10, 5)])
def test_migrate_limited(scripts: Scripts, redis_client: redis.Redis, limit: int, moved: int) -> None:
    redis_client.zadd(D, {f"j{i}".encode(): i for i in range(5)})
    redis_client.zadd(D, {b"future": 1000})
    out = scripts.migrate(D, L, N, 100, limit)
    assert out == [f"j{i}".encode() for i in range(moved)]
    assert redis_client.lrange(L, 0, -1) == out
    assert redis_client.llen(N) == moved
    assert redis_client.zcard(D) == 6 - moved


def test_migrate_matches_laravel_8(scripts: Scripts, redis_client: redis.Redis) -> None:
    reference = laravel_script("migrateExpiredJobs")
    states, outs = [], []
    for run in ("laravel", "laraq"):
        redis_client.flushall()
        redis_client.rpush(L, b"head")
        redis_client.zadd(R, {f"r{i:03d}".encode(): i % 50 for i in range(230)})
        if run == "laravel":
            outs.append(redis_client.eval(reference, 3, R, L, N, 25))
        else:
            outs.append(scripts.migrate(R, L, N, 25))
        states.append(dump_redis(redis_client))
    assert outs[0] == outs[1] and len(outs[0]) == 130  # i % 50 <= 25: 26 of every 50
    assert states[0] == states[1]


# -- script cache, pipelines, SHAs ----------------------------------------------------------------

def test_shas_are_sha1_of_text(scripts: Scripts) -> None:
    for name, text in SCRIPT_TEXTS.items():
        assert scripts.sha(name) == hashlib.sha1(text.encode()).hexdigest()


def test_noscript_fallback_after_flush(scripts: Scripts, redis_client: redis.Redis) -> None:
    scripts.push(L, N, b"a")
    assert redis_client.script_exists(scripts.sha("push")) == [True]
    redis_client.script_flush()
    assert redis_client.script_exists(scripts.sha("push")) == [False]
    scripts.push(L, N, b"b")  # NOSCRIPT → SCRIPT LOAD → EVALSHA
    assert redis_client.lrange(L, 0, -1) == [b"a", b"b"]
    redis_client.script_flush()
    res = scripts.pop(L, R, N, P, 5)  # neither member is JSON: both parked, after a reload
    assert (res.job, res.poisoned) == (None, 2)
    assert redis_client.lrange(P, 0, -1) == [b"a", b"b"]


def test_load_preloads_everything(scripts: Scripts, redis_client: redis.Redis) -> None:
    redis_client.script_flush()
    scripts.load()
    assert redis_client.script_exists(*[scripts.sha(n) for n in SCRIPT_TEXTS]) == [True] * len(SCRIPT_TEXTS)


@pytest.mark.parametrize("transaction", [True, False])
def test_scripts_inside_pipelines_after_flush(scripts: Scripts, redis_client: redis.Redis, transaction: bool) -> None:
    redis_client.script_flush()
    pipe = redis_client.pipeline(transaction=transaction)
    scripts.push(L, N, job(0), client=pipe)
    scripts.later(D, 50, b"later", client=pipe)
    scripts.size(L, D, R, client=pipe)
    scripts.migrate(D, L, N, 60, client=pipe)
    results = pipe.execute()
    assert results[2] == 2
    assert results[3] == [b"later"]
    assert redis_client.lrange(L, 0, -1) == [job(0), b"later"]
    assert redis_client.llen(N) == 2
