r"""Redis Cluster for real: three masters on loopback, PHP (phpredis ``RedisCluster``) and ``laraq work`` side
by side on hash-tagged queues that live on different nodes, and a slot migration in the middle.

The Laravel 8 fixture app's ``redis-cluster`` queue connection uses a ``clusters`` block (Laravel's native
cluster support through phpredis). Queues are named ``{alpha}``, ``{beta}``, ``{gamma}``: the hash tag
Laravel documents for clusters (13.5+ adds it itself; see ``test_queue.py``). While both workers run and a
producer keeps pushing, the slot of ``{alpha}`` is moved to another master key by key, the way
``redis-cli --cluster reshard`` does it, with a pause while the slot is half-moved (clients get ``ASK`` and
``TRYAGAIN``, then ``MOVED``). Every job pushed must run exactly once.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import redis
from phpapp import PhpApp
from prodapp import Cluster, stop_process, wait_until
from redis.cluster import key_slot
from test_worker_support import laraq_env

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

pytestmark = [pytest.mark.php, pytest.mark.slow]

PREFIX = "laravel_database_"


def pick_queues(cluster: Cluster, count: int = 3) -> list[str]:
    """Hash-tagged queue names whose slots belong to ``count`` different masters."""
    chosen: dict[int, str] = {}
    i = 0
    while len(chosen) < count:
        name = "{q" + str(i) + "}"
        owner = cluster.owner(key_slot(f"{PREFIX}queues:{name}".encode())).port
        chosen.setdefault(owner, name)
        i += 1
    return list(chosen.values())


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster")
    yield c
    c.stop()


def test_php_and_laraq_share_a_three_master_cluster_through_a_reshard(php, redis_server, cluster, tmp_path):
    queues = pick_queues(cluster)
    # a short retry_after: a reservation left behind by a stalled worker comes back within the test
    app = PhpApp(redis_server.port, extra_env={"REDIS_CLUSTER_SEEDS": cluster.seeds,
                                               "REDIS_CLUSTER_RETRY_AFTER": "10"})
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    rq = RedisQueue(client, prefix=PREFIX, version="8", connection_name="redis-cluster", retry_after=10)
    assert rq.cluster
    per_queue = 30
    for q in queues:
        app.tool("dispatch", "echo", "--connection=redis-cluster", f"--queue={q}", f"--count={per_queue}")
    owners = {cluster.owner(key_slot(rq.keys(q).list.encode())).port for q in queues}
    assert len(owners) == 3  # three queues on three masters
    for q in queues:
        assert client.llen(rq.keys(q).list) == per_queue

    env = laraq_env(app, LARAQ_REDIS_CLUSTER="default", LARAQ_REDIS_CLUSTER_NODES=cluster.seeds,
                    LARAQ_RETRY_AFTER="10")
    laraq_out = tmp_path / "laraq.log"
    with open(laraq_out, "wb") as out:
        laraq = subprocess.Popen(
            [*__import__("prodapp").LARAQ, "work", "redis-cluster", "--app", "test_worker_support:app",
             "--laravel", "8", "--queue", ",".join(queues), "--sleep", "0.1", "--tries", "3", "-v"],
            env=env, cwd=str(app.path.parent.parent), stdout=out, stderr=subprocess.STDOUT)
    artisan = app.popen_artisan("queue:work", "redis-cluster", f"--queue={','.join(queues)}", "--sleep=0.1",
                                "--tries=3")
    pushed = per_queue * len(queues)
    stop = threading.Event()
    produced = 0
    push_errors = 0
    d = Dispatcher(rq)

    def produce() -> None:
        nonlocal produced, push_errors
        n = 0
        while not stop.is_set():
            job = d.prepare_job("App\\Jobs\\EchoJob", {"args": {"n": n}, "mode": "ok", "seconds": 0},
                                protected={"note": "py"}, private={"hidden": "h"}, queue=queues[n % 3])
            try:
                d.push(job)
            except redis.RedisError:
                push_errors += 1
                time.sleep(0.05)
                continue
            produced += 1
            n += 1
            time.sleep(0.01)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        runners = lambda: {r["runner"] for r in app.runs()}  # noqa: E731
        producer.start()
        assert wait_until(lambda: runners() == {"php", "python"}, 60), laraq_out.read_text()
        # the slot must hold keys while it moves: delayed jobs (due in 2 s) keep :delayed alive
        for n in range(10):
            d.push(d.prepare_job("App\\Jobs\\EchoJob", {"args": {"late": n}, "mode": "ok", "seconds": 0},
                                 protected={"note": "py"}, private={"hidden": "h"}, queue=queues[0], delay=2))
        pushed += 10
        slot = key_slot(rq.keys(queues[0]).list.encode())
        source = cluster.owner(slot)
        target = next(n for n in cluster.nodes if n is not source)
        moved = cluster.migrate_slot(slot, target, pause=0.5)
        assert cluster.owner(slot) is target and moved >= 1
        time.sleep(1.0)
        stop.set()
        producer.join(10)
        total = pushed + produced

        def drained() -> bool:
            left = sum(client.llen(rq.keys(q).list) + client.zcard(rq.keys(q).reserved)
                       + client.zcard(rq.keys(q).delayed) for q in queues)
            return left == 0 and len(app.runs()) >= total

        drain_started = time.monotonic()
        assert wait_until(drained, 120), (laraq_out.read_text(), len(app.runs()), total)
        print(f"\ndrained in {time.monotonic() - drain_started:.1f}s")
        assert laraq.poll() is None, laraq_out.read_text()
    finally:
        stop.set()
        code = stop_process(laraq)
        stop_process(artisan)
    runs = app.runs()
    uuids = [r["uuid"] for r in runs]
    by_runner = {name: sum(1 for r in runs if r["runner"] == name) for name in ("php", "python")}
    print(f"\ncluster: {total} jobs ({produced} pushed during the reshard, {push_errors} push retries), "
          f"slot {slot} moved with {moved} keys; ran by php {by_runner['php']}, by laraq {by_runner['python']}")
    assert len(uuids) == total and len(set(uuids)) == total  # nothing lost, nothing run twice
    assert code == 0, laraq_out.read_text()
    assert app.tool("size", "--connection=redis-cluster", f"--queue={queues[0]}") == {"size": 0}  # PHP follows the moved slot
    assert min(by_runner.values()) > 0


def test_13_5_tags_untagged_queues_itself_on_three_masters(cluster, redis_server, tmp_path):
    """13.5+: plain queue names become ``queues:{name}`` on a cluster; laraq dispatches and works them."""
    from prodapp import laraq_env as prod_env
    from prodapp import popen_work, runs

    client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    rq = RedisQueue(client, prefix="laravel-database-", version="13.5")
    names, owners = [], set()
    i = 0
    while len(owners) < 3:  # plain names whose tagged keys land on three different masters
        name = f"mail{i}"
        owner = cluster.owner(key_slot(rq.keys(name).list.encode())).port
        if owner not in owners:
            owners.add(owner)
            names.append(name)
        i += 1
    d = Dispatcher(rq)
    for n in range(30):
        d.push(d.prepare_job("App\\Jobs\\Track", {"n": n}, queue=names[n % 3]))
    assert all(client.llen(f"laravel-database-queues:{{{name}}}") == 10 for name in names)
    log = tmp_path / "runs.jsonl"
    env = prod_env(LARAQ_REDIS_CLUSTER="true", LARAQ_REDIS_CLUSTER_NODES=cluster.seeds, LARAQ_LOG=str(log),
                   REDIS_PREFIX="laravel-database-", CACHE_STORE="array", DB_CONNECTION="sqlite",
                   DB_DATABASE=str(tmp_path / "db.sqlite"))
    worker = popen_work(env, "--laravel", "13.5", "--queue", ",".join(names), "--stop-when-empty",
                        log=tmp_path / "w.log")
    assert worker.wait(120) == 0, (tmp_path / "w.log").read_text()
    assert sorted(r["n"] for r in runs(log)) == list(range(30))
    assert {r["queue"] for r in runs(log)} == set(names)
    assert not client.keys("laravel-database-queues:*")


def test_block_for_longer_than_the_socket_timeout_on_a_cluster(cluster):
    """The wait on ``:notify`` runs on the node that holds the queue's slot and outlasts the client's
    socket timeout (redis-py's default 5 s is shorter than many a ``block_for``); a push wakes it."""
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=0.2)
    rq = RedisQueue(client, prefix=PREFIX, version="8", block_for=0.7)
    started = time.monotonic()
    assert rq.pop("{wait}") is None  # ran its course: no TimeoutError
    assert time.monotonic() - started >= 0.6
    rq.block_for = 5
    pusher = RedisQueue(redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port), prefix=PREFIX, version="8")
    timer = threading.Timer(0.3, pusher.push_raw, args=(b'{"uuid":"u","job":"x","data":{},"attempts":0,"id":"i"}', "{wait}"))
    timer.start()
    try:
        job = rq.pop("{wait}")
    finally:
        timer.join()
    assert job is not None and b'"attempts":1' in job.reserved
