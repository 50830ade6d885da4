#!/usr/bin/env python3
"""laraq vs ``php artisan queue:work``: throughput, pickup latency, Redis cost and memory, on one Redis.

    python3 bench/run.py                 # full run (a few minutes on 2 cores)
    python3 bench/run.py --quick         # smoke run (about a minute)
    python3 bench/run.py --json out.json # also write every number as JSON

Everything runs on this machine against a ``redis-server`` the script starts itself (temporary dir,
no persistence, a free loopback port). PHP is the Laravel 8 fixture app (``fixtures/laravel8``),
copied to a temporary directory together with the two benchmark-only files in ``bench/php/`` (the
CPU-light job class and a dispatch loop); the fixture itself is never changed. See bench/README.md
for what each number means and how it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import platform
import random
import re
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))  # handlers, fastpath
sys.path.insert(0, str(ROOT / "tests"))  # phpapp.PhpApp (no pytest needed)
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from stats import combine_runs, interleaved_rounds, p99_difference, pct, round_stats  # noqa: E402

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
HASH = "App\\Jobs\\BenchHashJob"
LARAVEL = "8.83.27"

#: Commands that, for these workloads, only ever run *inside* the queue's Lua scripts (push, pop,
#: migrate, release, size): subtracted from all calls to give the client's own commands (round trips).
SCRIPT_INTERNAL = {"rpush", "lpop", "zadd", "zrangebyscore", "zremrangebyrank", "llen", "zcard"}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- machine ------------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        pass

    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"

    import redis as redis_mod

    try:
        import laraq
        laraq_version = getattr(laraq, "__version__", "?")
    except Exception:  # noqa: BLE001
        laraq_version = "?"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "redis": out("redis-server", "--version"),
        "php": out("php", "--version"),
        "php_redis": out("php", "-r", "echo phpversion('redis');"),
        "laravel": out("php", "-r", "require '/usr/share/php/Illuminate/autoload.php'; "
                       "echo Illuminate\\Foundation\\Application::VERSION;"),
        "python": platform.python_version(),
        "redis_py": redis_mod.__version__,
        "laraq": laraq_version,
    }


# -- redis --------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throw-away ``redis-server`` on 127.0.0.1 (as tests/conftest.py's, without pytest)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server not found (bash scripts/setup installs it)")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                break
            except (redis.ConnectionError, redis.ResponseError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        self.client = redis.Redis(port=self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass
class Snap:
    calls: dict[str, int]
    cpu: float


def snap(r: redis.Redis) -> Snap:
    stats = r.info("commandstats")
    cpu = r.info("cpu")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    return Snap(calls, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))


@dataclass
class Delta:
    calls: Counter = field(default_factory=Counter)
    cpu: float = 0.0

    @classmethod
    def between(cls, a: Snap, b: Snap) -> Delta:
        calls = Counter()
        for name, n in b.calls.items():
            d = n - a.calls.get(name, 0)
            if d and name != "info":  # our own two INFO calls
                calls[name] = d
        return cls(calls, b.cpu - a.cpu)

    def minus(self, other: Delta) -> Delta:
        calls = Counter(self.calls)
        calls.subtract(other.calls)
        return Delta(+calls, self.cpu - other.cpu)

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def top_level(self) -> int:
        return sum(n for name, n in self.calls.items() if name not in SCRIPT_INTERNAL)

    def per_job(self, n: int) -> dict[str, Any]:
        n = max(n, 1)
        return {
            "commands_per_job": self.total / n,
            "client_commands_per_job": self.top_level / n,
            "redis_cpu_us_per_job": self.cpu / n * 1e6,
            "breakdown_per_job": {k: round(v / n, 3) for k, v in sorted(self.calls.items(), key=lambda kv: -kv[1])},
        }


# -- processes ----------------------------------------------------------------------------------------

@dataclass
class ProcResult:
    wall: float
    maxrss_kb: int
    cpu: float
    rc: int
    delta: Delta
    tree_rss_kb: int = 0
    procs: int = 1
    user: float = 0.0
    sys: float = 0.0
    nvcsw: int = 0
    nivcsw: int = 0
    #: VmRSS of the process started at its last sample (with laraq: the supervisor it execs into)
    root_rss_kb: int = 0
    #: seconds from the first pop to the moment the list and ``:reserved`` were both empty, as the bench
    #: saw them in Redis (see run_measured's ``drain``); None when it did not see both
    drain_s: float | None = None
    #: CPU seconds the process tree used over that same window (``/proc/<pid>/stat``), boot and exit
    #: left out; None without a drain window
    drain_cpu: float | None = None


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path, r: redis.Redis, logfile: Path,
                 timeout: float = 1800, *, drain: str | None = None) -> ProcResult:
    """Run one worker to completion: wall time; peak RSS of its largest process (wait4's ru_maxrss,
    which covers reaped children too) and of its whole process tree (VmRSS summed, sampled every
    20 ms, processes that lived >= 100 ms); CPU of the tree; Redis deltas.

    ``drain`` (a queue's list key): also time the work itself from Redis, whatever the worker's boot
    and exit cost. Every 5 ms one pipelined ``LLEN`` + ``ZCARD :reserved``; the work starts at the
    last poll that still saw the list whole and ends at the first poll that sees the list and
    ``:reserved`` both empty (every job deleted). Both ends err on the long side, by at most a poll.
    The polls are taken out of the command counts again. The tree's CPU is read from ``/proc`` at the
    same two polls, so ``drain_cpu`` is the work's CPU without the boot and exit an empty run can only
    approximate."""
    seen: Counter = Counter()  # pid -> samples it was alive in
    peak: dict[int, int] = {}  # pid -> its largest VmRSS
    polls = 0
    initial = int(r.llen(drain)) if drain else 0
    a = snap(r)
    with open(logfile, "ab") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        next_sample = next_poll = 0.0
        root_now = 0
        whole_at, started_at, done_at = t0, None, None
        cpu_whole = cpu_done = 0.0
        try:
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    pid, status, ru = os.wait4(proc.pid, 0)
                    break
                now = time.monotonic()
                if drain and initial and done_at is None and now >= next_poll:
                    length, reserved = r.pipeline(transaction=False).llen(drain).zcard(drain + ":reserved").execute()
                    polls += 1
                    seen_at = time.perf_counter()
                    if started_at is None:
                        if length >= initial:
                            whole_at, cpu_whole = seen_at, tree_cpu_s(proc.pid)
                        else:
                            started_at = whole_at
                    if started_at is not None and length == 0 and reserved == 0:
                        done_at, cpu_done = seen_at, tree_cpu_s(proc.pid)
                    next_poll = now + 0.005
                if now >= next_sample:
                    for p in tree_pids(proc.pid):
                        seen[p] += 1
                        peak[p] = max(peak.get(p, 0), rss_kb(p))
                    # the started process as it is now: laraq's launcher execs into its supervisor
                    root_now = rss_kb(proc.pid) or root_now
                    next_sample = now + 0.02
                time.sleep(0.002)
        except BaseException:  # Ctrl-C: do not leave the worker running
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    b = snap(r)
    for name, count in (("llen", polls), ("zcard", polls)):  # the bench's own polls
        if count:
            b.calls[name] = b.calls.get(name, 0) - count
    drain_s = done_at - started_at if started_at is not None and done_at is not None else None
    drain_cpu = cpu_done - cpu_whole if drain_s is not None else None
    # The tree: processes alive for >= 100 ms (not e.g. the `stty` Symfony Console runs at boot).
    lasting = [p for p, n in seen.items() if n >= 5]
    tree = sum(root_now if p == proc.pid and root_now else peak[p] for p in lasting)
    return ProcResult(wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, proc.returncode, Delta.between(a, b),
                      max(tree, ru.ru_maxrss), max(1, len(lasting)), ru.ru_utime, ru.ru_stime, ru.ru_nvcsw,
                      ru.ru_nivcsw, root_now, drain_s, drain_cpu)


# in a function, as the handler's loop is (module-level names would make it slower than the worker)
_HASHING = ("import hashlib, sys, time\n"
            "def chains(jobs, rounds):\n"
            "    for job in range(jobs):\n"
            "        h = str(job).encode()\n"
            "        for _ in range(rounds):\n"
            "            h = hashlib.sha256(h).digest()\n"
            "start = time.perf_counter()\n"
            "chains(int(sys.argv[1]), int(sys.argv[2]))\n"
            "print(start, time.perf_counter())\n")


def hashing_alone(processes: int, jobs: int, rounds: int) -> dict:
    """The CPU-light workload's own work with nothing around it: ``jobs`` chains of ``rounds`` SHA-256
    digests (the loop of ``bench/handlers.py``'s ``bench_hash``), shared by ``processes`` plain Python
    processes at once, no Redis and no laraq. jobs/s from the first process's start to the last one's
    end (``perf_counter`` is the system's monotonic clock, the same in every process): the rate 1 and 2
    processes can reach on this host at this moment, which ``--processes 2`` can only approach."""
    each = max(1, jobs // processes)
    procs = [subprocess.Popen([sys.executable, "-c", _HASHING, str(each), str(rounds)], stdout=subprocess.PIPE,
                              text=True) for _ in range(processes)]
    spans = [tuple(float(x) for x in proc.communicate()[0].split()) for proc in procs]
    if any(proc.returncode or len(span) != 2 for proc, span in zip(procs, spans, strict=True)):
        raise RuntimeError(f"the hashing-alone run failed: {spans}")
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    return {"jobs": each * processes, "seconds": seconds, "jobs_per_s": each * processes / seconds,
            "hashing_processes": processes}


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of ``pid`` and its descendants alive now (all their threads); ``reaped``:
    with the children each has reaped (``cutime``/``cstime``: a worker that forks per job counts them)."""
    last = 15 if reaped else 13  # utime, stime (the stat file's fields 14 and 15), cutime, cstime
    ticks = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:last])
    return ticks / _CLOCK_TICKS


def rss_kb(pid: int) -> int:
    try:
        m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


# -- the two sides --------------------------------------------------------------------------------------

class Php:
    """The fixture app, copied with bench/php/* into ``workdir``; dispatch and ``queue:work``."""

    def __init__(self, server: RedisServer, workdir: Path, version: str = "8") -> None:
        from phpapp import PhpApp, app_path

        if version == "8":
            self.app_dir = workdir / "laravel8"
            shutil.copytree(ROOT / "fixtures" / "laravel8", self.app_dir)
            shutil.copy(BENCH / "php" / "BenchHashJob.php", self.app_dir / "app" / "Jobs" / "BenchHashJob.php")
        else:
            # fixtures/laravel<N> with its vendor link to the live tree, next to the shared class roots
            # (fixtures/common, and the bench's copy of laravel8 with BenchHashJob) it loads App\ from
            tree = workdir / f"fixtures{version}"
            tree.mkdir()
            self.app_dir = tree / f"laravel{version}"
            shutil.copytree(app_path(version), self.app_dir, symlinks=True)
            shutil.copytree(ROOT / "fixtures" / "common", tree / "common")  # its loader looks in ../laravel8
            (tree / "laravel8").symlink_to(workdir / "laravel8")
        shutil.copy(BENCH / "php" / "bench.php", self.app_dir / "bench.php")
        self.app = PhpApp(server.port, workdir=workdir / f"php{version}", prefix=PREFIX, version=version)
        self.app.path = self.app_dir
        self.version = version
        self.server = server
        self.workdir = workdir

    def env(self, *, block_for: int | None = None, log_path: Path | None = None) -> dict[str, str]:
        env = dict(self.app.env)
        env.pop("LARAQ_LOG", None)
        if log_path is not None:
            env["LARAQ_LOG"] = str(log_path)
            env["LARAQ_LOG_TIME"] = "1"  # each line carries the time its handle() began
        env["REDIS_QUEUE_BLOCK_FOR"] = "" if block_for is None else str(block_for)
        return env

    def dispatch(self, kind: str, count: int, queue: str, *, args: dict | None = None, rounds: int = 0) -> dict:
        cmd = ["php", str(self.app_dir / "bench.php"), kind, f"--count={count}", f"--queue={queue}"]
        if args is not None:
            cmd.append("--args=" + json.dumps(args))
        if rounds:
            cmd.append(f"--rounds={rounds}")
        r = self.server.client
        a = snap(r)
        proc = subprocess.run(cmd, env=self.env(), cwd=self.app_dir, capture_output=True, text=True, timeout=900)
        b = snap(r)
        if proc.returncode != 0:
            raise RuntimeError(f"bench.php failed: {proc.stderr}\n{proc.stdout}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        delta = Delta.between(a, b)
        return {"jobs": count, "seconds": out["seconds"], "jobs_per_s": count / out["seconds"],
                **delta.per_job(count)}

    def worker_cmd(self, queue: str, *, stop_when_empty: bool = True, sleep: float = 0) -> list[str]:
        cmd = ["php", str(self.app_dir / "artisan"), "queue:work", "redis", f"--queue={queue}", f"--sleep={sleep:g}"]
        if stop_when_empty:
            cmd.append("--stop-when-empty")
        return cmd


def echo_props(args: dict | None = None) -> dict:
    """The properties of the fixture's ``EchoJob`` as PHP serializes them (protected and private included)."""
    a = args or {}
    return {"args": a.get("args", []), "mode": a.get("mode", "ok"), "seconds": a.get("seconds", 0),
            "tries": None, "backoff": None, "timeout": None, "maxExceptions": None, "failOnTimeout": False,
            "\0*\0note": "protected note", "\0App\\Jobs\\EchoJob\0hidden": "private value"}


class Laraq:
    """laraq's dispatcher (in this process) and ``laraq work`` (a subprocess) on the same Redis."""

    def __init__(self, server: RedisServer, workdir: Path, concurrency_flag: str = "--concurrency") -> None:
        from laraq.bus.dispatch import Dispatcher
        from laraq.protocol.queue import RedisQueue

        self.server = server
        self.workdir = workdir
        self.queue = RedisQueue(redis.Redis(port=server.port), prefix=PREFIX, version=LARAVEL)
        self.dispatcher = Dispatcher(self.queue)
        self.concurrency_flag = concurrency_flag
        self.db_path = workdir / "laraq.sqlite"
        # the interpreter's own console script, not a pyenv shim (a bash script: 0.1-1.5 s per start)
        beside = Path(sys.executable).parent / "laraq"
        self.laraq_bin = str(beside) if beside.exists() else shutil.which("laraq") or ""

    def prepare(self, kind: str, queue: str, *, args: dict | None = None, rounds: int = 0):
        if kind == "hash":
            props = {"rounds": rounds, "seed": "laraq"}
            return self.dispatcher.prepare_job(HASH, props, queue=queue, connection="redis")
        return self.dispatcher.prepare_job(ECHO, echo_props(args), queue=queue, connection="redis")

    def dispatch(self, kind: str, count: int, queue: str, *, args: dict | None = None, rounds: int = 0,
                 chunk: int = 1000) -> dict:
        r = self.server.client
        a = snap(r)
        t0 = time.perf_counter()
        left = count
        while left > 0:
            n = min(chunk, left)
            self.dispatcher.bulk([self.prepare(kind, queue, args=args, rounds=rounds) for _ in range(n)])
            left -= n
        seconds = time.perf_counter() - t0
        b = snap(r)
        return {"jobs": count, "seconds": seconds, "jobs_per_s": count / seconds,
                **Delta.between(a, b).per_job(count)}

    def fill(self, kind: str, count: int, queue: str, **kw: Any) -> None:
        """Fill a queue fast (laraq bulk), not measured."""
        self.dispatch(kind, count, queue, **kw)

    def env(self, *, log_path: Path | None = None) -> dict[str, str]:
        """The Laravel settings the PHP app runs with (same Redis, cache store, failed-job DB)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("REDIS_", "DB_", "APP_", "CACHE_", "QUEUE_", "LARAQ_"))}
        env.update({
            "APP_NAME": "Laravel", "APP_KEY": "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI=",
            "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(self.server.port), "REDIS_PREFIX": PREFIX,
            "REDIS_QUEUE": "default", "REDIS_QUEUE_RETRY_AFTER": "90", "CACHE_DRIVER": "redis",
            "CACHE_PREFIX": "laravel_cache", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(self.db_path),
            "QUEUE_CONNECTION": "redis",
        })
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")]))
        if log_path is not None:
            env["LARAQ_LOG"] = str(log_path)
        return env

    def worker_cmd(self, queue: str, *, concurrency: int | None = None, stop_when_empty: bool = True,
                   block_for: int | None = None, python: list[str] | None = None, sleep: float = 0) -> list[str]:
        base = python or ([self.laraq_bin] if self.laraq_bin else [sys.executable, "-m", "laraq.cli"])
        cmd = [*base, "work", "--app", "handlers:app", f"--queue={queue}", "--laravel", "8",
               "--prefix", PREFIX, "--redis-url", self.server.url, f"--sleep={sleep:g}"]
        if block_for is not None:
            cmd.append(f"--block-for={block_for}")
        if stop_when_empty:
            cmd.append("--stop-when-empty")
        if concurrency is not None:
            cmd += [self.concurrency_flag, str(concurrency)]
        return cmd


# -- the ceiling -----------------------------------------------------------------------------------------

# Laravel 8's own scripts (Illuminate\Queue\LuaScripts), byte for byte.
LARAVEL_POP = """-- Pop the first job off of the queue...
local job = redis.call('lpop', KEYS[1])
local reserved = false

if(job ~= false) then
    -- Increment the attempt count and place job on the reserved queue...
    reserved = cjson.decode(job)
    reserved['attempts'] = reserved['attempts'] + 1
    reserved = cjson.encode(reserved)
    redis.call('zadd', KEYS[2], ARGV[1], reserved)
    redis.call('lpop', KEYS[3])
end

return {job, reserved}"""

LARAVEL_MIGRATE = """-- Get all of the jobs with an expired "score"...
local val = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1])

