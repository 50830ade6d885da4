#!/usr/bin/env python3
"""What one job costs Redis in each worker mode, and how many workers one Redis core can feed.

One worker drains ``--jobs`` no-op ``EchoJob``s (mode ``ok``) from one queue, once per mode per round, the
modes alternating within each round (the order reversed every other round). Per run:

* **Redis CPU µs/job**: the ``redis-server``'s ``used_cpu_user + used_cpu_sys`` (``INFO cpu``, the process'
  own rusage) over the drain, divided by the jobs. Not the ``INFO commandstats`` ``usec`` sum: a command a
  Lua script runs is timed both inside the script's ``EVALSHA`` and on its own line, so that sum counts
  script work twice.
* **commands/job**: the ``INFO commandstats`` ``calls`` sum. Redis counts the commands a script runs as
  calls too, so a ``EVALSHA`` that runs four commands is five here; ``scripts/job`` is the ``EVAL`` +
  ``EVALSHA`` part.
* **worker CPU µs/job**: ``RUSAGE_CHILDREN`` (user + sys) of the worker process over its whole run, start-up
  included (about 15 µs per job at 20,000 for laraq).
* **jobs/s**: jobs over the wall time from start to exit (start-up included).

Modes, each a single process with ``--stop-when-empty``:

====================  ===============================================================================
``default``           ``laraq work --no-supervise`` on the Laravel 8 fixture (``--acks at-once``)
``batched``           the same with ``--acks batched``
``l13``               ``laraq work --no-supervise --no-horizon`` on the Laravel 13 fixture without Horizon:
                      the same payloads and key layout as the Horizon modes, no records
``horizon``           ``laraq work --no-supervise`` on the Laravel 13 fixture with Horizon 5.29 registered:
                      laraq finds Horizon in the app (``laraq.horizon.settings.app_horizon``) and writes
                      Horizon's job records and metrics as Horizon's PHP workers do
``horizon-batched``   the same with ``--acks batched``
``artisan``           ``php artisan queue:work redis`` on the Laravel 8 fixture (Debian's 8.83)
``artisan-13``        ``php artisan queue:work redis`` on the Laravel 13 fixture without Horizon
``horizon-php``       ``php artisan horizon:work redis`` (Horizon's worker command, one process, no
                      master or supervisor) on the same Laravel 13 + Horizon app
====================  ===============================================================================

The Laravel 8 modes get their jobs written straight into the list (``bench/scale.py``'s ``fill_list``, as
Laravel's push writes them). The Laravel 13 modes get theirs from laraq's dispatcher with the app's
settings; on the Horizon app each job carries Horizon's payload fields and has the *pending* record
Horizon's push writes (the push itself is not measured: the counters are reset after it). A Horizon
mode minus its plain Laravel 13 mode (``horizon`` - ``l13``, ``horizon-php`` - ``artisan-13``) is
what Horizon's records cost. From the medians the bench prints
the saturation arithmetic: the jobs/s at which one Redis core is busy all the time (1e6 / Redis µs per
job) and how many worker processes that is.

    python3 bench/redis_cost.py                    # 20,000 jobs, 3 rounds
    python3 bench/redis_cost.py --quick            # 2,000 jobs, 1 round (a smoke run)
    python3 bench/redis_cost.py --modes default,horizon --jobs 50000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench"), str(ROOT)]

from scale import Sides, command_calls, fill_list, loadavg, redis_cpu  # noqa: E402

ECHO = "App\\Jobs\\EchoJob"
ALL_MODES = ["default", "batched", "l13", "horizon", "horizon-batched", "artisan", "artisan-13", "horizon-php"]
#: the modes on the Laravel 13 fixture app with Horizon registered, and on the same app without it
HORIZON_MODES = ("horizon", "horizon-batched", "horizon-php")
PLAIN_13_MODES = ("l13", "artisan-13")
#: The Laravel line whose fixture app the Horizon modes run on (Horizon 5.29.1 in the live tree).
HORIZON_LINE = "13"


@dataclass
class Run:
    """One drain of one mode."""

    mode: str
    jobs: int
    seconds: float
    worker_cpu_s: float
    redis_cpu_s: float
    calls: int
    scripts: int
    exit_code: int
    left: int
    #: calls per command name over the run (``INFO commandstats``), script-inner commands included
    by_command: dict[str, int] = field(default_factory=dict)

    def per_job(self) -> dict[str, float]:
        return {"jobs_per_s": self.jobs / self.seconds,
                "redis_us": self.redis_cpu_s / self.jobs * 1e6,
                "worker_us": self.worker_cpu_s / self.jobs * 1e6,
                "commands": self.calls / self.jobs,
                "scripts": self.scripts / self.jobs}


@dataclass
class Target:
    """Where a mode's jobs go and how its worker starts."""

    fill: Any
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    left: Any
    extra: dict[str, Any] = field(default_factory=dict)


