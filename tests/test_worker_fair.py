"""Queue selection: ``--queue`` patterns found by SCAN, ``--fair`` turns, ``--weights`` and
``--max-per-queue`` slot leases, on a real redis-server.

Orders are read from what the handlers saw, never from timing; waits are bounded loops on a condition.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from laraq.app import App
from laraq.bus.job import Job
from laraq.protocol.discovery import QueueDiscovery, expand, probe, queue_name_of
from laraq.protocol.payload import build_string_payload
from laraq.protocol.queue import RedisQueue
from laraq.protocol.queueslots import QueueSlots
from laraq.worker.selection import QueueSelection, parse_weights
from laraq.worker.worker import Worker, WorkerOptions

ROOT = Path(__file__).resolve().parent.parent
NAME = "App\\Handlers\\Tenant@run"
VERSION = "12.0.0"


def _queue(redis_server: Any, **kw: Any) -> RedisQueue:
    return RedisQueue(redis_server.url, prefix="f_", retry_after=90, version=VERSION, **kw)


def _push(queue: RedisQueue, name: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        queue.push_raw(build_string_payload(VERSION, NAME, {"n": n, "q": name}), name)


def _recording_app(seen: list[tuple[str, int]]) -> App:
    app = App()

    @app.handler(NAME)
    def run(data: Any, job: Job) -> None:
        seen.append((job.queue, int(data["n"])))

    return app


def _drain(queue: RedisQueue, spec: str, **options: Any) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    opts = WorkerOptions(sleep=0, stop_when_empty=True, memory=1 << 20, **options)
    worker = Worker(_recording_app(seen), queue, spec, options=opts)
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    return seen


# -- discovery -----------------------------------------------------------------------------------------------

def test_a_pattern_finds_queues_by_any_of_their_job_keys_with_scan(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    redis_client.rpush("f_queues:tenant-list", b"{}")
    redis_client.zadd("f_queues:tenant-delayed:delayed", {b"{}": 9e9})
    redis_client.zadd("f_queues:tenant-reserved:reserved", {b"{}": 9e9})
    redis_client.rpush("f_queues:tenant-poisoned:poison", b"x")        # poison alone: not a queue with jobs
    redis_client.zadd("f_queues:tenant-slots:laraq-slots", {b"t": 9e9})  # slot leases alone: neither
    redis_client.rpush("other_queues:tenant-elsewhere", b"{}")        # another prefix
    redis_client.rpush("f_queues:default", b"{}")
    for n in range(300):                                               # keys SCAN must walk past
        redis_client.set(f"f_noise:{n}", 1)
    discovery = QueueDiscovery(queue, ["tenant-*"], count=10, calls=3)  # a few SCAN calls per refresh
    refreshes = 1
    while not discovery.refresh():
        refreshes += 1
    assert refreshes > 1  # bounded: one refresh did not walk the keyspace
    assert discovery.matched() == ["tenant-delayed", "tenant-list", "tenant-reserved"]
    assert expand(queue, ["high", "tenant-*", "default"]) == \
        ["high", "tenant-delayed", "tenant-list", "tenant-reserved", "default"]
    # an emptied queue drops out with the next complete pass; a new one comes in
    redis_client.delete("f_queues:tenant-list")
    redis_client.rpush("f_queues:tenant-new", b"{}")
    discovery.full_pass()
    assert discovery.matched() == ["tenant-delayed", "tenant-new", "tenant-reserved"]


def test_cluster_layout_names_lose_their_braces(redis_server: Any) -> None:
    tagged = RedisQueue(redis_server.client(), prefix="f_", version="13.5.0", cluster=True)
    assert queue_name_of(tagged, "f_queues:{tenant-1}:reserved") == "tenant-1"
    assert queue_name_of(tagged, "f_queues:{tenant-1}") == "tenant-1"
    plain = _queue(redis_server)
    assert queue_name_of(plain, "f_queues:{tenant-1}") == "{tenant-1}"  # braces the user wrote stay
    assert queue_name_of(plain, "f_queues:tenant-1:poison") is None


def test_probe_sees_waiting_due_and_expired_work(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    now = int(time.time())
    redis_client.rpush("f_queues:a", b"{}")
    redis_client.zadd("f_queues:b:delayed", {b"{}": now - 1})
    redis_client.zadd("f_queues:c:delayed", {b"{}": now + 3600})
    redis_client.zadd("f_queues:d:reserved", {b"{}": now - 1})
    assert probe(queue, ["a", "b", "c", "d", "e"]) == {"a": True, "b": True, "c": False, "d": True, "e": False}


# -- the worker ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 32])
def test_fair_takes_turns_across_a_patterns_queues(redis_client: redis.Redis, redis_server: Any, batch: int) -> None:
    queue = _queue(redis_server)
    _push(queue, "tenant-big", 30)          # the burst, dispatched first
    _push(queue, "tenant-a", 3)
    _push(queue, "tenant-b", 3)
    seen = _drain(queue, "tenant-*", fair=True, batch=batch, prefetch=False)
    assert sorted(seen) == sorted([("tenant-big", n) for n in range(30)] + [("tenant-a", n) for n in range(3)]
                                  + [("tenant-b", n) for n in range(3)])
    # the small tenants are done within their first turns, not after the 30 jobs of the burst
    last_small = max(i for i, (q, _) in enumerate(seen) if q != "tenant-big")
    assert last_small < 9
    # each queue's own jobs still run in the order they were dispatched
    for name in ("tenant-big", "tenant-a", "tenant-b"):
        assert [n for q, n in seen if q == name] == sorted(n for q, n in seen if q == name)


def test_without_fair_a_pattern_is_one_priority_level_by_name(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    _push(queue, "low", 2)
    _push(queue, "tenant-b", 2)
    _push(queue, "tenant-a", 2)
    _push(queue, "high", 2)
    seen = _drain(queue, "high,tenant-*,low", batch=1)
    assert [q for q, _ in seen] == ["high", "high", "tenant-a", "tenant-a", "tenant-b", "tenant-b", "low", "low"]


def test_fair_keeps_the_priority_of_a_mixed_list(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    _push(queue, "low", 2)
    _push(queue, "tenant-b", 2)
    _push(queue, "tenant-a", 2)
    _push(queue, "high", 2)
    seen = _drain(queue, "high,tenant-*,low", fair=True, batch=1)
    assert [q for q, _ in seen] == ["high", "high", "tenant-a", "tenant-b", "tenant-a", "tenant-b", "low", "low"]


def test_weights_give_a_queue_more_jobs_per_turn(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    _push(queue, "tenant-a", 6)
    _push(queue, "tenant-b", 6)
    _push(queue, "tenant-vip", 6)
    seen = _drain(queue, "tenant-*", fair=True, batch=1, weights=tuple(parse_weights("tenant-vip=3")))
    assert [q for q, _ in seen][:10] == ["tenant-a", "tenant-b", "tenant-vip", "tenant-vip", "tenant-vip",
                                         "tenant-a", "tenant-b", "tenant-vip", "tenant-vip", "tenant-vip"]
    with pytest.raises(ValueError, match="tenant-vip=x"):
        parse_weights("tenant-vip=x")


def test_a_plan_shares_a_batch_by_weight(redis_server: Any) -> None:
    selection = QueueSelection(_queue(redis_server), ["a", "b", "c"], fair=True, weights=[("b", 2)])
    level = selection.levels[0]
    assert selection.plan(level, 5) == [("a", 2), ("b", 2), ("c", 1)]  # a second turn for a
    assert selection.plan(level, 2) == [("b", 2)]  # the next round starts after the queue the last one ended on
    selection.took(level, "c", 1, 0)                # found empty: skipped until a probe says otherwise
    assert [n for n, _ in selection.plan(level, 3)] == ["a", "b"]


def test_new_queues_are_picked_up_while_the_worker_runs(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    _push(queue, "tenant-1", 1)
    seen: list[tuple[str, int]] = []
    worker = Worker(_recording_app(seen), queue, "tenant-*",
                    options=WorkerOptions(sleep=0.05, memory=1 << 20, fair=True, discover_every=0.2))
    thread = threading.Thread(target=worker.daemon)
    thread.start()
    try:
        _wait(lambda: ("tenant-1", 0) in seen)
        _push(queue, "tenant-2", 1)          # a queue that did not exist when the worker started
        _wait(lambda: ("tenant-2", 0) in seen)
        redis_client.zadd("f_queues:tenant-3:delayed", {build_string_payload(VERSION, NAME, {"n": 7, "q": "x"}):
                                                        int(time.time()) - 1})  # only a due delayed job
        _wait(lambda: ("tenant-3", 7) in seen)
    finally:
        worker.signals.quit()
        thread.join(30)
        worker.close()
    assert not thread.is_alive()
    assert sorted(seen) == [("tenant-1", 0), ("tenant-2", 0), ("tenant-3", 7)]


def _wait(condition: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# -- --max-per-queue -------------------------------------------------------------------------------------------

def test_slots_grant_at_most_the_limit_and_expire(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    slots = QueueSlots(queue, 2, 1.0)
    assert slots.acquire({"q": ["a", "b", "c"]}) == {"q": 2}
    assert slots.acquire({"q": ["d"]}) == {"q": 0}
    slots.release({"q": ["a"]})
    assert slots.acquire({"q": ["d"]}) == {"q": 1}
    # renewal keeps a slot whose job is still reserved and drops one whose job is gone
    redis_client.zadd("f_queues:q:reserved", {b"job-b": 9e9})
    assert slots.renew({"q": [("b", b"job-b"), ("d", b"job-d")]}) == {"q": [True, False]}
    _wait(lambda: slots.held("q") == 0, 10)  # a holder that stops renewing loses its slots by itself
    assert slots.acquire({"q": ["e", "f", "g"]}) == {"q": 2}


@pytest.mark.parametrize("batch", [1, 32])
def test_slots_are_taken_and_given_back_job_by_job(redis_client: redis.Redis, redis_server: Any, batch: int) -> None:
    queue = _queue(redis_server)
    _push(queue, "tenant-a", 4)
    _push(queue, "tenant-b", 4)
    held: list[int] = []
    app = App()

    @app.handler(NAME)
    def run(data: Any, job: Job) -> None:
        held.append(int(redis_client.zcard(f"f_queues:{job.queue}:laraq-slots")))

    worker = Worker(app, queue, "tenant-*", options=WorkerOptions(
        sleep=0, stop_when_empty=True, memory=1 << 20, fair=True, batch=batch, max_per_queue=1, concurrency=2))
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert len(held) == 8 and set(held) == {1}  # each running job held its queue's one slot
    assert not redis_client.exists("f_queues:tenant-a:laraq-slots", "f_queues:tenant-b:laraq-slots")


SLOT_WORKER = r"""
import os, signal, sys, time
import redis
from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.worker.worker import Worker, WorkerOptions

