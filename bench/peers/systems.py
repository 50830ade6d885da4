"""The systems ``bench/peers/run.py`` compares: how each enqueues with its own client, starts one worker,
shows what is left to do, and proves at the end that it ran every job (its own counters).

Each :class:`System` runs its peer from the peers directory ``bench/peers/setup.sh`` fills (one venv per
Python peer, BullMQ's ``node_modules``), with the job code in ``bench/peers/drivers/``. ``remaining``
reads the system's own keys in Redis (one pipelined round trip, polled every few ms): the jobs not yet
finished where the system keeps in-flight jobs in Redis, else (Sidekiq) those not yet taken.
``finish`` stops the worker when it does not stop by itself and returns the completion check.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"
BENCH = HERE.parent
sys.path.insert(0, str(BENCH))

from run import LARAVEL  # noqa: E402
from scale import ECHO, PREFIX, Sides  # noqa: E402

#: the default's Redis traffic from a bare loop, with no job model (``bench/floor.py``)
FLOOR = BENCH / "floor.py"


def peers_dir() -> Path:
    return Path(os.environ.get("LARAQ_PEERS_DIR") or Path.home() / ".cache" / "laraq-bench-peers")


@dataclass
class Variant:
    """One row: a system in one mode on one workload."""

    system: str
    mode: str
    kind: str  # noop, io_async, io_sync
    concurrency: int
    opts: dict[str, Any] = field(default_factory=dict)
    #: this row runs ``jobs * jobs_factor`` jobs (rq's fork-per-job worker)
    jobs_factor: float = 1.0
    #: a ``--quick`` row (each system's throughput settings: one row per system keeps the smoke run short)
    quick: bool = True

    @property
    def key(self) -> str:
        return f"{self.system}|{self.mode}|{self.kind}"


@dataclass
class Ctx:
    """What every run shares: the bench's Redis, laraq/artisan sides, the I/O server's port, a work dir."""

    sides: Sides
    client: redis.Redis
    url: str
    io_port: int
    workdir: Path
    queue: str = "peers"
    #: Redis CPU seconds per second of the bench's polling alone (``run.polling_cost``)
    poll_cost: float = 0.0


@dataclass
class Check:
    """The completion check: jobs the system counts as completed and failed, how it was counted."""

    completed: int | None
    failed: int
    how: str
    left: int = 0

    def ok(self, n: int) -> bool:
        return self.completed == n and self.failed == 0 and self.left == 0


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bool, Any]:
    """Wait for ``proc`` with ``wait4``: (exited, its rusage, its reaped children included)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return True, usage
        if time.monotonic() > deadline:
            return False, None
        time.sleep(0.01)


def stop(proc: subprocess.Popen[bytes], grace: float = 30) -> Any:
    """SIGTERM the worker's process group (the system's graceful stop), SIGKILL after ``grace``: its rusage."""
    if proc.returncode is None:  # never poll(): its waitpid would reap the rusage wait4 reads
        with _quiet():
            os.killpg(proc.pid, signal.SIGTERM)
    done, usage = wait_exit(proc, grace)
    if not done:
        with _quiet():
            os.killpg(proc.pid, signal.SIGKILL)
        done, usage = wait_exit(proc, 10)
    return usage


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], (ProcessLookupError, ChildProcessError))


