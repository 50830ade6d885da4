"""Parked failures: a failed job whose ``failed_jobs`` row cannot be written yet, kept in Redis with its failure.

Laravel's ``Job::fail`` deletes the job, runs its ``failed()`` side and then logs it through the
``FailedJobProviderInterface``; when that write throws (database restarted, SQLite file unwritable) the
job is gone in PHP. laraq keeps it instead, and does not run it again: the job has had its real
attempt, only the row is missing. The failure is recorded in a laraq-owned Redis hash next to the
queue, ``<prefix>queues:<name>:failed-parked`` (same ``{name}`` hash tag as the queue, so it lives
on the queue's cluster node), one field per job (its uuid, else its id, else a digest of the body),
whose value is JSON::

    {"connection": ..., "queue": ..., "payload": <the original body>, "exception": <PHP-style text>,
     "failed_at": <unix seconds>, "uuid": ..., "name": ...}

:meth:`ParkedFailures.write_rows` writes every parked record of the given queues to the failed store with
its original ``failed_at`` and removes it. A record whose uuid is already in the store (the row was
written but the ``HDEL`` was lost) is only removed. In a worker, :class:`ParkedFailures` is also a
listener of its events (:mod:`laraq.worker.events`): it writes the parked rows of the worker's queues at
start and then every :data:`FLUSH_EVERY` seconds while the loop runs, on a daemon thread so that a
hanging database never stalls the loop. :func:`parked_summary` is what ``status``/``doctor`` show.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.protocol.queue import RedisQueue
    from laraq.stores.failed import FailedJobStore
    from laraq.worker.events import Looping, WorkerStarting, WorkerStopping

__all__ = ["FLUSH_EVERY", "PARKED_SUFFIX", "STOP_WAIT", "ParkedFailure", "ParkedFailures", "parked_key",
           "parked_summary"]

log = logging.getLogger("laraq.stores.parked")
worker_log = logging.getLogger("laraq.worker.worker")

#: seconds between two attempts of a worker to write the parked rows (the first is at its start)
FLUSH_EVERY = 15.0
#: how long a stopping worker waits for a flush in progress (a hanging database must not hold the exit)
STOP_WAIT = 5.0

#: appended to a queue's base key (``<prefix>queues:<name>``)
PARKED_SUFFIX = ":failed-parked"


def parked_key(queue: RedisQueue, name: str) -> str:
    """The Redis hash holding ``name``'s parked failures."""
    return queue.keys(name).base + PARKED_SUFFIX


@dataclass(frozen=True)
class ParkedFailure:
    """One parked record: everything the ``failed_jobs`` row needs."""

    connection: str
    queue: str
    payload: str
    exception: str
    failed_at: float
    uuid: str | None = None
    name: str | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__)  # ASCII: a body that is not UTF-8 survives (surrogate escapes)

    @classmethod
    def from_json(cls, raw: bytes | str) -> ParkedFailure:
        data = json.loads(raw)
        return cls(connection=str(data["connection"]), queue=str(data["queue"]), payload=str(data["payload"]),
                   exception=str(data["exception"]), failed_at=float(data["failed_at"]),
                   uuid=data.get("uuid"), name=data.get("name"))


def _field(body: bytes | str, uuid: str | None, job_id: str | None) -> str:
    if uuid:
        return str(uuid)
    if job_id:
        return "id:" + str(job_id)
    raw = body.encode() if isinstance(body, str) else body
    return "sha1:" + hashlib.sha1(raw).hexdigest()


