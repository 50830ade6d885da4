"""Failed jobs moved between apps: ``laraq move-failed``.

Reads one failed-job store and writes another, through the providers of :mod:`laraq.stores.failed`
(``database-uuids`` and ``database`` on SQLite, MySQL/MariaDB or PostgreSQL, any table name, and the
``file`` store), so a failed job of the old app is a failed job of the new one and ``php artisan
queue:retry`` there works. Or, with ``retry``, each failed job is retried straight into the
destination's Redis queue, with the bytes ``queue:retry`` would push (:func:`laraq.bus.retry.retry_payload`:
attempts reset, ``retryUntil`` renewed), like Laravel's ``RetryCommand``.

Payloads are moved byte for byte, as ``move`` moves queued jobs: a job the destination's Laravel
cannot run as the source's would (:func:`laraq.ops.migrate.unsupported_by`) stays at the source and
is named. Every row is moved once:

* staying failed, a row whose payload uuid/id (:func:`laraq.ops.inspect.job_identity`) is already in
  the destination store is not written again;
* retried, the push is one script that also records the identity in the queue's
  ``:laraq-transfer:imported`` set (shared with ``import``), so a job a worker there already ran is not
  pushed again;
* the source row is forgotten only after the destination has it (unless ``copy``), so a run killed
  at any point is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

from laraq.bus.retry import retry_payload
from laraq.config.faults import explain, one_line
from laraq.ops.inspect import job_identity, list_members, scored_members
from laraq.ops.migrate import unsupported_by
from laraq.ops.stack import job_class, unknown_class
from laraq.ops.transfers import TRANSFER_MARK
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.stores.failed import FailedJob

__all__ = ["DestinationFailed", "FailedMoveSummary", "move_failed"]

# KEYS: 1 list, 2 notify, 3 remembered identities. ARGV: 1 payload, 2 identity, 3 remember seconds.
_PUSH_ONCE = """\
if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], 1)
redis.call('SADD', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[3])
return 1
"""

REMEMBER_SECONDS = 30 * 86400


class DestinationFailed(Exception):
    """The destination store or queue failed; the message names it and says how far the run got.
    ``exit_code`` is the one the same fault at the source gives (5 a database, 3/4 Redis)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _destination_failed(exc: Exception, summary: FailedMoveSummary, *, started: bool) -> Exception:
    """``exc`` raised by the destination, as a :class:`DestinationFailed` (or ``exc`` itself, a bug)."""
    explained = explain(exc)
    if explained is None:
        return exc
    where = "when it was opened" if not started else (
        f"after {summary.moved} failed job(s) had been {'copied' if summary.copy else 'moved'} there")
    return DestinationFailed(
        f"the destination {summary.destination} failed {where}: {one_line(exc)}; the job being moved stays at the "
        "source (its row is forgotten only once the destination has it). Fix the destination (its .env: "
        "--to-env-file, or --to-table/--to-url) and run the same command again: nothing is written twice",
        explained[1])


@dataclass
class FailedMoveSummary:
    """What ``move-failed`` did (or, dry, would do)."""

    source: str
    destination: str
    mode: str  # "failed" (stay failed) or "retry"
    copy: bool = False
    dry_run: bool = False
    moved: int = 0
    existing: int = 0
    forgotten: int = 0
    skipped_by_filter: int = 0
    refused: list[str] = field(default_factory=list)
    by_queue: dict[str, int] = field(default_factory=dict)
    #: whether the destination app's job classes were looked at (None: not known)
    classes_checked: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "destination": self.destination, "mode": self.mode, "copy": self.copy,
                "dry_run": self.dry_run, "moved": self.moved, "already_at_destination": self.existing, "forgotten_at_source": self.forgotten,
                "skipped_by_filter": self.skipped_by_filter, "refused": self.refused, "by_queue": self.by_queue,
                "classes_checked": self.classes_checked}

    def describe(self, *, dry_run: bool = False) -> str:
        verb = "would " + ("copy" if self.copy else "move") if dry_run else ("copied" if self.copy else "moved")
        how = "retried into the queue" if self.mode == "retry" else "as failed jobs"
        queues = ", ".join(f"{n} {q}" for q, n in sorted(self.by_queue.items())) or "none"
        lines = [f"{verb} {self.moved} failed job(s) {how} from {self.source} to {self.destination} ({queues})"]
        if self.existing:
            lines.append(f"  {self.existing} already at the destination (same uuid/id): not written again"
                         + ("" if self.copy or dry_run else "; their source rows were forgotten"))
        if self.skipped_by_filter:
            lines.append(f"  {self.skipped_by_filter} left at the source by --queue/--filter")
        if self.refused:
            shown = "\n    ".join(self.refused[:10]) + ("\n    ..." if len(self.refused) > 10 else "")
            lines.append(f"  {len(self.refused)} left at the source: the destination cannot run them as "
                         f"dispatched:\n    {shown}")
        if self.mode == "failed" and self.moved and not dry_run:
            lines.append("  on the destination: php artisan queue:failed lists them, queue:retry ID|all retries them")
        return "\n".join(lines)


def _identities(store: Any) -> set[str]:
    return {job_identity(row.payload.encode("utf-8")) for row in store.all()}


