"""The failed-job store: ``failed``, ``retry``, ``forget``, ``flush``, ``prune-failed``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import click

from laraq.bus.dispatch import expand_retry_ids, retry_failed
from laraq.cli.common import (
    Ops,
    emit_json,
    settings_options,
)
from laraq.cli.render import Column, print_table


@click.command("failed")
@settings_options
@click.option("-q", "--queue", "queue_name", default=None, help="Only this queue.")
@click.option("--json", "as_json", is_flag=True, help="Print the failed jobs as JSON.")
@click.option("--exceptions", is_flag=True, help="Include the exception text (first line in the table).")
def failed_cmd(ops: Ops, queue_name: str | None, as_json: bool, exceptions: bool) -> None:
    """List failed jobs, like queue:failed."""
    jobs = [j for j in ops.failed_store().all() if queue_name is None or j.queue == queue_name]
    if as_json:
        emit_json([{"id": j.id, "uuid": j.uuid, "connection": j.connection, "queue": j.queue,
                    "class": j.display_name, "failed_at": j.failed_at,
                    **({"exception": j.exception} if exceptions else {})} for j in jobs])
        return
    if not jobs:
        click.echo("No failed jobs found.")
        return
    headers = ["id", "connection", "queue", "class", "failed at"] + (["exception"] if exceptions else [])
    rows = [[j.id, j.connection, j.queue, j.display_name, j.failed_at]
            + ([j.exception.splitlines()[0] if j.exception else ""] if exceptions else []) for j in jobs]
    columns = [Column(h, no_wrap=h in ("id", "failed at")) for h in headers[:-1] if h != "exception"]
    columns.append(Column(headers[-1], overflow="ellipsis", no_wrap=True, min_width=10) if exceptions
                   else Column(headers[-1], no_wrap=True))
    print_table(columns, rows)


@click.command("retry")
@settings_options
@click.argument("ids", nargs=-1)
@click.option("-q", "--queue", "queue_name", default=None, help="Retry every failed job of this queue.")
@click.option("--range", "ranges", multiple=True, help="Failed job ids FROM-TO (integer ids).")
@click.option("--retry-until", "retry_until", type=click.Choice(["auto", "keep", "window"]), default="auto",
              show_default=True, help="How to refresh retryUntil (PHP re-runs the job's retryUntil() method).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON outcome per job.")
def retry_cmd(ops: Ops, ids: tuple[str, ...], queue_name: str | None, ranges: tuple[str, ...], retry_until: str,
              as_json: bool) -> None:
    """Push failed jobs back onto their queue (IDs, 'all', --queue, --range), like queue:retry."""
    store = ops.failed_store()
    try:
        targets = expand_retry_ids(store, ids, queue=queue_name, ranges=ranges)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if not targets:
        click.echo("No retryable jobs found.")
        return
    outcomes = retry_failed(store, ops.queue, targets, retry_until=retry_until, encrypter=ops.encrypter)
    if as_json:
        emit_json([{"id": o.id, "status": o.status, "queue": o.queue, "message": o.message} for o in outcomes])
    else:
        for o in outcomes:
            click.echo(o.message, err=o.status != "pushed")
    if any(o.status != "pushed" for o in outcomes):
        sys.exit(1)


@click.command("forget")
@settings_options
@click.argument("ids", nargs=-1, required=True)
def forget_cmd(ops: Ops, ids: tuple[str, ...]) -> None:
    """Delete failed jobs by id, like queue:forget."""
    store = ops.failed_store()
    missing = False
    for ident in ids:
        if store.forget(ident):
            click.echo("Failed job deleted successfully!")
        else:
            click.echo(f"No failed job matches the given ID [{ident}].", err=True)
            missing = True
    if missing:
        sys.exit(1)


@click.command("flush")
@settings_options
@click.option("--hours", type=int, default=None, help="Only failed jobs older than this many hours.")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def flush_cmd(ops: Ops, hours: int | None, force: bool) -> None:
    """Delete all failed jobs (or those older than --hours), like queue:flush."""
    if not force and not click.confirm("Delete failed jobs?"):
        raise click.Abort()
    ops.failed_store().flush(hours)
    click.echo(f"All jobs that failed more than {hours} hours ago have been deleted successfully!" if hours
               else "All failed jobs deleted successfully!")


@click.command("prune-failed")
@settings_options
@click.option("--hours", type=int, default=24, show_default=True, help="Prune jobs failed more than N hours ago.")
def prune_failed_cmd(ops: Ops, hours: int) -> None:
    """Delete failed jobs older than --hours, like queue:prune-failed."""
    count = ops.failed_store().prune(datetime.now(UTC) - timedelta(hours=hours))
    click.echo(f"{count} entries deleted!")
