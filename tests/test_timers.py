"""The idle worker's sleep (:class:`laraq.protocol.timers.Timers`) and the bounded migrate, on a real redis-server.

The bounded migrate is compared with Laravel's own ``migrateExpiredJobs`` script, read from the
installed framework (Debian's 8.83, and the live 10 tree's ``LIMIT`` variant) and run on identical
input: the list, its ``:notify`` and what is left in ``:delayed`` must be the same, in the same order,
while no single laraq command moved more than the bound.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis
from conftest import dump_redis, require
from pyapp import ENDS, PyApp

from laraq.protocol.queue import MIGRATE_BOUND, RedisQueue
from laraq.protocol.reserve import RESERVE_MIGRATE_BOUND
from laraq.protocol.timers import WAKE_MARGIN, Timers

PFX = "t_"
NOW = 1_700_000_000

LARAVEL_8 = Path("/usr/share/php/Illuminate/Queue/LuaScripts.php")
LARAVEL_10 = Path("/work/shared/laravel-live/10/vendor/laravel/framework/src/Illuminate/Queue/LuaScripts.php")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def body(n: int) -> bytes:
    doc = {"uuid": f"u-{n}", "displayName": "App\\Jobs\\X", "data": {"n": n}, "id": f"id-{n}", "attempts": 0}
    return json.dumps(doc, separators=(",", ":")).encode()


def queue(client: redis.Redis, clock: Clock, version: str = "8", **kw: object) -> RedisQueue:
    return RedisQueue(client, prefix=PFX, version=version, clock=clock, **kw)  # type: ignore[arg-type]


def fill(client: redis.Redis, key: str, count: int, score_of: object = lambda i: NOW - 1 - i % 7) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.zadd(key, {body(i): score_of(i)})  # type: ignore[operator]
    pipe.execute()


def laravel_migrate(path: Path) -> str:
    require(path.exists(), f"{path} is not installed; no Laravel script to compare with")
    m = re.search(r"function migrateExpiredJobs\(\).*?<<<'LUA'\n(.*?)\nLUA;", path.read_text(), re.S)
    assert m, "migrateExpiredJobs not found in " + str(path)
    return m.group(1)


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


# -- Timers ---------------------------------------------------------------------------------------

def test_sleep_is_full_interval_without_delayed_jobs(redis_client: redis.Redis) -> None:
    clock = Clock(NOW + 0.4)
    timers = Timers(queue(redis_client, clock), ["default"])
    assert timers.sleep_for(3) == 3
    assert timers.sleep_for(0) == 0


def test_sleep_ends_just_after_the_next_due_second(redis_client: redis.Redis) -> None:
    clock = Clock(NOW + 0.4)
    q = queue(redis_client, clock)
    redis_client.zadd(q.keys("default").delayed, {body(1): NOW + 2, body(2): NOW + 9})
    timers = Timers(q, ["default"])
    assert timers.sleep_for(3) == pytest.approx(1.6 + WAKE_MARGIN)
    assert timers.sleep_for(1) == 1  # bounded by --sleep: restart and pause are still seen
    clock.now = NOW + 2 + WAKE_MARGIN  # woke; the pop migrates it (Laravel's score <= floor(now))
    moved = q.migrate_expired_jobs(q.keys("default").delayed, q.keys("default").list)
    assert moved == [body(1)]
    assert timers.sleep_for(10) == pytest.approx(7 - WAKE_MARGIN + WAKE_MARGIN)


def test_fractional_score_is_due_at_its_next_whole_second(redis_client: redis.Redis) -> None:
    clock = Clock(NOW + 0.25)
    q = queue(redis_client, clock)
    redis_client.zadd(q.keys("default").delayed, {body(1): NOW + 1.5})
    assert Timers(q, ["default"]).sleep_for(5) == pytest.approx(1.75 + WAKE_MARGIN)


def test_earliest_over_all_queues(redis_client: redis.Redis) -> None:
    clock = Clock(NOW)
    q = queue(redis_client, clock)
    redis_client.zadd(q.keys("high").delayed, {body(1): NOW + 4})
    redis_client.zadd(q.keys("low").delayed, {body(2): NOW + 2})
    redis_client.zadd(q.keys("other").delayed, {body(3): NOW + 1})  # not a queue of this worker
    assert Timers(q, ["high", "low"]).sleep_for(3) == pytest.approx(2 + WAKE_MARGIN)


def test_due_now_but_not_taken_retries_once_then_never_spins(redis_client: redis.Redis) -> None:
    """A job due this second that the last pop left (a paused queue): one immediate retry, then the
    next due second; older leftovers are ignored."""
    clock = Clock(NOW + 0.5)
    q = queue(redis_client, clock)
    redis_client.zadd(q.keys("default").delayed, {body(0): NOW - 30, body(1): NOW, body(2): NOW + 3})
    timers = Timers(q, ["default"])
    assert timers.sleep_for(5) == 0
    assert timers.sleep_for(5) == pytest.approx(2.5 + WAKE_MARGIN)
    assert timers.sleep_for(5) == pytest.approx(2.5 + WAKE_MARGIN)
    clock.now = NOW + 1.5
    assert timers.sleep_for(5) == pytest.approx(1.5 + WAKE_MARGIN)


def test_unreachable_redis_sleeps_the_plain_interval() -> None:
    client = redis.Redis(port=1, socket_connect_timeout=0.2)
    timers = Timers(queue(client, Clock(NOW)), ["default"])
    assert timers.sleep_for(2) == 2


def test_block_for_wait_ends_when_the_next_delayed_job_is_due(redis_client: redis.Redis) -> None:
    """``block_for`` (0: until a token comes) is cut short to the next due second; a job due now means
    no wait at all; nothing scheduled keeps Laravel's wait."""
    clock = Clock(NOW + 0.4)
    q = queue(redis_client, clock, block_for=30)
    bound = Timers(q, ["default"]).wait_for
    assert q.block_timeout(bound) == 30
    redis_client.zadd(q.keys("default").delayed, {body(1): NOW + 3})
    assert q.block_timeout(bound) == pytest.approx(2.6 + WAKE_MARGIN, abs=0.001)
    assert q.block_timeout() == 30  # no bound: Laravel's own wait
    q.block_for = 0
    assert q.block_timeout(bound) == pytest.approx(2.6 + WAKE_MARGIN, abs=0.001)
    q.block_for = 2
    assert q.block_timeout(bound) == 2
    clock.now = NOW + 3.1
    assert q.block_timeout(bound) is None  # due now: the pop that follows migrates it
    redis_client.delete(q.keys("default").delayed)
    q.block_for = 0
    assert q.block_timeout(bound) == 0  # nothing scheduled: until a token comes, as Laravel waits


