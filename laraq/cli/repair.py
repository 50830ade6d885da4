"""Queue signals and repairs: ``clear``, ``restart``, ``pause`` and ``resume`` (artisan's ``queue:*``)."""

from __future__ import annotations

import click

from laraq.cli.common import (
    Ops,
    settings_options,
)

# -- repair ------------------------------------------------------------------------------------------------

@click.command("clear")
@settings_options
@click.argument("queue_name", metavar="QUEUE", required=False)
@click.option("--poison", is_flag=True, help="Also delete laraq's :poison list.")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def clear_cmd(ops: Ops, queue_name: str | None, poison: bool, force: bool) -> None:
    """Delete every job of QUEUE (ready, delayed, reserved), like queue:clear."""
    name = ops.queue.queue_name(queue_name)
    if not force and not click.confirm(f"Delete all jobs of {name!r} on prefix {ops.queue.prefix!r}?"):
        raise click.Abort()
    count = ops.queue.clear(name)
    extra = ops.queue.clear_poison(name) if poison else 0
    click.echo(f"Cleared {count} jobs from the [{name}] queue" + (f" and {extra} poison members" if poison else ""))


@click.command("restart")
@settings_options
def restart_cmd(ops: Ops) -> None:
    """Tell every worker (PHP and laraq) to exit after its current job, like queue:restart."""
    stamp = ops.cache().set_restart()
    click.echo(f"Broadcasting queue restart signal ({stamp}).")


def _split_target(ops: Ops, target: str) -> tuple[str, str]:
    connection, sep, queue = target.rpartition(":")
    if not sep:
        return ops.settings.connection_name, target
    return connection, queue


def _toggle(ops: Ops, target: str | None, all_queues: bool, verb: str, ttl: int | None = None) -> None:
    """``queue:pause`` / ``queue:resume`` (``verb``) of one queue or, with ``all_queues``, of every queue."""
    cache = ops.cache()
    try:
        if all_queues:
            (cache.pause_all if verb == "paused" else cache.resume_all)()
            click.echo(f"Job processing on all queues has been {verb}.")
            return
        if not target:
            raise click.UsageError("give [CONNECTION:]QUEUE or --all")
        connection, queue = _split_target(ops, target)
        if verb == "paused":
            cache.pause(connection, queue, ttl)
        else:
            cache.resume(connection, queue)
    except NotImplementedError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"Job processing on queue [{connection}:{queue}] has been {verb}.")


@click.command("pause")
@settings_options
@click.argument("target", metavar="[CONNECTION:]QUEUE", required=False)
@click.option("--all", "all_queues", is_flag=True, help="Pause every queue (13.25+).")
@click.option("--for", "ttl", type=int, default=None, help="Resume by itself after this many seconds.")
def pause_cmd(ops: Ops, target: str | None, all_queues: bool, ttl: int | None) -> None:
    """Stop workers taking jobs from a queue (Laravel 12.40+), like queue:pause."""
    _toggle(ops, target, all_queues, "paused", ttl)


@click.command("resume")
@settings_options
@click.argument("target", metavar="[CONNECTION:]QUEUE", required=False)
@click.option("--all", "all_queues", is_flag=True, help="Resume every queue (13.25+).")
def resume_cmd(ops: Ops, target: str | None, all_queues: bool) -> None:
    """Let workers take jobs from a paused queue again, like queue:resume."""
    _toggle(ops, target, all_queues, "resumed")