class Bench:
    """The Redis and fixture apps every mode runs on."""

    def __init__(self, tmp: Path, modes: list[str]) -> None:
        self.tmp = tmp
        self.sides = Sides(tmp, php="artisan" in modes)
        self.client = self.sides.client
        #: the Laravel 13 fixture app, plain and with Horizon registered, and a dispatcher for each
        self.apps: dict[bool, Any] = {}
        self.dispatchers: dict[bool, Any] = {}
        for horizon in (False, True):
            if any(m in (HORIZON_MODES if horizon else PLAIN_13_MODES) for m in modes):
                self._boot_13(horizon)

    def _boot_13(self, horizon: bool) -> None:
        from phpapp import PhpApp, live_missing

        from laraq.bus.dispatch import Dispatcher
        from laraq.config.settings import LaravelSettings
        from laraq.horizon.settings import app_horizon
        from laraq.protocol.queue import RedisQueue

        reason = live_missing(HORIZON_LINE)
        if reason:
            raise SystemExit(f"[redis_cost] the Laravel 13 modes need the live Laravel {HORIZON_LINE} tree: {reason}")
        app = PhpApp(self.sides.server.port, version=HORIZON_LINE, horizon=horizon,
                     workdir=self.tmp / ("l13-horizon" if horizon else "l13"))
        hs = None
        if horizon:
            settings = LaravelSettings.from_env({**app.laravel_env, "LARAQ_BASE_PATH": str(app.path)})
            hs = app_horizon(settings, None)
            assert hs is not None, "the Horizon fixture app does not read as a Horizon app"
        queue = RedisQueue(self.client, prefix=app.prefix, version=app.release, retry_after=90)
        self.apps[horizon] = app
        self.dispatchers[horizon] = Dispatcher(queue, horizon=hs)

    def target(self, mode: str, name: str, jobs: int) -> Target:
        if mode in ("default", "batched"):
            laraq = self.sides.laraq
            keys = self.sides.keys(name)
            template = self.sides.template(name)
            cmd = [*laraq.worker_cmd(name, stop_when_empty=True, sleep=1), "--no-supervise"]
            if mode == "batched":
                cmd += ["--acks", "batched"]
            return Target(lambda: fill_list(self.client, keys.list, template, jobs), cmd,
                          laraq.env(log_path=None), self.tmp,
                          lambda: self.client.llen(keys.list) + self.client.zcard(keys.reserved))
        if mode == "artisan":
            php = self.sides.php
            assert php is not None, "artisan needs PHP and Debian's Laravel 8"
            keys = self.sides.keys(name)
            template = self.sides.template(name)
            cmd = ["php", str(php.app.path / "artisan"), "queue:work", "redis", f"--queue={name}",
                   "--stop-when-empty", "--sleep=1", "--tries=1", "--quiet"]
            return Target(lambda: fill_list(self.client, keys.list, template, jobs), cmd, php.env(log_path=None),
                          php.app.path, lambda: self.client.llen(keys.list) + self.client.zcard(keys.reserved))
        horizon = mode in HORIZON_MODES
        app = self.apps[horizon]
        dispatcher = self.dispatchers[horizon]
        keys = dispatcher.queue.keys(name)

        def fill() -> None:
            left = jobs
            while left > 0:
                n = min(1000, left)
                dispatcher.bulk([dispatcher.prepare_job(ECHO, {"args": [0], "mode": "ok", "seconds": 0},
                                                        queue=name, connection="redis") for _ in range(n)])
                left -= n

        def remaining() -> int:
            return int(self.client.llen(keys.list) + self.client.zcard(keys.reserved))

        env = dict(app.env)
        env.pop("LARAQ_LOG", None)  # the fixture's RecordsRuns and bench/handlers.py write nothing per job
        if mode == "horizon-php":
            cmd = ["php", str(app.path / "artisan"), "horizon:work", "redis", f"--queue={name}", "--stop-when-empty",
                   "--sleep=1", "--tries=1", "--quiet", "--supervisor=bench-supervisor", f"--name={name}"]
            return Target(fill, cmd, env, app.path, remaining)
        if mode == "artisan-13":
            cmd = ["php", str(app.path / "artisan"), "queue:work", "redis", f"--queue={name}", "--stop-when-empty",
                   "--sleep=1", "--tries=1", "--quiet"]
            return Target(fill, cmd, env, app.path, remaining)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "bench"), str(ROOT), env.get("PYTHONPATH", "")]))
        env["LARAQ_BASE_PATH"] = str(app.path)
        cmd = [*([self.sides.laraq.laraq_bin] if self.sides.laraq.laraq_bin else [sys.executable, "-m", "laraq.cli"]),
               "work", "--app", "handlers:app", f"--queue={name}", "--laravel", app.release, "--sleep=1",
               "--stop-when-empty", "--no-supervise"]
        if not horizon:
            cmd.append("--no-horizon")  # the tree ships vendor/laravel/horizon: without this laraq finds it
        if mode.endswith("batched"):
            cmd += ["--acks", "batched"]
        return Target(fill, cmd, env, self.tmp, remaining)

    def run(self, mode: str, jobs: int, round_no: int) -> Run:
        name = f"cost-{mode}-{round_no}"
        target = self.target(mode, name, jobs)
        target.fill()
        self.client.config_resetstat()
        cpu0 = redis_cpu(self.client)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(target.cmd, env=target.env, cwd=target.cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu1 = redis_cpu(self.client)
        by_command = command_calls(self.client)
        by_command.pop("info", None)  # the bench's own INFO cpu
        calls = sum(by_command.values())
        scripts = by_command.get("eval", 0) + by_command.get("evalsha", 0)
        if proc.returncode:
            sys.stderr.write(proc.stderr.decode(errors="replace")[-3000:])
        return Run(mode, jobs, elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                   cpu1 - cpu0, calls, scripts, proc.returncode, int(target.left()), by_command)

    def stop(self) -> None:
        self.sides.stop()


def medians(runs: list[Run]) -> dict[str, float]:
    rows = [r.per_job() for r in runs]
    return {k: statistics.median(row[k] for row in rows) for k in rows[0]}


def saturation(med: dict[str, float]) -> dict[str, float]:
    """One Redis core's jobs/s for this mode, and the worker processes that take to reach it: at the
    measured jobs/s of one process, and at the rate one process reaches when its own CPU is all it
    waits on (1e6 / worker µs per job)."""
    core = 1e6 / med["redis_us"]
    cpu_bound = 1e6 / med["worker_us"]
    return {"redis_core_jobs_per_s": core, "processes_at_measured": core / med["jobs_per_s"],
            "cpu_bound_jobs_per_s": cpu_bound, "processes_at_cpu_bound": core / cpu_bound}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default=",".join(ALL_MODES), help=f"comma-separated, of {', '.join(ALL_MODES)}")
    p.add_argument("--quick", action="store_true", help="2,000 jobs, 1 round")
    p.add_argument("--json", type=Path, help="write every run and the medians here")
    p.add_argument("--commands", action="store_true", help="print each mode's commands per job, by name")
    args = p.parse_args()
    if args.quick:
        args.jobs, args.rounds = 2000, 1
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in ALL_MODES]
    if unknown:
        p.error(f"unknown mode(s): {', '.join(unknown)}")
    load_before = loadavg()
    print(f"[redis_cost] {args.jobs:,} jobs per run, {args.rounds} round(s), modes {', '.join(modes)}; "
          f"load {load_before}", flush=True)
    runs: list[Run] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="laraq-redis-cost-") as tmp:
        bench = Bench(Path(tmp), modes)
        try:
            for r in range(args.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    run = bench.run(mode, args.jobs, r)
                    runs.append(run)
                    pj = run.per_job()
                    print(f"  round {r + 1} {mode:16s} exit {run.exit_code}  {pj['jobs_per_s']:8,.0f} jobs/s  "
                          f"worker {pj['worker_us']:6.1f} µs/job  Redis {pj['redis_us']:5.1f} µs/job  "
                          f"{pj['commands']:5.2f} commands/job ({pj['scripts']:.2f} scripts)"
                          + (f"  {run.left} jobs left!" if run.left else ""), flush=True)
                    failed = failed or bool(run.exit_code or run.left)
        finally:
            bench.stop()
    load_after = loadavg()
    print(f"\nMedians of {args.rounds} round(s), {args.jobs:,} no-op jobs, one worker process; "
          f"load {load_before} -> {load_after}")
    print(f"{'mode':16s} {'jobs/s':>8s} {'worker µs/job':>14s} {'Redis µs/job':>13s} {'commands/job':>13s} "
          f"{'Redis core, jobs/s':>19s} {'processes (measured)':>21s} {'processes (CPU-bound)':>22s}")
    summary: dict[str, Any] = {}
    for mode in modes:
        med = medians([r for r in runs if r.mode == mode])
        sat = saturation(med)
        summary[mode] = {**med, **sat}
        print(f"{mode:16s} {med['jobs_per_s']:8,.0f} {med['worker_us']:14.1f} {med['redis_us']:13.1f} "
              f"{med['commands']:13.2f} {sat['redis_core_jobs_per_s']:19,.0f} {sat['processes_at_measured']:21.1f} "
              f"{sat['processes_at_cpu_bound']:22.1f}")
    if args.commands:
        for mode in modes:
            last = [r for r in runs if r.mode == mode][-1]
            parts = sorted(last.by_command.items(), key=lambda kv: -kv[1])
            print(f"{mode}: " + ", ".join(f"{name} {n / last.jobs:.2f}" for name, n in parts if n >= last.jobs / 100))
    if args.json:
        args.json.write_text(json.dumps({"jobs": args.jobs, "rounds": args.rounds, "load_before": load_before,
                                         "load_after": load_after, "runs": [vars(r) for r in runs],
                                         "medians": summary}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
