#!/usr/bin/env python3
"""laraq beside other Redis job queues: one worker process each, the same Redis, the same run.

    bash bench/peers/setup.sh                 # once: the peers, in ~/.cache/laraq-bench-peers
    python3 bench/peers/run.py                # 20,000 no-op jobs and 4,000 I/O jobs per row, 3 rounds
    python3 bench/peers/run.py --quick        # CI smoke: small counts, one round, exit 1 if a job is missing
    python3 bench/peers/run.py --only laraq,sidekiq --workloads noop --json out.json

For each row: FLUSHALL, enqueue with the system's own client (not timed), start one worker process,
poll the system's own keys every 2 ms, and measure between 10 % and 90 % of the jobs done: jobs/s, the
worker's CPU (its whole process tree from /proc: threads and forked children included) and Redis' CPU
(``INFO cpu`` user + sys) per job. At the end the system's own counters must show every job completed.
See bench/peers/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# bench/ first: its run.py (the laraq/artisan bench's helpers) and scale.py, not this file
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent.parent)]

from run import free_port, tree_cpu_s  # noqa: E402
from scale import Sides, loadavg, redis_cpu  # noqa: E402
from systems import DRIVERS, IO_SKIPPED, SYSTEMS, Ctx, Variant, io_variants, noop_variants, peers_dir  # noqa: E402

POLL_S = 0.002


def polling_cost(client: Any, seconds: float = 2.0) -> float:
    """Redis CPU seconds per second that the bench's own polling (and Redis' idle cron) costs: the poll
    loop's pipelined reads on empty keys, alone. Each row's Redis µs/job has this taken out."""
    start, t0 = redis_cpu(client), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pipe = client.pipeline(transaction=False)
        for key in ("peers:idle:a", "peers:idle:b", "peers:idle:c"):
            pipe.llen(key)
        pipe.execute()
        time.sleep(POLL_S)
    return (redis_cpu(client) - start) / (time.perf_counter() - t0)


def exited(pid: int) -> bool:
    """The worker is a zombie (exited, not yet reaped): read without reaping, so wait4 keeps its rusage."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def run_one(ctx: Ctx, v: Variant, n: int, logdir: Path, tag: str) -> dict[str, Any]:
    """One row once: enqueue ``n``, one worker drains them, the window's rates and the completion check."""
    system = SYSTEMS[v.system]
    ctx.client.flushall()
    t = time.perf_counter()
    system.enqueue(ctx, v, n)
    enqueue_s = time.perf_counter() - t
    queued = system.remaining(ctx)
    cmd, env, cwd = system.worker(ctx, v)
    log = logdir / f"{tag}.log"
    load_before = loadavg()
    redis_start = redis_cpu(ctx.client)
    lo_mark, hi_mark = n - math.ceil(0.1 * n), n - math.ceil(0.9 * n)  # remaining at 10 % and 90 % done
    marks: dict[str, tuple[float, int, float, float]] = {}
    with log.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = started + 120 + n / 50
    checked = started
    left = queued
    while True:
        left = system.remaining(ctx)
        now = time.perf_counter()
        if "lo" not in marks and left <= lo_mark:
            marks["lo"] = (now, left, tree_cpu_s(proc.pid, reaped=True), redis_cpu(ctx.client))
        if "hi" not in marks and left <= hi_mark:
            marks["hi"] = (now, left, tree_cpu_s(proc.pid, reaped=True), redis_cpu(ctx.client))
        if left == 0 or now > deadline:
            break
        if now - checked > 0.1:
            checked = now
            if exited(proc.pid):
                break
        time.sleep(POLL_S)
    drained = time.perf_counter() - started
    check, usage = system.finish(ctx, v, n, proc, log)
    wall = time.perf_counter() - started
    redis_end = redis_cpu(ctx.client)
    row: dict[str, Any] = {
        "system": v.system, "mode": v.mode, "kind": v.kind, "concurrency": v.concurrency, "jobs": n,
        "queued": queued, "enqueue_s": round(enqueue_s, 3), "drain_s": round(drained, 3),
        "wall_s": round(wall, 3), "exit": proc.returncode, "cmd": cmd,
        "completed": check.completed, "failed": check.failed, "left": check.left, "check": check.how,
        "complete": check.ok(n) and queued == n, "load_before": load_before, "load_after": loadavg(),
        "log": str(log),
    }
    if usage is not None:
        row["worker_us_per_job_run"] = round((usage.ru_utime + usage.ru_stime) / n * 1e6, 1)
    row["redis_us_per_job_run"] = round((redis_end - redis_start - ctx.poll_cost * wall) / n * 1e6, 1)
    if "lo" in marks and "hi" in marks and marks["hi"][0] > marks["lo"][0]:
        (t0, l0, c0, r0), (t1, l1, c1, r1) = marks["lo"], marks["hi"]
        done = l0 - l1
        row.update({"window_jobs": done, "window_s": round(t1 - t0, 4), "jobs_per_s": round(done / (t1 - t0), 1),
                    "worker_us_per_job": round((c1 - c0) / done * 1e6, 1),
                    "redis_us_per_job": round((r1 - r0 - ctx.poll_cost * (t1 - t0)) / done * 1e6, 1),
                    "redis_us_per_job_raw": round((r1 - r0) / done * 1e6, 1)})
    if not row["complete"]:
        row["log_tail"] = log.read_text(errors="replace")[-1500:]
    return row


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict[str, Any]], variants: list[Variant]) -> list[dict[str, Any]]:
    out = []
    for v in variants:
        rows = [r for r in runs if f"{r['system']}|{r['mode']}|{r['kind']}" == v.key]
        if not rows:
            continue
        out.append({"system": v.system, "mode": v.mode, "kind": v.kind, "concurrency": v.concurrency,
                    "jobs": rows[0]["jobs"], "runs": len(rows), "complete": all(r["complete"] for r in rows),
                    **{k: median(rows, k) for k in ("jobs_per_s", "worker_us_per_job", "redis_us_per_job",
                                                    "worker_us_per_job_run", "redis_us_per_job_run")}})
    return out


