"""Reading queues without touching them: ``status``, ``peek``, ``list`` and ``show``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from laraq.cli.common import (
    Ops,
    emit_json,
    fmt_time,
    human_age,
    settings_options,
)
from laraq.cli.render import Column, kv_table, print_renderable, print_table
from laraq.inspect import STATES, JobView, find_job, list_jobs, queue_status

# -- inspect -----------------------------------------------------------------------------------------------

@click.command("status")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the counters as JSON.")
def status_cmd(ops: Ops, queues: tuple[str, ...], as_json: bool) -> None:
    """Sizes and ages of QUEUES (default: every queue found under the prefix, via SCAN)."""
    statuses = [queue_status(ops.queue, name) for name in ops.queues(queues)]
    if as_json:
        emit_json({"prefix": ops.queue.prefix, "queues": [s.to_dict() for s in statuses]})
        return
    if not statuses:
        click.echo(f"no queues under prefix {ops.queue.prefix!r}")
        return
    rows = [(s.queue, s.pending, s.delayed, s.reserved, human_age(s.oldest_pending_age), s.due_delayed,
             s.expired_reserved, s.poison) for s in statuses]
    print_table([Column("queue", overflow="fold"), *(Column(h, justify="right", no_wrap=True) for h in (
        "pending", "delayed", "reserved", "oldest", "due", "expired", "poison"))], rows)


def _job_rows(views: Sequence[JobView]) -> None:
    rows = []
    for v in views:
        when = fmt_time(v.available_at if v.state == "delayed" else v.reserved_until if v.state == "reserved"
                        else v.created_at)
        view = v.properties if v.properties is not None else v.data
        if isinstance(view, dict) and view.get("@class") in (v.name, v.job):
            view = {k: item for k, item in view.items() if k != "@class"}  # the job column says it already
        props = "" if v.error else _short(view)
        rows.append((v.index, v.state, v.name or ("<" + _short(v.error or "?", quote=False) + ">"), v.attempts,
                     v.uuid, when, props))
    print_table([Column("#", justify="right", no_wrap=True), Column("state", no_wrap=True),
                 Column("job", overflow="fold"), Column("attempts", justify="right", no_wrap=True),
                 Column("uuid", overflow="fold"), Column("at (UTC)", no_wrap=True),
                 Column("properties", overflow="fold")], rows)


def _short(value: Any, width: int = 60, *, quote: bool = True) -> str:
    if value in (None, {}, []):
        return ""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":")) if quote else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _peek(ops: Ops, queue_name: str | None, state: str, limit: int, offset: int, class_filter: str | None,
          as_json: bool, raw: bool) -> None:
    views = list_jobs(ops.queue, queue_name, state, offset=offset, limit=limit, encrypter=ops.encrypter,
                      class_filter=class_filter)
    if as_json:
        emit_json([v.to_dict(raw=raw) for v in views])
    elif not views:
        click.echo(f"no {state} jobs on {ops.queue.queue_name(queue_name)}")
    else:
        _job_rows(views)


def _peek_command(name: str, help_text: str) -> click.Command:
    @click.command(name, help=help_text)
    @settings_options
    @click.argument("queue_name", metavar="QUEUE", required=False)
    @click.option("--state", type=click.Choice(STATES), default="pending", show_default=True,
                  help="Which part of the queue to list.")
    @click.option("-n", "--limit", type=int, default=20, show_default=True, help="At most this many jobs.")
    @click.option("--offset", type=int, default=0, help="Skip this many (matching) jobs first.")
    @click.option("--class", "class_filter", default=None, help="Only jobs of this class (glob allowed).")
    @click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
    @click.option("--raw", is_flag=True, help="Include the raw body in --json output.")
    def command(ops: Ops, queue_name: str | None, state: str, limit: int, offset: int, class_filter: str | None,
                as_json: bool, raw: bool) -> None:
        _peek(ops, queue_name, state, limit, offset, class_filter, as_json, raw)

    return command


peek_cmd = _peek_command("peek", "Show the next jobs of QUEUE, decoded, without taking them.")
list_cmd = _peek_command("list", "List the jobs of QUEUE (same as peek; --offset pages through).")


@click.command("show")
@settings_options
@click.argument("ident", metavar="ID|UUID")
@click.option("-q", "--queue", "queue_names", multiple=True, help="Search only these queues.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def show_cmd(ops: Ops, ident: str, queue_names: tuple[str, ...], as_json: bool) -> None:
    """Find a job by payload id or uuid in every queue and state, and show it in full."""
    found = find_job(ops.queue, ident, ops.queues(queue_names), encrypter=ops.encrypter)
    if not found:
        raise click.ClickException(f"no job with id or uuid {ident!r} under prefix {ops.queue.prefix!r}")
    if as_json:
        emit_json([v.to_dict(raw=True) for v in found])
        return
    for number, v in enumerate(found):
        d = v.to_dict(raw=True)
        pairs = [(key, d[key]) for key in (
            "queue", "state", "name", "job", "uuid", "id", "attempts", "max_tries", "backoff", "timeout",
            "retry_until", "created_at", "available_at", "reserved_until", "encrypted", "error",
        ) if d.get(key) is not None]
        view = v.properties if v.properties is not None else v.data
        pairs.append(("properties" if v.properties is not None else "data",
                      json.dumps(view, ensure_ascii=False, indent=2, default=str)))
        pairs.append(("body" if "body" in d else "body_b64", d.get("body", d.get("body_b64"))))
        if number:
            click.echo()
        print_renderable(kv_table(pairs))
