"""The dashboard's actions, each through the path its command takes, each written to a journal.

* pause / resume a queue and ``queue:restart``: the app's cache store, as ``laraq pause``/``resume``/
  ``restart`` (:mod:`laraq.cli.repair`);
* retry: ``laraq retry``'s audited bulk retry (:func:`laraq.bus.retry.bulk_retry`): its own journal of
  every payload sent, which ``laraq retry --undo JOURNAL`` takes back;
* undo: ``laraq retry --undo`` of one of those journals (:func:`laraq.bus.retry.undo_retry`), named by its
  file name in the state directory (never a path from the request);
* forget: the failed-job store's ``forget``, as ``laraq forget``;
* cancel a batch: ``Batch::cancel()``'s write to the app's ``queue.batching`` table
  (:func:`laraq.stores.batches.cancel_batch`): its jobs still to run see ``cancelled()``.

Every action appends one JSON line to the dashboard journal ``laraq-dashboard.jsonl`` in laraq's state
directory (private, ``0600``): when, who (the client's address), what, on which target, and the outcome.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from laraq.bus.retry import RetryFilter, bulk_retry, select_failed, undo_retry
from laraq.cli.common import Ops
from laraq.cli.statefiles import open_private, state_dir
from laraq.stores.batches import cancel_batch
from laraq.stores.database import connect_database

__all__ = ["Journal", "cancel", "forget", "pause", "restart", "resume", "retry", "retry_plan", "undo"]

#: the file names :meth:`Journal.retry_journal` gives: the only journals an undo from the dashboard opens
RETRY_JOURNAL = re.compile(r"laraq-retry-\d{8}T\d{6}Z-\d{1,6}\.jsonl")


class Journal:
    """The dashboard's action journal (one JSON object per line) in ``directory``."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory

    def _dir(self) -> Path:
        return self.directory if self.directory is not None else state_dir()

    @property
    def path(self) -> Path:
        return self._dir() / "laraq-dashboard.jsonl"

    def write(self, action: str, target: Any, outcome: Any, *, client: str | None) -> None:
        line = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "action": action, "target": target,
                "client": client, "outcome": outcome}
        with open_private(self.path, "append") as fh:
            fh.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")

    def retry_journal_named(self, name: str) -> Path:
        """The retry journal ``name`` in this directory (ValueError for any other name, or a missing file)."""
        if not RETRY_JOURNAL.fullmatch(name) or not (self._dir() / name).is_file():
            raise ValueError(f"no retry journal {name!r} in the state directory")
        return self._dir() / name

    def retry_journal(self) -> Path:
        return self._dir() / f"laraq-retry-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{time.time_ns() % 10**6}.jsonl"


def pause(ops: Ops, queue: str, journal: Journal, *, client: str | None) -> str:
    ops.cache().pause(ops.settings.connection_name, queue, None)
    message = f"Job processing on queue [{ops.settings.connection_name}:{queue}] has been paused."
    journal.write("pause", queue, message, client=client)
    return message


def resume(ops: Ops, queue: str, journal: Journal, *, client: str | None) -> str:
    ops.cache().resume(ops.settings.connection_name, queue)
    message = f"Job processing on queue [{ops.settings.connection_name}:{queue}] has been resumed."
    journal.write("resume", queue, message, client=client)
    return message


def restart(ops: Ops, journal: Journal, *, client: str | None) -> str:
    stamp = ops.cache().set_restart()
    message = f"Broadcasting queue restart signal ({stamp})."
    journal.write("restart", None, message, client=client)
    return message


def _among(ids: list[str]) -> list[str | int] | None:
    return list(ids) if ids else None


def retry_plan(ops: Ops, flt: RetryFilter, ids: list[str]) -> dict[str, Any]:
    """The dry run: how many failed jobs (of ``ids``, or all matching ``flt``) a retry takes, per class."""
    jobs = select_failed(ops.failed_store(), flt, _among(ids))
    by_class = Counter((j.queue, j.display_name or "?") for j in jobs)
    return {"count": len(jobs), "ids": [str(j.id) for j in jobs],
            "classes": [{"queue": q, "class": c, "jobs": n} for (q, c), n in sorted(by_class.items())]}


def retry(ops: Ops, flt: RetryFilter, ids: list[str], journal: Journal, *, client: str | None) -> dict[str, Any]:
    """Retry the failed jobs :func:`retry_plan` counted, through ``laraq retry``'s bulk path."""
    store = ops.failed_store()
    jobs = select_failed(store, flt, _among(ids))
    path = journal.retry_journal()
    with open_private(path, "new") as fh:
        outcomes = bulk_retry(store, ops.queue, jobs, fh, encrypter=ops.encrypter)
    counts = Counter(o.status for o in outcomes)
    result = {"journal": str(path), "journal_name": path.name, "undo": f"laraq retry --undo {path}",
              "counts": dict(counts),
              "messages": [o.message for o in outcomes if o.status != "pushed"]}
    journal.write("retry", [str(j.id) for j in jobs], {"counts": dict(counts), "journal": str(path)}, client=client)
    return result


def forget(ops: Ops, ids: list[str], journal: Journal, *, client: str | None) -> dict[str, Any]:
    """Delete failed jobs by id (``laraq forget``)."""
    store = ops.failed_store()
    gone = [i for i in ids if store.forget(i)]
    missing = [i for i in ids if i not in gone]
    journal.write("forget", ids, {"deleted": gone, "missing": missing}, client=client)
    return {"deleted": gone, "missing": missing}


def undo(ops: Ops, name: str, journal: Journal, *, client: str | None) -> dict[str, Any]:
    """Take back the retry whose journal is ``name`` (``laraq retry --undo``): waiting jobs leave their queue,
    their rows return to the failed-job store; one a worker already took is reported."""
    path = journal.retry_journal_named(name)
    outcomes = undo_retry(ops.failed_store(), ops.queue, open_private(path, "read"))
    counts = Counter(o.status for o in outcomes)
    journal.write("undo", name, {"counts": dict(counts)}, client=client)
    return {"counts": dict(counts), "messages": [o.message for o in outcomes if o.status == "taken"]}


def cancel(ops: Ops, batch: str, journal: Journal, *, client: str | None) -> str:
    """Cancel the batch ``batch`` as ``Batch::cancel()`` does (ValueError when the table has no such batch)."""
    conn = connect_database(ops.settings.database(ops.settings.batch_database))
    try:
        done = cancel_batch(conn, batch, ops.settings.batch_table)
    finally:
        conn.close()
    if not done:
        raise ValueError(f"cancel: no batch {batch!r} in {ops.settings.batch_table!r}")
    message = f"Batch [{batch}] cancelled: its jobs still to run see cancelled()."
    journal.write("cancel", batch, message, client=client)
    return message
