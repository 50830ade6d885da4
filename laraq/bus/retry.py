"""``php artisan queue:retry`` written from Python: a failed job's payload pushed back onto its queue.

Beyond artisan: a bulk retry that can be audited (:class:`RetryFilter`, :func:`select_failed`,
:func:`bulk_retry` with a JSON Lines journal) and undone (:func:`undo_retry`).

Mirrors ``Illuminate\\Queue\\Console\\RetryCommand``: :func:`expand_retry_ids` is its ``getJobIds``
(ids, ``all``, ``--queue=``, ``--range=``), :func:`retry_payload` the payload it pushes back
(``attempts`` reset, ``retryUntil`` renewed), :func:`retry_failed` the whole command over a failed-job
store (:mod:`laraq.stores.failed`).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import IO, TYPE_CHECKING, Any

from laraq.protocol.payload import is_queued_command, reencode_like_php_retry
from laraq.protocol.phpjson import json_loads
from laraq.protocol.queue import RedisQueue
from laraq.protocol.serializer import PHPObject, loads
from laraq.stores.failed import DATE_FORMAT, FailedJob, FailedJobStore

if TYPE_CHECKING:
    from laraq.protocol.encryption import Encrypter

__all__ = [
    "RETRY_UNTIL_POLICIES",
    "RetryFilter",
    "RetryOutcome",
    "UndoOutcome",
    "bulk_retry",
    "parse_moment",
    "select_failed",
    "undo_retry",
    "expand_retry_ids",
    "retry_failed",
    "retry_payload",
    "time_now",
]

#: How ``retryUntil`` is treated when a failed job is retried (see :func:`retry_payload`).
RETRY_UNTIL_POLICIES = ("auto", "keep", "window")


def _command_has_retry_until_property(payload: dict[str, Any], encrypter: Encrypter | None) -> bool | None:
    """True if the command object has a ``retryUntil`` *property* (PHP then keeps the value)."""
    data = payload.get("data")
    command = data.get("command") if isinstance(data, dict) else None
    if not isinstance(command, str):
        return None
    try:
        raw = command.encode("utf-8")
        if not command.startswith("O:"):
            if encrypter is None:
                return None
            raw = encrypter.decrypt(command)
        obj = loads(raw)
    except Exception:
        return None
    return isinstance(obj, PHPObject) and "retryUntil" in obj


def retry_payload(
    raw: bytes | str,
    *,
    now: float | None = None,
    retry_until: str = "auto",
    encrypter: Encrypter | None = None,
) -> bytes:
    """The bytes ``php artisan queue:retry`` pushes back for the stored failed ``raw`` payload.

    ``attempts`` is reset to 0 and the JSON re-encoded like PHP's ``json_encode`` without flags
    (:func:`laraq.protocol.payload.reencode_like_php_retry`): same ``uuid`` and ``id``, key order kept, unicode
    escaped, ``{}`` → ``[]``.

    PHP also calls the job's ``retryUntil()`` *method* again and stores the new deadline. Python
    cannot run PHP methods, so ``retry_until`` chooses:

    * ``"keep"``: leave ``retryUntil`` as it is (what PHP does for a ``$retryUntil`` property, or
      when there is no method);
    * ``"window"``: a non-null ``retryUntil`` becomes ``now + (retryUntil - createdAt)``, i.e. the
      same window the job had when it was dispatched; needs ``createdAt`` (12.11+ payloads);
    * ``"auto"`` (default): ``keep`` when the value is null, when the command declares a
      ``retryUntil`` property, or when the payload has no ``createdAt``; else ``window``.
    """
    if retry_until not in RETRY_UNTIL_POLICIES:
        raise ValueError(f"retry_until must be one of {RETRY_UNTIL_POLICIES}, got {retry_until!r}")
    decoded = json_loads(raw)
    new_deadline: int | None = None
    old = decoded.get("retryUntil") if isinstance(decoded, dict) else None
    created = decoded.get("createdAt") if isinstance(decoded, dict) else None
    if isinstance(old, int | float) and not isinstance(old, bool) and retry_until != "keep":
        has_property = _command_has_retry_until_property(decoded, encrypter)
        created_at = created if isinstance(created, int | float) and not isinstance(created, bool) else None
        if retry_until == "window" and created_at is None:
            raise ValueError("retry_until='window' needs the payload's createdAt (Laravel 12.11+)")
        if created_at is not None and (retry_until == "window" or not has_property):
            current = math.floor(time_now() if now is None else now)
            new_deadline = current + max(0, math.floor(old) - math.floor(created_at))
    return reencode_like_php_retry(raw, attempts=0, retry_until=new_deadline).encode("utf-8")


def time_now() -> float:
    return time.time()


@dataclass(frozen=True)
class RetryOutcome:
    """What happened to one failed-job id given to :func:`retry_failed`."""

    id: str
    status: str  # "pushed", "missing", "skipped"
    queue: str | None = None
    message: str = ""
    payload: bytes | None = field(default=None, repr=False)


def retry_failed(
    store: FailedJobStore,
    queue: RedisQueue,
    ids: Iterable[str | int],
    *,
    retry_until: str = "auto",
    encrypter: Encrypter | None = None,
    connection_name: str | None = None,
    forget: bool = True,
) -> list[RetryOutcome]:
    """``queue:retry``: for each id, find the failed job, push its retry payload to its queue, forget it.

    Jobs whose ``connection`` is not this queue's connection (``connection_name``, default
    ``queue.connection_name``) are skipped: laraq only writes to the Redis connection it was given.
    """
    conn = connection_name or queue.connection_name
    out: list[RetryOutcome] = []
    for ident in ids:
        failed = store.find(ident)
        if failed is None:
            out.append(RetryOutcome(str(ident), "missing", message=f"Unable to find failed job with ID [{ident}]."))
            continue
        if failed.connection != conn:
            out.append(RetryOutcome(str(ident), "skipped", failed.queue,
                                    f"failed job [{ident}] belongs to connection [{failed.connection}], not [{conn}]"))
            continue
        body = retry_payload(failed.payload, now=queue.clock(), retry_until=retry_until, encrypter=encrypter)
        queue.push_raw(body, failed.queue)
        if forget:
            store.forget(failed.id)
        out.append(RetryOutcome(str(ident), "pushed", failed.queue,
                                f"The failed job [{ident}] has been pushed back onto the queue!", body))
    return out


def expand_retry_ids(store: FailedJobStore, ids: Sequence[str], *, queue: str | None = None,
                     ranges: Sequence[str] = ()) -> list[str | int]:
    """``RetryCommand::getJobIds``: explicit ids, ``all``, ``--queue=`` and ``--range=1-5``."""
    result: list[str | int] = []
    if list(ids) == ["all"]:
        result.extend(store.ids())
    else:
        result.extend(ids)
    if queue:
        result.extend(store.ids(queue))
    for spec in ranges:
        lo, sep, hi = spec.partition("-")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"a range is FROM-TO, e.g. 1-5 (got {spec!r})")
        result.extend(range(int(lo), int(hi) + 1))
    seen: set[str] = set()
    unique: list[str | int] = []
    for item in result:
        if str(item) not in seen:
            seen.add(str(item))
            unique.append(item)
    return unique


# -- bulk retry that can be audited and undone ------------------------------------------------------------


@dataclass(frozen=True)
class RetryFilter:
    """Which failed jobs a bulk retry takes: every given criterion must match.

    ``classes``: job class names or globs (``App\\Jobs\\*Mail*``), compared with ``commandName`` and
    ``displayName``; ``queues``: queue names; ``failed_after``/``failed_before``: the ``failed_at`` window
    (aware datetimes); ``exception``: text the stored exception contains (case-insensitive)."""

    classes: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    failed_after: datetime | None = None
    failed_before: datetime | None = None
    exception: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.classes or self.queues or self.failed_after or self.failed_before or self.exception)

    def matches(self, job: FailedJob, tz: tzinfo = UTC) -> bool:
        if self.queues and job.queue not in self.queues:
            return False
        if self.classes:
            names = {n.lstrip("\\") for n in _class_names(job)}
            if not any(fnmatch.fnmatchcase(n, pattern.lstrip("\\")) for n in names for pattern in self.classes):
                return False
        if self.failed_after is not None or self.failed_before is not None:
            try:
                at = job.failed_at_datetime(tz)
            except ValueError:
                return False
            if self.failed_after is not None and at < self.failed_after:
                return False
            if self.failed_before is not None and at >= self.failed_before:
                return False
        return not (self.exception and self.exception.lower() not in (job.exception or "").lower())


def _class_names(job: FailedJob) -> list[str]:
    try:
        data = job.payload_data
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    inner = data.get("data")
    command = inner.get("commandName") if isinstance(inner, dict) and is_queued_command(data.get("job")) else None
    names = [data.get("displayName"), command, data.get("job")]
    return [str(n) for n in names if isinstance(n, str) and n]


def select_failed(store: FailedJobStore, flt: RetryFilter, ids: Iterable[str | int] | None = None) -> list[FailedJob]:
    """The failed jobs matching ``flt`` (among ``ids`` when given, else the whole store)."""
    tz = getattr(store, "tz", UTC)
    if ids is None:
        jobs = store.all()
    else:
        found = (store.find(i) for i in ids)
        jobs = [j for j in found if j is not None]
    return [j for j in jobs if flt.matches(j, tz)]


def parse_moment(text: str, *, now: float | None = None) -> datetime:
    """``2026-11-27``, ``2026-11-27T10:00`` (UTC unless it says), or an age ago: ``90m``, ``6h``, ``2d``."""
    value = text.strip()
    unit = value[-1:].lower()
    if unit in ("s", "m", "h", "d") and value[:-1].isdigit():
        seconds = int(value[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        return datetime.fromtimestamp((time_now() if now is None else now) - seconds, UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text!r} is neither a date/time (2026-11-27T10:00) nor an age (90m, 6h, 2d)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def bulk_retry(store: FailedJobStore, queue: RedisQueue, jobs: Sequence[FailedJob], journal: IO[str], *,
               retry_until: str = "auto", encrypter: Encrypter | None = None,
               connection_name: str | None = None) -> list[RetryOutcome]:
    """``queue:retry`` of ``jobs``, each step written to the JSON Lines ``journal`` (an open text file, its
    creation and permissions the caller's) first.

    Per job the journal gets the failed row as it was (to put back) and the exact payload pushed and
    the key it went to (to take back), before the push; then the push, then the row is forgotten, then
    a ``done`` line. A crash in between leaves the job in Redis or in the store (or, for a moment,
    both), never in neither; :func:`undo_retry` reads the journal back."""
    conn = connection_name or queue.connection_name
    out: list[RetryOutcome] = []
    with journal as fh:
        def write(entry: dict[str, Any]) -> None:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

        for failed in jobs:
            if failed.connection != conn:
                out.append(RetryOutcome(str(failed.id), "skipped", failed.queue,
                                        f"failed job [{failed.id}] belongs to connection [{failed.connection}], "
                                        f"not [{conn}]"))
                continue
            body = retry_payload(failed.payload, now=queue.clock(), retry_until=retry_until, encrypter=encrypter)
            write({"step": "retry", "at": time_now(), "id": failed.id, "uuid": failed.uuid,
                   "connection": failed.connection, "queue": failed.queue, "key": queue.keys(failed.queue).list,
                   "pushed": body.decode("utf-8"), "failed": {
                       "payload": failed.payload, "exception": failed.exception, "failed_at": failed.failed_at}})
            queue.push_raw(body, failed.queue)
            store.forget(failed.id)
            write({"step": "done", "id": failed.id})
            out.append(RetryOutcome(str(failed.id), "pushed", failed.queue,
                                    f"The failed job [{failed.id}] has been pushed back onto the queue!", body))
    return out


@dataclass(frozen=True)
class UndoOutcome:
    """What undoing one journal entry did: ``restored`` (taken off the queue, back in the store),
    ``taken`` (a worker already took it: left alone), ``present`` (the store has it already)."""

    id: str
    status: str
    queue: str
    message: str


def undo_retry(store: FailedJobStore, queue: RedisQueue, journal: IO[str]) -> list[UndoOutcome]:
    """Take back what a :func:`bulk_retry` journal (an open text file) says was pushed, and put the failed
    rows back.

    A payload still waiting in its list is removed (``LREM`` of the exact bytes pushed) and its row
    logged again with its exception and ``failed_at``; one a worker already took is left alone and
    reported. Entries whose job the store already holds again are skipped, so an undo can be re-run."""
    entries: list[dict[str, Any]] = []
    with journal as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"line {number}: not a journal line ({exc})") from None
            if isinstance(entry, dict) and entry.get("step") == "retry":
                entries.append(entry)
    out: list[UndoOutcome] = []
    for entry in reversed(entries):
        ident, q = str(entry["id"]), str(entry["queue"])
        failed = entry["failed"]
        key = entry["uuid"] or entry["id"]
        if store.find(key) is not None:
            out.append(UndoOutcome(ident, "present", q, f"failed job [{ident}] is in the store already"))
            continue
        removed = queue.client.lrem(entry["key"], 1, entry["pushed"].encode("utf-8"))
        if not removed:
            out.append(UndoOutcome(ident, "taken", q, f"failed job [{ident}] was already taken from {entry['key']} "
                                                      "by a worker: not restored"))
            continue
        at = datetime.strptime(failed["failed_at"], DATE_FORMAT).replace(tzinfo=getattr(store, "tz", UTC))
        store.log(str(entry["connection"]), q, failed["payload"], failed["exception"], failed_at=at)
        out.append(UndoOutcome(ident, "restored", q, f"failed job [{ident}] taken off {entry['key']} and restored"))
    return out