def until(fn: Callable[[], Any], ok: Callable[[Any], bool], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(every)


class System:
    name = ""
    #: the worker exits by itself once the queue is empty
    self_exits = False

    def missing(self) -> str | None:
        """None when installed; else why not (from setup's status file)."""
        status = peers_dir() / "status.txt"
        if not status.exists():
            return f"{status} missing: run bench/peers/setup.sh"
        for line in status.read_text().splitlines():
            name, _, rest = line.partition(" ")
            if name == self.name:
                return None if rest.startswith("ok") else rest
        return f"not in {status}: run bench/peers/setup.sh"

    def version(self) -> str:
        status = peers_dir() / "status.txt"
        for line in status.read_text().splitlines() if status.exists() else []:
            name, _, rest = line.partition(" ")
            if name == self.name:
                return rest.removeprefix("ok (").removeprefix("already installed: ").removeprefix("installed ") \
                    .rstrip(")")
        return "?"

    def env(self, ctx: Ctx, v: Variant) -> dict[str, str]:
        env = {k: val for k, val in os.environ.items() if not k.startswith(("PEERS_", "LARAQ_", "PYTHON"))}
        env.update({"PEERS_REDIS_URL": ctx.url, "PEERS_QUEUE": ctx.queue, "PEERS_IO_PORT": str(ctx.io_port),
                    "PEERS_CONCURRENCY": str(v.concurrency), "PYTHONPATH": str(DRIVERS),
                    "PYTHONUNBUFFERED": "1"})
        return env

    def enqueue(self, ctx: Ctx, v: Variant, n: int) -> None:
        raise NotImplementedError

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        raise NotImplementedError

    def remaining(self, ctx: Ctx) -> int:
        raise NotImplementedError

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        """Stop the worker if it does not stop itself; the completion check and the worker's rusage."""
        raise NotImplementedError

    def _run(self, cmd: list[str], env: dict[str, str], cwd: Path = DRIVERS, timeout: float = 600) -> str:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"{self.name}: {' '.join(cmd[:4])} exited {proc.returncode}: "
                               f"{(proc.stderr or proc.stdout)[-1500:]}")
        return proc.stdout


