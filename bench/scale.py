"""Shared set-up of the scale benches (``bench/timers.py``, ``bench/burst.py``, ``bench/startup.py``).

One throw-away ``redis-server`` and the fixture app, as ``bench/run.py`` builds them (its
:class:`RedisServer`, :class:`Php` and :class:`Laraq`), plus what the scale runs need on top: many
jobs written straight into ``:delayed`` or the list from one payload template (unique ``uuid``/``id``,
the due second in the job's ``args``), worker processes started and stopped as a fleet, SLOWLOG
read back, the machine's load, and nearest-rank quantiles.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import redis

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from run import ECHO, PREFIX, Laraq, Php, RedisServer, echo_props, laraq_worker_ready  # noqa: E402

__all__ = ["ECHO", "PREFIX", "Laraq", "Php", "RedisServer", "Fleet", "Sides", "command_calls", "fill_delayed",
           "fill_list", "loadavg", "quantiles", "redis_cpu", "slowlog", "slowlog_reset", "laraq_worker_ready"]

_DUE = 1111111111
_UUID = "00000000-0000-4000-8000-000000000000"


def laraq_script() -> str:
    """The ``laraq`` console script of this interpreter, never a version manager's shim: pyenv's
    ``shims/laraq`` is a bash script that runs several processes before Python starts (0.1-1.5 s here),
    which a production install does not have. Empty: use ``python -m laraq.cli``."""
    beside = Path(sys.executable).parent / "laraq"
    if beside.exists():
        return str(beside)
    found = shutil.which("laraq") or ""
    return "" if "/shims/" in found else found


def loadavg() -> str:
    """``/proc/loadavg``'s three load averages (what else the machine was doing)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def quantiles(values: list[float], qs: Iterable[float] = (0.5, 0.9, 0.99, 1.0)) -> dict[str, float]:
    """Nearest-rank quantiles (``p50``, ``p90``, ``p99``, ``max``) of ``values``."""
    ordered = sorted(values)
    out: dict[str, float] = {}
    for q in qs:
        key = "max" if q >= 1 else f"p{round(q * 100):d}"
        out[key] = ordered[max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 1)) - 1))] if ordered else float("nan")
    return out


class Sides:
    """The bench's Redis, the laraq side and (when PHP and Debian's Laravel 8 are here) the artisan side."""

    def __init__(self, workdir: Path, *, php: bool = True) -> None:
        self.workdir = workdir
        self.server = RedisServer(workdir)
        self.client = self.server.client
        have_php = php and subprocess.run(["which", "php"], capture_output=True).returncode == 0 \
            and Path("/usr/share/php/Illuminate/autoload.php").exists()
        self.php = Php(self.server, workdir) if have_php else None
        self.laraq = Laraq(self.server, workdir)
        self.laraq.laraq_bin = laraq_script()
        if self.php is not None:
            self.laraq.db_path = self.php.app.db_path
        else:
            with sqlite3.connect(self.laraq.db_path) as db:
                db.execute("create table if not exists failed_jobs (id integer primary key autoincrement, "
                           "uuid varchar not null unique, connection text not null, queue text not null, "
                           "payload text not null, exception text not null, "
                           "failed_at datetime default CURRENT_TIMESTAMP not null)")

    def keys(self, queue: str) -> Any:
        return self.laraq.queue.keys(queue)

    def template(self, queue: str) -> bytes:
        """One ``EchoJob`` payload (mode ``ok``) whose ``args`` is ``[<due second>]``; placeholders inside."""
        prepared = self.laraq.dispatcher.prepare_job(ECHO, echo_props({"args": [_DUE]}), queue=queue,
                                                    connection="redis")
        doc = json.loads(prepared.payload)
        body = prepared.payload.replace(doc["uuid"].encode(), _UUID.encode())
        return body.replace(str(doc["id"]).encode(), b"i" * len(str(doc["id"])))

    def stop(self) -> None:
        self.server.stop()


def _member(template: bytes, n: int, due: int) -> bytes:
    uid = f"{n:08x}-0000-4000-8000-{n:012x}"[-36:]
    return template.replace(_UUID.encode(), uid.encode()).replace(b"i" * 32, f"{n:032x}".encode()) \
        .replace(str(_DUE).encode(), str(due).encode())


def fill_delayed(client: redis.Redis, key: str, template: bytes, dues: list[int], chunk: int = 5000) -> None:
    """``ZADD key due member`` for each due second (job ``n`` gets ``dues[n]``), pipelined."""
    assert len(str(_DUE)) == 10 and all(len(str(d)) == 10 for d in dues[:1])
    for start in range(0, len(dues), chunk):
        mapping = {_member(template, n, dues[n]): dues[n] for n in range(start, min(len(dues), start + chunk))}
        client.zadd(key, mapping)  # type: ignore[arg-type]


def fill_list(client: redis.Redis, list_key: str, template: bytes, count: int, chunk: int = 5000) -> None:
    """``RPUSH`` ``count`` jobs (and their ``:notify`` tokens) as Laravel's push does."""
    now = int(time.time())
    for start in range(0, count, chunk):
        members = [_member(template, n, now) for n in range(start, min(count, start + chunk))]
        pipe = client.pipeline(transaction=False)
        pipe.rpush(list_key, *members)
        pipe.rpush(list_key + ":notify", *([1] * len(members)))
        pipe.execute()


def redis_cpu(client: redis.Redis) -> float:
    """The ``redis-server``'s own CPU seconds so far (``INFO cpu``: ``used_cpu_user + used_cpu_sys``).

    What Redis spent, counted once. The ``INFO commandstats`` ``usec`` sum is not: a command a Lua script
    runs is timed inside the script's ``EVALSHA`` and again on its own line."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Each command's ``calls`` since the last ``CONFIG RESETSTAT`` (``INFO commandstats``), by lower-case
    name without the ``cmdstat_``. Redis counts the commands a script runs as calls of their own."""
    stats: dict[str, Any] = client.info("commandstats")
    return {k.lower().removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def slowlog_reset(client: redis.Redis, slower_than_us: int = 1000) -> None:
    client.config_set("slowlog-log-slower-than", slower_than_us)
    client.config_set("slowlog-max-len", 100_000)
    client.slowlog_reset()


def slowlog(client: redis.Redis) -> dict[str, Any]:
    """The SLOWLOG since the last reset: count, the longest entry and how many took over 10 ms."""
    entries = client.slowlog_get(100_000)
    entries = [e for e in entries if not (e.get("command") or b"").upper().startswith((b"SLOWLOG", b"CONFIG"))]
    longest = max(entries, key=lambda e: e["duration"], default=None)
    return {"entries": len(entries),
            "over_10ms": sum(1 for e in entries if e["duration"] > 10_000),
            "longest_us": longest["duration"] if longest else 0,
            "longest_command": (longest["command"][:60].decode("latin-1") if longest else "")}


class Fleet:
    """Worker processes started together and stopped together (SIGTERM, then SIGKILL after a grace)."""

    def __init__(self, cmds: list[list[str]], env: dict[str, str], cwd: Path, logdir: Path, name: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, cmd in enumerate(cmds):
            out = (logdir / f"{name}-{i}.log").open("wb")
            self.procs.append(subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def stop(self, grace: float = 10) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
