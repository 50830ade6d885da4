"""A queue shared by ``php artisan queue:work`` and ``laraq work``: do PHP-only jobs wait
longer because laraq works the same queue?

    python3 bench/shared_queue.py                 # 2000 PHP-only + 2000 Python jobs, Laravel 8
    python3 bench/shared_queue.py --quick         # 200 + 200 (CI smoke)
    python3 bench/shared_queue.py --laravel 13 --compare-requeue --json out.json

One run, three phases on a fresh ``redis-server`` each, the same jobs each time:

1. **alone**: 2 artisan workers on ``default``; the PHP-only jobs (``EchoJob``, mode ``ok``) are pushed
   at once.
2. **shared**: 2 artisan + 2 laraq workers (default flags: ``--unhandled leave``) on ``default``
   (laraq also works ``python``); the same PHP-only jobs interleaved one for one with Python jobs
   (``HandedToPythonJob``, whose PHP side is ``examples/php/RunsInPython.php``) are pushed at once.
3. with ``--compare-requeue``: as 2, laraq with ``--unhandled requeue`` (what laraq did before).

A PHP-only job's latency is from the push to the moment its ``handle()`` began (``LARAQ_LOG_TIME``).
Reported per phase: p50/p99/max latency of the PHP-only jobs, the p99 ratio shared/alone (target at
most 2), jobs left behind (not run once by the deadline, or run twice), Python jobs run by Python,
and bounces: PHP-only jobs laraq took and put back (its ``unhandled`` lines). Nothing is asserted
here: the exit code is 1 only when a job was lost or run twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT)]

from phpapp import RELEASES, PhpApp  # noqa: E402
from run import RedisServer, stop_processes  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.protocol.queue import RedisQueue  # noqa: E402

ECHO = "App\\Jobs\\EchoJob"
HANDED = "App\\Jobs\\HandedToPythonJob"


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def phase(name: str, args: argparse.Namespace, *, laraq: int, python_jobs: bool,
          unhandled: str = "leave") -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"laraq-shared-{name}-"))
    server = RedisServer(tmp)
    app = PhpApp(server.port, version=args.laravel, extra_env={"LARAQ_LOG_TIME": "1"})
    queue = RedisQueue(server.client, prefix=app.prefix, version=app.release, retry_after=90)
    dispatcher = Dispatcher(queue)
    jobs = []
    for n in range(args.jobs):
        jobs.append(dispatcher.prepare_job(ECHO, {"args": {"n": n}, "mode": "ok", "seconds": 0},
                                           queue="default", connection="redis"))
        if python_jobs:
            jobs.append(dispatcher.prepare_job(HANDED, {"n": n}, queue="default", connection="redis"))
    env_py = dict(app.env)
    env_py["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env_py.get("PYTHONPATH", "")])
    fleet: list[subprocess.Popen[bytes]] = []
    laraq_logs = [tmp / f"laraq{i}.log" for i in range(laraq)]
    for _ in range(2):
        fleet.append(subprocess.Popen(["php", str(app.path / "artisan"), "queue:work", "redis", "--queue=default",
                                       "--sleep=0", "--quiet"], env=app.env, cwd=app.path,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for path in laraq_logs:
        fleet.append(subprocess.Popen([sys.executable, "-c", "from laraq.cli import main; main()", "work",
                                       "--app", "test_worker_shared:app", "--laravel", app.release,
                                       "--queue=default,python", "--sleep=0", "--no-supervise",
                                       f"--unhandled={unhandled}",
                                       # taking unhandled jobs, a worker must hand continuations elsewhere
                                       *([] if unhandled == "leave" else ["--php-queue=php"])],
                                      env=env_py, cwd=ROOT,
                                      stdout=path.open("wb"), stderr=subprocess.STDOUT))
    time.sleep(args.warmup)  # every worker is up and idle before the jobs come
    pushed_at = time.time()
    dispatcher.bulk(jobs)
    expected = len(jobs)
    deadline = time.monotonic() + args.deadline
    while time.monotonic() < deadline and len(app.runs()) < expected:
        time.sleep(0.2)
    finished_at = time.time()
    stop_processes(fleet, grace=30)
    runs = app.runs()
    left = sum(server.client.llen(app.prefix + f"queues:{q}") + server.client.zcard(app.prefix + f"queues:{q}:delayed")
               + server.client.zcard(app.prefix + f"queues:{q}:reserved") for q in ("default", "python"))
    server.stop()
    echo = [r for r in runs if r["class"].endswith("EchoJob")]
    latency = [float(r["t"]) - pushed_at for r in echo if "t" in r]
    bounces = 0
    for path in laraq_logs:
        text = path.read_text(errors="replace")
        bounces += sum(1 for line in text.splitlines() if "requeued untouched" in line or "released for" in line)
    uuids = [r["uuid"] for r in runs]
    return {
        "phase": name, "php_only_jobs": args.jobs, "python_jobs": args.jobs if python_jobs else 0,
        "laraq_workers": laraq, "unhandled": unhandled if laraq else None,
        "php_only_run": len(echo), "php_only_latency_s": {"p50": quantile(latency, 0.5), "p99": quantile(latency, 0.99),
                                                          "max": quantile(latency, 1.0)},
        "python_run_by_python": sum(1 for r in runs if r["class"].endswith("HandedToPythonJob")
                                    and r["runner"] == "python"),
        "run_twice": len(uuids) - len(set(uuids)), "left_in_redis": left,
        "not_run": expected - len(set(uuids)), "bounces": bounces,
        "seconds": round(finished_at - pushed_at, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--laravel", default="8", choices=sorted(RELEASES))
    p.add_argument("--jobs", type=int, default=2000, help="PHP-only jobs (and as many Python jobs)")
    p.add_argument("--quick", action="store_true", help="200 + 200 jobs, a short deadline")
    p.add_argument("--deadline", type=float, default=300, help="seconds to wait for every job per phase")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds for the workers to start")
    p.add_argument("--compare-requeue", action="store_true", help="also run laraq with --unhandled requeue")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.deadline = min(args.jobs, 200), min(args.deadline, 120)
    phases = [phase("alone", args, laraq=0, python_jobs=False), phase("shared", args, laraq=2, python_jobs=True)]
    if args.compare_requeue:
        phases.append(phase("shared-requeue", args, laraq=2, python_jobs=True, unhandled="requeue"))
    alone = phases[0]["php_only_latency_s"]["p99"]
    result: dict[str, Any] = {"laravel": RELEASES[args.laravel], "phases": phases}
    for ph in phases[1:]:
        p99 = ph["php_only_latency_s"]["p99"]
        result[f"p99_ratio_{ph['phase']}_vs_alone"] = round(p99 / alone, 2) if p99 and alone else None
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    bad = any(ph["run_twice"] or ph["not_run"] for ph in phases if ph["unhandled"] != "requeue")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
