"""Reading jobs without touching them: ``peek``, ``list`` and ``show`` (``status`` is :mod:`laraq.cli.status_cmd`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from laraq.cli.common import (
    Ops,
    emit_json,
    fmt_time,
    settings_options,
)
from laraq.cli.render import Column, kv_table, print_renderable, print_table
from laraq.logtext import visible
from laraq.ops.inspect import STATES, JobView, find_failed, find_job, list_jobs


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
                 Column("job", key=True), Column("attempts", justify="right", no_wrap=True),
                 Column("uuid", key=True, whole=True), Column("at (UTC)", whole=True),
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


#: How much of a body ``show`` prints without ``--full``, and how many values it decodes at most.
BODY_PREVIEW = 2000
DECODE_BUDGET = 20_000


def preview(value: Any, *, chars: int = 200, items: int = 20, depth: int = 0) -> Any:
    """A bounded copy of a decoded value: long strings cut, long arrays and objects shortened, each cut
    saying how much was left out (``show`` without ``--full``)."""
    if isinstance(value, str) and len(value) > chars:
        return value[:chars] + f"… (+{len(value) - chars:,} characters)"
    if depth > 8 and isinstance(value, list | dict):
        return f"… ({len(value):,} items)"
    if isinstance(value, list):
        out = [preview(v, chars=chars, items=items, depth=depth + 1) for v in value[:items]]
        if len(value) > items:
            out.append(f"… {len(value) - items:,} more items")
        return out
    if isinstance(value, dict):
        shown = dict(list(value.items())[:items])
        result = {k: preview(v, chars=chars, items=items, depth=depth + 1) for k, v in shown.items()}
        if len(value) > items:
            result["…"] = f"{len(value) - items:,} more keys"
        return result
    return value


def _search_failed(ops: Ops, ident: str, queue_names: Sequence[str], budget: int | None,
                   scan: bool) -> tuple[list[JobView], str]:
    """Matches in the failed-job store, and a note when it could not be searched."""

    try:
        store = ops.failed_store()
        found = find_failed(store, ident, encrypter=ops.encrypter, max_elements=budget, scan_payloads=scan)
    except Exception as exc:  # a store that is down or missing must not hide the Redis matches
        message = exc.message if isinstance(exc, click.ClickException) else f"{type(exc).__name__}: {exc}"
        return [], f"the failed-job store was not searched ({message})"
    return [v for v in found if not queue_names or v.queue in queue_names], ""


@click.command("show")
@settings_options
@click.argument("ident", metavar="ID|UUID")
@click.option("-q", "--queue", "queue_names", multiple=True, help="Search only these queues.")
@click.option("--full", is_flag=True,
              help=f"Decode and print everything (default: the first {BODY_PREVIEW:,} characters of the body, "
                   f"long values shortened, at most {DECODE_BUDGET:,} values decoded).")
@click.option("--no-failed", "skip_failed", is_flag=True, help="Do not search the failed-job store.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def show_cmd(ops: Ops, ident: str, queue_names: tuple[str, ...], full: bool, skip_failed: bool,
             as_json: bool) -> None:
    """Find a job by payload id or uuid in every queue and state, and in failed_jobs (by its id or uuid),
    and show it."""
    budget = None if full else DECODE_BUDGET
    found = find_job(ops.queue, ident, ops.queues(queue_names), encrypter=ops.encrypter, max_elements=budget)
    note = ""
    if not skip_failed:
        # by the store's id always; through every row's payload only when Redis had no match (a big
        # failed_jobs table would otherwise cost seconds on every show)
        failed, note = _search_failed(ops, ident, queue_names, budget, scan=not found)
        found += failed
    if note:
        click.echo(f"note: {note}", err=True)
    if not found:
        where = f"under prefix {ops.queue.prefix!r}" + ("" if skip_failed or note else " or in the failed-job store")
        raise click.ClickException(f"no job with id or uuid {ident!r} {where}")
    if as_json:
        emit_json([_json_view(v, full) for v in found])
        return
    for number, v in enumerate(found):
        if number:
            click.echo()
        _show_one(v, full)


def _json_view(v: JobView, full: bool) -> dict[str, Any]:
    d = v.to_dict(raw=True)
    if full:
        return d
    d["properties"], d["data"] = preview(d["properties"]), preview(d["data"])
    if d.get("exception"):
        d["exception"] = preview(d["exception"], chars=BODY_PREVIEW)
    d["body_bytes"] = len(v.raw)
    for key in ("body", "body_b64"):
        if key in d and len(d[key]) > BODY_PREVIEW:
            d[key] = d[key][:BODY_PREVIEW]
            d["body_truncated"] = True
    return d


def _show_one(v: JobView, full: bool) -> None:
    d = v.to_dict(raw=True)
    pairs = [(key, d[key]) for key in (
        "queue", "state", "connection", "failed_id", "failed_at", "name", "job", "uuid", "id", "attempts",
        "max_tries", "backoff", "timeout", "retry_until", "created_at", "available_at", "reserved_until",
        "encrypted", "error", "held_in", "taken_from", "destination", "finish", "undo", "note",
    ) if d.get(key) is not None]
    view = v.properties if v.properties is not None else v.data
    label = "properties" if v.properties is not None else "data"
    body_key = "body" if "body" in d else "body_b64"
    body = d.get(body_key) or ""
    exception = d.get("exception")
    if full:
        # the big parts go straight to the output: a table would re-flow megabytes of text
        print_renderable(kv_table(pairs))
        if exception:
            click.echo(f"\nexception:\n{visible(exception, multiline=True)}")
        click.echo(f"\n{label}:\n" + visible(json.dumps(view, ensure_ascii=False, indent=2, default=str),
                                              multiline=True, json=True))
        click.echo(f"\n{body_key} ({len(v.raw):,} bytes):\n{visible(body, multiline=True)}")
        return
    if exception:
        lines = exception.splitlines()
        shown = "\n".join(lines[:6]) + (f"\n… {len(lines) - 6} more lines (--full)" if len(lines) > 6 else "")
        pairs.append(("exception", preview(shown, chars=BODY_PREVIEW)))
    pairs.append((label, visible(json.dumps(preview(view), ensure_ascii=False, indent=2, default=str), multiline=True,
                                 json=True)))
    if len(body) > BODY_PREVIEW:
        body = body[:BODY_PREVIEW] + f"… ({len(v.raw):,} bytes in all; --full prints the whole body)"
    pairs.append((body_key, body))
    print_renderable(kv_table(pairs, multiline=("exception", label, body_key)))
