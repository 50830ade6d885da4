"""A cross-server ``laraq move`` while the source keeps receiving jobs: how long, how many jobs a second.

    python3 bench/move_under_traffic.py                  # 12,000 jobs, traffic 300 jobs/s, 3 rounds each way
    python3 bench/move_under_traffic.py --quick          # 5,000 jobs, 1 round
    python3 bench/move_under_traffic.py --php            # the traffic dispatched by PHP (artisan tinker-like tool)

Each round starts two fresh ``redis-server`` (source and destination, no persistence), fills the source's
``fleet`` queue with Laravel 8 payloads (``EchoJob``; 10 % delayed), and runs ``laraq move fleet --to-url
<dest> --to-prefix laravel-database- --to-laravel 13 --json`` as an operator would (the CLI, a process).
Two kinds of round, interleaved:

* **quiet**: nothing else touches the source;
* **traffic**: while the move runs, the source receives ``--rate`` new jobs a second (laraq's
  ``Dispatcher``, or with ``--php`` the fixture app's PHP ``dispatch`` tool in batches), which the
  move takes too (it repeats its pass until a pass finds nothing).

Reported per round: the jobs the move wrote, its wall time (process start to exit, Python start-up
included), jobs a second, and the jobs dispatched during it; then the best and median per kind, and the
load average before and after (the machine may be shared). Nothing is asserted; the exit code is 1 only
when a job is missing or twice at the destination.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT)]

from phpapp import PhpApp  # noqa: E402
from run import RedisServer  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.protocol.queue import RedisQueue  # noqa: E402

QUEUE = "fleet"
ECHO = "App\\Jobs\\EchoJob"
LARAQ = [sys.executable, "-c", "from laraq.cli import main; main()"]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def one_round(args: argparse.Namespace, traffic: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="laraq-move-bench-"))
    (tmp / "src").mkdir()
    (tmp / "dst").mkdir()
    source, dest = RedisServer(tmp / "src"), RedisServer(tmp / "dst")
    try:
        app = PhpApp(source.port, version="8", workdir=tmp / "app")
        queue = RedisQueue(source.client, prefix=app.prefix, version=app.release)
        d = Dispatcher(queue)
        delayed = args.jobs // 10
        for start in range(0, args.jobs, 2000):
            batch = range(start, min(start + 2000, args.jobs))
            d.bulk([d.prepare_job(ECHO, {"args": [i]}, queue=QUEUE, delay=3600 if i < delayed else None)
                    for i in batch])
        env = {**app.env, "PYTHONPATH": str(ROOT)}
        stop = threading.Event()
        sent = [0]

        def dispatch() -> None:
            while not stop.is_set():
                tick = time.monotonic()
                if args.php:
                    app.tool("dispatch", "echo", f"--queue={QUEUE}", f"--count={max(1, args.rate // 5)}")
                    sent[0] += max(1, args.rate // 5)
                    time.sleep(max(0.0, 0.2 - (time.monotonic() - tick)))
                else:
                    d.bulk([d.prepare_job(ECHO, {"args": ["live", sent[0] + i]}, queue=QUEUE)
                            for i in range(max(1, args.rate // 20))])
                    sent[0] += max(1, args.rate // 20)
                    time.sleep(max(0.0, 0.05 - (time.monotonic() - tick)))

        thread = threading.Thread(target=dispatch, daemon=True)
        if traffic:
            thread.start()
        began = time.monotonic()
        proc = subprocess.run([*LARAQ, "move", QUEUE, "--laravel", app.release, "--to-url", dest.url,
                               "--to-prefix", "laravel-database-", "--to-laravel", "13", "--json"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        took = time.monotonic() - began
        stop.set()
        if traffic:
            thread.join()
        if proc.returncode != 0:
            raise SystemExit(f"move failed: {proc.stderr}")
        report = json.loads(proc.stdout)
        moved = sum(report["transferred"].values())
        # every job once: what the move wrote is at the destination, each id once
        ids = [json.loads(m)["uuid"] for m in dest.client.lrange(f"laravel-database-queues:{QUEUE}", 0, -1)]
        ids += [json.loads(m)["uuid"] for m in dest.client.zrange(f"laravel-database-queues:{QUEUE}:delayed", 0, -1)]
        ok = len(ids) == len(set(ids)) == moved
        return {"kind": "traffic" if traffic else "quiet", "moved": moved, "seconds": round(took, 2),
                "jobs_per_second": round(moved / took), "dispatched_during": sent[0], "exact": ok}
    finally:
        source.stop()
        dest.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=12_000)
    parser.add_argument("--rate", type=int, default=300, help="jobs a second dispatched during a traffic round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5,000 jobs, one round of each kind")
    parser.add_argument("--php", action="store_true", help="the traffic is dispatched by PHP")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 5_000, 1
    print(f"[move] {args.jobs:,} jobs, traffic {args.rate}/s ({'PHP' if args.php else 'laraq'}), "
          f"{args.rounds} round(s) each, load {loadavg()}", flush=True)
    results = []
    for _ in range(args.rounds):
        for traffic in (False, True):
            result = one_round(args, traffic)
            results.append(result)
            print(f"[move] {result}", flush=True)
    summary = {}
    for kind in ("quiet", "traffic"):
        rounds = [r for r in results if r["kind"] == kind]
        rates = [r["jobs_per_second"] for r in rounds]
        summary[kind] = {"best_jobs_per_second": max(rates), "median_jobs_per_second": statistics.median(rates),
                         "best_seconds": min(r["seconds"] for r in rounds),
                         "median_moved": statistics.median(r["moved"] for r in rounds)}
    print(f"[move] {json.dumps(summary)}; load {loadavg()}", flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rounds": results, "summary": summary}, indent=2))
    return 0 if all(r["exact"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