def test_block_for_wait_on_a_server_without_fractional_timeouts(redis_client: redis.Redis) -> None:
    """Redis before 6.0 refuses a fractional ``BLPOP`` timeout: the queue notes it once and rounds up."""
    clock = Clock(NOW + 0.4)
    q = queue(redis_client, clock, block_for=30)
    bound = Timers(q, ["default"]).wait_for
    redis_client.zadd(q.keys("default").delayed, {body(1): NOW + 3})
    refused = redis.exceptions.ResponseError("timeout is not an integer or out of range")
    assert q.note_wait_refused(refused)
    assert not q.note_wait_refused(refused)  # said once
    assert q.block_timeout(bound) == 3.0
    assert not q.note_wait_refused(redis.exceptions.ResponseError("WRONGTYPE Operation against a key"))


# -- the bounded migrate ----------------------------------------------------------------------------

@pytest.mark.parametrize(("version", "reference", "laravel_limit"), [("8", LARAVEL_8, None), ("10", LARAVEL_10, -1)])
def test_bounded_migrate_ends_as_laravels_unbounded_one(
    redis_client: redis.Redis, version: str, reference: Path, laravel_limit: int | None
) -> None:
    script = laravel_migrate(reference)
    count = 2 * MIGRATE_BOUND + 345
    q = queue(redis_client, Clock(NOW + 0.5), version=version)
    keys = q.keys("default")
    fill(redis_client, keys.delayed, count + 50, lambda i: NOW - 1 - i % 7 if i < count else NOW + 60)
    redis_client.rpush(keys.list, b"already-there")
    # the same input under other keys, migrated by Laravel's own script in one call
    ref = "ref_queues:default"
    for key, target in ((keys.delayed, ref + ":delayed"), (keys.list, ref)):
        redis_client.copy(key, target)
    args = [NOW] if laravel_limit is None else [NOW, laravel_limit]
    expected = redis_client.eval(script, 3, ref + ":delayed", ref, ref + ":notify", *args)
    q.migrate_expired_jobs("warm:delayed", "warm", "warm:notify")  # the script loaded: no NOSCRIPT retry counted
    before = evalsha_calls(redis_client)
    moved = q.migrate_expired_jobs(keys.delayed, keys.list, keys.notify)
    assert moved == expected and len(moved) == count
    assert evalsha_calls(redis_client) - before == count // MIGRATE_BOUND + 1  # bounded commands, none larger
    state = dump_redis(redis_client)
    for suffix in ("", ":notify", ":delayed"):
        assert state["0:" + keys.list + suffix] == state["0:" + ref + suffix], suffix


