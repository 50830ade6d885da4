"""Start-up and memory: laraq against ``php artisan`` on the same app and Redis.

* **CLI**: ``laraq --version``, ``--help``, ``status`` and ``peek`` (against the bench's Redis), wall time
  of each, median of ``--rounds`` runs interleaved with a bare ``python3 -c pass``; "own" is the
  median minus the bare interpreter's (what this machine's Python and its ``.pth`` hooks cost anyway).
* **exec to first job**: one job waiting, then a default ``laraq work`` (supervisor included) /
  ``php artisan queue:work`` is started; the time from just before ``exec`` to the moment the job's
  ``handle()`` began (the line it appends). Rounds alternate the two sides.
* **--once**: one job waiting, ``laraq work --once`` / ``queue:work --once``, exec to exit.
* **bytecode**: laraq's ``__pycache__`` is written first, as an install does (``--source``: not).
* **RSS**: resident memory of the worker process (laraq: the supervised child, the supervisor in
  brackets; artisan: the PHP process), idle after a few seconds, and after draining a deep queue
  (``--deep`` jobs pushed first; quick 20,000, full 200,000), read while the worker idles after it.

    python3 bench/startup.py --quick
    python3 bench/startup.py --rounds 7 --deep 1000000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import PREFIX, Fleet, Sides, fill_list, laraq_worker_ready, loadavg  # noqa: E402


def compile_bytecode() -> None:
    """Write laraq's and the bench handlers' ``__pycache__`` as ``pip install`` does (``compileall``).

    A development environment with ``PYTHONDONTWRITEBYTECODE=1`` (this one) never writes them, so each
    start compiled the ~90 laraq modules a worker imports from source: about 0.13 s of CPU and 1.9 MB of
    the worker's RSS (the compiler's leftovers), which an installed laraq does not pay.
    """
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "laraq"), str(root / "bench")],
                   check=False, stdout=subprocess.DEVNULL)


def rss_kb(pid: int) -> int:
    try:
        m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def children(pid: int) -> list[int]:
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [int(x) for x in out.split()]


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + sys of the whole process tree, which the run waits for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cli_times(sides: Sides, rounds: int) -> dict[str, Any]:
    lq = sides.laraq
    env = lq.env()
    base = [lq.laraq_bin] if lq.laraq_bin else [sys.executable, "-m", "laraq.cli"]
    redis_args = ["--prefix", PREFIX, "--redis-url", sides.server.url, "--laravel", "8"]
    cmds = {"bare python": [sys.executable, "-c", "pass"], "--version": [*base, "--version"],
            "--help": [*base, "--help"], "status": [*base, "status", "default", "--sample", "0", *redis_args],
            "peek": [*base, "peek", "default", *redis_args]}
    if sides.php is not None:
        cmds["php artisan --version"] = ["php", str(sides.php.app_dir / "artisan"), "--version"]
    runs: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            wall, used = timed(cmd, env, sides.workdir)
            runs[name].append(wall)
            cpu[name].append(used)
    bare = statistics.median(runs["bare python"])
    bare_cpu = statistics.median(cpu["bare python"])
    own = ("--", "status", "peek")
    return {name: {"median_s": round(statistics.median(v), 3), "best_s": round(min(v), 3),
                   "own_s": round(statistics.median(v) - bare, 3) if name.startswith(own) else None,
                   "cpu_s": round(statistics.median(cpu[name]), 3),
                   "own_cpu_s": round(statistics.median(cpu[name]) - bare_cpu, 3) if name.startswith(own) else None}
            for name, v in runs.items()}


def _side(sides: Sides, side: str, queue: str, log_path: Path | None, extra: list[str] | None = None,
          sleep: float = 3) -> tuple[list[str], dict[str, str], Path]:
    if side == "laraq":
        env = sides.laraq.env(log_path=log_path)
        if log_path is not None:
            env["LARAQ_LOG_TIME"] = "1"
        cmd = sides.laraq.worker_cmd(queue, stop_when_empty=False, sleep=sleep)
        return [*cmd, *(extra or [])], env, sides.workdir
    assert sides.php is not None
    cmd = sides.php.worker_cmd(queue, stop_when_empty=False, sleep=sleep)
    return [*cmd, *(extra or [])], sides.php.env(log_path=log_path), sides.php.app_dir


def first_job(sides: Sides, side: str, n: int) -> tuple[float, float]:
    """Seconds from just before exec to the job's handle()."""
    queue = f"first-{side}-{n}"
    log_path = sides.workdir / f"{queue}.jsonl"
    fill_list(sides.client, sides.keys(queue).list, sides.template(queue), 1)
    cmd, env, cwd = _side(sides, side, queue, log_path)
    t0 = time.time()
    fleet = Fleet([cmd], env, cwd, sides.workdir, queue)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log_path.exists() and log_path.read_text().strip():
                return float(json.loads(log_path.read_text().splitlines()[0])["t"]) - t0, float("nan")
            time.sleep(0.005)
        return float("nan"), float("nan")
    finally:
        fleet.stop()


