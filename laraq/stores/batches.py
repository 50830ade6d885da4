"""A Python handler's view of its batch: ``Batchable::batch()->cancelled()`` read from ``job_batches``.

Laravel's ``DatabaseBatchRepository`` keeps a batch in the ``job_batches`` table of the app's default
database connection (``queue.batching.database``/``table``, stock: ``DB_CONNECTION`` and
``job_batches``); a cancelled batch has ``cancelled_at`` set. laraq reads it through the same
connections it loads models with (:class:`laraq.bus.models.ModelLoader`). The bookkeeping itself (counts,
callbacks) stays PHP's: see :mod:`laraq.bus.callqueued`. ``SkipIfBatchCancelled`` uses this check in
:mod:`laraq.bus.middleware`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["batch_id", "batch_cancelled"]

TABLE = "job_batches"


def batch_id(job: Job) -> str | None:
    """The job's batch id (``$batchId`` on the command, or ``data.batchId`` 11+), None outside a batch."""
    command = job.command
    value: Any = None
    get = getattr(command, "get", None)
    if callable(get):
        value = get("batchId")
    if not value:
        data = job.payload.decoded.get("data")
        value = data.get("batchId") if isinstance(data, dict) else None
    return str(value) if value else None


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
    rows = db.select(None, TABLE, "id", [bid])
    return bool(rows) and rows[0].get("cancelled_at") is not None
