"""Re-runs per SIGKILL: a mixed fleet of ``laraq work`` and ``php artisan queue:work`` on one queue.

    python3 bench/kill_fleet.py                      # 2 + 2 workers, 6000 jobs of 5 ms, 6 kills each
    python3 bench/kill_fleet.py --laravel 13 --jobs 20000 --kills 6

Both kinds run the fixture's ``EchoJob`` (mode ``sleep``) and write one line per run to the shared
log (``runner``: ``php`` or ``python``). Every second or so one worker is SIGKILLed (laraq and
artisan in turn) and started again at once. When every job has run and the queue is empty, a job
that ran more than once is charged to the runner of its *first* run (the one killed before its
acknowledgement); the report is re-runs per kill for each kind. A worker's at-least-once window is
the job it was running plus, for laraq, the finished jobs whose ``ZREM`` was still deferred (at most
about 50 ms of work: ``laraq.protocol.acks.ACK_MAX_AGE``). Nothing else is compared: the numbers
depend on the job length and the kill times.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT)]

from phpapp import RELEASES, PhpApp  # noqa: E402
from run import RedisServer, stop_processes  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--laravel", default="8", choices=["8", "12", "13"])
    p.add_argument("--jobs", type=int, default=6000)
    p.add_argument("--seconds", type=float, default=0.005, help="each job's length (usleep / time.sleep)")
    p.add_argument("--kills", type=int, default=6, help="SIGKILLs per kind of worker")
    p.add_argument("--workers", type=int, default=2, help="workers per kind")
    p.add_argument("--kill-only", choices=["php", "python"], help="SIGKILL only workers of this kind")
    p.add_argument("--tries", type=int, default=0, help="--tries of both kinds (1: a job whose attempt a kill "
                   "spent is failed; the report counts those failed without ever running)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="laraq-killfleet-"))
    server = RedisServer(tmp)
    app = PhpApp(server.port, version=args.laravel, retry_after=2)
    env_py = dict(app.env)
    env_py["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env_py.get("PYTHONPATH", "")])
    queue = "fleet"
    app.tool("dispatch", "echo", f"--queue={queue}", f"--count={args.jobs}",
             "--args=" + json.dumps({"mode": "sleep", "seconds": args.seconds}), timeout=900)
    key = app.prefix + "queues:" + queue
    client = server.client

    def start(kind: str) -> subprocess.Popen[bytes]:
        if kind == "php":
            return subprocess.Popen(["php", str(app.path / "artisan"), "queue:work", "redis", f"--queue={queue}",
                                     "--sleep=0", f"--tries={args.tries}", "--quiet"], env=app.env, cwd=app.path,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return subprocess.Popen([sys.executable, "-c", "from laraq.cli import main; main()", "work",
                                 "--app", "test_worker_support:app",
                                 "--laravel", RELEASES[args.laravel], f"--queue={queue}", "--sleep=0",
                                 f"--tries={args.tries}",
                                 "--quiet", "--no-supervise", "--retry-after=2"], env=env_py, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    fleet = {(kind, i): start(kind) for kind in ("php", "python") for i in range(args.workers)}
    kills: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    try:
        turn = 0
        kinds = (args.kill_only,) if args.kill_only else ("python", "php")
        while any(kills[k] < args.kills for k in kinds):
            time.sleep(1.0)
            kind = ("python", "php")[turn % 2]
            turn += 1
            if kills[kind] >= args.kills or kind not in kinds:
                continue
            slot = (kind, turn // 2 % args.workers)
            fleet[slot].send_signal(signal.SIGKILL)
            fleet[slot].wait()
            kills[kind] += 1
            fleet[slot] = start(kind)
            if client.llen(key) == 0:
                print("queue ran dry before all kills were made: use more --jobs", file=sys.stderr)
                break
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            left = client.llen(key) + client.zcard(key + ":reserved") + client.zcard(key + ":delayed")
            if left == 0:
                break
            time.sleep(0.5)
    finally:
        stop_processes(fleet.values(), grace=30)
        server.stop()
    runs = app.runs()
    failed_uuids = [json.loads(row[0])["uuid"] for row in sqlite3.connect(app.db_path).execute(
        "select payload from failed_jobs")]
    never_ran = len({u for u in failed_uuids if u not in {r["uuid"] for r in runs}})
    first: dict[str, str] = {}
    count: collections.Counter[str] = collections.Counter()
    for r in runs:
        first.setdefault(r["uuid"], r["runner"])
        count[r["uuid"]] += 1
    again = collections.Counter(first[u] for u, n in count.items() if n > 1 for _ in range(n - 1))
    result = {
        "laravel": RELEASES[args.laravel], "jobs": args.jobs, "job_seconds": args.seconds,
        "workers_per_kind": args.workers, "seconds": round(time.monotonic() - started, 1),
        "distinct_jobs_run": len(count), "lost": args.jobs - len(count) - never_ran,
        "kills": dict(kills), "reruns": {k: again.get(k, 0) for k in ("php", "python")},
        "reruns_per_kill": {k: round(again.get(k, 0) / kills[k], 2) if kills[k] else None for k in ("php", "python")},
        "runs_by_runner": dict(collections.Counter(r["runner"] for r in runs)),
        "tries": args.tries, "failed": len(failed_uuids),
        "failed_without_running": never_ran,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