def _n(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def render(summary: list[dict[str, Any]], skipped: dict[str, str], refs: list[dict[str, Any]]) -> str:
    lines = []
    noop = [s for s in summary if s["kind"] == "noop"]
    if noop:
        base = next((s["jobs_per_s"] for s in noop if s["system"] == "laraq" and s["mode"].startswith("work")), None)
        lines += ["no-op jobs, one worker process (medians; µs = CPU µs per job, 10-90 % window)",
                  f"{'system':9s} {'mode':22s} {'jobs':>6s} {'jobs/s':>8s} {'worker µs':>9s} {'Redis µs':>8s} "
                  f"{'×laraq':>6s} {'ok':>3s}"]
        for s in noop:
            ratio = s["jobs_per_s"] / base if base and s["jobs_per_s"] else None
            lines.append(f"{s['system']:9s} {s['mode'][:22]:22s} {s['jobs']:>6,d} {_n(s['jobs_per_s']):>8s} "
                         f"{_n(s['worker_us_per_job'], '{:,.1f}'):>9s} {_n(s['redis_us_per_job'], '{:,.1f}'):>8s} "
                         f"{_n(ratio, '{:.2f}'):>6s} {'yes' if s['complete'] else 'NO':>3s}")
    io = [s for s in summary if s["kind"] != "noop"]
    for c in sorted({s["concurrency"] for s in io}):
        rows = [s for s in io if s["concurrency"] == c]
        bare = {f: median([r for r in refs if r["concurrency"] == c and r["flavor"] == f], "per_s")
                for f in ("async", "uvloop", "sync")}
        lines += ["", f"I/O-bound jobs (5 ms request each), concurrency {c}: ideal {c / 0.005:,.0f} jobs/s",
                  f"  bare client, no queue: asyncio {_n(bare['async'])}/s, uvloop {_n(bare['uvloop'])}/s, "
                  f"threads {_n(bare['sync'])}/s",
                  f"{'system':9s} {'mode':25s} {'jobs/s':>7s} {'ideal':>6s} {'worker µs':>9s} {'Redis µs':>8s} "
                  f"{'×laraq':>6s} {'ok':>3s}"]
        for s in rows:
            base = next((b["jobs_per_s"] for b in rows if b["system"] == "laraq" and b["kind"] == s["kind"]), None)
            ratio = s["jobs_per_s"] / base if base and s["jobs_per_s"] else None
            ideal = s["jobs_per_s"] / (c / 0.005) if s["jobs_per_s"] else None
            lines.append(f"{s['system']:9s} {s['mode'][:25]:25s} {_n(s['jobs_per_s']):>7s} {_n(ideal, '{:.0%}'):>6s} "
                         f"{_n(s['worker_us_per_job'], '{:,.1f}'):>9s} {_n(s['redis_us_per_job'], '{:,.1f}'):>8s} "
                         f"{_n(ratio, '{:.2f}'):>6s} {'yes' if s['complete'] else 'NO':>3s}")
    if skipped:
        lines += ["", "skipped:"] + [f"  {k}: {why}"[:80] for k, why in skipped.items()]
    return "\n".join(lines)


def versions() -> dict[str, str]:
    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"

    found = {name: s.version() for name, s in SYSTEMS.items() if s.missing() is None}
    found.update({"python": platform.python_version(), "redis-server": out("redis-server", "--version"),
                  "node": out("node", "--version"), "ruby": out("ruby", "--version"),
                  "php": out("php", "-r", "echo PHP_VERSION;"), "kernel": platform.release(),
                  "nproc": str(os.cpu_count())})
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20000, help="no-op jobs per row (default 20,000)")
    p.add_argument("--io-jobs", type=int, default=4000, help="I/O jobs per row (default 4,000)")
    p.add_argument("--io-concurrency", default="10,100", help="I/O rows' concurrencies (default 10,100)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each runs every row once (default 3)")
    p.add_argument("--workloads", default="noop,io", help="noop, io or both (default)")
    p.add_argument("--only", default="", help="systems to run, comma-separated (default: all installed)")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: 2,000 no-op and 300 I/O jobs, one round, each system's throughput settings only "
                        "(laraq: both), I/O at concurrency 10")
    p.add_argument("--json", type=Path, help="write every run, the medians, versions and load here")
    p.add_argument("--keep", type=Path, help="keep the workers' logs in this directory")
    args = p.parse_args(argv)
    if args.quick:
        args.jobs, args.io_jobs, args.rounds, args.io_concurrency = 2000, 300, 1, "10"
    workloads = set(args.workloads.split(","))
    only = {s for s in args.only.split(",") if s}
    unknown = only - set(SYSTEMS)
    if unknown:
        p.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    variants: list[Variant] = []
    if "noop" in workloads:
        variants += noop_variants()
    if "io" in workloads:
        for c in (int(x) for x in args.io_concurrency.split(",") if x):
            variants += io_variants(c)
    skipped: dict[str, str] = {}
    for name, system in SYSTEMS.items():
        if only and name not in only:
            continue
        why = system.missing()
        if why is not None:
            skipped[name] = why
    if "io" in workloads:
        skipped.update({f"{k} (I/O)": why for k, why in IO_SKIPPED.items() if (not only or k in only)
                        and k not in skipped})
    variants = [v for v in variants if (not only or v.system in only) and v.system not in skipped
                and (v.quick or not args.quick)]
    for name, why in skipped.items():
        print(f"[peers] skipped {name}: {why}", flush=True)
    print(f"[peers] peers dir {peers_dir()}; {len(variants)} rows, {args.rounds} round(s), "
          f"{args.jobs:,} no-op / {args.io_jobs:,} I/O jobs; load {loadavg()}", flush=True)
    load_before = Path("/proc/loadavg").read_text().strip()
    runs: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    io_levels = sorted({v.concurrency for v in variants if v.kind != "noop"})
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        logdir = args.keep or work / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        sides = Sides(work, php="artisan" not in skipped and any(v.system == "artisan" for v in variants))
        io_port = 0
        server = None
        try:
            if any(v.kind != "noop" for v in variants):
                io_port = free_port()
                server = subprocess.Popen([sys.executable, str(DRIVERS / "iosrv.py"), str(io_port)],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                assert server.stdout is not None
                server.stdout.readline()
            ctx = Ctx(sides=sides, client=sides.client, url=sides.server.url, io_port=io_port, workdir=work)
            ctx.client.config_set("save", "")
            ctx.poll_cost = polling_cost(ctx.client)
            print(f"[peers] the bench's polling alone: {ctx.poll_cost * 1e3:.1f} ms of Redis CPU per second "
                  "(taken out of every Redis µs/job)", flush=True)
            for r in range(args.rounds):
                for c in io_levels:  # the same requests without a queue: this machine's ceiling
                    for flavor in ("async", "uvloop", "sync"):
                        out = subprocess.run([sys.executable, str(DRIVERS / "ioref.py"), flavor, str(c),
                                              str(args.io_jobs)], env={**os.environ, "PEERS_IO_PORT": str(io_port)},
                                             capture_output=True, text=True, timeout=300)
                        if out.returncode == 0:
                            refs.append({**json.loads(out.stdout), "round": r})
                order = variants if r % 2 == 0 else list(reversed(variants))
                for i, v in enumerate(order):
                    n = max(10, int((args.jobs if v.kind == "noop" else args.io_jobs) * v.jobs_factor))
                    tag = f"r{r}-{i:02d}-{v.system}-{v.kind}-{v.concurrency}"
                    try:
                        row = run_one(ctx, v, n, logdir, tag)
                    except Exception as exc:  # noqa: BLE001 - a peer's failure is a row, the run goes on
                        row = {"system": v.system, "mode": v.mode, "kind": v.kind, "concurrency": v.concurrency,
                               "jobs": n, "complete": False, "error": f"{type(exc).__name__}: {exc}"[-1500:]}
                    row["round"] = r
                    runs.append(row)
                    print(f"[peers] r{r} {v.system:8s} {v.mode:26s} {v.kind:8s} "
                          f"{_n(row.get('jobs_per_s')):>7s} jobs/s  worker {_n(row.get('worker_us_per_job'), '{:.1f}')}"
                          f" µs  Redis {_n(row.get('redis_us_per_job'), '{:.1f}')} µs  "
                          f"{'ok' if row['complete'] else 'INCOMPLETE'} {row.get('completed')}/{n}  "
                          f"load {loadavg()}", flush=True)
                    if not row["complete"]:
                        print(f"[peers]   {row.get('error') or row.get('check')}: left {row.get('left')}, failed "
                              f"{row.get('failed')}\n{row.get('log_tail', '')[-600:]}", flush=True)
        finally:
            if server is not None:
                server.terminate()
                server.wait(5)
            sides.stop()
    summary = summarize(runs, variants)
    load_after = Path("/proc/loadavg").read_text().strip()
    print()
    print(render(summary, skipped, refs))
    print(f"\nloadavg before: {load_before}\nloadavg after:  {load_after}\n"
          f"took {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "versions": versions(), "loadavg_before": load_before, "loadavg_after": load_after,
            "polling_redis_cpu_ms_per_s": round(ctx.poll_cost * 1e3, 2), "skipped": skipped, "summary": summary,
            "io_reference": refs, "runs": runs}, indent=1))
    incomplete = [f"{r['system']} {r['mode']} ({r['kind']})" for r in runs if not r["complete"]]
    if incomplete:
        print("INCOMPLETE: " + "; ".join(incomplete), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
