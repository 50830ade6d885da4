r"""Shared pieces of the production tests: a handler app, servers for Sentinel, and a ``laraq work`` runner.

``App\Jobs\Track`` jobs (dispatched from Python or PHP) append ``{"n": ..., "pid": ...}`` to
``$LARAQ_LOG``, so a test can count which jobs ran, how often and in which worker process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
from conftest import ROOT, free_port

from laraq.app import App
from laraq.job import Job

app = App("prod-tests")

LARAQ = [sys.executable, "-c", "from laraq.cli import main; main()"]


@app.handler("App\\Jobs\\Track")
def track(command: Any, job: Job) -> None:
    seconds = float(getattr(command, "seconds", 0) or 0)
    if seconds:
        _log(command, job, "start")
        time.sleep(seconds)
    _log(command, job, "done")


def _log(command: Any, job: Job, event: str) -> None:
    line = json.dumps({"n": command.n, "pid": os.getpid(), "queue": job.queue, "runner": "python",
                       "event": event})
    fd = os.open(os.environ["LARAQ_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def runs(path: Path, event: str = "done") -> list[dict[str, Any]]:
    """The handler runs recorded in ``path`` (finished ones by default; ``event="start"`` for starts)."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in lines if r.get("event", "done") == event]


def laraq_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "LARAQ_", "CACHE_", "DB_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def popen_work(env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen([*LARAQ, "work", "--app", "prodapp:app", *args], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT)
    finally:
        if log is not None:
            out.close()


def wait_until(predicate: Any, timeout: float = 60.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(10)


class Sentinel:
    """A throw-away ``redis-sentinel`` watching ``127.0.0.1:<master_port>`` as ``mymaster``."""

    def __init__(self, workdir: Path, master_port: int, quorum: int = 2) -> None:
        binary = shutil.which("redis-sentinel") or shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-sentinel not found (bash .ci/run installs it)")
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        conf = workdir / f"sentinel-{self.port}.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor mymaster 127.0.0.1 {master_port} {quorum}\n"
            "sentinel down-after-milliseconds mymaster 1000\n"
            "sentinel failover-timeout mymaster 10000\n"
            "sentinel parallel-syncs mymaster 1\n")
        args = [binary, str(conf)] if binary.endswith("sentinel") else [binary, str(conf), "--sentinel"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_until(self._up, 10, 0.05):
            raise RuntimeError("redis-sentinel did not start")

    def _up(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping())
        except redis.RedisError:
            return False

    def master(self) -> tuple[str, int] | None:
        try:
            found = redis.Redis(port=self.port, socket_timeout=1).sentinel_get_master_addr_by_name("mymaster")
        except redis.RedisError:
            return None
        if not found:
            return None
        host = found[0].decode() if isinstance(found[0], bytes) else str(found[0])
        return host, int(found[1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