port, tag = int(sys.argv[1]), sys.argv[2]
r = redis.Redis(port=port)
app = App()

@app.handler("App\\Handlers\\Tenant@run")
def run(data, job):
    # the count and its row in one step: a kill between two calls would leave a count with no row
    r.eval("local n = redis.call('INCR', KEYS[1]) redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. n)", 2,
           "running:" + job.queue, "seen", f"{tag} {job.queue} {data['n']} {job.attempts}")
    if job.queue == "tenant-a" and data["n"] == 0 and job.attempts == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # killed while holding the slot
    time.sleep(0.05)
    r.decr("running:" + job.queue)
    r.rpush("ended", f"{tag} {job.queue} {data['n']} {job.attempts}")

queue = RedisQueue(f"redis://127.0.0.1:{port}/0", prefix="f_", retry_after=4, version="12.0.0")
worker = Worker(app, queue, "tenant-*", options=WorkerOptions(
    sleep=0.05, memory=1 << 20, concurrency=3, max_tries=3, fair=True, max_per_queue=1, slot_lease=6.0,
    discover_every=0.2, unstarted_lease=1.0))
sys.exit(worker.run())
"""


def test_max_per_queue_across_two_processes_and_a_kill(redis_client: redis.Redis, redis_server: Any) -> None:
    queue = _queue(redis_server)
    _push(queue, "tenant-a", 12)
    _push(queue, "tenant-b", 12)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    a = subprocess.Popen([sys.executable, "-c", SLOT_WORKER, str(redis_server.port), "A"], env=env)
    b = subprocess.Popen([sys.executable, "-c", SLOT_WORKER, str(redis_server.port), "B"], env=env)
    try:
        _wait(lambda: a.poll() is not None or b.poll() is not None, 60)  # one killed on tenant-a's job 0
        assert -9 in (a.poll(), b.poll())
        _wait(lambda: len({tuple(x.split()[1:3]) for x in redis_client.lrange("seen", 0, -1)}) == 24
              and any(x.split()[1:4] == [b"tenant-a", b"0", b"2"] for x in redis_client.lrange("seen", 0, -1)), 60)
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    rows = [x.decode().split() for x in redis_client.lrange("seen", 0, -1)]
    ended = {tuple(x.decode().split()) for x in redis_client.lrange("ended", 0, -1)}
    killed = [r for r in rows if r[1] == "tenant-a" and r[2] == "0" and r[3] == "1"]
    assert len(killed) == 1
    dead = killed[0][0]
    at = rows.index(killed[0])
    # jobs the killed process started and never ended leave their queue's counter up (their decrement
    # never ran): at most one per queue, since it held at most one slot per queue
    left_up = {q: sum(1 for r in rows if r[0] == dead and r[1] == q and tuple(r[:4]) not in ended)
               for q in ("tenant-a", "tenant-b")}
    assert left_up["tenant-a"] == 1 and left_up["tenant-b"] <= 1
    # one job of a queue ran at a time over both processes (3 slots each): the counter never passed 1
    # before the kill, nor 1 + what the kill left up after it
    assert all(int(r[4]) == 1 for r in rows[:at + 1])
    assert all(int(r[4]) <= 1 + left_up[r[1]] for r in rows[at + 1:]), (rows, left_up, sorted(ended))
    # the killed worker's slot came back by itself: B ran the rest of that queue, and job 0 again after retry_after
    assert {(r[1], r[2]) for r in rows} == {(q, str(n)) for q in ("tenant-a", "tenant-b") for n in range(12)}
    assert [r for r in rows if r[1] == "tenant-a" and r[2] == "0" and r[3] == "2"]
    _wait(lambda: not redis_client.exists("f_queues:tenant-a:laraq-slots", "f_queues:tenant-b:laraq-slots"), 30)


# -- what the operator sees ------------------------------------------------------------------------------------

def test_doctor_status_and_metrics_list_a_patterns_queues(redis_client: redis.Redis, redis_server: Any,
                                                         tmp_path: Path) -> None:
    import click
    from click.testing import CliRunner

    from laraq.cli.ops import COMMANDS
    from laraq.config.settings import LaravelSettings
    from laraq.ops.doctor import diagnose
    from laraq.production.metrics import exposition

    queue = _queue(redis_server)
    _push(queue, "tenant-a", 2)
    _push(queue, "tenant-b", 1)
    _push(queue, "other", 1)
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": "f_",
           "LARAQ_LARAVEL_VERSION": VERSION, "DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "db.sqlite"),
           "COLUMNS": "200"}
    settings = LaravelSettings.from_env(env, version=VERSION)
    found = diagnose(settings, queue, queues=["tenant-*"])
    assert [f.title for f in found if "pattern" in f.title] == ["pattern 'tenant-*' matches 2 queue(s): tenant-a, tenant-b"]
    assert any(f.title.startswith("2 queue(s) under prefix") for f in found)
    cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})
    result = CliRunner().invoke(cli, ["status", "tenant-*", "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = {q["queue"]: q for q in __import__("json").loads(result.output)["queues"]}
    assert set(rows) == {"tenant-a", "tenant-b"}
    text = exposition(queue, expand(queue, ["tenant-*"])).decode()
    assert 'laraq_queue_jobs{queue="tenant-a",state="pending"} 2.0' in text
    assert 'laraq_queue_jobs{queue="tenant-b",state="pending"} 1.0' in text


def test_the_worker_metrics_label_and_sample_a_patterns_queues(redis_client: redis.Redis, redis_server: Any) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from laraq.production.metrics import Metrics

    queue = _queue(redis_server)
    _push(queue, "tenant-a", 2)
    _push(queue, "tenant-b", 1)
    registry = CollectorRegistry()
    seen: list[tuple[str, int]] = []
    metrics = Metrics(port=None, registry=registry, queue=queue, jobs=[NAME])
    worker = Worker(_recording_app(seen), queue, "tenant-*",
                    options=WorkerOptions(sleep=0, stop_when_empty=True, memory=1 << 20, fair=True),
                    listeners=[metrics])
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    text = generate_latest(registry).decode()
    assert 'queue="tenant-a"' in text and 'queue="tenant-b"' in text
    assert 'queue="other"' not in text


# -- Redis Cluster -----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_pattern_on_a_three_master_cluster(tmp_path: Path) -> None:
    """13.5+ wraps each tenant's queue in a hash tag (``queues:{tenant-N}``): the tenants live on different
    masters; SCAN runs on every master, and the worker drains them all in turns, slots included."""
    from prodapp import Cluster
    from redis.cluster import key_slot

    cluster = Cluster(tmp_path / "cluster")
    try:
        client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        queue = RedisQueue(client, prefix="f_", version="13.5.0", retry_after=90)
        names = [f"tenant-{i}" for i in range(12)]
        for name in names:
            for n in range(3):
                queue.push_raw(build_string_payload("13.5.0", NAME, {"n": n, "q": name}), name)
        owners = {cluster.owner(key_slot(queue.keys(n).list.encode())).port for n in names}
        assert len(owners) == 3  # the tenants are spread over the three masters
        discovery = QueueDiscovery(queue, ["tenant-*"], count=5, calls=2)
        discovery.full_pass()
        assert discovery.matched() == sorted(names)
        seen = _drain(queue, "tenant-*", fair=True, max_per_queue=1, slot_lease=5.0)
        assert sorted(seen) == sorted((n, i) for n in names for i in range(3))
        assert {q for q, _ in seen[:12]} == set(names)  # a turn for every tenant first
        assert not any(client.exists(queue.keys(n).base + ":laraq-slots") for n in names)
    finally:
        cluster.stop()


def test_only_a_star_makes_a_pattern() -> None:
    from laraq.protocol.discovery import is_pattern

    assert is_pattern("tenant-*") and is_pattern("tenant-[ab]*")
    assert not is_pattern("q[1]") and not is_pattern("what?")  # a queue's own name, as Laravel takes it
