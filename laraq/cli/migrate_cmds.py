"""Moving jobs: ``move`` (and ``move --recover``) and ``copy`` (:class:`laraq.ops.migrate.Transfer`), ``export``,
``import`` and ``remove-exported``."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import redis

from laraq.bus.schema import SchemaError
from laraq.cli.common import (
    Ops,
    emit_json,
    settings_options,
)
from laraq.cli.errors import LaraqError
from laraq.cli.render import progress
from laraq.cli.statefiles import open_private
from laraq.config.faults import explain, one_line
from laraq.config.settings import LaravelSettings, make_redis
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible
from laraq.ops.failed_move import DestinationFailed, move_failed
from laraq.ops.inspect import discover_prefixes, discover_queues, identities_at, job_identity
from laraq.ops.jsonl import remove_exported
from laraq.ops.migrate import GIVE_SCRIPT, Transfer, TransferSummary, export_jobs, import_jobs
from laraq.ops.move_checks import missing_source, spent_reserved
from laraq.ops.stack import StackMove, known_classes
from laraq.ops.transfers import (
    PASSWORD_ENV,
    DestinationError,
    HeldElsewhere,
    HeldTransfer,
    check_destination,
    deliver_held,
    destination_fault,
    destination_identity,
    find_held,
    forget_marker,
    return_to_source,
    written_at,
)
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.stores.failed import make_failed_store

# -- migrate -------------------------------------------------------------------------------------------------

def _env_file_queue(ops: Ops, env_file: str, url: str | None, prefix: str | None, laravel: str | None,
                    cluster: bool, password: str | None) -> RedisQueue:
    """The destination queue described by its app's .env (its REDIS_* and version), options overriding."""
    settings = _dest_settings(ops, env_file, laravel, None)
    if url:
        queue = _target_queue(ops, url, prefix, laravel or str(settings.version), cluster, password)
        return RedisQueue(queue.client, prefix=settings.redis_prefix if prefix is None else prefix,
                          version=queue.version, connection_name=settings.connection_name,
                          default_queue=settings.redis_queue, cluster=cluster)
    return RedisQueue(make_redis(settings, "default"), prefix=settings.redis_prefix if prefix is None else prefix,
                      version=settings.version, connection_name=settings.connection_name,
                      default_queue=settings.redis_queue, cluster=cluster)


def _connect(url: str, password: str | None, cluster: bool = False) -> Any:
    """A client for ``url``; ``password`` (``--to-password``/``LARAQ_TO_PASSWORD``) when the URL has none."""
    extra = {"password": password} if password else {}
    return redis.RedisCluster.from_url(url, **extra) if cluster else redis.Redis.from_url(url, **extra)


def _target_queue(ops: Ops, url: str | None, prefix: str | None, laravel: str | None, cluster: bool,
                  password: str | None = None) -> RedisQueue:
    version = laravel or str(ops.settings.version)
    try:
        client = _connect(url, password, cluster) if url else ops.queue.client
    except (ValueError, redis.RedisError) as exc:
        raise click.BadParameter(str(exc), param_hint="--to-url") from exc
    return RedisQueue(client, prefix=ops.queue.prefix if prefix is None else prefix, version=version,
                      connection_name=ops.queue.connection_name, default_queue=ops.queue.default_queue,
                      cluster=cluster)


def _allow_duplicates_option(move: bool) -> Any:
    if move:
        return lambda f: f
    return click.option("--allow-duplicates", is_flag=True,
                        help="Copy jobs even when a job with the same uuid/id is already at the destination.")


