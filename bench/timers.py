"""Timers at scale: delayed jobs that fire when they are due, and a Redis no laraq command blocks.

Two shapes, each run by ``laraq work`` and by ``php artisan queue:work`` (2 workers each, ``--sleep=1``
unless told otherwise), one side after the other, on the bench's own Redis:

* **spread**: ``--jobs`` delayed ``EchoJob``s written straight into ``:delayed``, due
  evenly over ``--over`` seconds (full: 1,000,000 over 600 s; quick: 20,000 over 30 s);
* **burst** (``--burst``, item 2; also ``bench/burst.py``): all of them due in the same second (full:
  100,000; quick: 20,000).

Every job's ``handle()`` appends a line with the wall-clock time it began (``$LARAQ_LOG`` with
``LARAQ_LOG_TIME``, the fixture's ``RecordsRuns`` and ``bench/handlers.py`` alike). **Lateness** is that
time minus the job's due second (its score: Laravel moves it when ``floor(now) >= score``), so a job
that fires the instant it becomes due reads 0. The SLOWLOG (threshold 1 ms, reset after the jobs are
written) gives the longest single command while the workers ran and how many took over 1 and 10 ms;
the bench's own polling is one ``LLEN``/``ZCARD`` round trip per 100 ms.

    python3 bench/timers.py --quick             # CI smoke: 20k timers over 30 s, both sides
    python3 bench/timers.py                     # full: 1,000,000 over 10 minutes (laraq only unless --artisan)
    python3 bench/timers.py --burst --quick     # 20k due in the same second
    python3 bench/timers.py --jobs 200000 --over 120 --json out.json
    python3 bench/timers.py --jobs 200000 --over 120 --record memory   # the worker's own lateness

``--record memory``: laraq's jobs note their start in memory and a thread writes the lines every 100 ms.
By default each job appends its line to the file (open, write, close), as the PHP fixture does: on a
2-core VM that is 30-50 µs per job, which every later job of the same second waits for.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import Fleet, Sides, fill_delayed, laraq_worker_ready, loadavg, quantiles, slowlog, slowlog_reset  # noqa: E402


def lateness(log_path: Path, dues: list[int]) -> dict[str, Any]:
    """Per job: handle() start minus its due second (ms); the job number is in its uuid."""
    late: list[float] = []
    per_second: dict[int, list[float]] = {}
    seen: set[int] = set()
    dup = 0
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            try:
                rec = json.loads(line)
                n = int(rec["uuid"][-12:], 16)
            except (ValueError, KeyError, TypeError):
                continue
            if n in seen:
                dup += 1
                continue
            seen.add(n)
            ms = (float(rec["t"]) - dues[n]) * 1000
            late.append(ms)
            per_second.setdefault(dues[n], []).append(ms)
    return {"fired": len(seen), "duplicates": dup, "early": sum(1 for v in late if v < 0),
            "lateness_ms": {k: round(v, 1) for k, v in quantiles(late).items()},
            "split_ms": split(per_second)}


def split(per_second: dict[int, list[float]]) -> dict[str, float]:
    """Where a second's lateness goes: ``wake`` is how late its first job started (the worker noticing
    the second), ``drain`` how long after that its last job started (the rate of the fleet); medians
    over the seconds."""
    wakes = [min(v) for v in per_second.values()]
    drains = [max(v) - min(v) for v in per_second.values()]
    if not wakes:
        return {}
    return {"wake_p50": round(quantiles(wakes)["p50"], 1), "wake_p90": round(quantiles(wakes)["p90"], 1),
            "drain_p50": round(quantiles(drains)["p50"], 1), "drain_p90": round(quantiles(drains)["p90"], 1)}


def run_side(sides: Sides, side: str, dues: list[int], args: argparse.Namespace, tag: str) -> dict[str, Any]:
    queue = f"timers-{tag}-{side}"
    keys = sides.keys(queue)
    client = sides.client
    log_path = sides.workdir / f"{queue}.jsonl"
    fill_delayed(client, keys.delayed, sides.template(queue), dues)
    if side == "laraq":
        env = sides.laraq.env(log_path=log_path)
        env["LARAQ_LOG_TIME"] = "1"
        if args.record == "memory":
            env["LARAQ_LOG_BUFFERED"] = "1"
        cmd = sides.laraq.worker_cmd(queue, stop_when_empty=False, sleep=args.sleep) + shlex.split(args.laraq_args)
        cwd = sides.workdir
    else:
        assert sides.php is not None
        env = sides.php.env(log_path=log_path)
        cmd = sides.php.worker_cmd(queue, stop_when_empty=False, sleep=args.sleep)
        cwd = sides.php.app_dir
    slowlog_reset(client, 1000)
    load_before = loadavg()
    fleet = Fleet([cmd] * args.workers, env, cwd, sides.workdir, queue)
    deadline = max(dues) + args.grace
    try:
        while time.time() < deadline:
            pipe = client.pipeline(transaction=False)
            pipe.llen(keys.list)
            pipe.zcard(keys.delayed)
            pipe.zcard(keys.reserved)
            if sum(pipe.execute()) == 0 and time.time() > max(dues):
                break
            if any(p.poll() is not None for p in fleet.procs):
                break
            time.sleep(0.1)
    finally:
        time.sleep(0.5)  # the last lines
        fleet.stop()
    out = {"side": side, "jobs": len(dues), "workers": args.workers, "sleep": args.sleep,
           "record": args.record if side == "laraq" else "file", "laraq_args": args.laraq_args if side == "laraq" else "",
           "load_before": load_before, "load_after": loadavg(), **lateness(log_path, dues),
           "slowlog": slowlog(client)}
    out["left"] = int(client.llen(keys.list) + client.zcard(keys.delayed) + client.zcard(keys.reserved))
    client.delete(keys.list, keys.delayed, keys.reserved, keys.notify)
    log_path.unlink(missing_ok=True)
    return out


def _duration_us(client: Any, call: Any) -> int:
    """Redis' own execution time of one call (SLOWLOG at 0 µs): what it cost, not the round trip."""
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    call()
    entries = [e for e in client.slowlog_get(10) if (e.get("command") or b"").upper().startswith((b"EVAL", b"FCALL"))]
    client.config_set("slowlog-log-slower-than", 1000)
    return max((e["duration"] for e in entries), default=0)