def test_configured_batch_size_still_limits_the_total(redis_client: redis.Redis) -> None:
    q = queue(redis_client, Clock(NOW + 0.5), version="10", migration_batch_size=MIGRATE_BOUND + 10)
    keys = q.keys("default")
    fill(redis_client, keys.delayed, MIGRATE_BOUND + 500)
    before = evalsha_calls(redis_client)
    assert len(q.migrate_expired_jobs(keys.delayed, keys.list, keys.notify)) == MIGRATE_BOUND + 10
    assert evalsha_calls(redis_client) - before == 2
    assert redis_client.zcard(keys.delayed) == 490


def test_reserve_calls_move_due_jobs_in_bounded_chunks_to_laravels_end_state(redis_client: redis.Redis) -> None:
    script = laravel_migrate(LARAVEL_8)
    count = 2 * RESERVE_MIGRATE_BOUND + 17
    q = queue(redis_client, Clock(NOW + 0.5))
    keys = q.keys("default")
    fill(redis_client, keys.delayed, count)
    ref = "ref_queues:default"
    redis_client.copy(keys.delayed, ref + ":delayed")
    redis_client.eval(script, 3, ref + ":delayed", ref, ref + ":notify", NOW)
    assert q.reserving.reserve_migrate_limit(10) == RESERVE_MIGRATE_BOUND
    assert q.reserving.reserve_migrate_limit(250) == 250  # never fewer than the jobs one call reserves
    calls = 0
    while redis_client.zcard(keys.delayed):
        assert q.reserving.reserve_batch("default", 0).jobs == []
        calls += 1
        assert redis_client.llen(keys.list) == min(count, calls * RESERVE_MIGRATE_BOUND)
    assert calls == 3
    state = dump_redis(redis_client)
    assert state["0:" + keys.list] == state["0:" + ref]
    assert state["0:" + keys.notify] == state["0:" + ref + ":notify"]


@pytest.mark.parametrize(("configured", "expected"), [(-1, RESERVE_MIGRATE_BOUND), (7, 7), (0, 0), (5000, RESERVE_MIGRATE_BOUND)])
def test_reserve_limit_follows_the_configured_batch_size(redis_client: redis.Redis, configured: int, expected: int) -> None:
    q = queue(redis_client, Clock(NOW), version="11", migration_batch_size=configured)
    assert q.reserving.reserve_migrate_limit(1) == expected
    assert queue(redis_client, Clock(NOW), version="9.22", migration_batch_size=7).reserving.reserve_migrate_limit(1) == RESERVE_MIGRATE_BOUND


# -- the worker wakes for a job PHP delayed ----------------------------------------------------------

@pytest.mark.parametrize("pyapp", ENDS, indirect=True)
@pytest.mark.parametrize(("wait", "batch"), [("sleep", None), ("block_for", None), ("block_for", 1)],
                         ids=["sleep", "block-for", "block-for-batch-1"])
def test_worker_with_a_long_wait_runs_a_delayed_job_when_it_is_due(
    pyapp: PyApp, redis_client: redis.Redis, wait: str, batch: int | None,
) -> None:
    """The app dispatches a job delayed by 2 s (PHP's bytes, from Python: ``pyapp.PyApp``; ``later`` is a
    ZADD on 8, a script on 13); a laraq worker that found nothing waits ten minutes: a
    ``--sleep=600``, or (``block_for`` 600) a ``BLPOP :notify``, which a delayed job never pushes to,
    with batch reserves and with `--batch 1`. With the timer it wakes when the job is due, runs it (never
    before its score) and stops at --max-jobs 1; without it, the thread would still be waiting when the
    join gives up."""
    import threading

    import test_worker_support as support

    from laraq.cli.work import build_worker, default_params

    extra: dict[str, object] = {} if batch is None else {"batch": batch}
    if wait == "block_for":
        extra["block_for"] = 600
    params = default_params(laravel=pyapp.release, sleep=600, max_jobs=1, quiet=True, memory=1 << 20, queue="later",
                            **extra)
    worker = build_worker(params, env=pyapp.env, app=support.app)
    try:
        pyapp.dispatch("python", "later", delay=2)
        assert redis_client.zcard(pyapp.prefix + "queues:later:delayed") == 1
        done: list[int] = []
        thread = threading.Thread(target=lambda: done.append(worker.daemon()), daemon=True)
        thread.start()
        thread.join(120)
        if thread.is_alive():
            worker.signals.quit()
            redis_client.rpush(pyapp.prefix + "queues:later:notify", 1)
            pytest.fail(f"the worker waited out its {wait} of 600 s past a due delayed job")
        assert done == [0]
        runs = [r for r in pyapp.runs() if r["runner"] == "python"]
        assert len(runs) == 1 and runs[0]["attempts"] == 1
        assert redis_client.zcard(pyapp.prefix + "queues:later:delayed") == 0
        assert redis_client.llen(pyapp.prefix + "queues:later") == 0
    finally:
        worker.close()

