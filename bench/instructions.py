"""CPU instructions per no-op job, counted by valgrind's callgrind: a measure the host's noise cannot move.

    python3 bench/instructions.py                 # default, def handler, --quiet; 1,000 and 3,000 jobs each
    python3 bench/instructions.py --variants default,quiet --jobs 2000,6000 --json out.json

``bench/run.py`` times the worker, and on a shared 2-core VM the same build reads 15 % apart from one
run to the next. This script counts instead: it runs laraq's worker in process under callgrind with
instrumentation switched on only around ``Worker.daemon()`` (``callgrind_control -i on/off``), once
with each job count, and reports the difference divided by the difference in jobs, so the worker's
boot and the dispatch drop out. ``PYTHONHASHSEED`` is fixed; what is left is the batch sizes Redis
happens to return, a few per cent from run to run.

Counted: the worker's own user-space instructions with batch reserves (the same options and handlers as
``bench/run.py``'s no-op rows, ``--laravel 8``, Redis cache store, stdout to ``/dev/null``). Not counted:
the kernel (system calls), Redis, and what an instruction costs (cache misses, branch mispredictions),
so this is evidence for "less work", never a jobs/s figure. ``--cache-sim`` adds callgrind's simulated
cache and branch misses per job. Needs ``valgrind`` (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

#: variant -> (LARAQ_BENCH_SYNC, --quiet): the no-op rows of bench/run.py that run in one process
VARIANTS = {"default": (False, False), "sync": (True, False), "quiet": (False, True)}
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw", "Bc", "Bcm", "Bi", "Bim")


def child(port: int, jobs: int, quiet: bool) -> int:
    """Inside valgrind: dispatch ``jobs`` no-op jobs, then count the worker draining them."""
    import handlers  # reads LARAQ_BENCH_SYNC at import
    import redis
    from run import ECHO, LARAVEL, PREFIX, echo_props

    from laraq.bus.dispatch import Dispatcher
    from laraq.cli.work import build_worker, default_params
    from laraq.protocol.queue import RedisQueue

    queue = "instructions"
    dispatcher = Dispatcher(RedisQueue(redis.Redis(port=port), prefix=PREFIX, version=LARAVEL))
    dispatcher.bulk([dispatcher.prepare_job(ECHO, echo_props(), queue=queue, connection="redis")
                     for _ in range(jobs)])
    # valgrind's own memory counts in the worker's RSS: a --memory of 128 MB would stop it early (the
    # check still runs per job, as in the timed rows)
    params = default_params(laravel="8", sleep=0, stop_when_empty=True, quiet=quiet, queue=queue,
                            redis_url=f"redis://127.0.0.1:{port}/0", prefix=PREFIX, memory=1 << 20)
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(port), "CACHE_DRIVER": "redis", "REDIS_PREFIX": PREFIX, "APP_KEY": "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="}
    worker = build_worker(params, env=env, app=handlers.app)
    control = shutil.which("callgrind_control") or "callgrind_control"
    subprocess.run([control, "-i", "on", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    status = worker.daemon()
    subprocess.run([control, "-i", "off", str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    left = dispatcher.queue.size(queue)
    if status != 0 or left:
        print(f"the worker stopped with status {status} and {left} job(s) left", file=sys.stderr)
        return status or 1
    return 0


def count(port: int, jobs: int, variant: str, workdir: Path, cache_sim: bool) -> dict[str, int]:
    """One run under callgrind: the events it collected while the worker ran."""
    sync, quiet = VARIANTS[variant]
    env = {**os.environ, "PYTHONHASHSEED": "0", "LARAQ_BENCH_SYNC": "1" if sync else ""}
    env.pop("LARAQ_LOG", None)
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--callgrind-out-file={workdir / f'callgrind.{variant}.{jobs}.out'}"]
    if cache_sim:
        cmd += ["--cache-sim=yes", "--branch-sim=yes"]
    cmd += [sys.executable, __file__, "--child", str(port), str(jobs), "1" if quiet else "0"]
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    found = re.search(r"^==\d+== Collected : ([\d ]+)$", done.stderr, re.M)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{variant} with {jobs} jobs: the worker under valgrind failed "
                         f"(exit {done.returncode}):\n{done.stderr[-2000:]}")
    return dict(zip(EVENTS, map(int, found.group(1).split()), strict=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="default,sync,quiet",
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--jobs", default="1000,3000", help="the two job counts (their difference is counted)")
    parser.add_argument("--cache-sim", action="store_true", help="also simulated cache and branch misses")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        port, jobs, quiet = args.child
        return child(int(port), int(jobs), quiet == "1")

    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind not found (apt-get install valgrind)")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    small, large = sorted(int(n) for n in args.jobs.split(","))
    if small < 1 or large <= small:
        raise SystemExit(f"--jobs needs two different positive counts, got {args.jobs!r}")

    from run import RedisServer

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="laraq-instructions-") as tmp:
        server = RedisServer(Path(tmp))
        try:
            for variant in variants:
                a = count(server.port, small, variant, Path(tmp), args.cache_sim)
                b = count(server.port, large, variant, Path(tmp), args.cache_sim)
                results[variant] = {k: (b[k] - a[k]) / (large - small) for k in a}
                print(f"{variant:8s} " + "  ".join(f"{k} {v:,.0f}" for k, v in results[variant].items())
                      + " per job", flush=True)
        finally:
            server.stop()
    if "default" in results:
        base = results["default"]["Ir"]
        for variant, events in results.items():
            if variant != "default":
                print(f"default / {variant}: {base / events['Ir']:.3f} of the instructions")
    if args.json:
        args.json.write_text(json.dumps({"jobs": [small, large], "per_job": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
