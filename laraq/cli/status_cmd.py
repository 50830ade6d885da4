"""``laraq status``: every queue's counters, failed count, paused state, pickup rate and wait estimate.

Like ``php artisan queue:monitor`` it can alert: ``--max N`` marks every queue whose size (Laravel's
``size()``: pending + delayed + reserved) is N or more, and exits 1 when any is. ``--watch`` redraws the
table every ``--interval`` seconds.

The pickup rate is measured, not stored anywhere: the last member of each ready list is marked, and
after ``--sample`` seconds (or between two ``--watch`` frames) the members that left in front of it
are the jobs workers took (:func:`laraq.ops.inspect.pickups_since`). The wait estimate is pending jobs
divided by that rate. Failed counts come from the app's failed-job store, paused state from its cache
store (12.40+ keys, 13.25+ global pause); either one that cannot be read is named in a note.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import click

from laraq.cli.common import Ops, emit_json, human_age, settings_options
from laraq.cli.render import Column, print_table, stdout_stream
from laraq.cli.reserved_view import show_reserved
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible
from laraq.ops.failed_queues import failed_queue_names
from laraq.ops.inspect import (
    ListMark,
    Pickups,
    QueueStatus,
    discover_prefixes,
    discover_queues,
    mark_lists,
    pickups_since,
    queue_status,
)
from laraq.ops.transfers import find_held
from laraq.protocol.versions import LaravelVersion
from laraq.stores.parked import parked_summary

__all__ = ["Snapshot", "status_cmd"]

#: Laravel lines whose stock prefixes are worth naming when the queues sit under another prefix.
_PROFILES = ("8", "11", "12.67", "13")


@dataclass
class Snapshot:
    """Everything one frame of ``status`` shows."""

    prefix: str
    statuses: list[QueueStatus]
    failed: dict[str, int] | None = None
    failed_total: int | None = None
    paused: dict[str, bool] | None = None
    pickups: dict[str, Pickups | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    max: int | None = None
    #: queue -> its real Redis keys by state (ready, delayed, reserved): what an autoscaler reads
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    #: unfinished transfers holding jobs of these queues (:func:`laraq.ops.transfers.find_held`)
    transfers: list[Any] = field(default_factory=list)
    #: failures waiting for the failed-job store (laraq.stores.parked), per queue
    parked: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: jobs only PHP can run, waiting where no PHP worker works (laraq.horizon.phpwait.PhpWaiting)
    php_waiting: list[Any] = field(default_factory=list)

    def alert(self, s: QueueStatus) -> bool:
        return self.max is not None and s.total >= self.max

    @property
    def alerting(self) -> list[str]:
        return [s.queue for s in self.statuses if self.alert(s)]

    def wait(self, s: QueueStatus) -> float | None:
        """Seconds until the last pending job is taken at the measured rate (None: not measured)."""
        pick = self.pickups.get(s.queue)
        if s.pending == 0:
            return 0.0
        if pick is None or pick.rate <= 0:
            return None
        return s.pending / pick.rate

    def to_dict(self) -> dict[str, Any]:
        queues = []
        for s in self.statuses:
            d = s.to_dict()
            pick = self.pickups.get(s.queue)
            d["failed"] = None if self.failed is None else self.failed.get(s.queue, 0)
            d["paused"] = None if self.paused is None else self.paused.get(s.queue, False)
            d["pickups"] = None if pick is None else {"taken": pick.taken, "seconds": round(pick.seconds, 3),
                                                      "exact": pick.exact, "per_second": round(pick.rate, 3)}
            d["wait_seconds"] = None if (w := self.wait(s)) is None else round(w, 1)
            if self.max is not None:
                d["alert"] = self.alert(s)
            if s.queue in self.keys:
                d["keys"] = self.keys[s.queue]
            queues.append(d)
        return {"prefix": self.prefix, "queues": queues, "failed_total": self.failed_total,
                "max": self.max, "notes": self.notes, "parked_failures": self.parked,
                "php_only_waiting": {w.queue: {"jobs": w.jobs, "looked_at": w.looked_at, "checked_at": w.checked_at}
                                     for w in self.php_waiting},
                "transfers": [h.to_dict(self.prefix) for h in self.transfers]}


def _failed_counts(ops: Ops, names: list[str], snap: Snapshot) -> None:
    try:
        store = ops.failed_store()
        connection = ops.settings.connection_name
        snap.failed = {name: store.count(connection=connection, queue=name) for name in names}
        snap.failed_total = store.count()
    except Exception as exc:  # the store being down must not hide the queue counters
        message = exc.message if isinstance(exc, click.ClickException) else f"{type(exc).__name__}: {exc}"
        snap.notes.append(f"failed counts unavailable: {message}")


def _paused(ops: Ops, names: list[str], snap: Snapshot) -> None:
    if not ops.settings.version.has_queue_pause:
        return  # no queue:pause before 12.40: the column shows "-"
    try:
        cache = ops.cache()
        paused = set(cache.paused_queues(ops.settings.connection_name, names))
    except Exception as exc:
        message = exc.message if isinstance(exc, click.ClickException) else f"{type(exc).__name__}: {exc}"
        snap.notes.append(f"paused state unavailable: {message}")
        return
    snap.paused = {name: name in paused for name in names}


def _elsewhere(ops: Ops, asked: list[str], statuses: list[QueueStatus]) -> list[str]:
    """Hints when the queues asked for are empty here but jobs sit under another prefix or key layout."""
    if any(s.total or s.poison for s in statuses):
        return []
    hints = []
    here = ops.queue.prefix
    tagged = [n for n in discover_queues(ops.queue.client, here) if n.startswith("{") and n[1:-1] in asked]
    for name in tagged:
        hints.append(f"queue {name!r} holds the keys of {name[1:-1]!r} (the 13.5+ cluster hash-tag layout): "
                     "pass --laravel 13.5 or newer, with a cluster connection")
    for prefix, _count in sorted(discover_prefixes(ops.queue.client).items(), key=lambda kv: -kv[1])[:5]:
        if prefix == here:
            continue
        names = discover_queues(ops.queue.client, prefix)
        if asked:
            names = [n for n in names if n in asked or n.strip("{}") in asked]
        if not names:
            continue
        stock = [v for v in _PROFILES if LaravelVersion.parse(v).default_redis_prefix(ops.settings.app_name) == prefix]
        where = f", the stock prefix of Laravel {'/'.join(stock)}" if stock else ""
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        hints.append(f"queues under prefix {prefix!r}: {shown} (pass --prefix {prefix}{where})")
    return hints


def _with_failed_only(ops: Ops, names: list[str]) -> list[str]:
    """Add the queues that only have failed jobs (no Redis keys) to the discovered ``names``."""
    try:
        failed = failed_queue_names(ops.failed_store(), ops.settings.connection_name)
    except Exception:  # reported by _failed_counts when the store cannot be read
        return names
    return sorted(set(names) | set(failed))


def _php_waiting(ops: Ops, names: list[str]) -> list[Any]:
    """What live ``laraq work`` processes recorded about jobs only PHP can run and no PHP worker takes
    (:mod:`laraq.horizon.phpwait`), for ``names`` on this connection."""
    # start-up: the horizon package only for the status frame, not for laraq --help
    from laraq.horizon.phpwait import read_php_waiting

    connection = ops.settings.connection_name
    try:
        found = read_php_waiting(ops.queue.client, ops.queue.prefix)
    except Exception:  # a server that refuses HGETALL (ACL) must not hide the queue counters
        return []
    return [w for w in found if w.connection == connection and w.queue in names]


def snapshot(ops: Ops, asked: list[str], marks: list[ListMark] | None, *, max_size: int | None) -> Snapshot:
    """One frame: counters now, pickups since ``marks`` (when given), failed counts and paused state."""
    names = ops.queues(asked)
    if not asked:
        names = _with_failed_only(ops, names)
    pickups = pickups_since(ops.queue, [m for m in marks if m.queue in names]) if marks else {}
    statuses = [queue_status(ops.queue, name) for name in names]
    snap = Snapshot(ops.queue.prefix, statuses, pickups=pickups, max=max_size)
    snap.keys = {n: {"ready": (k := ops.queue.keys(n)).list, "delayed": k.delayed, "reserved": k.reserved}
                 for n in names}
    if names:
        _failed_counts(ops, names, snap)
        _paused(ops, names, snap)
        snap.parked = parked_summary(ops.queue, names)
        snap.notes.extend(f"queue {n!r}: {p['count']} failed job(s) parked until the failed-job store takes their "
                          "rows (kept in Redis, not run again)" for n, p in snap.parked.items())
    snap.notes.extend(_elsewhere(ops, asked, statuses))
    snap.php_waiting = _php_waiting(ops, names)
    snap.notes.extend(
        f"queue {w.queue!r}: {w.jobs} job(s) only PHP can run wait (among the first {w.looked_at}) and no PHP "
        f"worker works the queue (no PHP Horizon supervisor alive; horizon:status counts laraq's masters as "
        f"Horizon running); seen by laraq work {w.worker} {human_age(max(0.0, time.time() - w.checked_at))} ago"
        for w in snap.php_waiting)
    held = find_held(ops.queue.client, ops.queue.prefix)
    snap.transfers = [h for h in held if not asked or h.source_queue(ops.queue.prefix) in asked]
    return snap


def _rate(pick: Pickups | None) -> str:
    if pick is None or pick.taken <= 0:
        return "-"  # nothing measured as consumed in the window: no rate is shown
    return ("" if pick.exact else "≥") + (f"{pick.rate:.1f}/s" if pick.rate < 100 else f"{pick.rate:.0f}/s")


def _wait(snap: Snapshot, s: QueueStatus) -> str:
    seconds = snap.wait(s)
    if seconds is None:
        return "-" if snap.pickups.get(s.queue) is None else "∞"
    return human_age(seconds)


def render(snap: Snapshot) -> None:
    if not snap.statuses:
        click.echo(f"no queues under prefix {snap.prefix!r}")
    else:
        rows = []
        for s in snap.statuses:
            failed = "?" if snap.failed is None else snap.failed.get(s.queue, 0)
            paused = "-" if snap.paused is None else ("yes" if snap.paused.get(s.queue) else "no")
            row = [s.queue, s.pending, s.delayed, s.reserved, human_age(s.oldest_pending_age), s.due_delayed,
                   s.expired_reserved, s.poison, failed, paused, _rate(snap.pickups.get(s.queue)), _wait(snap, s)]
            if snap.max is not None:
                row.append("ALERT" if snap.alert(s) else "OK")
            rows.append(row)
        headers = ["pending", "delayed", "reserved", "oldest", "due", "expired", "poison", "failed", "paused",
                   "rate", "wait"] + (["status"] if snap.max is not None else [])
        print_table([Column("queue", key=True), *(Column(h, justify="right", no_wrap=True) for h in headers)],
                    rows)
    if snap.transfers:
        click.echo("unfinished transfers (no worker runs a held job):")
        for held in snap.transfers:
            click.echo(f"  {visible(held.describe(snap.prefix))}")
    for note in snap.notes:
        click.echo(f"note: {visible(note)}", err=True)


def _is_tty() -> bool:
    try:
        return bool(stdout_stream().isatty())
    except (AttributeError, ValueError, OSError):
        return False


@click.command("status")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("--sample", type=click.FloatRange(0), default=1.0, show_default=True, metavar="SECONDS",
              help="Watch the ready lists this long to measure the pickup rate (0: skip; only when jobs are pending).")
@click.option("--max", "max_size", type=click.IntRange(0), default=None, metavar="N",
              help="Like queue:monitor --max: mark queues whose size (pending+delayed+reserved) is N or more "
                   "ALERT, and exit 1 when any is.")
@click.option("--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C (or --frames).")
@click.option("--interval", type=click.FloatRange(0.1), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between two --watch frames (also the rate's measuring window).")
@click.option("--frames", type=click.IntRange(1), default=None, metavar="N",
              help="With --watch: stop after N frames (default: run until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="Print the counters as JSON (with --watch: one line per frame).")
@click.option("--reserved", is_flag=True,
              help="Show each reserved job instead: the worker holding it (by heartbeat), since when, its lease "
                   "end, and orphans with how they come back.")
def status_cmd(ops: Ops, queues: tuple[str, ...], sample: float, max_size: int | None, watch: bool,
               interval: float, frames: int | None, as_json: bool, reserved: bool = False) -> None:
    """Sizes, ages, failed count, paused state, pickup rate and wait estimate of QUEUES (default: every
    queue found under the prefix, via SCAN), like queue:monitor.

    Exit codes: 0, or 1 when --max is given and a queue is at or over it, or when an unfinished move holds
    jobs of these queues (listed with the commands that finish or undo it)."""
    asked = list(queues)
    if reserved:
        show_reserved(ops, asked, as_json)
        return
    marks: list[ListMark] | None = None
    snap: Snapshot | None = None
    if not watch:
        names = ops.queues(asked)
        if sample > 0 and names:
            marks = [m for m in mark_lists(ops.queue, names) if m.tail is not None]
            if marks:
                time.sleep(sample)
        snap = snapshot(ops, asked, marks, max_size=max_size)
        _emit(snap, as_json)
        if snap.alerting or snap.transfers:
            sys.exit(EXIT_ERROR)
        return
    marks = None  # the first frame has nothing to measure against yet
    frame = 0
    try:
        while True:
            snap = snapshot(ops, asked, marks, max_size=max_size)
            frame += 1
            if not as_json and _is_tty():
                click.clear()
            if not as_json:
                click.echo(f"laraq status  {time.strftime('%Y-%m-%d %H:%M:%S')}  prefix {ops.queue.prefix!r}  "
                           f"every {interval:g}s  (Ctrl-C to stop)")
            _emit(snap, as_json, lines=True)
            if frames is not None and frame >= frames:
                break
            marks = mark_lists(ops.queue, [s.queue for s in snap.statuses])
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    if snap is not None and (snap.alerting or snap.transfers):
        sys.exit(EXIT_ERROR)


def _emit(snap: Snapshot, as_json: bool, *, lines: bool = False) -> None:
    if as_json and lines:  # --watch --json: one compact document per line (JSON Lines)
        click.echo(visible(json.dumps(snap.to_dict(), ensure_ascii=False, default=str), json=True))
    elif as_json:
        emit_json(snap.to_dict())
    else:
        render(snap)
