"""The failed-job store: ``failed``, ``retry`` (also filtered bulk retry, its journal and ``--undo``), ``forget``,
``flush``, ``prune-failed``."""

from __future__ import annotations

import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from laraq.bus.dispatch import expand_retry_ids, retry_failed
from laraq.bus.retry import RetryFilter, RetryOutcome, bulk_retry, parse_moment, select_failed, undo_retry
from laraq.cli.common import (
    Ops,
    emit_json,
    settings_options,
)
from laraq.cli.render import Column, print_table
from laraq.cli.statefiles import How, open_private, state_dir, state_dir_problem
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible


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
    # the id (to paste into retry/forget) and the time are never cut; the class is what a reader looks for
    columns = [Column(h, key=h in ("id", "class"), whole=h in ("id", "failed at")) for h in headers[:-1]
               if h != "exception"]
    columns.append(Column(headers[-1], wrap=True) if exceptions else Column(headers[-1], whole=True))
    print_table(columns, rows)


@click.command("retry")
@settings_options
@click.argument("ids", nargs=-1)
@click.option("-q", "--queue", "queue_name", default=None, help="Retry every failed job of this queue.")
@click.option("--range", "ranges", multiple=True, help="Failed job ids FROM-TO (integer ids).")
@click.option("--class", "classes", multiple=True, metavar="CLASS",
              help="Bulk: only jobs of this class (a glob such as 'App\\Jobs\\*Mail*' works; repeatable).")
@click.option("--failed-after", default=None, metavar="WHEN",
              help="Bulk: only jobs that failed at or after WHEN (2026-11-27T10:00, UTC unless given; or an age: 6h, 2d).")
@click.option("--failed-before", default=None, metavar="WHEN", help="Bulk: only jobs that failed before WHEN.")
@click.option("--exception", "exception_text", default=None, metavar="TEXT",
              help="Bulk: only jobs whose exception contains TEXT (case-insensitive).")
@click.option("--dry-run", is_flag=True, help="Bulk: list what would be retried, change nothing.")
@click.option("-y", "--yes", is_flag=True, help="Bulk: do not ask for confirmation after the count.")
@click.option("--journal", type=click.Path(dir_okay=False), default=None,
              help="Bulk: the JSON Lines journal of what was sent where, created 0600 or appended to if it is "
                   "yours (default: laraq-retry-<time>.jsonl in the state directory, $LARAQ_STATE_DIR).")
