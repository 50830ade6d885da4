#!/usr/bin/env python3
"""Each dashboard page on big queues: its answer time, and the slowest Redis commands it sent (SLOWLOG).

    python3 bench/dashboard.py                                  # 1,000,000 pending, 100,000 delayed (~1 GB Redis)
    python3 bench/dashboard.py --pending 100000 --delayed 10000 # smaller

A throw-away ``redis-server`` gets ``--pending`` jobs in ``default``'s ready list and ``--delayed`` in its
delayed set (one real payload, each copy with its own uuid and id), 100 reservations and 100 failed rows
(SQLite). Every page is then asked ``--rounds`` times through Starlette's test client (the whole app:
routing, the guard, the readers, the templates; no network), and the median and the slowest answer are
printed. SLOWLOG is reset before the pages and read after them with a threshold of 1 ms, so it lists
every command of the dashboard's that took 1 ms or more in Redis, with its time.

Times depend on the machine: say how loaded it was when quoting them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import RedisServer  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.cli.common import Ops  # noqa: E402
from laraq.dashboard.actions import Journal  # noqa: E402
from laraq.dashboard.app import create_app  # noqa: E402
from laraq.dashboard.history import History  # noqa: E402

PAGES = ["/", "/queues/default", "/queues/default?page=20", "/queues/default?state=delayed",
         "/queues/default?state=reserved", "/failed", "/workers", "/batches", "/schedule", "/transfers"]
BATCH = 10_000


def fill(ops: Ops, pending: int, delayed: int) -> str:
    """Push the jobs; returns the uuid of the last pending one (for the search page)."""
    queue = ops.queue
    raw = Dispatcher(queue).prepare_job("App\\Jobs\\EchoJob", {"n": 1, "text": "x" * 200}).payload
    template = raw.decode() if isinstance(raw, bytes) else raw
    doc = json.loads(template)
    uuid, ident = doc["uuid"], doc["id"]
    keys = queue.keys("default")
    client = queue.client
    last = ""
    now = time.time()
    for kind, count in (("pending", pending), ("delayed", delayed)):
        for start in range(0, count, BATCH):
            pipe = client.pipeline(transaction=False)
            members = []
            for n in range(start, min(count, start + BATCH)):
                last = f"{kind[0]}{n:011d}-0000-4000-8000-000000000000"
                member = template.replace(uuid, last).replace(ident, f"{kind}-{n}")
                members.append(member)
            if kind == "pending":
                pipe.rpush(keys.list, *members)
            else:
                pipe.zadd(keys.delayed, {m: now + 3600 + i for i, m in enumerate(members)})
            pipe.execute()
    for n in range(100):
        member = template.replace(uuid, f"r{n:011d}-0000-4000-8000-000000000000").replace(ident, f"reserved-{n}")
        client.zadd(keys.reserved, {member: now + 90})
    store = ops.failed_store()
    store.ensure_table()
    for n in range(100):
        store.log("redis", "default", template.replace(uuid, f"f-{n}"), f"RuntimeException: failure {n}")
    return f"p{pending - 1:011d}-0000-4000-8000-000000000000"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--delayed", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--search", action="store_true", help="Also time the search of the last pending job by uuid "
                                                             "(reads the whole queue: slow on big queues).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="laraq-bench-dash-") as tmp:
        work = Path(tmp)
        server = RedisServer(work)
        try:
            env = work / ".env"
            env.write_text(f"REDIS_HOST=127.0.0.1\nREDIS_PORT={server.port}\nLARAQ_LARAVEL_VERSION=13\n"
                           f"DB_CONNECTION=sqlite\nDB_DATABASE={work / 'db.sqlite'}\nCACHE_STORE=redis\n")
            ops = Ops.load(str(env), None, None)
            began = time.perf_counter()
            last = fill(ops, args.pending, args.delayed)
            (last_delayed, delayed_at), = ops.queue.client.zrange(ops.queue.keys("default").delayed, -1, -1,
                                                                  withscores=True)
            last_delayed = json.loads(last_delayed)["uuid"]
            print(f"filled {args.pending:,} pending, {args.delayed:,} delayed, 100 reserved, 100 failed "
                  f"in {time.perf_counter() - began:.1f} s; Redis used "
                  f"{ops.queue.client.info('memory')['used_memory_human']}")
            (work / "state").mkdir()
            client = TestClient(create_app(ops, journal=Journal(work / "state"), history=History(every=1)),
                                base_url="http://127.0.0.1")
            # a job's own page as the list page links it (state and position), and one whose hint is missing
            # (its bounded search of each state, then the failed store)
            pages = PAGES + [f"/queues/default/jobs/{last}?state=pending&at={args.pending - 1}",
                             f"/queues/default/jobs/{last_delayed}?state=delayed&at={delayed_at!r}",
                             f"/queues/default/jobs/{last}"] + (
                [f"/queues/default?id={last}"] if args.search else [])
            redis = ops.queue.client
            redis.config_set("slowlog-log-slower-than", 1000)
            redis.config_set("slowlog-max-len", 1000)
            client.get("/")  # the first request builds the templates
            redis.slowlog_reset()
            print(f"{'page':70} {'median ms':>10} {'max ms':>8}")
            for page in pages:
                times = []
                for _ in range(args.rounds):
                    began = time.perf_counter()
                    answer = client.get(page)
                    times.append((time.perf_counter() - began) * 1000)
                    # the job page without a hint answers 404 past its bounded search on a big queue
                    assert answer.status_code == 200 or "/jobs/" in page, (page, answer.status_code)
                print(f"{page[:70]:70} {statistics.median(times):10.1f} {max(times):8.1f}")
            slow = redis.slowlog_get(1000)
            print(f"SLOWLOG (>= 1 ms): {len(slow)} command(s)")
            for entry in sorted(slow, key=lambda e: -e["duration"])[:15]:
                command = entry["command"]
                text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
                print(f"  {entry['duration'] / 1000:7.2f} ms  {text[:100]}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
