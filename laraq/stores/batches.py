"""A Python handler's view of its batch: ``Batchable::batch()->cancelled()`` read from the batches table.

Laravel's ``DatabaseBatchRepository`` keeps a batch in the table and on the database connection that
``queue.batching.table``/``database`` name (stock: ``job_batches`` on the default connection); a cancelled
batch has ``cancelled_at`` set. laraq reads it through the same connections it loads models with
(:class:`laraq.bus.models.ModelLoader`), at the :class:`BatchTable` that loader carries (the app's
``queue.batching``, read by :mod:`laraq.config.effective`). ``SkipIfBatchCancelled`` uses
this check in :mod:`laraq.bus.middleware`.

When PHP is not on the worker's host, :func:`record_success` and :func:`record_failure` do the data half
of ``Batch::recordSuccessfulJob`` / ``recordFailedJob`` at artisan's moment, as
``DatabaseBatchRepository::updateAtomicValues`` does it (the row read ``FOR UPDATE`` in a transaction):
``pending_jobs``, ``failed_jobs``, ``failed_job_ids``, ``finished_at`` and, on a first failure of a batch
that does not allow failures, ``cancelled_at``. The callbacks (PHP closures) are PHP's: see
:mod:`laraq.bus.phpsteps`.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laraq.protocol.serializer import PHPSerializeError, loads
from laraq.stores.database import dialect_of, locked_cursor

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["BatchCounts", "BatchTable", "batch_cancelled", "batch_id", "cancel_batch", "recent_batches", "record_failure",
           "record_success"]

TABLE = "job_batches"


@dataclass(frozen=True, slots=True)
class BatchTable:
    """Where ``DatabaseBatchRepository`` keeps batches: ``queue.batching.database`` (None: the app's default
    connection) and ``queue.batching.table``."""

    connection: str | None = None
    table: str = TABLE


def _where(db: Any) -> BatchTable:
    """The batches table of the loader ``db`` (the stock one when it carries none)."""
    found = getattr(db, "batching", None)
    return found if isinstance(found, BatchTable) else BatchTable()


def batch_id(job: Job) -> str | None:
    """The job's batch id (``$batchId`` on the command, or ``data.batchId`` 12.51+), None outside a batch
    and for a string job (its data is the app's array, not a command)."""
    if not job.payload.is_queued_command:
        return None
    command = job.command
    value: Any = None
    get = getattr(command, "get", None)
    if callable(get):
        value = get("batchId")
    return str(value) if value else job.payload.batch_id or None


def batch_cancelled(job: Job) -> bool:
    """True when the job's batch was cancelled (False outside a batch, or when the batch row is gone:
    PHP's ``$this->batch()`` is then null)."""
    bid = batch_id(job)
    if bid is None:
        return False
    db = getattr(job, "app_db", None)
    if db is None:
        raise RuntimeError(f"{job.name}: the batch's cancellation is in the database, and no database is "
                           "configured for this worker (DB_*)")
    where = _where(db)
    rows = db.select(where.connection, where.table, "id", [bid])
    return bool(rows) and rows[0].get("cancelled_at") is not None


# -- the data half of Batch::recordSuccessfulJob / recordFailedJob (no PHP on this host) ---------------

@dataclass(frozen=True, slots=True)
class BatchCounts:
    """``UpdatedBatchJobCounts``: the row's counts right after laraq's update."""

    pending_jobs: int
    failed_jobs: int

    @property
    def all_ran_exactly_once(self) -> bool:
        return self.pending_jobs - self.failed_jobs == 0


def _options(raw: Any) -> dict[Any, Any]:
    """The batch's ``options`` column (PHP-serialized; base64 on PostgreSQL 9+), {} when unreadable."""
    if isinstance(raw, memoryview | bytearray):
        raw = bytes(raw)
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if not isinstance(raw, bytes) or not raw:
        return {}
    if b":" not in raw or b";" not in raw:  # DatabaseBatchRepository::unserialize: base64 on pgsql
        try:
            raw = base64.b64decode(raw, validate=True)
        except ValueError:
            return {}
    try:
        value = loads(raw)
    except PHPSerializeError:
        return {}
    return value if isinstance(value, dict) else {}


def _atomic(db: Any, batch: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
    """``DatabaseBatchRepository::updateAtomicValues``: read the row under its lock (``FOR UPDATE``;
    SQLite's write lock), write ``change(row)``, commit. None when the row is gone."""
    where = _where(db)
    conn, lock = db.connection(where.connection)
    dialect = dialect_of(conn)

    def q(ident: str) -> str:
        return "`" + ident.replace("`", "``") + "`" if dialect == "mysql" else '"' + ident.replace('"', '""') + '"'

    ph = "?" if dialect == "sqlite" else "%s"
    suffix = "" if dialect == "sqlite" else " FOR UPDATE"
    with locked_cursor(conn, lock, sqlite_immediate=dialect == "sqlite") as cur:
        cur.execute(f"SELECT * FROM {q(where.table)} WHERE {q('id')} = {ph}{suffix}", [batch])
        found = cur.fetchone()
        if found is None:
            return None
        row = dict(zip([d[0] for d in cur.description], found, strict=True))
        values = change(row)
        sets = ", ".join(f"{q(k)} = {ph}" for k in values)
        cur.execute(f"UPDATE {q(where.table)} SET {sets} WHERE {q('id')} = {ph}", [*values.values(), batch])
        return {**row, **values}


#: the columns of ``job_batches`` a listing shows (Laravel 8 to 13 create them all)
LISTED = ("id", "name", "total_jobs", "pending_jobs", "failed_jobs", "created_at", "cancelled_at", "finished_at")


def recent_batches(conn: Any, table: str = TABLE, *, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    """The newest batches of ``table`` (``DatabaseBatchRepository::get``: by ``id`` descending), as dicts of
    :data:`LISTED` plus ``progress`` (``Batch::progress()``: the percentage of jobs processed)."""
    dialect = dialect_of(conn)

    def q(ident: str) -> str:
        return "`" + ident.replace("`", "``") + "`" if dialect == "mysql" else '"' + ident.replace('"', '""') + '"'

    ph = "?" if dialect == "sqlite" else "%s"
    cur = conn.cursor()
    try:
        cur.execute(f"SELECT {', '.join(q(c) for c in LISTED)} FROM {q(table)} ORDER BY {q('id')} DESC "
                    f"LIMIT {ph} OFFSET {ph}", [int(limit), int(offset)])
        rows = [dict(zip(LISTED, row, strict=True)) for row in cur.fetchall()]
    finally:
        cur.close()
        conn.commit()  # ends the read's transaction (MySQL/PostgreSQL would otherwise keep a snapshot)
    for row in rows:
        total = int(row["total_jobs"] or 0)
        done = total - int(row["pending_jobs"] or 0)
        row["progress"] = int(done * 100 / total + 0.5) if total > 0 else 0  # PHP's round(): half away from 0
    return rows


def cancel_batch(conn: Any, batch: str, table: str = TABLE) -> bool:
    """``DatabaseBatchRepository::cancel`` (what ``Batch::cancel()`` writes): ``cancelled_at`` and
    ``finished_at`` set to now, by id; False when no row has that id."""
    dialect = dialect_of(conn)

    def q(ident: str) -> str:
        return "`" + ident.replace("`", "``") + "`" if dialect == "mysql" else '"' + ident.replace('"', '""') + '"'

    ph = "?" if dialect == "sqlite" else "%s"
    now = int(time.time())
    cur = conn.cursor()
    try:
        cur.execute(f"UPDATE {q(table)} SET {q('cancelled_at')} = {ph}, {q('finished_at')} = {ph} "
                    f"WHERE {q('id')} = {ph}", [now, now, batch])
        changed = cur.rowcount > 0
    finally:
        cur.close()
        conn.commit()
    return bool(changed)


def _ids(raw: Any) -> list[Any]:
    try:
        value = json.loads(raw or "[]")
    except (TypeError, ValueError):
        return []
    return value if isinstance(value, list) else []


def _json(ids: list[Any]) -> str:
    return json.dumps(ids, separators=(",", ":")).replace("/", "\\/")  # PHP's json_encode escapes slashes


def record_success(db: Any, batch: str, job_uuid: str) -> BatchCounts | None:
    """``decrementPendingJobs`` (and ``markAsFinished`` at zero), under the row lock; None if no row."""

    def change(row: dict[str, Any]) -> dict[str, Any]:
        pending = int(row["pending_jobs"]) - 1
        values: dict[str, Any] = {"pending_jobs": pending, "failed_jobs": int(row["failed_jobs"]),
                                  "failed_job_ids": _json([i for i in _ids(row["failed_job_ids"]) if i != job_uuid])}
        if pending == 0:
            values["finished_at"] = int(time.time())
        return values

    row = _atomic(db, batch, change)
    return None if row is None else BatchCounts(int(row["pending_jobs"]), int(row["failed_jobs"]))


def record_failure(db: Any, batch: str, job_uuid: str) -> BatchCounts | None:
    """``incrementFailedJobs``, and the batch's cancel on its first failure unless it allows failures,
    under the row lock; None if no row."""

    def change(row: dict[str, Any]) -> dict[str, Any]:
        ids = _ids(row["failed_job_ids"])
        failed = int(row["failed_jobs"]) + 1
        values: dict[str, Any] = {"pending_jobs": int(row["pending_jobs"]), "failed_jobs": failed,
                                  "failed_job_ids": _json(ids if job_uuid in ids else [*ids, job_uuid])}
        if failed == 1 and not _options(row.get("options")).get("allowFailures"):
            now = int(time.time())
            values["cancelled_at"] = now
            values["finished_at"] = now
        return values

    row = _atomic(db, batch, change)
    return None if row is None else BatchCounts(int(row["pending_jobs"]), int(row["failed_jobs"]))