def _recover_options(move: bool) -> Any:
    if not move:
        return lambda f: f

    def wrap(f: Any) -> Any:
        f = click.option("--to-source", is_flag=True,
                         help="With --recover: put the held jobs back in their source queue instead (those the "
                              "destination already wrote stay there: it is read, at the journal's recorded URL or "
                              "--to-url).")(f)
        f = click.option("--unchecked", is_flag=True,
                         help="With --recover --to-source: do not read the destination (it is gone for good); "
                              "every held job goes back, even one it had written.")(f)
        return click.option("--recover", is_flag=True,
                            help="Finish every unfinished move of SOURCE (default: of every queue under the prefix): "
                                 "deliver the jobs held in its journal on to the destination given by --to-url/"
                                 "--to-prefix, or back to the source with --to-source.")(f)
    return wrap


def _among(ids: set[str]) -> Callable[[bytes], bool]:
    """Whether a member's uuid/id is one of ``ids``."""
    return lambda member: job_identity(member) in ids


def _destination_error(exc: DestinationError) -> LaraqError:
    """The CLI error of a destination fault: its message, and the exit code the same fault at the source gives."""
    return LaraqError(str(exc), exc.exit_code)


def _written_there(ops: Ops, held: HeldTransfer, target: RedisQueue, explicit: bool,
                   password: str | None) -> tuple[Any, set[str]]:
    """The journal tokens the held transfer's destination has written (see :func:`written_at`), read from
    the destination given (``explicit``), else from the URL the journal recorded (password from
    ``--to-password``/``LARAQ_TO_PASSWORD``), with the client that read it. Raises :class:`DestinationError`
    when it cannot be read."""
    meta = held.meta
    where = held.dest_url() or "an unrecorded destination"
    undo = ("; nothing was put back. Make the destination reachable (--to-url, and its password in --to-url or "
            f"{PASSWORD_ENV}), or pass --unchecked to put every held job back (a job the destination already "
            "wrote would then be on both sides)")
    if explicit:
        client = target.client
        if meta.get("dest_ident") and meta["dest_ident"] != destination_identity(target):
            raise DestinationError(f"the journal {held.key} belongs to a move to {where}, not "
                                   f"{target.redacted_url()}" + undo)
    elif meta.get("dest_ident") and meta["dest_ident"] == destination_identity(ops.queue):
        client = ops.queue.client
    elif held.dest_url():
        try:
            client = _connect(str(held.dest_url()), password, bool(meta.get("dest_cluster")))
        except (ValueError, redis.RedisError) as exc:
            raise DestinationError(f"cannot connect to the destination {where}: {exc}" + undo) from exc
    else:
        raise DestinationError(f"the journal {held.key} does not say where its move went, so laraq cannot see "
                               "which held jobs the destination already wrote" + undo)
    try:
        return client, written_at(client, held)
    except redis.RedisError as exc:
        text, code = destination_fault(exc, where)
        raise DestinationError(f"{text}; laraq reads it to see which held jobs it already wrote" + undo,
                               code) from exc