@click.option("--undo", "undo_journal", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Take back a bulk retry from its journal: waiting jobs leave the queue, rows return to the store.")
@click.option("--retry-until", "retry_until", type=click.Choice(["auto", "keep", "window"]), default="auto",
              show_default=True, help="How to refresh retryUntil (PHP re-runs the job's retryUntil() method).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON outcome per job.")
def retry_cmd(ops: Ops, ids: tuple[str, ...], queue_name: str | None, ranges: tuple[str, ...],
              classes: tuple[str, ...], failed_after: str | None, failed_before: str | None,
              exception_text: str | None, dry_run: bool, yes: bool, journal: str | None, undo_journal: str | None,
              retry_until: str, as_json: bool) -> None:
    """Push failed jobs back onto their queue (IDs, 'all', --queue, --range), like queue:retry.

    Bulk retry: filter by --class, --failed-after/--failed-before, --exception (and IDs/--queue/--range);
    it shows the count and asks first (--yes skips, --dry-run only lists), and writes a journal that
    --undo JOURNAL reverses."""
    store = ops.failed_store()
    if undo_journal:
        _undo(ops, undo_journal, as_json)
        return
    bulk = bool(classes or failed_after or failed_before or exception_text or dry_run or journal)
    try:
        targets = expand_retry_ids(store, ids, queue=queue_name, ranges=ranges)
        flt = RetryFilter(classes, (), parse_moment(failed_after) if failed_after else None,
                          parse_moment(failed_before) if failed_before else None, exception_text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if bulk:
        _bulk(ops, flt, targets if (ids or queue_name or ranges) else None, dry_run=dry_run, yes=yes,
              journal=journal, retry_until=retry_until, as_json=as_json)
        return
    if not targets:
        click.echo("No retryable jobs found.")
        return
    outcomes = retry_failed(store, ops.queue, targets, retry_until=retry_until, encrypter=ops.encrypter)
    _report(outcomes, as_json)


def _report(outcomes: list[RetryOutcome], as_json: bool) -> None:
    if as_json:
        emit_json([{"id": o.id, "status": o.status, "queue": o.queue, "message": o.message} for o in outcomes])
    else:
        for o in outcomes:
            click.echo(visible(o.message), err=o.status != "pushed")
    if any(o.status != "pushed" for o in outcomes):
        sys.exit(EXIT_ERROR)


def _bulk(ops: Ops, flt: RetryFilter, among: list[str | int] | None, *, dry_run: bool, yes: bool,
          journal: str | None, retry_until: str, as_json: bool) -> None:
    store = ops.failed_store()
    jobs = select_failed(store, flt, among)
    by_class = Counter((j.queue, j.display_name or "?") for j in jobs)
    if dry_run or not as_json:
        if as_json:
            emit_json({"dry_run": True, "count": len(jobs), "jobs": [
                {"id": j.id, "queue": j.queue, "class": j.display_name, "failed_at": j.failed_at} for j in jobs]})
            return
        click.echo(f"{len(jobs)} failed job(s) match" + (":" if jobs else "."))
        print_table([Column("queue", key=True), Column("class", key=True), Column("jobs", justify="right")],
                    [[q, c, n] for (q, c), n in sorted(by_class.items())])
    if dry_run and jobs:  # the jobs themselves, as `laraq failed` lists them (the id never drops)
        click.echo("")
        print_table([Column("id", key=True, whole=True), Column("queue"), Column("class", key=True),
                     Column("failed at", whole=True)],
                    [[j.uuid or j.id, j.queue, j.display_name, j.failed_at] for j in jobs])
        click.echo("(dry run: nothing retried)")
    if dry_run or not jobs:
        return
    if not yes and not click.confirm(f"Retry {len(jobs)} failed job(s)?"):
        raise click.Abort()
    # the journal holds every payload: a private file, never one found at a predictable name
    how: How = "append"
    if journal:
        path = Path(journal)
    else:
        where = state_dir()
        loose = state_dir_problem(where)
        if loose:
            click.echo(f"warning: {loose}", err=True)
        path, how = where / f"laraq-retry-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.jsonl", "new"
    try:
        fh = open_private(path, how)
    except OSError as exc:
        raise click.ClickException(f"cannot write the journal: {exc}") from exc
    outcomes = bulk_retry(store, ops.queue, jobs, fh, retry_until=retry_until, encrypter=ops.encrypter)
    click.echo(f"journal: {path} (undo: laraq retry --undo {path})", err=True)
    _report(outcomes, as_json)


def _undo(ops: Ops, journal: str, as_json: bool) -> None:
    try:
        fh = open_private(journal, "read")
    except OSError as exc:
        raise click.ClickException(f"cannot undo from {journal}: {exc}") from exc
    try:
        outcomes = undo_retry(ops.failed_store(), ops.queue, fh)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(f"cannot undo from {journal}: {exc}") from exc
    if as_json:
        emit_json([{"id": o.id, "status": o.status, "queue": o.queue, "message": o.message} for o in outcomes])
    else:
        for o in outcomes:
            click.echo(visible(o.message), err=o.status == "taken")
        counts = Counter(o.status for o in outcomes)
        click.echo(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to undo", err=True)
        if counts.get("taken"):
            # expected while workers run: those jobs ran (or are running) again; nothing is lost or failed
            click.echo(f"{counts['taken']} job(s) a worker had already taken were left to it; the others are "
                       "back in the failed-job store", err=True)


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
        sys.exit(EXIT_ERROR)


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