def _queue_identities(queue: RedisQueue, name: str) -> set[str]:
    keys = queue.keys(name)
    found = {job_identity(m) for m in list_members(queue.client, keys.list, 0, -1)}
    for key in (keys.delayed, keys.reserved):
        found.update(job_identity(m) for m, _ in scored_members(queue.client, key, 0, -1))
    return found


def _wanted(row: FailedJob, queues: tuple[str, ...], class_filter: str | None) -> bool:
    if queues and row.queue not in queues:
        return False
    if class_filter:
        name = row.display_name or ""
        return name == class_filter or fnmatchcase(name, class_filter)
    return True


def move_failed(
    source: Any,
    *,
    dest_store: Any = None,
    dest_queue: RedisQueue | None = None,
    dest_version: LaravelVersion | str,
    source_name: str = "source",
    dest_name: str = "destination",
    queues: tuple[str, ...] = (),
    class_filter: str | None = None,
    copy: bool = False,
    connection: str | None = None,
    dry_run: bool = False,
    encrypter: Any = None,
    progress: Callable[[int], Any] | None = None,
    app_classes: set[str] | None = None,
) -> FailedMoveSummary:
    """Move (or ``copy``) the failed jobs of ``source`` into ``dest_store`` (they stay failed) or, when
    ``dest_queue`` is given, retry them into it. ``connection`` renames the rows' connection (default:
    kept). With ``app_classes`` (the destination app's job classes), a job whose class it lacks stays at the
    source and is named. See the module docstring for what makes it safe to re-run."""
    if (dest_store is None) == (dest_queue is None):
        raise ValueError("give a destination store (stay failed) or a destination queue (retry), not both")
    version = LaravelVersion.parse(str(dest_version))
    summary = FailedMoveSummary(source_name, dest_name, "retry" if dest_queue is not None else "failed", copy,
                                dry_run, classes_checked=app_classes is not None)
    src_tz = getattr(source, "tz", UTC)
    try:
        known: set[str] = _identities(dest_store) if dest_store is not None else set()
    except Exception as exc:
        raise _destination_failed(exc, summary, started=False) from exc
    queue_known: dict[str, set[str]] = {}
    push = dest_queue.client.register_script(_PUSH_ONCE) if dest_queue is not None else None
    for row in reversed(source.all()):  # oldest first (the stores list newest first), as they failed
        if progress is not None:
            progress(1)
        if not _wanted(row, queues, class_filter):
            summary.skipped_by_filter += 1
            continue
        body = row.payload.encode("utf-8")
        reason = unsupported_by(body, version)
        if reason is None and app_classes is not None and unknown_class(job_class(body), app_classes):
            reason = f"the destination app has no job class {job_class(body) or '?'}"
        if reason:
            summary.refused.append(f"{row.display_name or '?'} (failed id {row.id}): {reason}")
            continue
        ident = job_identity(body)
        if dest_queue is not None:
            if row.queue not in queue_known:
                try:
                    queue_known[row.queue] = _queue_identities(dest_queue, row.queue)
                except Exception as exc:
                    raise _destination_failed(exc, summary, started=summary.moved > 0) from exc
            there = ident in queue_known[row.queue]
        else:
            there = ident in known
        if there:
            summary.existing += 1
        elif not dry_run:
            try:
                wrote = _write(row, body, ident, dest_store, dest_queue, push, connection, src_tz, encrypter)
            except Exception as exc:
                raise _destination_failed(exc, summary, started=True) from exc
            if wrote:
                summary.moved += 1
                summary.by_queue[row.queue] = summary.by_queue.get(row.queue, 0) + 1
            else:
                summary.existing += 1
            known.add(ident)
            queue_known.get(row.queue, set()).add(ident)
        else:
            summary.moved += 1
            summary.by_queue[row.queue] = summary.by_queue.get(row.queue, 0) + 1
            known.add(ident)
        if not copy and not dry_run:
            source.forget(row.id)  # only now: the destination has it
            summary.forgotten += 1
    return summary


def _write(row: FailedJob, body: bytes, ident: str, dest_store: Any, dest_queue: RedisQueue | None, push: Any,
           connection: str | None, src_tz: Any, encrypter: Any) -> bool:
    if dest_queue is not None:
        retried = retry_payload(body, now=dest_queue.clock(), encrypter=encrypter)
        keys = dest_queue.keys(row.queue)
        remembered = keys.base + TRANSFER_MARK + "imported"
        return bool(push(keys=[keys.list, keys.notify, remembered], args=[retried, ident, REMEMBER_SECONDS]))
    dest_store.log(connection or row.connection, row.queue, row.payload, row.exception,
                   failed_at=_failed_at(row, src_tz))
    return True


def _failed_at(row: FailedJob, tz: Any) -> datetime | None:
    """When the job failed, as an aware datetime (the destination store writes it in its own zone)."""
    if row.failed_at_timestamp is not None:
        return datetime.fromtimestamp(row.failed_at_timestamp, UTC)
    try:
        return row.failed_at_datetime(tz)
    except ValueError:
        return None  # an unreadable date: the destination writes now, as Laravel's log() does
