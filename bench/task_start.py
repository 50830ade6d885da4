"""How an ``async def`` job's task is started, measured through the whole worker, in process.

Compares laraq trees (or one tree two ways) on the same machine, in interleaved rounds: every round
runs each variant once, in an order that alternates, so a load that rises or falls weighs on all
alike. Each run is a fresh process that dispatches ``--jobs`` no-op jobs (the bench's ``EchoJob``,
``async def`` handler, ``--quiet``) to its own ``redis-server`` queue and times ``Worker.daemon()``
draining them: CPU µs per job (the process's user + system time, the number the host's load moves
least) and jobs/s by wall time::

    python3 bench/task_start.py before=/tmp/laraq-before after=. --rounds 6
    python3 bench/task_start.py eager=. scheduled=.:scheduled     # ``:scheduled``: see below

A variant is ``label=TREE`` or ``label=TREE:scheduled``. ``:scheduled`` makes a tree that starts a
job's first step at once (the private-asyncio path of older trees) start it the ordinary way instead:
a plain asyncio loop and no ``_enter_task``, so the task's first step waits for the next loop pass.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def child(tree: str, port: int, jobs: int, scheduled: bool) -> None:
    sys.path.insert(0, str(BENCH))
    sys.path.insert(0, tree)
    import asyncio

    import handlers
    import redis

    from laraq.bus.dispatch import Dispatcher
    from laraq.cli.work import build_worker, default_params
    from laraq.protocol.queue import RedisQueue

    if scheduled:
        from laraq.worker import eager, worker
        eager._enter_task = None  # no first step run at once: each task's first step waits for a loop pass
        worker.new_worker_loop = asyncio.new_event_loop  # type: ignore[attr-defined]
    prefix, queue = "laravel_database_", f"task-start-{os.getpid()}"
    client = redis.Redis(port=port)
    dispatcher = Dispatcher(RedisQueue(client, prefix=prefix, version="8.83.27"))
    props = {"args": [], "mode": "ok", "seconds": 0, "tries": None, "backoff": None, "timeout": None,
             "maxExceptions": None, "failOnTimeout": False}
    dispatcher.bulk([dispatcher.prepare_job("App\\Jobs\\EchoJob", props, queue=queue, connection="redis")
                     for _ in range(jobs)])
    params = default_params(laravel="8", sleep=0, stop_when_empty=True, quiet=True, queue=queue,
                            redis_url=f"redis://127.0.0.1:{port}/0", prefix=prefix, memory=1 << 20)
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(port), "CACHE_DRIVER": "redis", "REDIS_PREFIX": prefix}
    worker = build_worker(params, env=env, app=handlers.app)
    cpu, wall = time.process_time(), time.perf_counter()
    status = worker.daemon()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if status != 0 or client.llen(prefix + "queues:" + queue):
        raise SystemExit(f"the worker stopped with status {status} before the queue was empty")
    print(f"{cpu / jobs * 1e6:.3f} {jobs / wall:.1f}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", help="label=TREE or label=TREE:scheduled")
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        tree, port, jobs, scheduled = args.child
        child(tree, int(port), int(jobs), scheduled == "1")
        return 0
    variants = []
    for spec in args.variants:
        label, _, rest = spec.partition("=")
        tree, _, how = rest.partition(":")
        variants.append((label, str(Path(tree).resolve()), how == "scheduled"))
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="laraq-task-start-")
    server = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", workdir], stdout=subprocess.DEVNULL)
    results: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in variants}
    try:
        time.sleep(0.5)
        for round_no in range(args.rounds):
            order = variants if round_no % 2 == 0 else variants[::-1]
            for label, tree, scheduled in order:
                env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
                env.pop("LARAQ_BENCH_SYNC", None)
                env.pop("LARAQ_LOG", None)
                done = subprocess.run([sys.executable, __file__, "--child", tree, str(port), str(args.jobs),
                                       "1" if scheduled else "0"], env=env, capture_output=True, text=True,
                                      check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{label}: {done.stderr[-2000:]}")
                cpu, rate = map(float, done.stdout.split()[-2:])
                results[label].append((cpu, rate))
                print(f"round {round_no + 1} {label:>12}: {cpu:6.2f} CPU µs/job {rate:9.0f} jobs/s", flush=True)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{'variant':>12} | CPU µs/job best / median | jobs/s best / median  ({args.rounds} rounds of "
          f"{args.jobs} jobs, Python {sys.version.split()[0]})")
    for label, runs in results.items():
        cpus, rates = [c for c, _ in runs], [r for _, r in runs]
        print(f"{label:>12} | {min(cpus):6.2f} / {statistics.median(cpus):6.2f} | "
              f"{max(rates):8.0f} / {statistics.median(rates):8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