def _recover(ops: Ops, source: str | None, dest: str | None, target: RedisQueue, to_url: str | None,
             to_source: bool, as_json: bool, *, explicit: bool = False, password: str | None = None,
             unchecked: bool = False) -> None:
    base = ops.queue.keys(source).base if source else None
    helds = find_held(ops.queue.client, ops.queue.prefix, source_base=base)
    if not helds:
        click.echo(f"no unfinished transfer under prefix {ops.queue.prefix!r}" + (f" for queue {source!r}" if source
                                                                                else ""))
        return
    report = []
    for held in helds:
        name = held.source_queue(ops.queue.prefix)
        if to_source:
            try:
                checker, written = (None, None) if unchecked else _written_there(ops, held, target, explicit,
                                                                                  password)
            except DestinationError as exc:
                raise _destination_error(exc) from exc
            counts, there = return_to_source(ops.queue, held, written)
            if checker is not None:
                forget_marker(ops.queue.client, checker, held)
            where = f"back to {ops.queue.redacted_url()} {held.source_base}"
        else:
            ident = destination_identity(target)
            dest_name = dest or held.meta.get("dest_queue") or name
            dest_base = target.keys(dest_name).base
            if held.meta.get("dest_ident") and (held.meta["dest_ident"], held.meta.get("dest_base")) != (ident,
                                                                                                    dest_base):
                raise click.ClickException(
                    f"the journal {held.key} belongs to a move to {held.meta.get('dest_url')} {held.meta.get('dest_base')}, "
                    f"not {target.redacted_url()} {dest_base}; nothing was recovered. Finish it: "
                    f"{held.finish_command(ops.queue.prefix)}  or undo it: {held.undo_command(ops.queue.prefix)}")
            if target.client is ops.queue.client and not to_url and dest_base == held.source_base:
                raise click.UsageError("--recover needs the destination (--to-url/--to-prefix/DEST) or --to-source")
            try:
                check_destination(target, dest_base)
                present = identities_at(target, [dest_name])
                counts, there = deliver_held(ops.queue, held, target, dest_base,
                                             target.client.register_script(GIVE_SCRIPT),
                                             already=_among(present))
            except DestinationError as exc:
                raise _destination_error(exc) from exc
            except redis.RedisError as exc:
                text, code = destination_fault(exc, target.redacted_url())
                raise LaraqError(f"{text}; the jobs stay in {held.key}", code) from exc
            where = f"on to {target.redacted_url()} {dest_base}"
        already = sum(there.values())
        report.append({"journal": held.key, "queue": name, "held": held.jobs, "delivered": counts,
                       "already_at_destination": there, "to": "source" if to_source else "destination",
                       "destination_checked": not (to_source and unchecked)})
        if not as_json:
            done = sum(counts.values())
            line = f"recovered {done} of {held.jobs} held job(s) of {name!r} {where}"
            if already:
                line += (f"; {already} {'was' if already == 1 else 'were'} already at the destination (same "
                         "uuid/id, or written there before the run was cut): left there, not "
                         + ("put back" if to_source else "written twice"))
            elif done != held.jobs:
                line += " (the others were already there: the destination had written them)"
            if to_source and unchecked:
                line += "; the destination was not checked (--unchecked)"
            click.echo(line)
    if as_json:
        emit_json({"recovered": report})


