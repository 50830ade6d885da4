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

:meth:`ParkedFailures.flush` writes every parked record of the given queues to the failed store with
its original ``failed_at`` and removes it; the worker calls it at start and on a timer
(:mod:`laraq.worker.parking`). A record whose uuid is already in the store (the row was written but
the ``HDEL`` was lost) is only removed. :func:`parked_summary` is what ``status``/``doctor`` show.
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
    from laraq.protocol.queue import RedisQueue
    from laraq.stores.failed import FailedJobStore

__all__ = ["PARKED_SUFFIX", "ParkedFailure", "ParkedFailures", "parked_key", "parked_summary"]

log = logging.getLogger("laraq.stores.parked")

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
    """Park failures whose row cannot be written, and write them when the store is back."""

    def __init__(self, queue: RedisQueue, store: FailedJobStore | None) -> None:
        self.queue = queue
        self.store = store
        self._flush_lock = threading.Lock()
        #: what the last flush could not write: ``(count, reason)`` for the status line
        self.last_error: str | None = None

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

    def flush(self, queues: Iterable[str]) -> tuple[int, int]:
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