-- If we have values in the array, we will remove them from the first queue
-- and add them onto the destination queue in chunks of 100, which moves
-- all of the appropriate jobs onto the destination queue very safely.
if(next(val) ~= nil) then
    redis.call('zremrangebyrank', KEYS[1], 0, #val - 1)

    for i = 1, #val, 100 do
        redis.call('rpush', KEYS[2], unpack(val, i, math.min(i+99, #val)))
        -- Push a notification for every job that was migrated...
        for j = i, math.min(i+99, #val) do
            redis.call('rpush', KEYS[3], 1)
        end
    end
end

return val"""


def ceiling(r: redis.Redis, queue: str, count: int, batch: int) -> dict:
    """Laravel's per-job Redis work (migrate :delayed, migrate :reserved, pop, ZREM), pipelined.

    Per batch: one pipeline of ``batch`` x (EVALSHA migrate, EVALSHA migrate, EVALSHA pop), then one
    pipeline of the ``batch`` ZREMs of the reserved members it returned. No job code, no decoding.
    """
    base = f"{PREFIX}queues:{queue}"
    pop_sha = r.script_load(LARAVEL_POP)
    mig_sha = r.script_load(LARAVEL_MIGRATE)
    done = 0
    a = snap(r)
    t0 = time.perf_counter()
    while True:
        now = int(time.time())
        pipe = r.pipeline(transaction=False)
        for _ in range(batch):
            pipe.evalsha(mig_sha, 3, base + ":delayed", base, base + ":notify", now)
            pipe.evalsha(mig_sha, 3, base + ":reserved", base, base + ":notify", now)
            pipe.evalsha(pop_sha, 3, base, base + ":reserved", base + ":notify", now + 90)
        res = pipe.execute()
        reserved = [res[i][1] for i in range(2, len(res), 3) if res[i] and res[i][0]]
        if reserved:
            pipe = r.pipeline(transaction=False)
            for member in reserved:
                pipe.zrem(base + ":reserved", member)
            pipe.execute()
            done += len(reserved)
        if len(reserved) < batch:
            break
    seconds = time.perf_counter() - t0
    d = Delta.between(a, snap(r))
    return {"jobs": done, "seconds": seconds, "jobs_per_s": done / seconds, "batch": batch, **d.per_job(done)}


def fast_path_probe(r: redis.Redis, queue: str, count: int, batch: int) -> dict:
    """What a batch-reserving worker could reach: per batch one migrate pair, laraq's ``pop_many``
    Lua script reserving ``batch`` jobs in one call, then the ``batch`` ZREMs pipelined."""
    from laraq.protocol.lua import Scripts

    base = f"{PREFIX}queues:{queue}"
    scripts = Scripts(r)
    scripts.load()
    mig_sha = r.script_load(LARAVEL_MIGRATE)
    done = 0
    a = snap(r)
    t0 = time.perf_counter()
    while True:
        now = int(time.time())
        pipe = r.pipeline(transaction=False)
        pipe.evalsha(mig_sha, 3, base + ":delayed", base, base + ":notify", now)
        pipe.evalsha(mig_sha, 3, base + ":reserved", base, base + ":notify", now)
        pipe.execute()
        got = scripts.pop_many(base, base + ":reserved", base + ":notify", base + ":poison", now + 90, batch)
        if got.jobs:
            pipe = r.pipeline(transaction=False)
            for _job, reserved in got.jobs:
                pipe.zrem(base + ":reserved", reserved)
            pipe.execute()
            done += len(got.jobs)
        if len(got.jobs) < batch:
            break
    seconds = time.perf_counter() - t0
    d = Delta.between(a, snap(r))
    return {"jobs": done, "seconds": seconds, "jobs_per_s": done / seconds, "batch": batch, **d.per_job(done)}


def prototype(server: RedisServer, queue: str, batch: int) -> dict:
    """bench/fastpath.py in this process: one Lua call per batch (acks + migrate + reserve), laraq's
    payload parsing, unserialize and Job objects, the bench handlers run inline."""
    import fastpath

    os.environ.pop("LARAQ_LOG", None)
    os.environ.pop("LARAQ_BENCH_SYNC", None)
    import handlers

    r = server.client
    client = redis.Redis(port=server.port)
    cache = redis.Redis(port=server.port, db=1)
    client.ping()
    cache.ping()
    a = snap(r)
    t0 = time.perf_counter()
    c0 = time.process_time()
    done, sent = fastpath.run_fast_path(client, handlers.app, prefix=PREFIX, queue=queue, version=LARAVEL, batch=batch,
                                        cache_client=cache)
    cpu = time.process_time() - c0
    seconds = time.perf_counter() - t0
    d = Delta.between(a, snap(r))
    left = queue_left(r, queue)
    out = {"jobs": done, "seconds": seconds, "jobs_per_s": done / seconds, "batch": batch,
           "worker_cpu_us_per_job": cpu / max(done, 1) * 1e6, "left": left, **d.per_job(done)}
    out["client_commands_per_job"] = sent / max(done, 1)  # counted by the loop itself (exact)
    if any(left.values()):
        out["error"] = f"left {left}"
    return out


# -- latency --------------------------------------------------------------------------------------------

class FileWatch:
    """Wait for appends to a file: inotify (IN_MODIFY) through libc, polling every 0.5 ms without it."""

    IN_MODIFY = 0x2

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buf = b""
        self.fd = -1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK)
            if fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), self.IN_MODIFY) >= 0:
                self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def wait_lines(self, timeout: float) -> tuple[float, list[dict]]:
        """Block until new complete lines appear; returns (time seen, lines)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self._read()
            if lines:
                return time.time(), lines
            left = deadline - time.monotonic()
            if left <= 0:
                return time.time(), []
            if self.fd >= 0:
                ready, _, _ = select.select([self.fd], [], [], left)
                if ready:
                    seen = time.time()
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.fd, 65536)
                    lines = self._read()
                    if lines:
                        return seen, lines
            else:
                time.sleep(0.0005)

    def _read(self) -> list[dict]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        if not data:
            return []
        self.offset += len(data)
        self.buf += data
        *complete, self.buf = self.buf.split(b"\n")
        return [json.loads(line) for line in complete if line.strip()]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def stop_processes(procs: Iterable[subprocess.Popen], grace: float) -> None:
    """SIGTERM every process, then wait ``grace`` seconds for each before killing it."""
    procs = list(procs)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure_latency_interleaved(lq: Laraq, sides: dict[str, tuple], samples: int,
                                gap: tuple[float, float] = (0.02, 0.04)) -> dict[str, dict]:
    """Pickup latency of several idle workers measured together: each waits on its own queue, and every
    round pushes one job to each side in a random order, one at a time (a job is pushed only when the
    previous one was seen). A side's samples then meet the same host load as the other's, which
    sequential runs on a shared machine do not give. ``sides``: label -> (cmd, env, cwd, log path,
    queue, output file). ``gap``: the random pause before each push (for polling workers it must span
    their ``--sleep``, so that a push lands at a random point of each worker's sleep)."""
    watches = {label: FileWatch(spec[3]) for label, spec in sides.items()}
    lat: dict[str, list[float]] = {label: [] for label in sides}
    handler_lat: dict[str, list[float]] = {label: [] for label in sides}
    peak = dict.fromkeys(sides, 0)
    procs = {}
    rng = random.Random(13)
    try:
        for label, (cmd, env, cwd, _log, _queue, outfile) in sides.items():
            with open(outfile, "ab") as out:
                procs[label] = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        for i in range(samples + 3):  # 3 warm-up jobs: the first waits for the workers to boot
            order = list(sides)
            rng.shuffle(order)
            for label in order:
                queue, outfile = sides[label][4], sides[label][5]
                time.sleep(rng.uniform(*gap))
                ts = time.time()
                job = lq.prepare("echo", queue, args={"args": {"ts": ts, "i": i}, "mode": "ok"})
                sent = time.time()
                lq.dispatcher.push(job)
                found = None
                while found is None:
                    seen, lines = watches[label].wait_lines(60 if i < 3 else 10)
                    if not lines:
                        raise RuntimeError(f"latency job {i} never ran (see {outfile})")
                    for line in lines:
                        args = line.get("args") or {}
                        if isinstance(args, dict) and args.get("i") == i:
                            found = (seen, line)
                if i >= 3:
                    lat[label].append(found[0] - sent)
                    if "t" in found[1]:
                        handler_lat[label].append(found[1]["t"] - sent)
                peak[label] = max(peak[label], rss_kb(procs[label].pid))
    finally:
        for watch in watches.values():
            watch.close()
        stop_processes(procs.values(), grace=15)
    results = {}
    for label in sides:
        # pickup: push to the start of the job's handle(), by the job's own clock (both sides log it);
        # "seen": push to the dispatcher reading the job's line, which cannot come before its own push
        # call returns (see compat-docs/performance.md: on a 2-CPU host the woken worker may hold the
        # CPU the dispatcher shares while Redis's reply to it waits)
        complete = len(handler_lat[label]) == len(lat[label])
        out = {"samples": len(lat[label]), "measure": "handler start" if complete else "line seen",
               **pct(handler_lat[label] if complete else lat[label]), "seen": pct(lat[label]),
               "pickup_ms": [round(x * 1000, 3) for x in (handler_lat[label] if complete else lat[label])]}
        results[label] = out
    for label in sides:  # laraq's p99 against artisan's, with how far chance alone moves the difference
        theirs = results.get("artisan" + label[5:]) if label.startswith("laraq") else None
        if theirs and theirs["measure"] == results[label]["measure"] and theirs["pickup_ms"]:
            results[label]["p99_vs_artisan_ms"] = p99_difference(results[label]["pickup_ms"], theirs["pickup_ms"])
    return results


# -- profiling --------------------------------------------------------------------------------------------

def profile_laraq(lq: Laraq, cmd: list[str], env: dict[str, str], cwd: Path, logfile: Path,
                  workdir: Path, top: int = 25, gil: bool = False) -> dict:
    """py-spy (250 Hz, worker and supervisor processes) over a whole no-op run; self/inclusive top
    functions. Default: every thread that is not idle (so time blocked in a socket read for a Redis
    reply counts); ``gil``: only the thread holding the GIL, i.e. Python actually computing."""
    spy = shutil.which("py-spy")
    if not spy:
        return {"error": "py-spy not installed (pip install py-spy)"}
    raw = workdir / ("pyspy-gil.txt" if gil else "pyspy.txt")
    rate = 250
    with open(logfile, "ab") as out:
        t0 = time.perf_counter()
        proc = subprocess.run([spy, "record", "--format", "raw", "--rate", str(rate), "--nonblocking", "--subprocesses",
                               *(["--gil"] if gil else []), "-o", str(raw), "--", *cmd],
                              env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    if proc.returncode != 0 or not raw.exists():
        return {"error": f"py-spy exited {proc.returncode} (see {logfile})"}
    self_c: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        n = int(n)
        total += n
        # a process frame ("process 123:\"python -c ...; ...\"") may itself hold ';': keep real frames only
        frames = [_short(f) for f in stack.split(";") if _FRAME.match(f)]
        if not frames:
            continue
        self_c[frames[-1]] += n
        for f in {re.sub(r":\d+\)$", ")", f) for f in frames}:  # inclusive: per function, any line
            incl[f] += n
    return {
        "samples": total,
        "mode": "gil" if gil else "all non-idle threads",
        "wall_s": wall,
        # share of the run's wall time in which some thread held the GIL (boot included)
        "gil_busy": total / (wall * rate) if gil else None,
        "self": [(f, n / total) for f, n in self_c.most_common(top)],
        "inclusive": [(f, n / total) for f, n in incl.most_common(top * 2)],
        # the worker's own functions only (laraq/*), inclusive: where a job's time goes
        "laraq_inclusive": [(f, n / total) for f, n in incl.most_common() if "(laraq/" in f][:top],
        "raw": str(raw),
    }


_FRAME = re.compile(r"(.*) \((.*):(\d+)\)$")


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py:123)"; keep site-packages module paths short
    m = re.match(r"(.*) \((.*):(\d+)\)$", frame)
    if not m:
        return frame
    func, path, lineno = m.groups()
    p = path
    for marker in ("site-packages/", "/laraq/", "lib/python3"):
        if marker in p:
            p = p.split(marker, 1)[1]
            if marker == "/laraq/":
                p = "laraq/" + p
            break
    return f"{func} ({p}:{lineno})"


# -- helpers ----------------------------------------------------------------------------------------------

def queue_left(r: redis.Redis, queue: str) -> dict:
    base = f"{PREFIX}queues:{queue}"
    return {"pending": r.llen(base), "reserved": r.zcard(base + ":reserved"), "delayed": r.zcard(base + ":delayed")}


def failed_jobs(php: Php | None) -> int:
    if php is None:
        return 0
    with sqlite3.connect(php.app.db_path) as db:
        return db.execute("select count(*) from failed_jobs").fetchone()[0]


def clear_queue(r: redis.Redis, queue: str) -> None:
    base = f"{PREFIX}queues:{queue}"
    r.delete(base, base + ":reserved", base + ":delayed", base + ":notify", base + ":poison")


def laraq_worker_ready() -> str | None:
    """None when ``laraq work`` exists; else why not."""
    if not (ROOT / "laraq" / "worker" / "worker.py").exists():
        return "laraq/worker/worker.py does not exist yet"
    cli = ROOT / "laraq" / "cli"
    if not any(cli.glob("work*.py")):
        return "laraq/cli/work.py does not exist yet"
    try:
        out = subprocess.run([sys.executable, "-m", "laraq.cli", "work", "--help"], capture_output=True, text=True,
                             timeout=60, cwd=ROOT)
    except subprocess.SubprocessError as exc:
        return f"laraq work --help failed: {exc}"
    if out.returncode != 0:
        out2 = subprocess.run(["laraq", "work", "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT) \
            if shutil.which("laraq") else out
        if out2.returncode != 0:
            return "laraq work --help failed: " + (out.stderr or out.stdout).strip()[-300:]
    return None


def laraq_work_help() -> str:
    for cmd in (["laraq", "work", "--help"], [sys.executable, "-m", "laraq.cli", "work", "--help"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
            if out.returncode == 0:
                return out.stdout
        except (OSError, subprocess.SubprocessError):
            continue
    return ""


# -- the run --------------------------------------------------------------------------------------------

@dataclass
class Config:
    noop: int
    io: int
    io_laraq: int
    cpu: int
    rounds: int
    io_seconds: float
    concurrency: int
    latency: int
    mem_small: int
    mem_large_laraq: int
    mem_large_php: int
    ceiling_batch: int
    profile_jobs: int
    #: --sleep of the latency runs without block_for (both sides)
    latency_sleep: float = 0.1
    #: interleaved rounds of the no-op variants, the ceiling and the probe (see interleaved_rounds)
    ratio_rounds: int = 4


FULL = Config(noop=20000, io=300, io_laraq=12000, cpu=4000, rounds=2000, io_seconds=0.05, concurrency=256,
              latency=500, mem_small=1000, mem_large_laraq=100000, mem_large_php=100000, ceiling_batch=100,
              profile_jobs=20000)
QUICK = Config(noop=3000, io=60, io_laraq=3000, cpu=600, rounds=2000, io_seconds=0.05, concurrency=256,
               latency=40, mem_small=1000, mem_large_laraq=10000, mem_large_php=10000, ceiling_batch=100,
               profile_jobs=0, ratio_rounds=2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small counts: a smoke run of about a minute")
    p.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    p.add_argument("--noop-jobs", type=int)
    p.add_argument("--io-jobs", type=int, help="I/O jobs for artisan (50 ms each, one at a time)")
    p.add_argument("--io-jobs-laraq", type=int, help="I/O jobs for laraq (run with --concurrency)")
    p.add_argument("--cpu-jobs", type=int)
    p.add_argument("--rounds", type=int, help="SHA-256 rounds per CPU-light job (default 2000, ~0.5 ms)")
    p.add_argument("--concurrency", type=int, help="laraq --concurrency for the I/O workload (default 256)")
    p.add_argument("--latency-samples", type=int)
    p.add_argument("--mem-large-laraq", type=int)
    p.add_argument("--mem-large-php", type=int)
    p.add_argument("--ceiling-batch", type=int)
    p.add_argument("--profile-jobs", type=int, help="no-op jobs for the py-spy run of the laraq worker (0: skip)")
    p.add_argument("--ratio-rounds", type=int,
                   help="interleaved rounds of the no-op variants, ceiling and probe (default 4; quick 2)")
    p.add_argument("--skip-php", action="store_true")
    p.add_argument("--skip-laraq", action="store_true")
    p.add_argument("--workloads", default="noop,io,cpu", help="comma list of noop,io,cpu")
    p.add_argument("--no-variants", action="store_true",
                   help="skip the extra laraq no-op runs (--no-supervise, sync handler)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, py-spy output)")
    p.add_argument("--no-laravel13", action="store_true",
                   help="skip artisan of the live Laravel 13 tree (../shared/laravel-live)")
    args = p.parse_args(argv)

    cfg = QUICK if args.quick else FULL
    for name, attr in [("noop_jobs", "noop"), ("io_jobs", "io"), ("io_jobs_laraq", "io_laraq"),
                       ("cpu_jobs", "cpu"), ("rounds", "rounds"), ("concurrency", "concurrency"),
                       ("latency_samples", "latency"), ("mem_large_laraq", "mem_large_laraq"),
                       ("mem_large_php", "mem_large_php"), ("ceiling_batch", "ceiling_batch"),
                       ("profile_jobs", "profile_jobs"), ("ratio_rounds", "ratio_rounds")]:
        v = getattr(args, name)
        if v is not None:
            setattr(cfg, attr, v)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]

    tmp = Path(tempfile.mkdtemp(prefix="laraq-bench-"))
    logs = tmp / "logs"
    logs.mkdir()
    log(f"work dir {tmp}")
    results: dict[str, Any] = {"machine": machine(), "config": cfg.__dict__.copy(), "quick": args.quick,
                               "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "workloads": {},
                               "notes": []}
    server = RedisServer(tmp)
    r = server.client
    try:
        have_php = not args.skip_php and shutil.which("php") is not None \
            and Path("/usr/share/php/Illuminate/autoload.php").exists()
        php = Php(server, tmp) if have_php else None
        if php is None and not args.skip_php:
            results["notes"].append("PHP/Laravel 8 missing: artisan side skipped")
        php13 = None
        if php is not None and not args.no_laravel13:
            sys.path.insert(0, str(ROOT / "tests"))
            from phpapp import live_missing

            why13 = live_missing("13")
            if why13 is None:
                php13 = Php(server, tmp, version="13")
            else:
                results["notes"].append(f"Laravel 13 artisan not run: {why13}")
        lq = Laraq(server, tmp)
        if php is not None:
            lq.db_path = php.app.db_path  # failed_jobs already created by Laravel's schema builder
        else:
            with sqlite3.connect(lq.db_path) as db:
                db.execute("create table if not exists failed_jobs (id integer primary key autoincrement, "
                           "uuid varchar not null unique, connection text not null, queue text not null, "
                           "payload text not null, exception text not null, "
                           "failed_at datetime default CURRENT_TIMESTAMP not null)")
        why = None if not args.skip_laraq else "--skip-laraq"
        if why is None:
            why = laraq_worker_ready()
        if why is None:
            help_text = laraq_work_help()
            if "--concurrency" not in help_text:
                results["notes"].append("laraq work has no --concurrency option")
        run_laraq = why is None
        if not run_laraq:
            results["notes"].append(f"laraq worker not run: {why}")
            log(f"laraq worker not run: {why}")

        spec = {
            "noop": dict(kind="echo", args={"args": [], "mode": "ok", "seconds": 0}, php_n=cfg.noop, laraq_n=cfg.noop,
                         concurrency=None, label="no-op"),
            "io": dict(kind="echo", args={"args": [], "mode": "sleep", "seconds": cfg.io_seconds}, php_n=cfg.io,
                       laraq_n=cfg.io_laraq, concurrency=cfg.concurrency,
                       label=f"I/O {int(cfg.io_seconds * 1000)} ms"),
            "cpu": dict(kind="hash", args=None, php_n=cfg.cpu, laraq_n=cfg.cpu, concurrency=None,
                        label=f"CPU {cfg.rounds}xSHA-256"),
        }

        # Baselines: each worker on an empty queue (boot + one empty poll + exit), subtracted below.
        base: dict[str, ProcResult] = {}
        if php:
            base["php"] = min((run_measured(php.worker_cmd("bench-empty"), php.env(), php.app_dir, r,
                                            logs / "php-empty.log") for _ in range(3)), key=lambda x: x.wall)
            log(f"artisan empty run: {base['php'].wall:.3f}s, {base['php'].maxrss_kb / 1024:.1f} MB")
        if php13:
            base["php13"] = min((run_measured(php13.worker_cmd("bench-empty"), php13.env(), php13.app_dir, r,
                                              logs / "php13-empty.log") for _ in range(3)), key=lambda x: x.wall)
            log(f"artisan (Laravel 13) empty run: {base['php13'].wall:.3f}s rc={base['php13'].rc}")
            if base["php13"].rc != 0:
                results["notes"].append("Laravel 13 artisan empty run failed: see logs")
                php13 = None
        if run_laraq:
            base["laraq"] = min((run_measured(lq.worker_cmd("bench-empty"), lq.env(), BENCH, r,
                                              logs / "laraq-empty.log") for _ in range(3)), key=lambda x: x.wall)
            log(f"laraq empty run: {base['laraq'].wall:.3f}s rc={base['laraq'].rc}")
            if not args.no_variants and "noop" in workloads:
                base["laraq-ns"] = min((run_measured(lq.worker_cmd("bench-empty") + ["--no-supervise"], lq.env(), BENCH,
                                                     r, logs / "laraq-empty.log") for _ in range(3)),
                                       key=lambda x: x.wall)
            if base["laraq"].rc != 0:
                results["notes"].append(f"laraq empty run exited {base['laraq'].rc}: see logs")
                log((logs / "laraq-empty.log").read_text()[-2000:])
                run_laraq = False
        results["baseline"] = {k: {"wall_s": v.wall, "maxrss_mb": v.maxrss_kb / 1024, "cpu_s": v.cpu,
                                   "commands": v.delta.total} for k, v in base.items()}

        def worker_row(side: str, cmd: list[str], env: dict, cwd: Path, n: int, queue: str,
                       baseline: str | None = None) -> dict:
            res = run_measured(cmd, env, cwd, r, logs / f"{side}-{queue}.log", drain=f"{PREFIX}queues:{queue}")
            left = queue_left(r, queue)
            b = base[baseline or side]
            # the work as Redis saw it (first pop to last delete); else the wall time minus an empty run's
            boot_subtracted = max(res.wall - b.wall, 1e-9)
            work = res.drain_s if res.drain_s else boot_subtracted
            d = res.delta.minus(b.delta)
            row = {"jobs": n, "wall_s": res.wall, "work_s": work, "jobs_per_s": n / work,
                   "work_measure": "drain" if res.drain_s else "wall - empty run",
                   "jobs_per_s_boot_subtracted": n / boot_subtracted,
                   "jobs_per_s_wall": n / res.wall, "peak_rss_mb": res.maxrss_kb / 1024,
                   "tree_rss_mb": res.tree_rss_kb / 1024, "processes": res.procs,
                   # over the drain window when the bench saw one; else the whole run minus an empty run
                   "worker_cpu_us_per_job": (res.drain_cpu / n * 1e6 if res.drain_cpu is not None
                                             else max(res.cpu - b.cpu, 0) / n * 1e6),
                   "worker_cpu_measure": "drain" if res.drain_cpu is not None else "run - empty run",
                   "worker_cpu_us_per_job_run_minus_empty": max(res.cpu - b.cpu, 0) / n * 1e6,
                   "rc": res.rc, "left": left,
                   "worker_user_us_per_job": max(res.user - b.user, 0) / n * 1e6,
                   "worker_sys_us_per_job": max(res.sys - b.sys, 0) / n * 1e6,
                   "voluntary_switches_per_job": max(res.nvcsw - b.nvcsw, 0) / n,
                   "involuntary_switches_per_job": max(res.nivcsw - b.nivcsw, 0) / n,
                   "root_rss_mb": res.root_rss_kb / 1024,
                   **d.per_job(n)}
            if res.rc != 0 or any(left.values()):
                row["error"] = f"exit {res.rc}, left {left} (log {logs / f'{side}-{queue}.log'})"
                log(f"!! {side} {queue}: {row['error']}")
            return row

        for w in workloads:
            s = spec[w]
            out: dict[str, Any] = {"label": s["label"]}
            results["workloads"][w] = out
            log(f"== workload {w}: {s['label']}")
            if php:
                q = f"bench-php-{w}"
                clear_queue(r, q)
                out["php_dispatch"] = php.dispatch(s["kind"], s["php_n"], q, args=s["args"], rounds=cfg.rounds)
                log(f"php dispatch {s['php_n']}: {out['php_dispatch']['jobs_per_s']:.0f} jobs/s")
                out["artisan"] = worker_row("php", php.worker_cmd(q), php.env(), php.app_dir, s["php_n"], q)
                log(f"artisan: {out['artisan']['jobs_per_s']:.0f} jobs/s")
            if php13 and w in ("noop", "cpu"):
                q = f"bench-php13-{w}"
                clear_queue(r, q)
                try:
                    out["php13_dispatch"] = php13.dispatch(s["kind"], s["php_n"], q, args=s["args"],
                                                           rounds=cfg.rounds)
                    out["artisan13"] = worker_row("php13", php13.worker_cmd(q), php13.env(), php13.app_dir,
                                                  s["php_n"], q)
                    log(f"artisan (Laravel 13): {out['artisan13']['jobs_per_s']:.0f} jobs/s")
                except (RuntimeError, ValueError) as exc:
                    results["notes"].append(f"Laravel 13 {w}: {exc}")
                clear_queue(r, q)
            q = f"bench-laraq-{w}"
            clear_queue(r, q)
            out["laraq_dispatch"] = lq.dispatch(s["kind"], s["laraq_n"], q, args=s["args"], rounds=cfg.rounds)
            log(f"laraq dispatch {s['laraq_n']}: {out['laraq_dispatch']['jobs_per_s']:.0f} jobs/s")
            if run_laraq:
                out["laraq"] = worker_row("laraq", lq.worker_cmd(q, concurrency=s["concurrency"]), lq.env(), BENCH,
                                          s["laraq_n"], q)
                out["laraq"]["concurrency"] = s["concurrency"]
                log(f"laraq: {out['laraq']['jobs_per_s']:.0f} jobs/s")
                if w == "noop" and not args.no_variants:
                    # Where does laraq's per-job time go? The same run without the supervisor process,
                    # with a plain (sync) handler instead of the async one, and so on; the ceiling and
                    # the probe take their turns among them (see interleaved_rounds).
                    variants = [("laraq", [], {}),
                                ("laraq_no_supervise", ["--no-supervise"], {}),
                                ("laraq_sync_handler", [], {"LARAQ_BENCH_SYNC": "1"}),
                                ("laraq_sync_no_supervise", ["--no-supervise"], {"LARAQ_BENCH_SYNC": "1"}),
                                ("laraq_concurrency_8", ["--concurrency", "8"], {}),
                                ("laraq_quiet", ["--quiet"], {}),
                                ("laraq_acks_batched", ["--acks", "batched"], {})]

                    def variant_run(queue: str, spec_w: dict, extra: list[str], env_extra: dict[str, str]) -> dict:
                        clear_queue(r, queue)
                        lq.fill(spec_w["kind"], spec_w["laraq_n"], queue, args=spec_w["args"])
                        return worker_row("laraq", lq.worker_cmd(queue) + extra, {**lq.env(), **env_extra}, BENCH,
                                          spec_w["laraq_n"], queue,
                                          "laraq-ns" if "--no-supervise" in extra else "laraq")

                    def redis_run(queue: str, spec_w: dict, measure: Callable[..., dict]) -> dict:
                        clear_queue(r, queue)
                        lq.fill("echo", cfg.noop, queue, args=spec_w["args"])
                        return measure(r, queue, cfg.noop, cfg.ceiling_batch)

                    items = [(key, functools.partial(variant_run, q, s, extra, env_extra))
                             for key, extra, env_extra in variants]
                    items += [("ceiling", functools.partial(redis_run, q, s, ceiling)),
                              ("fast_path_probe", functools.partial(redis_run, q, s, fast_path_probe))]
                    for key, runs in interleaved_rounds(items, max(1, cfg.ratio_rounds), log).items():
                        combined = out.get(key)  # the default's run right after the dispatch comes first
                        for run in runs:
                            combined = combine_runs(combined, run) if combined is not None else run
                        assert combined is not None
                        combined["rounds_jobs_per_s"] = [run["jobs_per_s"] for run in runs]
                        out[key] = combined
            if w == "noop" and php and not args.no_variants:
                # the dispatch rates again, in interleaved rounds on a scratch queue (one run each above)
                def dispatch_run(side: Any, queue: str, spec_w: dict) -> dict:
                    clear_queue(r, queue)
                    try:
                        return side.dispatch(spec_w["kind"], spec_w["php_n"], queue, args=spec_w["args"],
                                             rounds=cfg.rounds)
                    finally:
                        clear_queue(r, queue)

                sides_d = [("php_dispatch", php), ("laraq_dispatch", lq)] + (
                    [("php13_dispatch", php13)] if php13 and "php13_dispatch" in out else [])
                items_d = [(key, functools.partial(dispatch_run, side, "bench-dispatch", s)) for key, side in sides_d]
                for key, runs in interleaved_rounds(items_d, max(1, cfg.ratio_rounds), log).items():
                    if key in out:
                        out[key]["rounds_jobs_per_s"] = [run["jobs_per_s"] for run in runs]
            if run_laraq and w in ("noop", "cpu") and not args.no_variants:
                # prefork: every core (one supervisor, N worker processes)
                def prefork_run(queue: str, spec_w: dict, n: int) -> dict:
                    clear_queue(r, queue)
                    lq.fill(spec_w["kind"], spec_w["laraq_n"] * n, queue, args=spec_w["args"], rounds=cfg.rounds)
                    extra = ["--processes", str(n)] if n > 1 else []
                    row = worker_row("laraq", lq.worker_cmd(queue) + extra, lq.env(), BENCH, spec_w["laraq_n"] * n,
                                     queue)
                    row["processes_flag"] = n
                    return row

                if w == "cpu":
                    # 1 and 2 processes in interleaved rounds, with the same hashing in 1 and 2 plain Python
                    # processes (no Redis, no laraq) among them: what 2 cores give this work on this host now
                    hash_jobs = max(200, s["laraq_n"] // 2)
                    items_p = [("laraq", functools.partial(prefork_run, q, s, 1)),
                               ("laraq_processes_2", functools.partial(prefork_run, q, s, 2)),
                               ("hashing_1", functools.partial(hashing_alone, 1, hash_jobs, cfg.rounds)),
                               ("hashing_2", functools.partial(hashing_alone, 2, hash_jobs * 2, cfg.rounds))]
                    for key, runs in interleaved_rounds(items_p, max(1, cfg.ratio_rounds), log).items():
                        combined = out.get(key)  # the 1-process run right after the dispatch comes first
                        for run in runs:
                            combined = combine_runs(combined, run) if combined is not None else run
                        assert combined is not None
                        combined["rounds_jobs_per_s"] = [run["jobs_per_s"] for run in runs]
                        out[key] = combined
                else:
                    out["laraq_processes_2"] = prefork_run(q, s, 2)
                p2 = out["laraq_processes_2"]
                log(f"laraq_processes_2: {p2['jobs_per_s']:.0f} jobs/s, supervisor {p2['root_rss_mb']:.1f} MB")
            if w == "noop":
                if "ceiling" not in out:  # measured once when the variants' rounds did not run
                    clear_queue(r, q)
                    lq.fill("echo", cfg.noop, q, args=s["args"])
                    out["ceiling"] = ceiling(r, q, cfg.noop, cfg.ceiling_batch)
                    log(f"ceiling: {out['ceiling']['jobs_per_s']:.0f} jobs/s")
                if "fast_path_probe" not in out:
                    clear_queue(r, q)
                    lq.fill("echo", cfg.noop, q, args=s["args"])
                    out["fast_path_probe"] = fast_path_probe(r, q, cfg.noop, cfg.ceiling_batch)
                    log(f"fast-path probe: {out['fast_path_probe']['jobs_per_s']:.0f} jobs/s")
                for b in (1, cfg.ceiling_batch):
                    clear_queue(r, q)
                    lq.fill("echo", cfg.noop, q, args=s["args"])
                    out[f"prototype_{b}"] = prototype(server, q, b)
                    log(f"fast-path prototype x{b}: {out[f'prototype_{b}']['jobs_per_s']:.0f} jobs/s")
            else:
                out["ceiling"] = results["workloads"].get("noop", {}).get("ceiling")
            clear_queue(r, q)

        # Pickup latency: idle worker blocked on :notify (block_for = 5 s), one job at a time.
        results["latency"] = {}
        if cfg.latency:
            # block_for = 5 (idle workers blocked on :notify), then block_for unset (both poll, sleeping
            # --sleep between empty pops); artisan and laraq measured together, interleaved
            for mode in ("block", "sleep"):
                sides: dict[str, tuple] = {}
                for side in ("artisan", "laraq"):
                    if (side == "artisan" and not php) or (side == "laraq" and not run_laraq):
                        continue
                    q = f"bench-latency-{side}"
                    clear_queue(r, q)
                    suffix = "" if mode == "block" else "-sleep"
                    lp = tmp / f"{side}-latency{suffix}.jsonl"
                    lp.touch()
                    outfile = logs / f"{side}-latency{suffix}.log"
                    if side == "artisan" and mode == "block":
                        spec = (php.worker_cmd(q, stop_when_empty=False), php.env(block_for=5, log_path=lp),
                                php.app_dir)
                    elif side == "artisan":
                        spec = (php.worker_cmd(q, stop_when_empty=False, sleep=cfg.latency_sleep),
                                php.env(log_path=lp), php.app_dir)
                    elif mode == "block":
                        spec = (lq.worker_cmd(q, stop_when_empty=False, block_for=5), lq.env(log_path=lp), BENCH)
                    else:
                        spec = (lq.worker_cmd(q, stop_when_empty=False, sleep=cfg.latency_sleep),
                                lq.env(log_path=lp), BENCH)
                    label = side if mode == "block" else f"{side} --sleep={cfg.latency_sleep:g}"
                    sides[label] = (*spec, lp, q, outfile)
                if not sides:
                    continue
                log(f"latency: {' and '.join(sides)}, interleaved")
                gap = (0.02, 0.04) if mode == "block" else (0.02, 0.03 + cfg.latency_sleep)
                # a --sleep sample takes ~0.14 s a side, but its p99 is an order statistic of a random
                # phase (±0.7 ms at 200 samples of a 100 ms sleep): as many rounds as with block_for
                samples = cfg.latency
                results["latency"].update(measure_latency_interleaved(lq, sides, samples, gap))
                for label in sides:
                    clear_queue(r, sides[label][4])

        # Memory growth: peak RSS over a small and a large no-op run.
        results["memory"] = {}
        mem_sides = []
        if php:
            mem_sides.append(("artisan", "php", cfg.mem_large_php))
        if run_laraq:
            mem_sides.append(("laraq", "laraq", cfg.mem_large_laraq))
        for label, side, large in mem_sides:
            m = {}
            for n in (cfg.mem_small, large):
                q = f"bench-mem-{side}"
                clear_queue(r, q)
                lq.fill("echo", n, q, args={"args": [], "mode": "ok", "seconds": 0})
                cmd, env, cwd = ((php.worker_cmd(q), php.env(), php.app_dir) if side == "php"
                                 else (lq.worker_cmd(q), lq.env(), BENCH))
                log(f"memory: {label} {n} jobs")
                res = run_measured(cmd, env, cwd, r, logs / f"{side}-mem-{n}.log")
                m[str(n)] = {"peak_rss_mb": res.maxrss_kb / 1024, "wall_s": res.wall, "rc": res.rc,
                             "left": queue_left(r, q)}
                clear_queue(r, q)
            results["memory"][label] = m

        # Profile: py-spy over a laraq no-op run.
        if run_laraq and cfg.profile_jobs:
            q = "bench-profile"
            clear_queue(r, q)
            lq.fill("echo", cfg.profile_jobs, q, args={"args": [], "mode": "ok", "seconds": 0})
            log(f"profile: py-spy over laraq, {cfg.profile_jobs} no-op jobs")
            prof = profile_laraq(lq, lq.worker_cmd(q), lq.env(), BENCH, logs / "laraq-profile.log", tmp)
            prof["jobs"] = cfg.profile_jobs
            results["profile"] = prof
            clear_queue(r, q)
            lq.fill("echo", cfg.profile_jobs, q, args={"args": [], "mode": "ok", "seconds": 0})
            log(f"profile: py-spy --gil over laraq, {cfg.profile_jobs} no-op jobs")
            prof = profile_laraq(lq, lq.worker_cmd(q), lq.env(), BENCH, logs / "laraq-profile.log", tmp, gil=True)
            prof["jobs"] = cfg.profile_jobs
            results["profile_gil"] = prof
            clear_queue(r, q)
    finally:
        server.stop()

    results["failed_jobs_php"] = failed_jobs(php) if "php" in dir() and php else 0
    text = render(results)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        log(f"wrote {args.json}")
    if args.keep:
        log(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


# -- rendering ------------------------------------------------------------------------------------------

def _f(v: Any, fmt: str = "{:,.0f}") -> str:
    if v is None:
        return "-"
    try:
        return fmt.format(v)
    except (TypeError, ValueError):
        return str(v)


def _cmds(v: float) -> str:
    return f"{v:.2f}" if v < 1 else f"{v:.1f}"


def _targets(res: dict) -> list[str]:
    """The performance targets' ratios (laraq against artisan, the ceiling and the probe), all from this run."""
    wl = res.get("workloads") or {}
    noop, cpu = wl.get("noop") or {}, wl.get("cpu") or {}
    out: list[str] = []

    def rate(o: dict, k: str) -> float | None:
        return (o.get(k) or {}).get("jobs_per_s")

    default = rate(noop, "laraq")
    variant_keys = ("laraq", "laraq_no_supervise", "laraq_sync_handler", "laraq_sync_no_supervise",
                    "laraq_concurrency_8")
    if default and round_stats(noop.get("laraq")) is not None:
        # every row's best interleaved run, and the median run beside it (see interleaved_rounds)
        stats = {k: round_stats(noop.get(k)) for k in (*variant_keys, "laraq_quiet", "laraq_acks_batched", "ceiling",
                                                       "fast_path_probe")}
        best_key = max((k for k in variant_keys if stats[k]), key=lambda k: stats[k][0])  # type: ignore[index]
        mine = stats["laraq"]
        assert mine is not None

        def both(a: tuple[float, float], b: tuple[float, float]) -> str:
            return f"{a[0] / b[0]:.2f} (median runs: {a[1] / b[1]:.2f})"

        rounds = len(noop["laraq"]["rounds_jobs_per_s"])
        out.append(f"- (ratios of the best of {rounds} interleaved runs per row; the medians' ratio in brackets)")
        out.append(f"- default vs best laraq no-op row ({best_key}): {both(mine, stats[best_key])} "  # type: ignore[arg-type]
                   f"(target ≥ 0.91)")
        # the same question by CPU over the work: no waits on Redis or on other processes in it, though a
        # busy host still moves it (compat-docs/performance.md, the host's noise)
        by_cpu = {k: noop[k]["worker_cpu_us_per_job"] for k in variant_keys
                  if (noop.get(k) or {}).get("worker_cpu_measure") == "drain"}
        if "laraq" in by_cpu and len(by_cpu) > 1:
            least = min(by_cpu, key=lambda k: by_cpu[k])
            out.append(f"  by worker CPU over the work (mean of the runs): default {by_cpu['laraq']:.1f} µs/job, "
                       f"least {least} {by_cpu[least]:.1f}: {by_cpu[least] / by_cpu['laraq']:.2f}")
        for name, key, target in [("pop_many probe", "fast_path_probe", 0.5),
                                  ("pipelined ceiling", "ceiling", 1.0)]:
            theirs = stats[key]
            if theirs:
                out.append(f"- default no-op / {name}: {both(mine, theirs)} (target ≥ {target})")
                quiet = stats["laraq_quiet"]
                if quiet:  # what the two console lines per job cost (artisan writes them too)
                    out.append(f"  (--quiet, no console lines: {both(quiet, theirs)})")
                batched = stats["laraq_acks_batched"]
                if batched:  # what writing each ack at once (the SIGKILL bound) costs
                    out.append(f"  (--acks batched: {both(batched, theirs)})")
        out.append("  runs, jobs/s in the order they ran: " + "; ".join(
            f"{k} " + " / ".join(f"{v:,.0f}" for v in noop[k]["rounds_jobs_per_s"])
            for k in (*variant_keys, "laraq_quiet", "laraq_acks_batched", "ceiling", "fast_path_probe") if stats[k]))
    elif default:  # --no-variants: one run of each
        rows = {k: rate(noop, k) for k in variant_keys}
        best_key = max((k for k, v in rows.items() if v), key=lambda k: rows[k] or 0)
        out.append(f"- default vs best laraq no-op row ({best_key}): {default / rows[best_key]:.2f} "
                   f"(target ≥ 0.91)")
        for name, key, target in [("pop_many probe", "fast_path_probe", 0.5),
                                  ("pipelined ceiling", "ceiling", 1.0)]:
            if rate(noop, key):
                out.append(f"- default no-op / {name}: {default / rate(noop, key):.2f} (target ≥ {target})")
    one, two = rate(cpu, "laraq"), rate(cpu, "laraq_processes_2")
    if one and two:
        p2 = cpu["laraq_processes_2"]
        one_r, two_r = round_stats(cpu.get("laraq")), round_stats(cpu.get("laraq_processes_2"))
        if one_r and two_r:
            scaling = (f"best runs {two_r[0] / one_r[0]:.2f}x (medians {two_r[1] / one_r[1]:.2f}x, "
                       f"{len(cpu['laraq_processes_2']['rounds_jobs_per_s'])} interleaved rounds)")
        else:
            scaling = f"{two / one:.2f}x"
        probe = rate(noop, "fast_path_probe")
        out.append(f"- CPU-light --processes 2 / 1 process: {scaling} (target ≥ 1.7x)"
                   + (f"; Redis-side ceiling (pop_many probe) {_f(probe)} jobs/s = {two / probe:.2f} of it"
                      if probe else ""))
        h1, h2 = round_stats(cpu.get("hashing_1")), round_stats(cpu.get("hashing_2"))
        if h1 and h2 and one_r and two_r:  # the host's own ceiling for two processes of this work
            out.append(f"  the same hashing alone (no Redis, no laraq), 2 processes / 1: best runs {h2[0] / h1[0]:.2f}x "
                       f"(medians {h2[1] / h1[1]:.2f}x); --processes 2 reached {two_r[0] / h2[0]:.2f} of 2 such "
                       f"processes, 1 process {one_r[0] / h1[0]:.2f} of 1")
        out.append(f"- supervisor RSS {p2.get('root_rss_mb', 0):.1f} MB (target ≤ 15); total RSS per job slot "
                   f"{p2.get('tree_rss_mb', 0) / 2:.1f} MB with 2 processes, "
                   f"{(cpu.get('laraq') or {}).get('tree_rss_mb', 0):.1f} MB with 1 (supervisor included); "
                   f"artisan {(cpu.get('artisan') or {}).get('peak_rss_mb', 0):.1f} MB (Laravel 8), "
                   f"{(cpu.get('artisan13') or {}).get('peak_rss_mb', 0):.1f} MB (Laravel 13) per slot")
    mine_d, php_d, php13_d = (round_stats(noop.get(k)) for k in ("laraq_dispatch", "php_dispatch", "php13_dispatch"))
    if mine_d and php_d:
        out.append(f"- dispatch laraq / PHP (no-op jobs; best of {len(noop['laraq_dispatch']['rounds_jobs_per_s'])} "
                   f"interleaved runs, medians in brackets): {mine_d[0] / php_d[0]:.2f} ({mine_d[1] / php_d[1]:.2f}) "
                   f"(target ≥ 1)" + (f"; / PHP on Laravel 13: {mine_d[0] / php13_d[0]:.2f} ({mine_d[1] / php13_d[1]:.2f})"
                                      if php13_d else ""))
    elif (noop.get("laraq_dispatch") or {}).get("jobs_per_s") and (noop.get("php_dispatch") or {}).get("jobs_per_s"):
        out.append(f"- dispatch laraq / PHP (no-op jobs): "
                   f"{noop['laraq_dispatch']['jobs_per_s'] / noop['php_dispatch']['jobs_per_s']:.2f} (target ≥ 1)"
                   + (f"; / PHP on Laravel 13: {noop['laraq_dispatch']['jobs_per_s'] / noop['php13_dispatch']['jobs_per_s']:.2f}"
                      if (noop.get("php13_dispatch") or {}).get("jobs_per_s") else ""))
    lat = res.get("latency") or {}
    for mine, theirs in [("laraq", "artisan")] + [(k, "artisan" + k[5:]) for k in lat if k.startswith("laraq --sleep")]:
        if lat.get(mine, {}).get("p99_ms") and lat.get(theirs, {}).get("p99_ms"):
            out.append(f"- pickup p99 {mine}: {lat[mine]['p99_ms']:.2f} ms vs {theirs} {lat[theirs]['p99_ms']:.2f} ms "
                       f"({lat[mine].get('measure', 'line seen')}; target ≤)"
                       + (f"; line seen by the dispatcher: {lat[mine]['seen']['p99_ms']:.2f} vs "
                          f"{lat[theirs]['seen']['p99_ms']:.2f} ms" if lat[mine].get("seen") and lat[theirs].get("seen")
                          else ""))
            ci = lat[mine].get("p99_vs_artisan_ms")
            if ci:
                out.append(f"  (p99 difference {ci['diff']:+.2f} ms, 95 % bootstrap interval {ci['low']:+.2f} to "
                           f"{ci['high']:+.2f} ms)")
    return ["", "Targets (ratios from this run)"] + out if out else []


def render(res: dict) -> str:
    m = res["machine"]
    lines = [
        f"laraq benchmark ({'quick' if res['quick'] else 'full'} run, {res['started']})",
        f"machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']}, Linux {m['kernel']}",
        f"{m['redis']} | {m['php']} (phpredis {m['php_redis']}), Laravel {m['laravel']} | "
        f"Python {m['python']}, redis-py {m['redis_py']}",
        "",
        "Throughput (one worker each; worker jobs/s over the work as Redis saw it: first pop to last job deleted)",
        "| workload | runner | jobs | dispatch jobs/s | worker jobs/s | Redis cmds/job (client) | Redis CPU µs/job "
        "| worker CPU µs/job | peak RSS MB (largest process) | laraq/artisan | laraq/ceiling |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w, out in res["workloads"].items():
        label = out["label"]
        ceil = out.get("ceiling") or {}
        art = out.get("artisan") or {}
        for runner, key, disp in [("artisan", "artisan", "php_dispatch"),
                                  ("artisan, live Laravel 13", "artisan13", "php13_dispatch"),
                                  ("laraq", "laraq", "laraq_dispatch"),
                                  ("laraq --processes 2", "laraq_processes_2", None),
                                  ("laraq --no-supervise", "laraq_no_supervise", None),
                                  ("laraq, sync handler", "laraq_sync_handler", None),
                                  ("laraq --no-supervise, sync handler", "laraq_sync_no_supervise", None),
                                  ("laraq --concurrency 8", "laraq_concurrency_8", None),
                                  ("laraq --quiet (no per-job console lines)", "laraq_quiet", None),
                                  ("laraq --acks batched", "laraq_acks_batched", None),
                                  ("the hashing alone, 1 process (no Redis, no laraq)", "hashing_1", None),
                                  ("the hashing alone, 2 processes", "hashing_2", None)]:
            row = out.get(key)
            d = out.get(disp) or {} if disp else {}
            if row is None and not d:
                continue
            row = row or {}
            ratio_a = ratio_c = "-"
            if runner.startswith("laraq") and row.get("jobs_per_s"):
                if art.get("jobs_per_s"):
                    ratio_a = f"{row['jobs_per_s'] / art['jobs_per_s']:.2f}x"
                if ceil.get("jobs_per_s") and w == "noop":
                    ratio_c = f"{row['jobs_per_s'] / ceil['jobs_per_s']:.2f}"
            name = runner + (f" (concurrency {row['concurrency']})" if row.get("concurrency") else "")
            err = " ⚠" if row.get("error") else ""
            rss = _f(row.get("peak_rss_mb"), "{:.1f}")
            if row.get("processes", 1) > 1:
                rss += f" ({_f(row.get('tree_rss_mb'), '{:.1f}')} in {row['processes']} procs)"
            lines.append(
                f"| {label} | {name}{err} | {_f(row.get('jobs') or d.get('jobs'))} | {_f(d.get('jobs_per_s'))} "
                f"| {_f(row.get('jobs_per_s'))} "
                f"| {_f(row.get('commands_per_job'), '{:.1f}')} ({_f(row.get('client_commands_per_job'), '{:.1f}')}) "
                f"| {_f(row.get('redis_cpu_us_per_job'), '{:.1f}')} | {_f(row.get('worker_cpu_us_per_job'))} "
                f"| {rss} | {ratio_a} | {ratio_c} |")
        if w == "noop":
            for name, key in [(f"ceiling (Laravel's 4 ops, pipelined x{ceil.get('batch', '?')})", "ceiling"),
                              (f"fast-path probe (pop_many x{(out.get('fast_path_probe') or {}).get('batch', '?')})",
                               "fast_path_probe")] + [
                    (f"fast-path prototype x{k.split('_')[1]} (bench/fastpath.py, in-process)", k)
                    for k in sorted(out, key=lambda k: int(k.split("_")[1]) if k.startswith("prototype_") else 0)
                    if k.startswith("prototype_")]:
                c = out.get(key)
                if not c:
                    continue
                lines.append(
                    f"| {label} | {name} | {_f(c['jobs'])} | - | {_f(c['jobs_per_s'])} "
                    f"| {c['commands_per_job']:.1f} ({_cmds(c['client_commands_per_job'])}) "
                    f"| {c['redis_cpu_us_per_job']:.1f} | {_f(c.get('worker_cpu_us_per_job'))} | - "
                    f"| {_f(c['jobs_per_s'] / art['jobs_per_s'], '{:.2f}x') if art.get('jobs_per_s') else '-'} "
                    f"| {_f(c['jobs_per_s'] / ceil['jobs_per_s'], '{:.2f}') if ceil.get('jobs_per_s') else '-'} |")
    lines += _targets(res)
    lat = res.get("latency") or {}
    if lat:
        lines += ["", "Pickup latency (idle worker blocked on :notify, block_for=5, or polling with --sleep and "
                  "no block_for). pickup: push → the job's handle() starts (its own clock, both sides); "
                  "seen: push → the dispatcher reads the job's log line",
                  "| runner | measure | samples | p50 ms | p90 ms | p99 ms | max ms |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for runner, v in lat.items():
            rows = [(v.get("measure", "line seen"), v)]
            if v.get("measure") == "handler start" and v.get("seen"):
                rows.append(("line seen", v["seen"]))
            for measure, r in rows:
                lines.append(f"| {runner} | {measure} | {v.get('samples')} | {_f(r.get('p50_ms'), '{:.2f}')} "
                             f"| {_f(r.get('p90_ms'), '{:.2f}')} | {_f(r.get('p99_ms'), '{:.2f}')} "
                             f"| {_f(r.get('max_ms'), '{:.2f}')} |")
    mem = res.get("memory") or {}
    if mem:
        lines += ["", "Memory growth (peak RSS of one worker over a no-op run of N jobs)",
                  "| runner | N small | RSS MB | N large | RSS MB | growth MB |", "|---|---:|---:|---:|---:|---:|"]
        for runner, v in mem.items():
            (ns, a), (nl, b) = list(v.items())[0], list(v.items())[-1]
            lines.append(f"| {runner} | {int(ns):,} | {a['peak_rss_mb']:.1f} | {int(nl):,} | {b['peak_rss_mb']:.1f} "
                         f"| {b['peak_rss_mb'] - a['peak_rss_mb']:+.1f} |")
    for key in ("profile", "profile_gil"):
        prof = res.get(key)
        if not prof:
            continue
        what = ("only the thread holding the GIL" if key == "profile_gil"
                else "all non-idle threads: waiting for a Redis reply counts")
        lines += ["", f"py-spy profile of the laraq worker, no-op workload ({prof.get('jobs')} jobs; {what})"]
        if prof.get("error"):
            lines.append("  " + prof["error"])
            continue
        busy = f"; GIL held {prof['gil_busy'] * 100:.0f}% of the run's wall time" if prof.get("gil_busy") else ""
        lines.append(f"  samples: {prof['samples']}{busy}; top self time:")
        lines += [f"  {share * 100:5.1f}%  {f}" for f, share in prof["self"][:15]]
        lines.append("  laraq functions, inclusive (share of samples):")
        lines += [f"  {share * 100:5.1f}%  {f}" for f, share in prof.get("laraq_inclusive", [])[:20]]
    if res.get("notes"):
        lines += ["", "Notes:"] + [f"- {n}" for n in res["notes"]]
    errors = [f"{w}/{k}: {v['error']}" for w, o in res["workloads"].items() for k, v in o.items()
              if isinstance(v, dict) and v.get("error")]
    if errors:
        lines += ["", "Errors:"] + [f"- {e}" for e in errors]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