def _transfer_command(name: str, move: bool) -> click.Command:
    verb = "Move" if move else "Copy"
    extra = ("" if move else " Jobs whose uuid/id is already at the destination are skipped (so re-running a copy "
             "never duplicates), unless --allow-duplicates.")
    held = (" The destination is checked first (connect, credentials, a write); a move to another server holds "
            "each job in a journal on the source between the two writes: `laraq status` lists unfinished ones and "
            "--recover finishes or undoes them." if move else "")

    @click.command(name, help=f"{verb} jobs from SOURCE queue to DEST queue (same or another prefix/db/server).\n\n"
                   "Ready jobs keep their order, delayed jobs their scores; bytes are never changed. "
                   "Safe to interrupt: re-run the same command to finish. The report counts what the destination "
                   "wrote, by state, and checks it is there." + extra + held + "\n\n"
                   "Reserved jobs are being run by workers: they are left in place unless --include-reserved "
                   "(a job still running may then run twice).")
    @settings_options
    @click.argument("source", required=False)
    @click.argument("dest", required=False)
    @click.option("--to-url", default=None, help="Destination Redis URL (default: the same connection).")
    @click.option("--to-password", default=None, envvar=PASSWORD_ENV, show_envvar=True,
                  help="The destination's password when --to-url has none (the commands laraq prints read it "
                       "from the environment).")
    @click.option("--to-prefix", default=None, help="Destination key prefix (default: the source prefix).")
    @click.option("--to-laravel", default=None, help="Destination Laravel version (key layout).")
    @click.option("--to-cluster", is_flag=True, help="Destination is a Redis Cluster (13.5+ hash tags).")
    @click.option("--state", "states", multiple=True, type=click.Choice(["pending", "delayed", "reserved"]),
                  help="States to transfer (default: pending and delayed).")
    @click.option("--include-reserved", is_flag=True, help="Also take reserved jobs (same as --state reserved).")
    @_allow_duplicates_option(move)
    @_recover_options(move)
    @click.option("--filter", "class_filter", default=None, help="Only jobs of this class (glob allowed).")
    @click.option("--all-queues", is_flag=True,
                  help="Every queue under the prefix (SOURCE may also be a comma-separated list), one report.")
    @click.option("--to-schema", type=click.Path(dir_okay=False, exists=True), default=None,
                  help="A `laraq schema` export of the destination app: jobs of classes it lacks stay behind.")
    @click.option("--to-app", type=click.Path(file_okay=False, exists=True), default=None,
                  help="The destination app's directory (its classes are read by running PHP), like --to-schema.")
    @click.option("--to-env-file", type=click.Path(dir_okay=False, exists=True), default=None,
                  help="The destination app's .env: its Redis connection, prefix and Laravel version (--to-url/"
                       "--to-prefix/--to-laravel override them); with an app next to it (artisan), its job classes "
                       "are checked as with --to-app.")
    @click.option("--include-unknown", is_flag=True,
                  help="With --to-schema/--to-app: take jobs of unknown classes too (they are still listed).")
    @click.option("--dry-run", is_flag=True, help="Only count what would be transferred.")
    @click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
    def command(ops: Ops, source: str | None, dest: str | None, to_url: str | None, to_prefix: str | None,
                to_laravel: str | None, to_cluster: bool, states: tuple[str, ...], include_reserved: bool,
                class_filter: str | None, all_queues: bool, to_schema: str | None, to_app: str | None,
                include_unknown: bool, dry_run: bool, as_json: bool, to_password: str | None,
                to_env_file: str | None,
                allow_duplicates: bool = False, recover: bool = False, to_source: bool = False,
                unchecked: bool = False) -> None:
        if to_env_file:
            target = _env_file_queue(ops, to_env_file, to_url, to_prefix, to_laravel, to_cluster, to_password)
            app_dir = Path(to_env_file).resolve().parent
            if not (to_app or to_schema) and (app_dir / "artisan").is_file():
                to_app = str(app_dir)  # the destination app is known: its classes are checked
        else:
            target = _target_queue(ops, to_url, to_prefix, to_laravel, to_cluster, to_password)
        if recover:
            _recover(ops, source, dest, target, to_url, to_source, as_json,
                     explicit=bool(to_url or to_prefix is not None), password=to_password, unchecked=unchecked)
            return
        if to_source or unchecked:
            raise click.UsageError("--to-source and --unchecked go with --recover")
        # another app (server, prefix or Laravel): the report says whether its classes were looked at
        other_app = bool(to_url or to_prefix is not None or to_laravel or to_env_file)
        chosen = tuple(states) or ("pending", "delayed")
        if include_reserved and "reserved" not in chosen:
            chosen += ("reserved",)
        names = [n for n in (source or "").split(",") if n]
        if all_queues or len(names) > 1 or to_schema or to_app:
            _stack(ops, target, names, dest, move=move, states=chosen, class_filter=class_filter,
                   allow_duplicates=allow_duplicates, all_queues=all_queues, to_schema=to_schema, to_app=to_app,
                   include_unknown=include_unknown, dry_run=dry_run, as_json=as_json, other_app=other_app)
            return
        if source is None:
            raise click.UsageError("missing argument SOURCE (or --all-queues)")
        dest_name = dest or source
        same = (target.client is ops.queue.client and target.keys(dest_name).base == ops.queue.keys(source).base)
        if same:
            raise click.UsageError("source and destination are the same queue")
        try:
            transfer = Transfer(ops.queue, source, target, dest_name, move=move, states=chosen,
                                class_filter=class_filter, allow_duplicates=allow_duplicates)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        try:
            transfer.preflight()
            summary = _run_transfer(transfer, verb, move, dry_run, as_json)
            if other_app:
                summary.classes_checked = False
        except DestinationError as exc:
            raise _destination_error(exc) from exc
        except HeldElsewhere as exc:
            raise click.ClickException(str(exc)) from exc
        if as_json:
            emit_json(summary.to_dict())
        else:
            click.echo(summary.describe(dry_run=dry_run))

    return command


