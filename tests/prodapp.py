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
from conftest import ROOT, RedisServer, free_port

from laraq.app import App
from laraq.bus.job import Job

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
    # a line still being appended has no newline yet: read it next time, not half now
    lines = [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]
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

    def __init__(self, workdir: Path, master_port: int, quorum: int = 2, extra: str = "") -> None:
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
            "sentinel parallel-syncs mymaster 1\n" + extra)
        args = [binary, str(conf)] if binary.endswith("sentinel") else [binary, str(conf), "--sentinel"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_until(self._up, 10, 0.05):
            raise RuntimeError("redis-sentinel did not start")

    def _up(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping())
        except redis.AuthenticationError:
            return True  # up, and asking for its password
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

    stop = RedisServer.stop  # the same terminate-then-kill


class Cluster:
    """Three Redis Cluster masters on loopback, slots split evenly (ports below 55536 for the bus port)."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.nodes: list[Any] = []
        try:
            for i in range(masters):
                d = workdir / f"node{i}"
                d.mkdir(parents=True, exist_ok=True)
                self.nodes.append(RedisServer(d, "--cluster-enabled", "yes", "--cluster-config-file",
                                              str(d / "nodes.conf"), "--cluster-node-timeout", "5000"))
            first = self.nodes[0].client()
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
            step = 16384 // masters
            for i, node in enumerate(self.nodes):
                end = 16383 if i == masters - 1 else (i + 1) * step - 1
                node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, end)
            if not wait_until(self._ready, 30):
                raise RuntimeError("the cluster did not become ready")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        for node in self.nodes:
            info = node.client().execute_command("CLUSTER", "INFO")
            if b"cluster_state:ok" not in info or b"cluster_known_nodes:%d" % len(self.nodes) not in info:
                return False
        return True

    @property
    def seeds(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def node_id(self, node: Any) -> str:
        return node.client().execute_command("CLUSTER", "MYID").decode()

    def owner(self, slot: int) -> Any:
        for row in self.nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            if row[0] <= slot <= row[1]:
                return next(n for n in self.nodes if n.port == int(row[2][1]))
        raise LookupError(slot)

    def migrate_slot(self, slot: int, target: Any, *, pause: float = 0.0) -> int:
        """Move ``slot`` to ``target`` the way ``redis-cli --cluster reshard`` does (IMPORTING/MIGRATING,
        MIGRATE key by key, then SETSLOT NODE everywhere); returns how many keys moved. ``pause`` waits
        between keys so clients see ``ASK``/``TRYAGAIN`` while the slot is half-moved."""
        source = self.owner(slot)
        if source is target:
            return 0
        src, dst = source.client(), target.client()
        target_id, source_id = self.node_id(target), self.node_id(source)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            for key in keys:
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", key)
                moved += 1
                if pause:
                    time.sleep(pause)
        for node in (target, source, *[n for n in self.nodes if n not in (source, target)]):
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