def once(sides: Sides, side: str, n: int) -> tuple[float, float]:
    """``--once`` with one job waiting: exec to exit, wall and CPU seconds."""
    queue = f"once-{side}-{n}"
    fill_list(sides.client, sides.keys(queue).list, sides.template(queue), 1)
    cmd, env, cwd = _side(sides, side, queue, None, ["--once"])
    wall, used = timed(cmd, env, cwd)
    left = sides.client.llen(sides.keys(queue).list)
    return (wall, used) if left == 0 else (float("nan"), used)


def memory(sides: Sides, side: str, deep: int, idle_s: float) -> dict[str, Any]:
    queue = f"mem-{side}"
    keys = sides.keys(queue)
    cmd, env, cwd = _side(sides, side, queue, None, sleep=1)
    fleet = Fleet([cmd], env, cwd, sides.workdir, queue)
    proc = fleet.procs[0]
    try:
        def sample() -> dict[str, int]:
            kids = children(proc.pid)
            if side == "laraq" and kids:
                return {"worker_kb": max(rss_kb(k) for k in kids), "supervisor_kb": rss_kb(proc.pid)}
            return {"worker_kb": rss_kb(proc.pid)}

        # idle: once the worker's RSS has held still for idle_s (it has booted and sleeps), at most 60 s
        started = time.monotonic()
        last, still_since = sample(), time.monotonic()
        while time.monotonic() - started < 60 and time.monotonic() - still_since < idle_s:
            time.sleep(0.5)
            now = sample()
            if abs(now["worker_kb"] - last["worker_kb"]) > 256:
                still_since = time.monotonic()
            last = now
        idle = last
        fill_list(sides.client, keys.list, sides.template(queue), deep)
        t0 = time.monotonic()
        peak = 0
        while sides.client.llen(keys.list) + sides.client.zcard(keys.reserved) > 0:
            peak = max(peak, sample()["worker_kb"])
            if time.monotonic() - t0 > 3600 or proc.poll() is not None:
                break
            time.sleep(0.2)
        drain_s = time.monotonic() - t0
        time.sleep(2)
        after = sample()
    finally:
        fleet.stop()
    return {"idle": idle, "after_drain": after, "peak_during_drain_kb": peak, "deep_jobs": deep,
            "drain_s": round(drain_s, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 rounds, a 20,000-job deep queue")
    p.add_argument("--rounds", type=int, help="rounds of each timing (quick 3, full 7)")
    p.add_argument("--deep", type=int, help="jobs in the deep queue (quick 20,000, full 200,000)")
    p.add_argument("--deep-artisan", type=int, help="artisan's deep queue (default: as --deep, at most 100,000)")
    p.add_argument("--skip-php", action="store_true")
    p.add_argument("--only", default="cli,first,once,memory", help="comma list of cli,first,once,memory")
    p.add_argument("--source", action="store_true",
                   help="leave laraq's bytecode unwritten (with PYTHONDONTWRITEBYTECODE, every start compiles "
                        "laraq from source)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if not args.source:
        compile_bytecode()
    rounds = args.rounds or (3 if args.quick else 7)
    deep = args.deep or (20_000 if args.quick else 200_000)
    deep_php = args.deep_artisan or min(deep, 100_000)
    only = set(args.only.split(","))
    why = laraq_worker_ready()
    if why is not None:
        print(f"laraq worker not runnable: {why}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="laraq-startup-"))
    sides = Sides(tmp, php=not args.skip_php)
    names = ["laraq"] + (["artisan"] if sides.php is not None else [])
    res: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load_before": loadavg()}
    try:
        if "cli" in only:
            res["cli"] = cli_times(sides, rounds)
            print("[startup] cli", json.dumps(res["cli"]), file=sys.stderr)
        for what, fn in (("first", first_job), ("once", once)):
            if what not in only:
                continue
            runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
            for i in range(rounds):
                for name in (names if i % 2 == 0 else names[::-1]):
                    runs[name].append(fn(sides, name, i))  # type: ignore[operator]
            res[what] = {n: {"median_s": round(statistics.median(w for w, _ in v), 3),
                             "runs_s": [round(w, 3) for w, _ in v],
                             "median_cpu_s": round(statistics.median(c for _, c in v), 3)}
                         for n, v in runs.items()}
            print(f"[startup] {what}", json.dumps(res[what]), file=sys.stderr)
        if "memory" in only:
            res["memory"] = {n: memory(sides, n, deep if n == "laraq" else deep_php, 4) for n in names}
            print("[startup] memory", json.dumps(res["memory"]), file=sys.stderr)
    finally:
        sides.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = loadavg()
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