def script_costs(sides: Sides, jobs: int, repeat: int) -> dict[str, Any]:
    """The scripts of a burst measured alone, the fastest of ``repeat`` runs each (a run the host
    preempted only reads longer, so the fastest is what the command itself costs): laraq's reserve
    call (100 jobs, the migrate bounded inside it), laraq's bounded migrate command, and Laravel 8's
    migrate of every due job, on ``:delayed`` holding ``jobs`` due members."""
    from run import LARAVEL_MIGRATE
    from scale import fill_delayed

    from laraq.protocol.queue import MIGRATE_BOUND

    client = sides.client
    queue = sides.laraq.queue
    name = "script-costs"
    keys = sides.keys(name)
    template = sides.template(name)
    now = int(time.time())
    out: dict[str, list[int]] = {"laraq reserve (100 jobs)": [], "laraq migrate command": [], "Laravel 8 migrate (all due)": []}
    for _ in range(repeat):
        client.delete(keys.list, keys.delayed, keys.reserved, keys.notify)
        fill_delayed(client, keys.delayed, template, [now - 1] * jobs)
        out["laraq reserve (100 jobs)"].append(_duration_us(client, lambda: queue.reserving.reserve_batch(name, 100)))
        out["laraq migrate command"].append(_duration_us(client, lambda: queue.scripts.migrate(
            keys.delayed, keys.list, keys.notify, now, MIGRATE_BOUND)))
        if len(out["Laravel 8 migrate (all due)"]) < 3:
            out["Laravel 8 migrate (all due)"].append(_duration_us(client, lambda: client.eval(
                LARAVEL_MIGRATE, 3, keys.delayed, keys.list, keys.notify, now)))
    client.delete(keys.list, keys.delayed, keys.reserved, keys.notify)
    return {k: {"fastest_ms": round(min(v) / 1000, 2), "median_ms": round(sorted(v)[len(v) // 2] / 1000, 2)}
            for k, v in out.items() if v} | {"due_jobs": jobs, "runs": repeat}


def dues_for(jobs: int, over: float, burst: bool, lead: float) -> list[int]:
    start = int(time.time() + lead) + 1
    if burst:
        return [start] * jobs
    return [start + int(i * over / jobs) for i in range(jobs)]


def render(res: dict[str, Any]) -> str:
    rows = ["| side | jobs | fired | lateness p50 / p90 / p99 / max (ms) | a second's wake / drain, p50 (ms) | longest command | cmds > 1 ms | > 10 ms | load before → after |",
            "|---|---:|---:|---|---|---|---:|---:|---|"]
    for r in res["runs"]:
        q = r["lateness_ms"]
        s = r["slowlog"]
        sp = r.get("split_ms", {})
        rows.append(f"| {r['side']} | {r['jobs']:,} | {r['fired']:,} | {q['p50']:,} / {q['p90']:,} / {q['p99']:,} / "
                    f"{q['max']:,} | {sp.get('wake_p50', '-')} / {sp.get('drain_p50', '-')} | {s['longest_us'] / 1000:.1f} ms `{s['longest_command'][:28]}` | {s['entries']:,} | "
                    f"{s['over_10ms']:,} | {r['load_before']} → {r['load_after']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="CI smoke: 20,000 jobs (over 30 s unless --burst)")
    p.add_argument("--burst", action="store_true", help="every job due in the same second")
    p.add_argument("--jobs", type=int, help="delayed jobs (full: 1,000,000 spread / 100,000 burst)")
    p.add_argument("--over", type=float, help="seconds the due times spread over (full 600, quick 30)")
    p.add_argument("--workers", type=int, default=2, help="worker processes per side (2)")
    p.add_argument("--sleep", type=float, default=1, help="--sleep of both workers (1)")
    p.add_argument("--grace", type=float, default=120, help="seconds after the last due time before giving up")
    p.add_argument("--sides", default=None, help="laraq,artisan (default: both in quick mode, laraq in full)")
    p.add_argument("--artisan", action="store_true", help="also run artisan in full mode")
    p.add_argument("--record", choices=("file", "memory"), default="file",
                   help="how laraq's jobs record their start: a file append per job, as PHP's fixture does "
                        "(file), or in memory, written every 100 ms (memory: the worker's own lateness)")
    p.add_argument("--laraq-args", default="", help="more options for laraq's workers (e.g. '--acks batched')")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--keep", action="store_true", help="keep the work directory (worker logs)")
    args = p.parse_args(argv)
    if args.jobs is None:
        args.jobs = 20_000 if args.quick else (100_000 if args.burst else 1_000_000)
    if args.over is None:
        args.over = 0 if args.burst else (30 if args.quick else 600)
    sides_wanted = (args.sides or ("laraq,artisan" if args.quick or args.artisan or args.burst else "laraq")).split(",")
    why = laraq_worker_ready()
    if why is not None:
        print(f"laraq worker not runnable: {why}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="laraq-timers-"))
    sides = Sides(tmp, php="artisan" in sides_wanted)
    res: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "shape": "burst" if args.burst else "spread",
                           "jobs": args.jobs, "over_s": args.over, "runs": []}
    try:
        for side in sides_wanted:
            if side == "artisan" and sides.php is None:
                res.setdefault("notes", []).append("PHP/Laravel 8 missing: artisan side skipped")
                continue
            lead = 5 + args.jobs / 50_000  # time to write the jobs and start the workers
            dues = dues_for(args.jobs, args.over, args.burst, lead)
            print(f"[timers] {side}: {args.jobs:,} jobs due {'in one second' if args.burst else f'over {args.over:g} s'}"
                  f" from {time.strftime('%H:%M:%S', time.localtime(dues[0]))}, load {loadavg()}", file=sys.stderr)
            res["runs"].append(run_side(sides, side, dues, args, res["shape"]))
            print(render({"runs": res["runs"][-1:]}).splitlines()[-1], file=sys.stderr)
        if args.burst:
            res["script_costs"] = script_costs(sides, args.jobs, 5 if args.quick else 10)
            print("[timers] script costs", json.dumps(res["script_costs"]), file=sys.stderr)
    finally:
        sides.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[timers] kept {tmp}", file=sys.stderr)
    print(render(res))
    if "script_costs" in res:
        print(json.dumps(res["script_costs"], indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