def _stack(ops: Ops, target: RedisQueue, names: list[str], dest: str | None, *, move: bool, states: tuple[str, ...],
           class_filter: str | None, allow_duplicates: bool, all_queues: bool, to_schema: str | None,
           to_app: str | None, include_unknown: bool, dry_run: bool, as_json: bool, other_app: bool = False) -> None:
    """Several queues (or every queue under the prefix) in one command, checked together, one report."""
    if dest:
        raise click.UsageError("DEST goes with a single SOURCE queue: a stack move keeps each queue's name "
                               "(--to-prefix/--to-url choose where)")
    if all_queues:
        if names:
            raise click.UsageError("give SOURCE queues or --all-queues, not both")
        names = discover_queues(ops.queue.client, ops.queue.prefix)
        if not names and not find_held(ops.queue.client, ops.queue.prefix):
            prefixes = sorted(p for p in discover_prefixes(ops.queue.client) if p != ops.queue.prefix)
            raise click.ClickException(f"no queue under prefix {ops.queue.prefix!r} on {ops.queue.redacted_url()}; "
                                       f"prefixes holding queues: {', '.join(map(repr, prefixes)) or 'none'}. "
                                       "Nothing was moved")
    if not names:
        raise click.UsageError("missing argument SOURCE (or --all-queues)")
    known = None
    if to_schema or to_app:
        try:
            known = known_classes(schema_file=to_schema, app_path=to_app)
        except (SchemaError, ValueError) as exc:
            raise click.ClickException(f"cannot read the destination app's classes: {exc}") from exc
    try:
        stack = StackMove(ops.queue, target, names, move=move, states=states, class_filter=class_filter,
                          allow_duplicates=allow_duplicates, known=known, include_unknown=include_unknown)
        stack.report.classes_checked = True if known is not None else (False if other_app else None)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not all_queues:
        missing = [m for m in (missing_source(t) for t in stack.transfers) if m]
        if missing:
            raise click.ClickException("\n".join(missing))
    try:
        stack.preflight()
    except DestinationError as exc:
        raise _destination_error(exc) from exc
    except HeldElsewhere as exc:
        raise click.ClickException(str(exc)) from exc
    refused = stack.incompatible()
    if refused:
        shown = "\n  ".join(refused[:20]) + (f"\n  ... and {len(refused) - 20} more" if len(refused) > 20 else "")
        raise click.ClickException(f"refusing to move to Laravel {target.version}: {len(refused)} job(s) it cannot "
                                   f"run as dispatched; nothing was moved:\n  {shown}")
    for transfer in stack.transfers:
        stack.report.warnings.extend(spent_reserved(transfer).warnings())
    for warning in stack.report.warnings:
        click.echo(f"warning: {visible(warning)}", err=True)
    try:
        with progress(stack.count(), "moving" if move else "copying", enabled=not as_json and not dry_run) as bar:
            report = stack.run(progress=bar.update, dry_run=dry_run)
    except DestinationError as exc:
        raise _destination_error(exc) from exc
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.describe(dry_run=dry_run))