class PyPeer(System):
    """A Python peer: its venv's interpreter, its ``drivers/t_<name>.py``."""

    def python(self) -> str:
        return str(peers_dir() / "py" / self.name / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(peers_dir() / "py" / self.name / "bin" / name)

    def enqueue(self, ctx: Ctx, v: Variant, n: int) -> None:
        self._run([self.python(), f"t_{self.name}.py", "enqueue", str(n), v.kind], self.env(ctx, v))


# -- laraq and artisan ------------------------------------------------------------------------------------

class Laravel(System):
    """The Laravel queue's keys; jobs pushed as Laravel pushes them (laraq's ``Dispatcher.bulk``)."""

    self_exits = True

    def keys(self, ctx: Ctx) -> tuple[str, str, str]:
        base = f"{PREFIX}queues:{ctx.queue}"
        return base, base + ":reserved", base + ":delayed"

    def enqueue(self, ctx: Ctx, v: Variant, n: int) -> None:
        args = {"mode": "ok"} if v.kind == "noop" else {"mode": "io"}
        ctx.sides.laraq.dispatch("echo", n, ctx.queue, args=args)

    def remaining(self, ctx: Ctx) -> int:
        lst, reserved, delayed = self.keys(ctx)
        pipe = ctx.client.pipeline(transaction=False)
        pipe.llen(lst)
        pipe.zcard(reserved)
        pipe.zcard(delayed)
        return sum(pipe.execute())

    def failed_jobs(self, ctx: Ctx) -> int:
        with sqlite3.connect(ctx.sides.laraq.db_path) as db:
            return int(db.execute("select count(*) from failed_jobs").fetchone()[0])

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        done, usage = wait_exit(proc, 60)
        if not done:
            usage = stop(proc)
        failed = self.failed_jobs(ctx)
        with sqlite3.connect(ctx.sides.laraq.db_path) as db:
            db.execute("delete from failed_jobs")
        left = self.remaining(ctx)
        ok_exit = proc.returncode == 0
        return Check(n - left - failed if ok_exit else None, failed,
                     f"list, :reserved, :delayed empty; failed_jobs rows {failed}; exit {proc.returncode}",
                     left), usage


class Laraq(Laravel):
    name = "laraq"

    def missing(self) -> str | None:
        return None

    def version(self) -> str:
        try:
            import laraq
            return str(getattr(laraq, "__version__", "?"))
        except ImportError:
            return "?"

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        if v.opts.get("floor"):
            return [sys.executable, str(FLOOR), ctx.url, PREFIX, ctx.queue, LARAVEL, ECHO], \
                ctx.sides.laraq.env(), ctx.workdir
        concurrency = v.concurrency if v.concurrency > 1 else None
        cmd = ctx.sides.laraq.worker_cmd(ctx.queue, stop_when_empty=True, sleep=1, concurrency=concurrency)
        cmd += v.opts.get("args", [])
        env = ctx.sides.laraq.env()
        if v.kind != "noop":
            cmd[cmd.index("handlers:app")] = "laraq_io:app"
            env["PYTHONPATH"] = os.pathsep.join([str(DRIVERS), env.get("PYTHONPATH", "")])
            env["PEERS_IO_PORT"] = str(ctx.io_port)
        if v.kind == "io_sync":
            env["LARAQ_BENCH_SYNC"] = "1"
        return cmd, env, ctx.workdir


class Artisan(Laravel):
    name = "artisan"

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        php = ctx.sides.php
        assert php is not None
        return php.worker_cmd(ctx.queue, stop_when_empty=True, sleep=1), php.env(), php.app_dir


# -- the Python peers -------------------------------------------------------------------------------------

class Rq(PyPeer):
    name = "rq"
    self_exits = True

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        cmd = [self.bin("rq"), "worker", "--burst", "--url", ctx.url, *v.opts.get("args", []), ctx.queue]
        return cmd, self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        pipe = ctx.client.pipeline(transaction=False)
        pipe.llen(f"rq:queue:{ctx.queue}")
        pipe.zcard(f"rq:wip:{ctx.queue}")
        return sum(pipe.execute())

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        done, usage = wait_exit(proc, 60)
        if not done:
            usage = stop(proc)
        finished = int(ctx.client.zcard(f"rq:finished:{ctx.queue}"))
        failed = int(ctx.client.zcard(f"rq:failed:{ctx.queue}"))
        return Check(finished, failed, "FinishedJobRegistry / FailedJobRegistry (results kept: result_ttl 500 s)",
                     self.remaining(ctx)), usage


class Dramatiq(PyPeer):
    name = "dramatiq"

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        cmd = [self.bin("dramatiq"), "t_dramatiq", "--processes", "1", "--threads", str(v.concurrency),
               "--queues", ctx.queue]
        return cmd, self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        # the broker keeps each message in <queue>.msgs until its ack (done or dead-lettered)
        return int(ctx.client.hlen(f"dramatiq:{ctx.queue}.msgs"))

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        usage = stop(proc)
        pipe = ctx.client.pipeline(transaction=False)
        pipe.hlen(f"dramatiq:{ctx.queue}.msgs")
        pipe.llen(f"dramatiq:{ctx.queue}")
        pipe.zcard(f"dramatiq:{ctx.queue}.XQ")
        unacked, listed, dead = pipe.execute()
        return Check(n - unacked - dead, int(dead),
                     ".msgs hash (messages until acked) and the queue list empty, dead-letter .XQ count",
                     int(unacked + listed)), usage


class Celery(PyPeer):
    name = "celery"

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        cmd = [self.bin("celery"), "-A", "t_celery", "worker", "-Q", ctx.queue, "-l", "warning",
               "-n", f"peers@{os.getpid()}", *v.opts.get("args", [])]
        return cmd, self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        pipe = ctx.client.pipeline(transaction=False)
        pipe.llen(ctx.queue)
        pipe.hlen("unacked")
        return sum(pipe.execute())

    def stats(self, ctx: Ctx, v: Variant) -> dict[str, Any]:
        try:
            out = self._run([self.python(), "t_celery.py", "stats", "1"], self.env(ctx, v), timeout=60)
            return json.loads(out.strip().splitlines()[-1] or "{}")
        except (RuntimeError, ValueError, IndexError, subprocess.SubprocessError):
            return {}

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        def total(stats: dict[str, Any]) -> int:
            return sum(sum(t.values()) for t in stats.values())

        stats = until(lambda: self.stats(ctx, v), lambda s: total(s) >= n, 20, every=0.5)
        usage = stop(proc)
        return Check(total(stats), 0, "inspect().stats() 'total' (tasks received and run, no result backend)",
                     self.remaining(ctx)), usage


class Arq(PyPeer):
    name = "arq"
    self_exits = True

    def env(self, ctx: Ctx, v: Variant) -> dict[str, str]:
        env = super().env(ctx, v)
        env.update({f"PEERS_ARQ_{k.upper()}": str(val) for k, val in v.opts.items()})
        return env

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        return [self.python(), "t_arq.py", "work"], self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        # a job leaves arq's queue sorted set when it finishes
        return int(ctx.client.zcard(ctx.queue))

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        done, usage = wait_exit(proc, 60)
        if not done:
            usage = stop(proc)
        counts: dict[str, int] = {}
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if line.startswith("{"):
                counts = json.loads(line)
                break
        return Check(counts.get("complete"), int(counts.get("failed", 0)) + int(counts.get("retried", 0)),
                     "Worker.jobs_complete / jobs_failed / jobs_retried (burst mode)", self.remaining(ctx)), usage


class Saq(PyPeer):
    name = "saq"

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        return [self.bin("saq"), "t_saq.settings", "--workers", "1"], self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        return int(ctx.client.zcard(f"saq:{ctx.queue}:incomplete"))

    def counts(self, ctx: Ctx) -> dict[str, int]:
        out = {"complete": 0, "failed": 0, "retried": 0, "aborted": 0}
        for key in ctx.client.scan_iter(f"saq:{ctx.queue}:worker_info:*"):
            raw = ctx.client.get(key)
            stats = json.loads(raw).get("stats", {}) if raw else {}
            for k in out:
                out[k] += int(stats.get(k, 0))
        return out

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        counts = until(lambda: self.counts(ctx), lambda c: c["complete"] + c["failed"] >= n, 5)
        usage = stop(proc)
        return Check(counts["complete"], counts["failed"],
                     f"{counts} " + "worker_info stats 'complete'/'failed' (written each second; job records kept: ttl 600 s)",
                     self.remaining(ctx)), usage


# -- BullMQ and Sidekiq -----------------------------------------------------------------------------------

class BullMQ(System):
    name = "bullmq"

    def env(self, ctx: Ctx, v: Variant) -> dict[str, str]:
        env = super().env(ctx, v)
        env["NODE_PATH"] = str(peers_dir() / "node" / "node_modules")
        return env

    def enqueue(self, ctx: Ctx, v: Variant, n: int) -> None:
        self._run(["node", "bullmq.js", "enqueue", str(n), v.kind], self.env(ctx, v))

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        return ["node", "bullmq.js", "work"], self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        base = f"bull:{ctx.queue}:"
        pipe = ctx.client.pipeline(transaction=False)
        pipe.llen(base + "wait")
        pipe.llen(base + "active")
        pipe.zcard(base + "prioritized")
        pipe.llen(base + "paused")
        return sum(pipe.execute())

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        usage = stop(proc)
        counts = json.loads(self._run(["node", "bullmq.js", "counts"], self.env(ctx, v)).strip().splitlines()[-1])
        left = sum(int(counts.get(k, 0)) for k in ("active", "wait", "waiting", "prioritized", "delayed", "paused"))
        return Check(int(counts.get("completed", 0)), int(counts.get("failed", 0)),
                     "Queue.getJobCounts() completed/failed (completed jobs kept: BullMQ's default)", left), usage


class Sidekiq(System):
    name = "sidekiq"

    def env(self, ctx: Ctx, v: Variant) -> dict[str, str]:
        env = super().env(ctx, v)
        env["REDIS_URL"] = ctx.url
        return env

    def enqueue(self, ctx: Ctx, v: Variant, n: int) -> None:
        self._run(["ruby", "sidekiq_jobs.rb", "enqueue", str(n), v.kind], self.env(ctx, v))

    def worker(self, ctx: Ctx, v: Variant) -> tuple[list[str], dict[str, str], Path]:
        cmd = ["sidekiq", "-r", str(DRIVERS / "sidekiq_jobs.rb"), "-c", str(v.concurrency), "-q", ctx.queue]
        return cmd, self.env(ctx, v), DRIVERS

    def remaining(self, ctx: Ctx) -> int:
        # jobs not yet fetched: Sidekiq's basic fetch holds the running ones (at most -c) in the process
        return int(ctx.client.llen(f"queue:{ctx.queue}"))

    def finish(self, ctx: Ctx, v: Variant, n: int, proc: subprocess.Popen[bytes], log: Path) -> tuple[Check, Any]:
        # the list is empty while up to -c jobs still run: wait for the heartbeat's flush of stat:processed
        # (every 5 s) to count them all before the TERM. A TERM while they run is Sidekiq's own shutdown,
        # but a processor thread that fetched a job and sees the stop only then pushes it back to the queue
        # (seen at -c 100 on a loaded host: 3 of 4,000 back in the list, none lost).
        until(lambda: int(ctx.client.get("stat:processed") or 0), lambda done: done >= n, 15)
        usage = stop(proc)
        processed = int(ctx.client.get("stat:processed") or 0)
        failed = int(ctx.client.get("stat:failed") or 0)
        return Check(processed - failed, failed, "stat:processed / stat:failed (flushed every 5 s and at exit)",
                     self.remaining(ctx)), usage


SYSTEMS: dict[str, System] = {s.name: s for s in (Laraq(), Artisan(), Rq(), Dramatiq(), Celery(), Arq(), Saq(),
                                                   BullMQ(), Sidekiq())}


def noop_variants() -> list[Variant]:
    """Each system at concurrency 1 and in its own documented throughput settings (README: citations).
    Rows that run under ~500 jobs/s here take a fraction of ``--jobs`` (``jobs_factor``), so that a full
    run stays under half an hour; the table shows each row's job count."""
    return [
        Variant("laraq", "work (defaults)", "noop", 1),
        Variant("laraq", "--acks batched", "noop", 1, {"args": ["--acks", "batched"]}, quick=False),
        Variant("laraq", "--concurrency 50", "noop", 50, quick=False),
        Variant("laraq", "floor (no job model)", "noop", 1, {"floor": True}, quick=False),
        Variant("artisan", "queue:work", "noop", 1),
        Variant("rq", "SimpleWorker", "noop", 1, {"args": ["--worker-class", "rq.worker.SimpleWorker"]},
                jobs_factor=0.25),
        Variant("rq", "Worker (fork per job)", "noop", 1, jobs_factor=0.1, quick=False),
        Variant("dramatiq", "--threads 1", "noop", 1, jobs_factor=0.25, quick=False),
        Variant("dramatiq", "--threads 8", "noop", 8),
        Variant("celery", "prefork -c 1", "noop", 1, {"args": ["--pool", "prefork", "-c", "1"]}, quick=False),
        Variant("celery", "solo, tuned", "noop", 1,
                {"args": ["--pool", "solo", "--prefetch-multiplier", "128", "--without-gossip", "--without-mingle",
                          "--without-heartbeat"]}),
        Variant("arq", "max_jobs 1, poll 0.01 s", "noop", 1, {"poll_delay": 0.01}, jobs_factor=0.1, quick=False),
        Variant("arq", "max_jobs 50, tuned", "noop", 50, {"poll_delay": 0.01, "keep_result": 0}),
        Variant("saq", "concurrency 1", "noop", 1, quick=False),
        Variant("saq", "concurrency 50", "noop", 50),
        Variant("bullmq", "concurrency 1", "noop", 1, quick=False),
        Variant("bullmq", "concurrency 50", "noop", 50),
        Variant("sidekiq", "-c 1", "noop", 1, quick=False),
        Variant("sidekiq", "-c 10", "noop", 10),
    ]


def io_variants(concurrency: int) -> list[Variant]:
    """The I/O-bound job at one concurrency: async handlers, then blocking (thread) handlers."""
    c = concurrency
    return [
        Variant("laraq", f"async --concurrency {c}", "io_async", c),
        # the same handlers on asyncio's own loop: what uvloop (the default where installed) is worth
        Variant("laraq", f"async --loop asyncio ({c})", "io_async", c, {"args": ["--loop", "asyncio"]}, quick=False),
        Variant("arq", f"async max_jobs {c}", "io_async", c, {"poll_delay": 0.01}),
        Variant("saq", f"async concurrency {c}", "io_async", c),
        Variant("bullmq", f"async concurrency {c}", "io_async", c),
        Variant("laraq", f"def --concurrency {c}", "io_sync", c),
        Variant("dramatiq", f"def --threads {c}", "io_sync", c),
        Variant("celery", f"def threads -c {c}", "io_sync", c, {"args": ["--pool", "threads", "-c", str(c)]}),
        Variant("saq", f"def concurrency {c}", "io_sync", c),
        Variant("sidekiq", f"-c {c}", "io_sync", c),
    ]


#: systems left out of the I/O rows, and why
IO_SKIPPED = {
    "rq": "one job at a time per worker process (SimpleWorker runs it inline, Worker forks per job)",
    "artisan": "one job at a time per queue:work process",
}
