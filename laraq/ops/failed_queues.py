"""Which queues have failed jobs: ``status`` lists a queue that only has failed jobs (no Redis keys).

Reads a failed-job store of :mod:`laraq.stores.failed` without changing it: a database store is
asked ``select distinct queue`` for the connection; any other store (file, null) is read row by row.
"""

from __future__ import annotations

from typing import Any

__all__ = ["failed_queue_names"]


def failed_queue_names(store: Any, connection: str | None) -> list[str]:
    """Sorted names of the queues with at least one failed job of ``connection`` (all when None)."""
    cursor = getattr(store, "_cursor", None)
    if cursor is not None and hasattr(store, "q") and hasattr(store, "t"):
        try:
            sql = f"select distinct {store.q('queue')} from {store.t}"
            params: tuple[Any, ...] = ()
            if connection is not None:
                sql += f" where {store.q('connection')} = ?"
                params = (connection,)
            with cursor() as cur:
                cur.execute(store._sql(sql), params)
                return sorted({str(row[0]) for row in cur.fetchall() if row[0] is not None})
        except Exception:  # an unexpected schema: fall back to reading the rows
            pass
    return sorted({row.queue for row in store.all() if connection is None or row.connection == connection})