def _run_transfer(transfer: Transfer, verb: str, move: bool, dry_run: bool, as_json: bool) -> TransferSummary:
    missing = missing_source(transfer)
    if missing:
        raise click.ClickException(missing)
    refused = transfer.incompatible()
    if refused:
        shown = "\n  ".join(refused[:20]) + (f"\n  ... and {len(refused) - 20} more" if len(refused) > 20 else "")
        raise click.ClickException(
            f"refusing to {verb.lower()} to Laravel {transfer.dest.version}: {len(refused)} job(s) it cannot run as "
            f"dispatched; nothing was {'moved' if move else 'copied'} (--filter selects the classes to take):\n  {shown}")
    warnings = spent_reserved(transfer).warnings()
    for warning in warnings:
        click.echo(f"warning: {visible(warning)}", err=True)
    total = transfer.count()
    if dry_run:
        summary = transfer.plan()
    else:
        with progress(total, "moving" if move else "copying", enabled=not as_json) as bar:
            summary = transfer.run(progress=bar.update)
    summary.warnings = warnings
    return summary


move_cmd = _transfer_command("move", True)
copy_cmd = _transfer_command("copy", False)


@click.command("export")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-", show_default=True,
              help="File to write, 0600 (- for standard output).")
@click.option("--state", "states", multiple=True, type=click.Choice(["pending", "delayed", "reserved", "poison"]),
              help="States to export (repeatable; default: pending, delayed, reserved).")
def export_cmd(ops: Ops, queues: tuple[str, ...], output: str, states: tuple[str, ...]) -> None:
    """Write jobs as JSON Lines: {"queue", "state", "score", "body"} (body_b64 if not UTF-8).

    A copy: the jobs stay in Redis and workers keep running them. Once the file is imported and
    checked, `laraq remove-exported FILE` deletes exactly the exported jobs still here."""
    names = ops.queues(queues)
    try:  # the jobs' payloads: a 0600 file of this user, never through a symbolic link
        stream = click.open_file("-", "w", encoding="utf-8") if output == "-" else open_private(output, "replace")
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc}") from exc
    with stream:
        count = export_jobs(ops.queue, names, stream, states=tuple(states) or ("pending", "delayed", "reserved"))
    where = "standard output" if output == "-" else output
    click.echo(f"exported {count} jobs from {len(names)} queue(s) to {where}. This is a copy: the jobs are still in "
               "Redis and workers here keep running them. Once the file is imported and checked, remove exactly "
               f"these jobs here with: laraq remove-exported {output if output != '-' else 'FILE'} --prefix "
               f"{ops.queue.prefix}", err=True)


@click.command("import")
@settings_options
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--queue", "queue_override", default=None, help="Put every job on this queue.")
@click.option("--reserved-as", type=click.Choice(["pending", "reserved", "skip"]), default="pending",
              show_default=True, help="Where exported reserved jobs go.")
@click.option("--allow-duplicates", is_flag=True,
              help="Write every line, even jobs whose uuid/id is already here or was imported here before.")
@click.option("--dry-run", is_flag=True, help="Check every line and count what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def import_cmd(ops: Ops, path: str, queue_override: str | None, reserved_as: str, allow_duplicates: bool,
               dry_run: bool, as_json: bool) -> None:
    """Read JSON Lines written by export and push the jobs, bytes and scores unchanged.

    All or nothing: every line is checked first, and a bad one stops the import with its line number
    and cause before anything is written; then the whole file goes in one MULTI/EXEC transaction.
    Each job once: a job whose uuid/id is already at the destination (in any queue under the prefix), or
    that an earlier import wrote to that queue (remembered 30 days, so jobs a worker already ran are not imported again), is skipped,
    unless --allow-duplicates. Re-running an import is safe."""
    lines = None
    if path != "-":
        with open(path, "rb") as fh:
            lines = sum(1 for _ in fh)
    with click.open_file(path, "rb") as stream, progress(lines, "importing", enabled=not as_json) as bar:
        try:
            counts = import_jobs(ops.queue, stream, queue=queue_override, reserved_as=reserved_as,
                                 progress=bar.update, allow_duplicates=allow_duplicates, dry_run=dry_run)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    existing = counts.pop("existing")
    if as_json:
        emit_json({"dry_run": dry_run, "prefix": ops.queue.prefix, "imported": counts,
                   "already_here": existing})
        return
    click.echo(("would import " if dry_run else "imported ")
               + ", ".join(f"{n} {state}" for state, n in counts.items() if n or state == "pending")
               + f" to prefix {ops.queue.prefix!r}")
    if existing:
        click.echo(f"  {existing} {'would be ' if dry_run else ''}skipped: a job with the same uuid/id is already "
                   "here or was imported here before (--allow-duplicates writes them anyway)")


