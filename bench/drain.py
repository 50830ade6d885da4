#!/usr/bin/env python3
"""One worker drains a deep queue: jobs/s, worker CPU per job, Redis CPU per job and commands per job.

Each variant is a ``laraq work`` with extra options (``--no-supervise --stop-when-empty`` always), run on
``--jobs`` no-op ``EchoJob``s pushed as Laravel pushes them, in rounds that alternate the variants. The
worker's CPU is ``RUSAGE_CHILDREN`` over its run (start-up included: about 15 µs per job at 20,000);
Redis' is the ``redis-server``'s own CPU (``INFO cpu``) over the run, and the commands are the
``INFO commandstats`` ``calls`` summed (reset before each run; a script's inner commands count as calls
too). No console lines are kept (the worker's output goes to ``/dev/null``). Where ``bench/run.py`` compares with artisan and the ceilings, this
isolates what an option costs the worker and Redis.

The variant ``floor`` is not a worker: ``bench/floor.py`` sends the default's Redis traffic from a bare
loop with no job model, so its row is what the wire alone costs a Python process.

    python3 bench/drain.py                                  # the default and --acks batched
    python3 bench/drain.py --jobs 50000 --rounds 3 -- "" "--acks batched" "--no-prefetch"
    python3 bench/drain.py --jobs 50000 --rounds 3 -- "" floor

(A variant that is one option, like ``--no-prefetch``, needs the ``--`` before the variants.)
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import ECHO, LARAVEL, PREFIX  # noqa: E402
from scale import Sides, command_calls, fill_list, loadavg, redis_cpu  # noqa: E402

FLOOR = Path(__file__).resolve().parent / "floor.py"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", nargs="*", help="extra options of each variant, one string each ('' = default)")
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    variants = [shlex.split(v) for v in (args.variants or ["", "--acks batched"])]
    print(f"[drain] {args.jobs:,} jobs, {args.rounds} round(s), load {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sides = Sides(Path(tmp), php=False)
        try:
            client = sides.client
            name = "drain"
            keys = sides.keys(name)
            template = sides.template(name)
            for _ in range(args.rounds):
                for extra in variants:
                    fill_list(client, keys.list, template, args.jobs)
                    if extra == ["floor"]:
                        cmd = [sys.executable, str(FLOOR), f"redis://127.0.0.1:{sides.server.port}/0", PREFIX, name,
                               LARAVEL, ECHO]
                    else:
                        cmd = [*sides.laraq.worker_cmd(name, stop_when_empty=True, sleep=1), "--no-supervise",
                               *extra]
                    client.config_resetstat()
                    redis_before = redis_cpu(client)
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    proc = subprocess.run(cmd, env=sides.laraq.env(log_path=None), cwd=tmp,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                    elapsed = time.perf_counter() - started
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    redis_us = (redis_cpu(client) - redis_before) * 1e6
                    calls = sum(n for name, n in command_calls(client).items() if name != "info")
                    label = " ".join(extra) or "default"
                    print(f"{label:36s} exit {proc.returncode}  {args.jobs / elapsed:8,.0f} jobs/s  worker "
                          f"{cpu / args.jobs * 1e6:6.1f} µs/job  Redis {redis_us / args.jobs:5.1f} µs/job  "
                          f"{calls / args.jobs:.2f} commands/job", flush=True)
                    if proc.returncode:
                        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
                        return 1
                    if client.llen(keys.list) or client.zcard(keys.reserved) or client.zcard(keys.unstarted):
                        print("  jobs left in the queue!", flush=True)
                        return 1
        finally:
            sides.stop()
    print(f"[drain] load {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