class ParkedFailures:
    """Park failures whose row cannot be written, and write them when the store is back (see the module;
    ``queues``: a worker's, whose parked rows it writes)."""

    def __init__(self, queue: RedisQueue, store: FailedJobStore | None, queues: Iterable[str] = (),
                 every: float = FLUSH_EVERY) -> None:
        self.queue = queue
        self.store = store
        self.queues = list(queues)
        self.every = every
        self._flush_lock = threading.Lock()
        #: why the last flush could not write a row (the store's error, on one line; None: all written)
        self.last_error: str | None = None
        self._next = 0.0
        self._thread: threading.Thread | None = None
        self._last_left = 0

    # -- a worker's listener --------------------------------------------------------------------------------

    def park_job(self, job: Job, text: str, reason: BaseException) -> bool:
        """Park ``job``'s failure; False if Redis refused it too (the caller then puts the job back)."""
        why = " ".join(str(reason).split())[:300] or type(reason).__name__
        if job.queue not in self.queues:
            self.queues.append(job.queue)
        try:
            self.park(job.connection, job.queue, job.body, text, uuid=job.uuid, job_id=job.id, name=job.name)
        except Exception as exc:
            worker_log.error("%s (uuid %s) failed but failed_jobs could not be written (%s), nor parked in Redis "
                             "(%s): putting it back on the queue in 60s", job.name, job.uuid, why, exc)
            return False
        worker_log.error("%s (uuid %s) failed but failed_jobs could not be written (%s): kept in %s, not run "
                         "again; its row is written when the store is back ('laraq status' shows parked "
                         "failures)", job.name, job.uuid, why, parked_key(self.queue, job.queue))
        self._next = time.monotonic() + self.every
        return True

    def worker_starting(self, event: WorkerStarting) -> None:
        self._flush_soon()

    def worker_looping(self, event: Looping) -> None:
        if time.monotonic() >= self._next:
            self._flush_soon()

    def worker_stopping(self, event: WorkerStopping) -> None:
        # a short-lived worker (--once, --stop-when-empty) lets the flush it started at start finish
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(STOP_WAIT)

    def _flush_soon(self) -> None:
        self._next = time.monotonic() + self.every
        if self.store is None or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._flush_queues, name="laraq-parked-flush", daemon=True)
        self._thread.start()

    def _flush_queues(self) -> None:
        try:
            written, left = self.write_rows(self.queues)
        except Exception as exc:  # Redis down: the next pass tries again
            worker_log.debug("could not read parked failures: %s", exc)
            return
        if left and (written or left != self._last_left):  # one line per change, not one per pass
            worker_log.warning("%d parked failure(s) still wait for failed_jobs (%s)%s", left, self.last_error,
                               f"; {written} written" if written else "")
        self._last_left = left

    # -- the store -------------------------------------------------------------------------------------------

    def park(self, connection: str, queue: str, body: bytes | str, exception: str, *,
             uuid: str | None = None, job_id: str | None = None, name: str | None = None,
             failed_at: float | None = None) -> str:
        """Record the failure in Redis (raises a Redis error if Redis is unreachable); returns the field."""
        text = body.decode("utf-8", "surrogateescape") if isinstance(body, bytes) else body
        record = ParkedFailure(connection, queue, text, exception, time.time() if failed_at is None else failed_at,
                               uuid, name)
        field = _field(body, uuid, job_id)
        self.queue.client.hset(parked_key(self.queue, queue), field, record.to_json())
        return field

    def write_rows(self, queues: Iterable[str]) -> tuple[int, int]:
        """Write the parked records of ``queues`` to the store; returns ``(written, still_parked)``.

        Stops at the first record the store refuses (it is still down) and keeps the rest parked.
        """
        if self.store is None:
            return 0, 0
        if not self._flush_lock.acquire(blocking=False):
            return 0, 0  # another thread is flushing
        written = 0
        names = list(dict.fromkeys(queues))
        try:
            for name in names:
                key = parked_key(self.queue, name)
                entries = self.queue.client.hgetall(key)
                for field, raw in entries.items():
                    try:
                        record = ParkedFailure.from_json(raw)
                    except (ValueError, KeyError, TypeError) as exc:
                        log.error("parked failure %r in %s is unreadable (%s): left there", field, key, exc)
                        continue
                    try:
                        if not (record.uuid and self._already_logged(record.uuid)):
                            self.store.log(record.connection, record.queue, record.payload.encode(
                                "utf-8", "surrogateescape"), record.exception,
                                failed_at=datetime.fromtimestamp(record.failed_at, UTC))
                    except Exception as exc:
                        self.last_error = " ".join(str(exc).split())[:300] or type(exc).__name__
                        return written, self.count(names)
                    self.queue.client.hdel(key, field)
                    written += 1
                    log.warning("%s (uuid %s) failed at %s: its failed_jobs row is written now",
                                record.name or "job", record.uuid, datetime.fromtimestamp(record.failed_at, UTC)
                                .strftime("%Y-%m-%d %H:%M:%S UTC"))
            left = self.count(names)
            if not left:
                self.last_error = None
            return written, left
        finally:
            self._flush_lock.release()

    def count(self, queues: Iterable[str]) -> int:
        """How many failures of ``queues`` are parked."""
        return sum(int(self.queue.client.hlen(parked_key(self.queue, name))) for name in dict.fromkeys(queues))

    def _already_logged(self, uuid: str) -> bool:
        """Is ``uuid``'s row in the store already (written, but the ``HDEL`` after it was lost)?"""
        assert self.store is not None
        return bool(getattr(self.store, "uses_uuid", False)) and self.store.find(uuid) is not None


def parked_summary(queue: RedisQueue, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{queue: {"count": n, "oldest": unix seconds | None, "newest_exception": first line}}`` for each
    queue of ``names`` with parked failures (``status``/``doctor``: rows waiting for the failed store)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(names):
        entries = queue.client.hgetall(parked_key(queue, name))
        if not entries:
            continue
        records = []
        for raw in entries.values():
            try:
                records.append(ParkedFailure.from_json(raw))
            except (ValueError, KeyError, TypeError):
                continue
        oldest = min((r.failed_at for r in records), default=None)
        newest = max(records, key=lambda r: r.failed_at, default=None)
        out[name] = {"count": len(entries), "oldest": oldest,
                     "newest_exception": newest.exception.partition("\n")[0] if newest else None}
    return out