@click.command("remove-exported")
@settings_options
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Count the exported jobs still here; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
def remove_exported_cmd(ops: Ops, path: str, force: bool, dry_run: bool, as_json: bool) -> None:
    """Delete from this Redis the jobs of an export file that are still here, byte for byte.

    For after `laraq export` + `laraq import` elsewhere, once the import is checked: only the exported
    members are removed (jobs dispatched since stay); a job a worker took or ran since is not here any more."""
    if not force and not dry_run:
        click.confirm(f"delete the jobs of {path} from prefix {ops.queue.prefix!r} on {ops.queue.redacted_url()}?",
                      abort=True)
    with open(path, "rb") as stream:
        try:
            counts = remove_exported(ops.queue, stream, dry_run=dry_run)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if as_json:
        emit_json({"dry_run": dry_run, "prefix": ops.queue.prefix, **counts})
        return
    click.echo(f"{'would remove' if dry_run else 'removed'} {counts['removed']} exported job(s); {counts['gone']} "
               f"{'are' if dry_run else 'were'} no longer here (taken by a worker, or changed since the export)")


def _failed_store_name(settings: LaravelSettings) -> str:
    """``database-uuids table 'failed_jobs' in sqlite:/path/db.sqlite``: which store, in which database."""
    name = f"{settings.failed_driver} table {settings.failed_table!r}"
    if settings.failed_driver in ("database", "database-uuids"):
        with contextlib.suppress(KeyError, ValueError):
            name += f" in {settings.database(settings.failed_database).describe()}"
    return name


def _dest_settings(ops: Ops, env_file: str | None, laravel: str | None, table: str | None) -> LaravelSettings:
    settings = ops.settings
    if env_file:
        try:
            # the .env alone describes the destination app: this process's environment is the source's
            settings = LaravelSettings.from_env({}, env_file=env_file, version=laravel)
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--to-env-file") from exc
    elif laravel:
        settings = dataclasses.replace(settings, version=LaravelVersion.parse(laravel))
    if table:
        settings = dataclasses.replace(settings, failed_table=table)
    return settings


@click.command("move-failed")
@settings_options
@click.option("--from-table", default=None, help="Source failed-jobs table (default: the app's).")
@click.option("--to-env-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The destination app's .env: its failed-job store (and, with --retry, its queue connection).")
@click.option("--to-table", default=None, help="Destination failed-jobs table (default: the destination app's).")
@click.option("--to-laravel", default=None, help="Destination Laravel version.")
@click.option("--retry", is_flag=True,
              help="Retry them into the destination's Redis queue (as queue:retry there would) instead of "
                   "keeping them failed.")
@click.option("--to-url", default=None, help="With --retry: destination Redis URL (default: the destination app's).")
@click.option("--to-prefix", default=None, help="With --retry: destination key prefix.")
@click.option("--queue", "queues", multiple=True, help="Only failed jobs of this queue (repeatable).")
@click.option("--filter", "class_filter", default=None, help="Only jobs of this class (glob allowed).")
@click.option("--connection", default=None, help="Write the rows under this connection name (default: kept).")
@click.option("--include-unknown", is_flag=True,
              help="Do not check the destination app's job classes (with --to-env-file and an app next to it, "
                   "jobs of classes it lacks stay at the source by default).")
