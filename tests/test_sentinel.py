"""Redis Sentinel for real: a master, a replica and three sentinels on loopback; the master is killed while
``laraq work`` runs, and the jobs are counted.

A producer keeps pushing ``Track`` jobs through the sentinels (as a Laravel app would) before, during and
after the failover; only pushes the server acknowledged count. At the end every acknowledged job must
have run, except those Redis's asynchronous replication dropped: jobs the old master acknowledged but had
not yet sent to the replica when it died. Replication is in order, so those can only be a tail of the
pushes before the kill: every job pushed before the first lost one ran (asserted, with no clock in it). The numbers
are printed (``pytest -s``) and recorded in ``compat-docs/production.md``.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from conftest import RedisServer, require
from prodapp import Sentinel, laraq_env, popen_work, runs, stop_process, wait_until

from laraq.bus.dispatch import Dispatcher
from laraq.config.sentinel import sentinel_settings
from laraq.config.settings import LaravelSettings, make_redis
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.slow


def test_sentinel_settings_read_the_laravel_variables():
    assert sentinel_settings({"REDIS_HOST": "x"}) is None
    one = sentinel_settings({"REDIS_CLIENT": "phpredis-sentinel", "REDIS_SENTINEL_HOST": "sentinel.local",
                             "REDIS_SENTINEL_PORT": "26380", "REDIS_SENTINEL_SERVICE": "queues",
                             "REDIS_SENTINEL_PASSWORD": "s3cret"})
    assert one is not None and one.sentinels == (("sentinel.local", 26380),) and one.service == "queues"
    assert "s3cret" not in repr(one) and "s3cret" not in one.describe()
    many = sentinel_settings({"REDIS_SENTINEL_HOST": "tcp://a:1,b:2, c"})
    assert many is not None and many.sentinels == (("a", 1), ("b", 2), ("c", 26379)) and many.service == "mymaster"
    with pytest.raises(ValueError, match="REDIS_SENTINEL_PORT"):
        sentinel_settings({"REDIS_SENTINEL_HOST": "a", "REDIS_SENTINEL_PORT": "many"})


@pytest.fixture
def sentinel_group(tmp_path):
    require(os.path.exists("/usr/bin/redis-sentinel") or bool(__import__("shutil").which("redis-sentinel")),
            "redis-sentinel is not installed (bash .ci/run installs it)")
    for name in ("master", "replica"):
        (tmp_path / name).mkdir()
    master = RedisServer(tmp_path / "master")
    replica = RedisServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(master.port))
    sentinels = [Sentinel(tmp_path / f"s{i}", master.port) for i in range(3)]
    servers = [master, replica]
    try:
        assert wait_until(lambda: replica.client().info("replication").get("master_link_status") == "up", 30)
        # every sentinel knows the replica and the other sentinels before the test starts
        assert wait_until(lambda: all(
            len(redis.Redis(port=s.port).sentinel_slaves("mymaster")) == 1
            and len(redis.Redis(port=s.port).sentinel_sentinels("mymaster")) == 2 for s in sentinels), 60)
        yield master, replica, sentinels
    finally:
        for s in sentinels:
            s.stop()
        for server in servers:
            if server.proc.poll() is None:
                server.stop()


def test_laraq_follows_a_failover_and_counts_what_replication_lost(sentinel_group, tmp_path):
    master, replica, sentinels = sentinel_group
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in sentinels)
    laravel_env = {"REDIS_CLIENT": "phpredis-sentinel", "REDIS_SENTINEL_HOST": hosts,
                   "REDIS_SENTINEL_SERVICE": "mymaster", "REDIS_PREFIX": "s_", "LARAQ_LARAVEL_VERSION": "12.67",
                   "CACHE_STORE": "redis", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "db.sqlite"),
                   "LARAQ_RETRY_AFTER": "5"}
    settings = LaravelSettings.from_env(laravel_env)
    queue = RedisQueue(make_redis(settings), prefix="s_", version="12.67", retry_after=5)
    dispatcher = Dispatcher(queue)

    acked: dict[int, float] = {}
    push_errors = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal push_errors
        n = 0
        while not stop.is_set():
            try:
                dispatcher.push(dispatcher.prepare_job("App\\Jobs\\Track", {"n": n}))
            except redis.RedisError:
                push_errors += 1
                time.sleep(0.1)
                continue
            acked[n] = time.monotonic()
            n += 1
            time.sleep(0.005)

    log = tmp_path / "runs.jsonl"
    out = tmp_path / "worker.log"
    env = laraq_env(**laravel_env, LARAQ_LOG=str(log))
    worker = popen_work(env, "--sleep", "0.1", "--tries", "3", "-v", log=out)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        assert wait_until(lambda: len(runs(log)) >= 200, 60), out.read_text()
        killed_at = time.monotonic()
        old = ("127.0.0.1", master.port)
        master.proc.send_signal(signal.SIGKILL)
        master.proc.wait(10)
        assert wait_until(lambda: sentinels[0].master() not in (None, old), 60), "no failover"
        promoted_at = time.monotonic()
        assert sentinels[0].master() == ("127.0.0.1", replica.port)
        assert wait_until(lambda: sum(1 for t in acked.values() if t > promoted_at) >= 200, 60)
        stop.set()
        producer.join(10)
        new = replica.client()

        def drained() -> bool:
            left = new.llen("s_queues:default") + new.zcard("s_queues:default:reserved") \
                + new.zcard("s_queues:default:delayed")
            return left == 0 and {r["n"] for r in runs(log)} >= {n for n, t in acked.items() if t > promoted_at}

        assert wait_until(drained, 90), out.read_text()
        assert worker.poll() is None, "the worker exited instead of following the failover:\n" + out.read_text()
    finally:
        stop.set()
        code = stop_process(worker)
    assert code == 0, out.read_text()

    done = runs(log)
    ran = {r["n"] for r in done}
    lost = sorted(set(acked) - ran)
    duplicates = len(done) - len(ran)
    before_kill = sum(1 for t in acked.values() if t <= killed_at)
    print(f"\nsentinel failover: pushed+acknowledged {len(acked)} ({before_kill} before the kill), "
          f"push errors during failover {push_errors}, ran {len(ran)} distinct, re-run {duplicates}, "
          f"lost by asynchronous replication {len(lost)}, failover took {promoted_at - killed_at:.1f}s")
    # Only the last pushes the dead master acknowledged can be lost: replication sends writes in order, so
    # what the replica missed is a tail of the pushes before the kill (one producer: ``n`` is the push
    # order). Every job pushed before the first lost one ran, every lost one was acknowledged before the
    # kill, and everything pushed after the promotion ran (the drain above waited for it).
    if lost:
        assert all(acked[n] <= killed_at for n in lost), "a job acknowledged after the kill was lost"
        missing_before = [n for n in range(lost[0]) if n in acked and n not in ran]
        assert not missing_before, f"lost jobs are not a tail of the pushes before the kill: {missing_before[:10]}"
        tail = [n for n in acked if n >= lost[0] and acked[n] <= killed_at]
        print(f"lost {len(lost)} of the last {len(tail)} pushes before the kill")
    assert not (ran - set(acked)), "a job ran that was never acknowledged"
    worker_log = out.read_text()
    # loud, not silent: the outage and the recovery are logged (no password, the sentinel address)
    assert "Redis unreachable at redis-sentinel://" in worker_log, worker_log
    assert "Redis reachable again" in worker_log, worker_log
    assert "worker process died" not in worker_log, worker_log


def test_sentinel_and_data_passwords(tmp_path):
    """``REDIS_SENTINEL_PASSWORD`` authenticates to the sentinels, ``REDIS_PASSWORD`` to the master."""
    require(bool(__import__("shutil").which("redis-sentinel")), "redis-sentinel is not installed")
    (tmp_path / "m").mkdir()
    master = RedisServer(tmp_path / "m")
    master.client().config_set("requirepass", "datapw")
    sentinel = Sentinel(tmp_path / "s", master.port, quorum=1,
                        extra="sentinel auth-pass mymaster datapw\nrequirepass sentinelpw\n")
    try:
        base = {"REDIS_SENTINEL_HOST": f"127.0.0.1:{sentinel.port}", "REDIS_SENTINEL_PASSWORD": "sentinelpw",
                "REDIS_PASSWORD": "datapw", "LARAQ_LARAVEL_VERSION": "12.67"}
        q = RedisQueue(make_redis(LaravelSettings.from_env(base)), prefix="", version="12.67")
        q.push_raw(b'{"uuid":"u","job":"X","attempts":0,"data":{}}')
        assert q.pop() is not None
        wrong = RedisQueue(make_redis(LaravelSettings.from_env({**base, "REDIS_SENTINEL_PASSWORD": "nope"})),
                           prefix="", version="12.67")
        with pytest.raises(redis.RedisError) as info:
            wrong.push_raw(b"{}")
        assert "nope" not in str(info.value) and "sentinelpw" not in str(info.value)
        assert "datapw" not in q.redacted_url() and "mymaster" in q.redacted_url()
    finally:
        sentinel.stop()
        master.stop()
