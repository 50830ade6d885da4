"""Queue transfers (move/copy), JSON Lines export/import, and moves killed at random points."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from laraq.bus.dispatch import Dispatcher
from laraq.ops.inspect import discover_queues
from laraq.ops.migrate import Transfer, export_jobs, import_jobs
from laraq.protocol.queue import RedisQueue


def q(client, prefix="laravel_database_", version="12.67", cluster=False):
    return RedisQueue(client, prefix=prefix, version=version, cluster=cluster)


def fill(queue: RedisQueue, name="default", pending=5, delayed=3, cls="App\\Jobs\\EchoJob"):
    d = Dispatcher(queue)
    ready = [d.dispatch_job(cls, {"i": i}, queue=name).payload for i in range(pending)]
    later = [d.dispatch_job(cls, {"i": i}, queue=name, delay=100 + i).payload for i in range(delayed)]
    return ready, later


def test_move_between_prefixes_keeps_bytes_order_and_scores(redis_client):
    src, dst = q(redis_client), q(redis_client, prefix="laravel-database-", version="13")
    ready, later = fill(src)
    scores = dict(redis_client.zrange("laravel_database_queues:default:delayed", 0, -1, withscores=True))
    summary = Transfer(src, "default", dst).run()
    assert summary.transferred == {"pending": 5, "delayed": 3}
    assert redis_client.lrange("laravel-database-queues:default", 0, -1) == ready
    assert redis_client.llen("laravel-database-queues:default:notify") == 5
    assert dict(redis_client.zrange("laravel-database-queues:default:delayed", 0, -1, withscores=True)) == scores
    assert not redis_client.exists("laravel_database_queues:default", "laravel_database_queues:default:delayed")
    assert [k for k in redis_client.scan_iter("*laraq-transfer*")] == []


def test_copy_filter_reserved_and_cluster_hash_tags(redis_client):
    src, dst = q(redis_client), q(redis_client, prefix="laravel-database-", version="13.26", cluster=True)
    ready, _ = fill(src, pending=4, delayed=0)
    Dispatcher(src).dispatch_job("App\\Jobs\\Other", {})
    src.pop()  # one reserved job
    t = Transfer(src, "default", dst, move=False, states=("pending", "reserved"), class_filter="*EchoJob")
    assert t.local is False  # a cluster destination always goes through the journal protocol
    assert t.plan().transferred == {"pending": 3, "reserved": 1}
    summary = t.run()
    assert summary.transferred == {"pending": 3, "reserved": 1} and summary.skipped["pending"] == 1
    assert redis_client.lrange("laravel-database-queues:{default}", 0, -1) == ready[1:]
    assert redis_client.zcard("laravel-database-queues:{default}:reserved") == 1
    assert redis_client.llen("laravel_database_queues:default") == 4  # copy leaves the source alone
    again = Transfer(src, "default", dst, move=False, states=("pending",), class_filter="*EchoJob").run()
    assert again.transferred == {"pending": 0} and again.existing == {"pending": 3}  # never a silent duplicate
    assert "--allow-duplicates" in again.describe()
    forced = Transfer(src, "default", dst, move=False, states=("pending",), class_filter="*EchoJob",
                      allow_duplicates=True).run()
    assert forced.transferred == {"pending": 3} and forced.verified == {"pending": 3}
    assert redis_client.llen("laravel-database-queues:{default}") == 6


def test_cross_db_move_and_recovery_from_journal(redis_server):
    a, b = redis_server.client(0), redis_server.client(2)
    a.flushall()
    src, dst = q(a), q(b)
    ready, later = fill(src, pending=3, delayed=2)
    t = Transfer(src, "default", dst)
    assert t.local is False
    # simulate a kill after the source step of one member: it sits in the journal only
    member = ready[0]
    assert t._take(keys=["laravel_database_queues:default", "laravel_database_queues:default:notify",
                         t.journal_key], args=["list", member, "h0", b"pending\n0\n" + member, t.meta]) == b"h0:1"
    assert member not in a.lrange("laravel_database_queues:default", 0, -1)
    summary = t.run()
    assert summary.recovered == 1 and summary.transferred == {"pending": 3, "delayed": 2}
    assert summary.verified == {"pending": 3, "delayed": 2}
    assert sorted(b.lrange("laravel_database_queues:default", 0, -1)) == sorted(ready)
    assert b.zcard("laravel_database_queues:default:delayed") == 2
    assert a.dbsize() == 0


def test_export_import_round_trip(redis_client):
    src = q(redis_client)
    ready, later = fill(src, name="mail")
    src.pop("mail")
    redis_client.rpush("laravel_database_queues:mail", b"\xff not utf-8")
    out = io.StringIO()
    assert export_jobs(src, ["mail"], out) == 9
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert {line["state"] for line in lines} == {"pending", "delayed", "reserved"}
    assert any("body_b64" in line for line in lines)
    dst = q(redis_client, prefix="new_")
    counts = import_jobs(dst, io.StringIO(out.getvalue()), reserved_as="pending")
    assert counts == {"pending": 6, "delayed": 3, "reserved": 0, "skipped": 0, "existing": 0}
    assert redis_client.lrange("new_queues:mail", 0, 4) == ready[1:] + [b"\xff not utf-8"]
    assert discover_queues(redis_client, "new_") == ["mail"]
    with pytest.raises(ValueError):
        import_jobs(dst, io.StringIO("{nope\n"))


MOVER = """
import sys, redis
from laraq.ops.migrate import Transfer
from laraq.protocol.queue import RedisQueue
port, db = int(sys.argv[1]), int(sys.argv[2])
src = RedisQueue(redis.Redis(port=port, db=0), prefix="p_", version="12.67")
dst = RedisQueue(redis.Redis(port=port, db=db), prefix="n_", version="13")
Transfer(src, "default", dst, batch=int(sys.argv[3])).run()
"""


@pytest.mark.parametrize("dest_db", [0, 3], ids=["same-connection-lua", "cross-db-journal"])
def test_move_killed_at_random_points_while_a_worker_pops(redis_server, dest_db):
    rng = random.Random(1234 + dest_db)
    a = redis_server.client(0)
    a.flushall()
    b = redis_server.client(dest_db)
    src = RedisQueue(a, prefix="p_", version="12.67")
    d = Dispatcher(src)
    expected = set()
    prepared = [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(4000)]
    prepared += [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, delay=3600) for i in range(500)]
    for r in d.bulk(prepared):
        expected.add(r.uuid)

    consumed: list[str] = []
    stop = threading.Event()

    def worker() -> None:
        wq = RedisQueue(redis_server.client(0), prefix="p_", version="12.67")
        while not stop.is_set():
            job = wq.pop()
            if job is None:
                time.sleep(0.002)
                continue
            consumed.append(json.loads(job.body)["uuid"])
            wq.delete_reserved(job)
            time.sleep(0.0005)

    thread = threading.Thread(target=worker)
    thread.start()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    try:
        interrupted = 0
        for _ in range(4):
            before = b.llen("n_queues:default") + b.zcard("n_queues:default:delayed")
            proc = subprocess.Popen([sys.executable, "-c", MOVER, str(redis_server.port), str(dest_db), "20"], env=env)
            # Kill only once the mover is under way (interpreter start-up is slow on a loaded machine),
            # then at a random point of its work.
            deadline = time.monotonic() + 30
            while (b.llen("n_queues:default") + b.zcard("n_queues:default:delayed") == before
                   and proc.poll() is None and time.monotonic() < deadline):
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.08))
            proc.send_signal(signal.SIGKILL)
            if proc.wait() == -signal.SIGKILL and a.llen("p_queues:default") + a.zcard("p_queues:default:delayed"):
                interrupted += 1
        subprocess.run([sys.executable, "-c", MOVER, str(redis_server.port), str(dest_db), "20"], env=env,
                       check=True, timeout=120)
    finally:
        stop.set()
        thread.join()

    def uuids(members):
        return [json.loads(m)["uuid"] for m in members]

    moved = uuids(b.lrange("n_queues:default", 0, -1)) + uuids(b.zrange("n_queues:default:delayed", 0, -1))
    left = a.llen("p_queues:default") + a.zcard("p_queues:default:delayed") + a.zcard("p_queues:default:reserved")
    assert left == 0
    everything = moved + consumed
    assert len(everything) == len(set(everything)), "a job exists twice (moved and run, or moved twice)"
    assert set(everything) == expected, "a job was lost"
    assert b.zcard("n_queues:default:delayed") == 500
    assert interrupted, "no kill landed in the middle of a move"
    assert list(a.scan_iter("*laraq-transfer*")) == [] and list(b.scan_iter("*laraq-transfer*")) == []