@click.option("--copy", is_flag=True, help="Leave the source rows in place.")
@click.option("--dry-run", is_flag=True, help="Only count what would be moved.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def move_failed_cmd(ops: Ops, from_table: str | None, to_env_file: str | None, to_table: str | None,
                    to_laravel: str | None, retry: bool, to_url: str | None, to_prefix: str | None,
                    queues: tuple[str, ...], class_filter: str | None, connection: str | None,
                    include_unknown: bool, copy: bool, dry_run: bool, as_json: bool) -> None:
    """Move failed jobs to another app's failed-job store (they stay failed: queue:retry there works),
    or --retry them into its queue.

    Any two stores laraq reads (database-uuids or database on SQLite, MySQL/MariaDB, PostgreSQL, any table;
    the file store). Payloads move byte for byte; each job once, by uuid/id, so a re-run (or a run killed
    half-way, then re-run) never duplicates; a source row is forgotten only once the destination has it."""
    source_settings = dataclasses.replace(ops.settings, failed_table=from_table) if from_table else ops.settings
    try:
        source = make_failed_store(source_settings)
    except (ValueError, NotImplementedError, ImportError) as exc:
        raise click.ClickException(f"cannot open the source failed-job store: {exc}") from exc
    dest_settings = _dest_settings(ops, to_env_file, to_laravel, to_table)
    if not retry and not to_env_file and not to_table:
        raise click.UsageError("give the destination: --to-env-file (its failed-job store) and/or --to-table, "
                               "or --retry with --to-url/--to-env-file")
    dest_store = dest_queue = None
    if retry:
        if to_url or to_prefix or not to_env_file:
            dest_queue = _target_queue(ops, to_url, to_prefix, str(dest_settings.version), False)
        else:
            dest_queue = RedisQueue(make_redis(dest_settings, "default"), prefix=dest_settings.redis_prefix,
                                    version=dest_settings.version, connection_name=dest_settings.connection_name,
                                    default_queue=dest_settings.redis_queue)
        try:
            check_destination(dest_queue, dest_queue.prefix + "queues:failed-move",
                              "--to-url" if to_url else "--to-env-file")
        except DestinationError as exc:
            raise _destination_error(exc) from exc
        where = f"{dest_queue.redacted_url()} prefix {dest_queue.prefix!r}"
    else:
        where = _failed_store_name(dest_settings)
        try:
            dest_store = make_failed_store(dest_settings)
            if hasattr(dest_store, "ensure_table"):
                dest_store.ensure_table()  # create table if not exists, as Laravel's migration would
        except Exception as exc:
            explained = explain(exc)
            option = "--to-env-file" if to_env_file else "--to-table"
            raise LaraqError(f"cannot open the destination failed-job store, {where} ({option}): {one_line(exc)}; "
                             f"start that database or fix the destination's DB_* settings ({option}); nothing was "
                             "moved", explained[1] if explained else EXIT_ERROR) from exc
    known = None
    app_dir = Path(to_env_file).resolve().parent if to_env_file else None
    if app_dir is not None and not include_unknown and (app_dir / "artisan").is_file():
        try:  # the destination app is known: its job classes are checked
            known = known_classes(app_path=app_dir)
        except (SchemaError, ValueError) as exc:
            raise click.ClickException(f"cannot read the destination app's classes ({app_dir}): {exc}; "
                                       "--include-unknown skips the check") from exc
    try:
        summary = move_failed(source, dest_store=dest_store, dest_queue=dest_queue, app_classes=known,
                              dest_version=dest_settings.version, source_name=_failed_store_name(source_settings),
                              dest_name=where, queues=queues, class_filter=class_filter, copy=copy,
                              connection=connection, dry_run=dry_run, encrypter=ops.encrypter)
    except DestinationFailed as exc:
        raise LaraqError(str(exc), exc.exit_code) from exc
    if as_json:
        emit_json(summary.to_dict())
    else:
        click.echo(summary.describe(dry_run=dry_run))


#: The commands of this module beyond move/copy/export/import (listed in :data:`laraq.cli.ops.COMMANDS`).
MORE_COMMANDS: list[click.Command] = [remove_exported_cmd, move_failed_cmd]
