"""Fair share across many queues: does one tenant's burst hold every other tenant's jobs?

    python3 bench/fair_share.py                # 100,000 jobs on tenant-000, then 99 tenants x 100
    python3 bench/fair_share.py --quick        # 20,000 + 99 x 100 (the scale for a shared machine)
    python3 bench/fair_share.py --big 5000 --small 20 --json out.json

One run, phases side by side, each on a fresh ``redis-server`` and the Laravel 8 fixture app's settings,
one worker process each, the same jobs (a ``--job-ms`` sleep each):

1. ``fair-alone``: ``laraq work --queue 'tenant-*' --fair``, the 99 small tenants only (the baseline).
2. ``fair``: the same worker; the big tenant's jobs are dispatched first, then the small tenants'.
3. ``plain``: ``laraq work --queue=tenant-000,...,tenant-099`` (every queue listed, Laravel's priority
   order), the same jobs.
4. ``artisan``: ``php artisan queue:work --queue=tenant-000,...,tenant-099`` on the fixture, the same
   jobs as PHP jobs (``EchoJob`` sleeping ``--job-ms``); ``--artisan-alone`` adds its baseline too.

A small tenant's wait is from the moment its own jobs were dispatched to the moment its job started
(laraq: the handler's first line; artisan: ``handle()``'s, ``LARAQ_LOG_TIME``). Reported per phase:
p50/p99 of the small tenants' waits, jobs not started by the deadline (counted as waiting until then, so a
p99 with some is a lower bound), and throughput (jobs started per second, first start to last). Then the
ratios the goal is read by: ``fair`` p99 / ``fair-alone`` p99 (target at most 2), the same for artisan
against ``fair-alone`` (or its own baseline), and ``fair`` / ``plain`` throughput (target at least 0.9).
Nothing is asserted: the exit code is 1 only when a job ran twice.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT)]

from laraq.app import App  # noqa: E402
from laraq.protocol.payload import build_string_payload  # noqa: E402

HANDLER = "Bench\\FairShare@run"
ECHO = "App\\Jobs\\EchoJob"

# -- the Python side (``laraq work --app fair_share:app``) --------------------------------------------------

app = App()
_log: IO[str] | None = None


@app.handler(HANDLER)
def run(data: Any, job: Any) -> None:
    global _log
    if _log is None:
        _log = open(os.environ["FAIR_SHARE_LOG"], "a")  # noqa: SIM115 (closed at exit)
        atexit.register(_log.close)
    _log.write(f"{time.time():.6f} {job.queue} {data['n']}\n")
    seconds = float(data.get("ms", 0)) / 1000
    if seconds > 0:
        time.sleep(seconds)


# -- the bench ---------------------------------------------------------------------------------------------

def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def tenants(args: argparse.Namespace, with_big: bool) -> list[tuple[str, int]]:
    small = [(f"tenant-{i:03d}", args.small) for i in range(1, args.tenants)]
    return ([("tenant-000", args.big)] if with_big else []) + small


def phase(name: str, args: argparse.Namespace, *, worker: str, with_big: bool, fair: bool = False) -> dict[str, Any]:
    from phpapp import PhpApp
    from run import RedisServer, stop_processes

    from laraq.bus.dispatch import Dispatcher
    from laraq.protocol.queue import RedisQueue

    tmp = Path(tempfile.mkdtemp(prefix=f"laraq-fair-{name}-"))
    server = RedisServer(tmp)
    php = PhpApp(server.port, version="8", extra_env={"LARAQ_LOG_TIME": "1"})
    queue = RedisQueue(server.client, prefix=php.prefix, version=php.release, retry_after=90)
    groups = tenants(args, with_big)
    every = ",".join(f"tenant-{i:03d}" for i in range(args.tenants))
    log = tmp / "laraq.log"
    if worker == "artisan":
        cmd = ["php", str(php.path / "artisan"), "queue:work", "redis", f"--queue={every}", "--sleep=1", "--quiet",
               "--memory=1024"]
        proc = subprocess.Popen(cmd, env=php.env, cwd=php.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        env = dict(php.env, FAIR_SHARE_LOG=str(log))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench"), str(ROOT), env.get("PYTHONPATH", "")])
        spec = ["--queue=tenant-*", "--fair"] if fair else [f"--queue={every}"]
        cmd = [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app", "fair_share:app",
               "--laravel", php.release, *spec, "--sleep=1", "--no-supervise", "--quiet", "--memory=1024",
               "--log-level=warning"]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(tmp / "err.log").open("wb"))
    time.sleep(args.warmup)  # the worker is up and idle before the jobs come
    dispatcher = Dispatcher(queue)
    pushed: dict[str, float] = {}
    for tenant, count in groups:
        if worker == "artisan":
            jobs = [dispatcher.prepare_job(ECHO, {"args": {"n": n, "q": tenant}, "mode": "sleep",
                                                  "seconds": args.job_ms / 1000}, queue=tenant, connection="redis")
                    for n in range(count)]
            for first in range(0, len(jobs), 5000):
                dispatcher.bulk(jobs[first:first + 5000])
        else:
            pipe = server.client.pipeline(transaction=False)
            keys = queue.keys(tenant)
            for n in range(count):
                pipe.rpush(keys.list, build_string_payload(php.release, HANDLER, {"n": n, "ms": args.job_ms}))
                pipe.rpush(keys.notify, 1)
                if n % 5000 == 4999:
                    pipe.execute()
            pipe.execute()
        pushed[tenant] = time.time()
    expected = sum(count for _, count in groups)
    deadline = time.monotonic() + args.deadline

    def waiting() -> int:
        pipe = server.client.pipeline(transaction=False)
        for tenant, _ in groups:
            keys = queue.keys(tenant)
            pipe.llen(keys.list)
            pipe.zcard(keys.reserved)
        return sum(int(x) for x in pipe.execute())

    while time.monotonic() < deadline and waiting():
        time.sleep(0.25)
    ended = time.time()
    stop_processes([proc], grace=30)
    if worker == "artisan":
        starts = [(float(r["t"]), r["queue"], int(r["args"]["n"])) for r in php.runs() if "t" in r]
    else:
        lines = log.read_text().split("\n")[:-1] if log.exists() else []
        starts = [(float(t), q, int(n)) for t, q, n in (line.split() for line in lines)]
    server.stop()
    small_sizes = {t: c for t, c in groups if t != "tenant-000"}
    waits = [t - pushed[q] for t, q, _ in starts if q in small_sizes]
    started_small = len(waits)
    waits += [ended - pushed[q] for q, c in small_sizes.items() for _ in range(c)][: max(0, sum(small_sizes.values())
                                                                                          - started_small)]
    times = sorted(t for t, _, _ in starts)
    seen = [(q, n) for _, q, n in starts]
    return {
        "phase": name, "worker": "artisan" if worker == "artisan" else f"laraq{' --fair' if fair else ''}",
        "jobs": expected, "started": len(starts), "not_started": expected - len(set(seen)),
        "run_twice": len(seen) - len(set(seen)),
        "small_wait_s": {"p50": quantile(waits, 0.5), "p99": quantile(waits, 0.99), "max": quantile(waits, 1.0)},
        "small_not_started": sum(small_sizes.values()) - started_small,
        "throughput_jobs_s": round((len(times) - 1) / (times[-1] - times[0]), 1) if len(times) > 1 else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--big", type=int, default=100_000, help="jobs of the big tenant (dispatched first)")
    p.add_argument("--small", type=int, default=100, help="jobs of each small tenant")
    p.add_argument("--tenants", type=int, default=100, help="queues in all (the big one and the small ones)")
    p.add_argument("--job-ms", type=float, default=1.0, help="each job's sleep (milliseconds)")
    p.add_argument("--quick", action="store_true", help="20,000 jobs on the big tenant")
    p.add_argument("--deadline", type=float, default=600, help="seconds to wait for every job per phase")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--skip-artisan", action="store_true")
    p.add_argument("--artisan-alone", action="store_true", help="also artisan's baseline (small tenants only)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.big = min(args.big, 20_000)
    phases = [phase("fair-alone", args, worker="laraq", with_big=False, fair=True),
              phase("fair", args, worker="laraq", with_big=True, fair=True),
              phase("plain", args, worker="laraq", with_big=True)]
    if not args.skip_artisan:
        if args.artisan_alone:
            phases.append(phase("artisan-alone", args, worker="artisan", with_big=False))
        phases.append(phase("artisan", args, worker="artisan", with_big=True))
    by = {ph["phase"]: ph for ph in phases}
    base = by["fair-alone"]["small_wait_s"]["p99"]

    def ratio(a: Any, b: Any) -> float | None:
        return round(a / b, 2) if a and b else None

    result: dict[str, Any] = {
        "scale": {"big": args.big, "small_tenants": args.tenants - 1, "small_each": args.small, "job_ms": args.job_ms},
        "phases": phases,
        "fair_p99_vs_alone": ratio(by["fair"]["small_wait_s"]["p99"], base),
        "plain_p99_vs_alone": ratio(by["plain"]["small_wait_s"]["p99"], base),
        "fair_throughput_vs_plain": ratio(by["fair"]["throughput_jobs_s"], by["plain"]["throughput_jobs_s"]),
    }
    if "artisan" in by:
        artisan_base = by["artisan-alone"]["small_wait_s"]["p99"] if "artisan-alone" in by else base
        result["artisan_p99_vs_alone"] = ratio(by["artisan"]["small_wait_s"]["p99"], artisan_base)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 1 if any(ph["run_twice"] for ph in phases) else 0


if __name__ == "__main__":
    sys.exit(main())
