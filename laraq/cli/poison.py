"""``laraq poison``: laraq's dead-letter lists (``queues:NAME:poison``, compat-docs/protocol.md §5).

laraq's pop parks a member it cannot reserve (not JSON, no numeric ``attempts``, a number Redis' cjson
cannot encode) there instead of losing it as Laravel's pop does. ``list`` shows them with the reason,
``requeue`` puts them back on their queue once fixed, ``drop`` deletes them. The Redis work is in
:mod:`laraq.ops.poison`.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Sequence

import click

from laraq.cli.common import Ops, emit_json, settings_options
from laraq.cli.render import Column, print_table
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible
from laraq.ops.inspect import discover_queues
from laraq.ops.poison import drop_poison, poison_readable, poison_reason, requeue_poison

__all__ = ["poison_group"]

PREVIEW = 60


@click.group("poison")
def poison_group() -> None:
    """laraq's dead-letter lists: members the pop could not reserve (list, requeue, drop).

    To repair members: `laraq export QUEUE --state poison -o bad.jsonl`, fix the bodies, `laraq import
    bad.jsonl`, then `laraq poison drop QUEUE --all`. Or fix what wrote them and `requeue` as they are.
    """


def _preview(member: bytes) -> str:
    text = member[:PREVIEW * 4].decode("utf-8", "backslashreplace")
    return text if len(text) <= PREVIEW and len(member) <= PREVIEW * 4 else text[:PREVIEW - 1] + "…"


@poison_group.command("list", short_help="Poison members with the reason they are there.")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the members as JSON (body, or body_b64).")
def poison_list_cmd(ops: Ops, queues: tuple[str, ...], as_json: bool) -> None:
    """Poison members of QUEUES (default: every queue under the prefix that has any), with the reason."""
    names = list(queues) or [q for q in discover_queues(ops.queue.client, ops.queue.prefix)
                             if ops.queue.poison_size(q)]
    rows, docs = [], []
    for name in names:
        members = ops.queue.poison_members(name)
        for index, (member, readable) in enumerate(zip(members, poison_readable(ops.queue, members), strict=True)):
            reason = "readable now: requeue it" if readable else poison_reason(member)
            rows.append((name, index, len(member), reason, _preview(member)))
            doc = {"queue": name, "index": index, "bytes": len(member), "readable": readable, "reason": reason}
            try:
                doc["body"] = member.decode("utf-8")
            except UnicodeDecodeError:
                doc["body_b64"] = base64.b64encode(member).decode("ascii")
            docs.append(doc)
    if as_json:
        emit_json(docs)
    elif not rows:
        click.echo(f"no poison members under prefix {ops.queue.prefix!r}")
    else:
        print_table([Column("queue", key=True), Column("#", justify="right", no_wrap=True),
                     Column("bytes", justify="right", no_wrap=True), Column("reason", overflow="fold"),
                     Column("member", overflow="fold")], rows)


def _targets(indexes: Sequence[int], all_members: bool) -> list[int] | None:
    if all_members == bool(indexes):
        raise click.UsageError("give member numbers (from `laraq poison list`) or --all")
    return None if all_members else list(indexes)


@poison_group.command("requeue", short_help="Put poison members back on their queue.")
@settings_options
@click.argument("queue_name", metavar="QUEUE")
@click.argument("indexes", nargs=-1, type=click.IntRange(0), metavar="[N]...")
@click.option("--all", "all_members", is_flag=True, help="Every poison member of QUEUE.")
@click.option("--force", is_flag=True,
              help="Requeue even members the pop would park again (PHP's pop would lose them).")
def poison_requeue_cmd(ops: Ops, queue_name: str, indexes: tuple[int, ...], all_members: bool,
                       force: bool) -> None:
    """Put poison members N... (or --all) back at the tail of QUEUE, each in one atomic step.

    Members the pop script still cannot reserve stay in the poison list (exit 1) unless --force."""
    try:
        outcomes = requeue_poison(ops.queue, queue_name, _targets(indexes, all_members), force=force)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    moved = sum(o.status == "requeued" for o in outcomes)
    click.echo(f"requeued {moved} poison member(s) to {ops.queue.keys(queue_name).list}")
    for o in outcomes:
        if o.status == "unreadable":
            click.echo(f"#{o.index} left in the poison list: {visible(o.reason)} (fix it, or --force)", err=True)
        elif o.status == "gone":
            click.echo(f"#{o.index} was no longer in the poison list", err=True)
    if any(o.status == "unreadable" for o in outcomes):
        sys.exit(EXIT_ERROR)


@poison_group.command("drop", short_help="Delete poison members.")
@settings_options
@click.argument("queue_name", metavar="QUEUE")
@click.argument("indexes", nargs=-1, type=click.IntRange(0), metavar="[N]...")
@click.option("--all", "all_members", is_flag=True, help="Every poison member of QUEUE.")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def poison_drop_cmd(ops: Ops, queue_name: str, indexes: tuple[int, ...], all_members: bool, force: bool) -> None:
    """Delete poison members N... (or --all) of QUEUE for good."""
    targets = _targets(indexes, all_members)
    what = "every poison member" if targets is None else f"poison member(s) {', '.join(map(str, targets))}"
    if not force and not click.confirm(f"Delete {what} of {queue_name!r} on prefix {ops.queue.prefix!r}?"):
        raise click.Abort()
    try:
        outcomes = drop_poison(ops.queue, queue_name, targets)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    click.echo(f"dropped {sum(o.status == 'dropped' for o in outcomes)} poison member(s) of {queue_name}")
