"""Worker liveness: one heartbeat record per running ``laraq work`` process, kept in Redis.

Layout (all under the connection's Laravel key prefix, one hash slot thanks to the ``{workers}`` tag, so
it works on a Redis Cluster too):

* ``laraq:{workers}`` - a sorted set of worker ids scored by their last beat (Redis ``TIME``, so hosts
  with skewed clocks still agree);
* ``laraq:{workers}:<id>`` - a hash per worker (host, pid, supervisor pid, name, connection, queues,
  Laravel profile, laraq version, started, last beat, jobs done/failed/released, in flight, its resident
  memory as the worker's ``--memory`` check measures it, the job ids it holds reserved with when it took
  them) with a TTL of
  a few beat intervals.

Discovery never uses ``KEYS`` or ``SCAN``: :func:`live_workers` reads the sorted set, drops members
older than the TTL (``ZREMRANGEBYSCORE``) and reads their hashes in one pipeline; a hash that expired
(its worker was killed) is skipped. A stopping worker deletes only its own id, so one worker exiting
never makes the others look dead (arq's shared health key does).

:class:`Heartbeat` is a :class:`~laraq.worker.events.WorkerListener`. A job's outcome only bumps an
in-memory counter; a daemon thread writes the record every ``interval`` seconds, with what the worker holds
at that moment (``held``: :meth:`laraq.worker.worker.Worker.held`, asked from the thread, so no per-job
event keeps a list of its own). The thread stops beating when the worker loop has not reported for
``stall_after`` seconds, so a wedged worker turns unhealthy even though its process is alive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laraq._version import __version__
from laraq.worker.events import (
    Held,
    JobFailed,
    JobProcessed,
    JobReleased,
    Looping,
    WorkerListener,
    WorkerStarting,
    WorkerStopping,
)
from laraq.worker.notes import rss_mb

__all__ = ["Heartbeat", "WorkerRecord", "live_workers", "check_health", "registry_key", "DEFAULT_INTERVAL",
           "DEFAULT_TTL"]

log = logging.getLogger("laraq.production.heartbeat")

_NOTHING_HELD = Held({}, 0)

DEFAULT_INTERVAL = 5.0
DEFAULT_TTL = 30


def registry_key(prefix: str) -> str:
    """The sorted set of worker ids under the Laravel ``prefix``."""
    return f"{prefix}laraq:{{workers}}"


def _record_key(prefix: str, worker_id: str) -> str:
    return f"{registry_key(prefix)}:{worker_id}"


def _redis_now(client: Any) -> float:
    seconds, micros = client.time()
    return int(seconds) + int(micros) / 1e6


@dataclass
class WorkerRecord:
    """One live worker as read back from Redis."""

    id: str
    host: str
    pid: int
    ppid: int
    name: str
    connection: str
    queues: list[str]
    laravel: str
    laraq: str
    started: float
    beat: float
    jobs_done: int
    jobs_failed: int
    jobs_released: int
    in_flight: int
    #: resident memory in MB at the last beat (:func:`laraq.worker.notes.rss_mb`); None in a record without it
    memory_mb: float | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_hash(cls, worker_id: str, data: dict[bytes, bytes]) -> WorkerRecord:
        d = {k.decode(): v.decode(errors="replace") for k, v in data.items()}

        def num(name: str, kind: type = int) -> Any:
            try:
                return kind(d.get(name, "0") or 0)
            except ValueError:
                return kind(0)

        known = {"host", "pid", "ppid", "name", "connection", "queues", "laravel", "laraq", "started", "beat",
                 "jobs_done", "jobs_failed", "jobs_released", "in_flight", "memory_mb"}
        try:
            memory: float | None = float(d["memory_mb"])
        except (KeyError, ValueError):
            memory = None
        return cls(
            id=worker_id, host=d.get("host", "?"), pid=num("pid"), ppid=num("ppid"), name=d.get("name", ""),
            connection=d.get("connection", ""), queues=[q for q in d.get("queues", "").split(",") if q],
            laravel=d.get("laravel", ""), laraq=d.get("laraq", ""), started=num("started", float),
            beat=num("beat", float), jobs_done=num("jobs_done"), jobs_failed=num("jobs_failed"),
            jobs_released=num("jobs_released"), in_flight=num("in_flight"), memory_mb=memory,
            extra={k: v for k, v in d.items() if k not in known},
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "host": self.host, "pid": self.pid, "ppid": self.ppid, "name": self.name,
            "connection": self.connection, "queues": self.queues, "laravel": self.laravel, "laraq": self.laraq,
            "started": self.started, "beat": self.beat, "jobs_done": self.jobs_done,
            "jobs_failed": self.jobs_failed, "jobs_released": self.jobs_released, "in_flight": self.in_flight,
            "memory_mb": self.memory_mb,
        }


def live_workers(client: Any, prefix: str, *, ttl: float = DEFAULT_TTL) -> list[WorkerRecord]:
    """Every worker that beat within ``ttl`` seconds, oldest start first; expired ids are cleaned up."""
    key = registry_key(prefix)
    now = _redis_now(client)
    client.zremrangebyscore(key, "-inf", f"({now - ttl}")
    ids = [m.decode() for m in client.zrangebyscore(key, now - ttl, "+inf")]
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hgetall(_record_key(prefix, worker_id))
    records = []
    gone = []
    for worker_id, data in zip(ids, pipe.execute(), strict=True):
        if data:
            records.append(WorkerRecord.from_hash(worker_id, data))
        else:
            gone.append(worker_id)
    if gone:
        client.zrem(key, *gone)
    records.sort(key=lambda r: (r.started, r.id))
    return records


def check_health(client: Any, prefix: str, *, within: float, worker_id: str | None = None,
                 pid: int | None = None, host: str | None = None,
                 queues: Iterable[str] = ()) -> tuple[bool, str]:
    """``(healthy, reason)``: a matching worker beat within ``within`` seconds.

    A worker matches by ``worker_id``, else by ``pid`` (its own or its supervisor's) on ``host``
    (default: this host), else by serving any of ``queues``, else any live worker matches.
    """
    wanted = [q for q in queues if q]
    host = host or socket.gethostname()
    now = _redis_now(client)
    candidates = live_workers(client, prefix, ttl=max(within, DEFAULT_TTL))
    if worker_id:
        candidates = [r for r in candidates if r.id == worker_id]
        what = f"worker {worker_id}"
    elif pid:
        candidates = [r for r in candidates if r.host == host and pid in (r.pid, r.ppid)]
        what = f"a worker with pid {pid} on {host}"
    elif wanted:
        candidates = [r for r in candidates if set(r.queues) & set(wanted)]
        what = f"a worker on queue(s) {','.join(wanted)}"
    else:
        what = "any worker"
    fresh = [r for r in candidates if now - r.beat <= within]
    if fresh:
        best = max(fresh, key=lambda r: r.beat)
        return True, f"{what}: {best.id} beat {now - best.beat:.1f}s ago"
    if candidates:
        best = max(candidates, key=lambda r: r.beat)
        return False, f"{what}: last beat {now - best.beat:.1f}s ago (more than {within:g}s)"
    return False, f"{what}: no heartbeat record in Redis"


class Heartbeat(WorkerListener):
    """Keeps this worker's heartbeat record fresh while it runs (a :class:`WorkerListener`).

    ``id_file``: where to write this worker's id (for ``laraq health --id-file``); removed on stop.
    ``held``: the worker's :meth:`~laraq.worker.worker.Worker.held` (its reservations and running jobs).
    """

    def __init__(self, client: Any, prefix: str, *, interval: float = DEFAULT_INTERVAL, ttl: int = DEFAULT_TTL,
                 stall_after: float | None = 300.0, id_file: str | os.PathLike[str] | None = None,
                 supervisor_pid: int | None = None, held: Callable[[], Held] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.interval = interval
        self.ttl = max(int(ttl), int(interval * 2) + 1)
        self.stall_after = stall_after
        self.id_file = Path(id_file) if id_file else None
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.ppid = supervisor_pid if supervisor_pid is not None else os.getppid()
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self.done = self.failed = self.released = 0
        #: the reservations the worker holds, asked at each beat (laraq status --reserved); None: no worker
        self.held = held
        self._static: dict[str, str] = {}
        self._looped = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned = False
        self._beats_ok = False

    # -- listener hooks: in-memory only, except start and stop ------------------------------------------

    def worker_starting(self, event: WorkerStarting) -> None:
        self._static = {
            "host": self.host, "pid": str(self.pid), "ppid": str(self.ppid), "name": str(event.options.name),
            "connection": event.connection, "queues": ",".join(event.queues), "laravel": str(event.version),
            "laraq": __version__,
        }
        self._looped = time.monotonic()
        self._static["started"] = repr(time.time())
        if self.id_file is not None:
            try:
                self.id_file.write_text(self.id + "\n")
            except OSError as exc:
                log.warning("cannot write the heartbeat id file %s: %s", self.id_file, exc)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="laraq-heartbeat", daemon=True)
        self._thread.start()

    def worker_looping(self, event: Looping) -> None:
        self._looped = time.monotonic()

    def job_processed(self, event: JobProcessed) -> None:
        with self._lock:
            self.done += 1

    def job_released(self, event: JobReleased) -> None:
        with self._lock:
            self.released += 1

    def job_failed(self, event: JobFailed) -> None:
        with self._lock:
            self.failed += 1

    def worker_stopping(self, event: WorkerStopping) -> None:
        self.stop()

    # -- the record ------------------------------------------------------------------------------------

    def beat(self) -> bool:
        """Write the record now; False (logged once) when Redis is unreachable."""
        with self._lock:
            counters = {"jobs_done": self.done, "jobs_failed": self.failed, "jobs_released": self.released}
        held = self.held() if self.held is not None else _NOTHING_HELD
        counters["in_flight"] = held.running
        holding = json.dumps(held.jobs)
        try:
            now = _redis_now(self.client)
            fields = {**self._static, **{k: str(v) for k, v in counters.items()}, "beat": repr(now),
                      "holding": holding, "memory_mb": f"{rss_mb():.1f}"}
            key = _record_key(self.prefix, self.id)
            pipe = self.client.pipeline(transaction=False)
            pipe.hset(key, mapping=fields)
            pipe.expire(key, self.ttl)
            pipe.zadd(registry_key(self.prefix), {self.id: now})
            pipe.execute()
        except Exception as exc:
            self._beats_ok = False
            if not self._warned:
                log.warning("heartbeat: cannot write the worker record (%s); retrying every %gs", exc,
                            self.interval)
                self._warned = True
            return False
        self._beats_ok = True
        if self._warned:
            log.warning("heartbeat: the worker record is written again")
            self._warned = False
        return True

    def stop(self) -> None:
        """Stop beating and remove this worker's own record (never anyone else's)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if self._beats_ok:  # an unreachable Redis must not delay the exit; the record expires by itself
            with contextlib.suppress(Exception):
                pipe = self.client.pipeline(transaction=False)
                pipe.zrem(registry_key(self.prefix), self.id)
                pipe.delete(_record_key(self.prefix, self.id))
                pipe.execute()
        if self.id_file is not None:
            with contextlib.suppress(OSError):
                if self.id_file.read_text().strip() == self.id:
                    self.id_file.unlink()

    def _run(self) -> None:
        # Redis I/O only here, never on the worker's thread: an unreachable Redis must not delay its loop
        self.beat()
        while not self._stop.wait(self.interval):
            stalled = time.monotonic() - self._looped
            if self.stall_after is not None and stalled > self.stall_after:
                log.warning("heartbeat: the worker loop has not run for %.0fs; not beating", stalled)
                continue
            self.beat()


def read_id_file(path: str | os.PathLike[str]) -> str | None:
    """The worker id in an ``--heartbeat-file`` (None if missing or empty)."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return text or None
