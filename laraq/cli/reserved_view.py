"""``laraq status --reserved``: each reserved job, the worker holding it, since when, when its lease ends,
and the orphans with how they come back (see :mod:`laraq.production.holders`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from laraq.cli.common import Ops, emit_json, human_age
from laraq.cli.render import Column, print_table
from laraq.logtext import visible
from laraq.production.holders import reservations

__all__ = ["show_reserved"]


def _clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S")


def show_reserved(ops: Ops, asked: list[str], as_json: bool) -> dict[str, Any]:
    """Print the reservations of the queues (JSON or a table); returns the JSON document."""
    names = ops.queues(asked)
    jobs = reservations(ops.queue, names, retry_after=ops.settings.retry_after)
    now = float(ops.queue.current_time())
    doc = {"prefix": ops.queue.prefix, "now": now, "retry_after": ops.settings.retry_after,
           "reserved": [j.to_dict(now) for j in jobs], "orphans": sum(1 for j in jobs if j.orphan)}
    if as_json:
        emit_json(doc)
        return doc
    if not jobs:
        click.echo(f"no reserved jobs on {visible(', '.join(names)) or 'any queue'}")
        return doc
    rows = []
    for j in jobs:
        holder = f"{j.worker}" if j.worker else ("(expired)" if j.state == "expired" else "(no laraq worker)")
        since = "-" if j.since is None else ("~" if j.since_estimated else "") + human_age(now - j.since)
        lease = _clock(j.lease_ends_at) + (" (ended)" if j.lease_ends_at <= now else f" (in {human_age(j.lease_ends_at - now)})")
        rows.append([j.queue, j.job, j.id or "-", j.attempts if j.attempts is not None else "-", holder, since, lease,
                     j.comes_back(now) or "-"])
    print_table([Column("queue", key=True), Column("job", key=True), Column("id", whole=True),
                 Column("attempts", justify="right"), Column("held by", overflow="fold"), Column("for", whole=True),
                 Column("lease ends", whole=True), Column("orphan: comes back", overflow="fold")], rows)
    orphans = doc["orphans"]
    if orphans:
        click.echo(f"note: {orphans} reservation(s) held by no live laraq worker: a PHP worker's, or orphans "
                   f"that return at their lease end (retry_after {ops.settings.retry_after}s)", err=True)
    return doc
