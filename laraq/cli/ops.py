"""The operations commands of ``laraq``: dispatch, inspect, repair, migrate and diagnose queues.

Every command reads the Laravel settings like ``laraq work`` (environment, ``--env-file``,
``--laravel``), talks to the queue's Redis connection with raw bytes, and prints a table, or
JSON with ``--json``. Human tables and progress bars come from :mod:`laraq.cli.render` (``rich`` tables,
``click`` progress bars). :data:`COMMANDS` is what :mod:`laraq.cli` registers. The mapping from artisan's
``queue:*`` commands is in ``compat-docs/operations.md``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.text import Text

from laraq.cli.render import Column, kv_table, print_renderable, print_table, progress
from laraq.config import LaravelSettings, make_redis
from laraq.dispatch import Dispatcher, expand_retry_ids, retry_failed
from laraq.inspect import STATES, JobView, discover_queues, find_job, list_jobs, queue_status
from laraq.queue import RedisQueue

__all__ = ["COMMANDS", "Ops"]


# -- shared plumbing ------------------------------------------------------------------------------------

@dataclass
class Ops:
    """The settings and connections one command works with."""

    settings: LaravelSettings
    queue: RedisQueue
    encrypter: Any

    @classmethod
    def load(cls, env_file: str | None, laravel: str | None, prefix: str | None) -> Ops:
        try:
            settings = LaravelSettings.from_env(env_file=env_file, version=laravel)
        except (OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        queue = RedisQueue(
            make_redis(settings, "default"),
            connection_name=settings.connection_name,
            default_queue=settings.redis_queue,
            prefix=settings.redis_prefix if prefix is None else prefix,
            retry_after=settings.retry_after,
            version=settings.version,
            forwards=settings.env.get("LARAQ_QUEUE_FORWARD"),
        )
        encrypter = None
        if settings.app_key:
            from laraq.encryption import Encrypter

            try:
                encrypter = Encrypter.from_app_key(settings.app_key, previous_keys=settings.app_previous_keys)
            except ValueError:
                encrypter = None
        return cls(settings, queue, encrypter)

    def failed_store(self) -> Any:
        from laraq.failed import make_failed_store

        try:
            return make_failed_store(self.settings)
        except (ValueError, NotImplementedError, ImportError) as exc:
            raise click.ClickException(f"cannot open the failed-job store: {exc}") from exc

    def cache(self) -> Any:
        """The app's default cache store (redis, file or database), where the queue signals live."""
        from laraq.cache import make_cache

        try:
            return make_cache(self.settings)
        except Exception as exc:
            raise click.ClickException(f"cannot open the {self.settings.cache_store!r} cache store: {exc}") from exc

    def queues(self, names: Sequence[str] = ()) -> list[str]:
        return list(names) or discover_queues(self.queue.client, self.queue.prefix)


def settings_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--env-file``, ``--laravel`` and ``--prefix``; the command receives an :class:`Ops` as ``ops``."""

    @click.option("--env-file", type=click.Path(dir_okay=False), default=None, help="The Laravel app's .env file.")
    @click.option("--laravel", "laravel", default=None, help="Laravel version of the app (e.g. 8, 12.45, 13).")
    @click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
    def wrapper(env_file: str | None, laravel: str | None, prefix: str | None, **kwargs: Any) -> Any:
        return func(Ops.load(env_file, laravel, prefix), **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    own = getattr(wrapper, "__click_params__", [])
    wrapper.__click_params__ = [*getattr(func, "__click_params__", []), *own]  # type: ignore[attr-defined]
    return wrapper


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60}s"
    return f"{seconds}s"


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def parse_delay(text: str | None) -> int | datetime | None:
    """``30`` (seconds), ``5m``/``2h``/``1d``, or an ISO date-time (UTC if no offset)."""
    if text is None:
        return None
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not a delay: {text!r} (seconds, 5m, 2h, 1d or an ISO date-time)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_assignments(values: Sequence[str], what: str) -> dict[str, Any]:
    """``name=JSON`` pairs (a value that is not JSON is taken as a string)."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{what} must be NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


# -- dispatch ----------------------------------------------------------------------------------------------

@click.command("dispatch")
@settings_options
@click.argument("job")
@click.option("-p", "--prop", "props", multiple=True, help="Public property NAME=JSON (repeatable).")
@click.option("--protected", "protected_props", multiple=True, help="Protected property NAME=JSON.")
@click.option("--private", "private_props", multiple=True, help="Private property NAME=JSON.")
@click.option("--data", default=None, help="JSON data of a Class@method string job.")
@click.option("-q", "--queue", "queue_name", default=None, help="Queue (default: the connection's).")
@click.option("--delay", default=None, help="Delay: seconds, 5m, 2h, 1d or an ISO date-time.")
@click.option("--tries", type=int, default=None)
@click.option("--backoff", default=None, help="Seconds, or a comma list such as 1,5,10.")
@click.option("--timeout", type=int, default=None)
@click.option("--retry-until", default=None, help="Deadline: seconds from now, 5m/2h/1d or an ISO date-time.")
@click.option("--max-exceptions", type=int, default=None)
@click.option("--fail-on-timeout", is_flag=True)
@click.option("--encrypt", is_flag=True, help="ShouldBeEncrypted: encrypt the command with APP_KEY.")
@click.option("--count", type=int, default=1, show_default=True, help="Dispatch this many copies (one round trip).")
@click.option("--json", "as_json", is_flag=True)
def dispatch_cmd(ops: Ops, job: str, props: tuple[str, ...], protected_props: tuple[str, ...],
                 private_props: tuple[str, ...], data: str | None, queue_name: str | None, delay: str | None,
                 tries: int | None, backoff: str | None, timeout: int | None, retry_until: str | None,
                 max_exceptions: int | None, fail_on_timeout: bool, encrypt: bool, count: int,
                 as_json: bool) -> None:
    """Dispatch JOB (a job class, or Class@method) so that PHP workers run it."""
    dispatcher = Dispatcher(ops.queue, encrypter=ops.encrypter)
    backoff_value: Any = None
    if backoff is not None:
        backoff_value = [int(b) for b in backoff.split(",")] if "," in backoff else int(backoff)
    delay_value = parse_delay(delay)
    common: dict[str, Any] = dict(queue=queue_name, delay=delay_value, tries=tries, backoff=backoff_value,
                                  timeout=timeout, max_exceptions=max_exceptions, fail_on_timeout=fail_on_timeout)
    try:
        if "@" in job:
            if props or protected_props or private_props or encrypt or retry_until:
                raise click.UsageError("a Class@method job takes --data, not properties/--encrypt/--retry-until")
            payload_data = json.loads(data) if data is not None else ""
            prepared = [dispatcher.prepare_string(job, payload_data, **common) for _ in range(count)]
        else:
            deadline = parse_delay(retry_until)
            if isinstance(deadline, int):
                deadline = datetime.now(UTC) + timedelta(seconds=deadline)
            prepared = [
                dispatcher.prepare_job(
                    job, parse_assignments(props, "--prop"), protected=parse_assignments(protected_props, "--protected"),
                    private=parse_assignments(private_props, "--private"), retry_until=deadline, encrypt=encrypt,
                    **common,
                )
                for _ in range(count)
            ]
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    results = dispatcher.bulk(prepared) if count > 1 else [dispatcher.push(prepared[0])]
    if as_json:
        emit_json([{"id": r.id, "uuid": r.uuid, "queue": r.queue, "available_at": r.available_at} for r in results])
        return
    for r in results:
        when = f" (due {fmt_time(r.available_at)} UTC)" if r.available_at is not None else ""
        click.echo(f"dispatched {job} to {r.queue}: id {r.id} uuid {r.uuid}{when}")


# -- inspect -----------------------------------------------------------------------------------------------

@click.command("status")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("--json", "as_json", is_flag=True)
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
    @click.option("--state", type=click.Choice(STATES), default="pending", show_default=True)
    @click.option("-n", "--limit", type=int, default=20, show_default=True)
    @click.option("--offset", type=int, default=0)
    @click.option("--class", "class_filter", default=None, help="Only jobs of this class (glob allowed).")
    @click.option("--json", "as_json", is_flag=True)
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
@click.option("--json", "as_json", is_flag=True)
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


@click.command("pause")
@settings_options
@click.argument("target", metavar="[CONNECTION:]QUEUE", required=False)
@click.option("--all", "all_queues", is_flag=True, help="Pause every queue (13.25+).")
@click.option("--for", "ttl", type=int, default=None, help="Resume by itself after this many seconds.")
def pause_cmd(ops: Ops, target: str | None, all_queues: bool, ttl: int | None) -> None:
    """Stop workers taking jobs from a queue (Laravel 12.40+), like queue:pause."""
    cache = ops.cache()
    try:
        if all_queues:
            cache.pause_all()
            click.echo("Job processing on all queues has been paused.")
            return
        if not target:
            raise click.UsageError("give [CONNECTION:]QUEUE or --all")
        connection, queue = _split_target(ops, target)
        cache.pause(connection, queue, ttl)
    except NotImplementedError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"Job processing on queue [{connection}:{queue}] has been paused.")


@click.command("resume")
@settings_options
@click.argument("target", metavar="[CONNECTION:]QUEUE", required=False)
@click.option("--all", "all_queues", is_flag=True)
def resume_cmd(ops: Ops, target: str | None, all_queues: bool) -> None:
    """Let workers take jobs from a paused queue again, like queue:resume."""
    cache = ops.cache()
    try:
        if all_queues:
            cache.resume_all()
            click.echo("Job processing on all queues has been resumed.")
            return
        if not target:
            raise click.UsageError("give [CONNECTION:]QUEUE or --all")
        connection, queue = _split_target(ops, target)
        cache.resume(connection, queue)
    except NotImplementedError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"Job processing on queue [{connection}:{queue}] has been resumed.")


@click.command("failed")
@settings_options
@click.option("-q", "--queue", "queue_name", default=None, help="Only this queue.")
@click.option("--json", "as_json", is_flag=True)
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
@click.option("--json", "as_json", is_flag=True)
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
@click.option("--force", is_flag=True)
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


# -- migrate -------------------------------------------------------------------------------------------------

def _target_queue(ops: Ops, url: str | None, prefix: str | None, laravel: str | None, cluster: bool) -> RedisQueue:
    import redis

    version = laravel or str(ops.settings.version)
    client = redis.Redis.from_url(url) if url else ops.queue.client
    if cluster and url:
        client = redis.RedisCluster.from_url(url)
    return RedisQueue(client, prefix=ops.queue.prefix if prefix is None else prefix, version=version,
                      connection_name=ops.queue.connection_name, default_queue=ops.queue.default_queue,
                      cluster=cluster)


def _transfer_command(name: str, move: bool) -> click.Command:
    verb = "Move" if move else "Copy"

    @click.command(name, help=f"{verb} jobs from SOURCE queue to DEST queue (same or another prefix/db/server).\n\n"
                   "Ready jobs keep their order, delayed jobs their scores; bytes are never changed. "
                   "Safe to interrupt: re-run the same command to finish.")
    @settings_options
    @click.argument("source")
    @click.argument("dest", required=False)
    @click.option("--to-url", default=None, help="Destination Redis URL (default: the same connection).")
    @click.option("--to-prefix", default=None, help="Destination key prefix (default: the source prefix).")
    @click.option("--to-laravel", default=None, help="Destination Laravel version (key layout).")
    @click.option("--to-cluster", is_flag=True, help="Destination is a Redis Cluster (13.5+ hash tags).")
    @click.option("--state", "states", multiple=True, type=click.Choice(["pending", "delayed", "reserved"]),
                  help="States to transfer (default: pending and delayed).")
    @click.option("--filter", "class_filter", default=None, help="Only jobs of this class (glob allowed).")
    @click.option("--dry-run", is_flag=True)
    @click.option("--json", "as_json", is_flag=True)
    def command(ops: Ops, source: str, dest: str | None, to_url: str | None, to_prefix: str | None,
                to_laravel: str | None, to_cluster: bool, states: tuple[str, ...], class_filter: str | None,
                dry_run: bool, as_json: bool) -> None:
        from laraq.migrate import Transfer

        target = _target_queue(ops, to_url, to_prefix, to_laravel, to_cluster)
        dest_name = dest or source
        same = (target.client is ops.queue.client and target.keys(dest_name).base == ops.queue.keys(source).base)
        if same:
            raise click.UsageError("source and destination are the same queue")
        try:
            transfer = Transfer(ops.queue, source, target, dest_name, move=move,
                                states=tuple(states) or ("pending", "delayed"), class_filter=class_filter)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
        refused = transfer.incompatible()
        if refused:
            shown = "\n  ".join(refused[:20]) + (f"\n  ... and {len(refused) - 20} more" if len(refused) > 20 else "")
            raise click.ClickException(
                f"refusing to {verb.lower()} to Laravel {target.version}: {len(refused)} job(s) it cannot run as "
                f"dispatched; nothing was {'moved' if move else 'copied'} (--filter selects the classes to take):\n  {shown}")
        total = transfer.count()
        if dry_run:
            summary = transfer.plan()
        else:
            with progress(total, f"{verb.lower()}ing", enabled=not as_json) as bar:
                summary = transfer.run(progress=bar.update)
        if as_json:
            emit_json(summary.to_dict())
        else:
            click.echo(summary.describe(dry_run=dry_run))

    return command


move_cmd = _transfer_command("move", True)
copy_cmd = _transfer_command("copy", False)


@click.command("export")
@settings_options
@click.argument("queues", nargs=-1)
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@click.option("--state", "states", multiple=True, type=click.Choice(["pending", "delayed", "reserved", "poison"]))
def export_cmd(ops: Ops, queues: tuple[str, ...], output: str, states: tuple[str, ...]) -> None:
    """Write jobs as JSON Lines: {"queue", "state", "score", "body"} (body_b64 if not UTF-8)."""
    from laraq.migrate import export_jobs

    names = ops.queues(queues)
    stream = click.open_file(output, "w", encoding="utf-8")
    with stream:
        count = export_jobs(ops.queue, names, stream, states=tuple(states) or ("pending", "delayed", "reserved"))
    click.echo(f"exported {count} jobs from {len(names)} queue(s)", err=True)


@click.command("import")
@settings_options
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--queue", "queue_override", default=None, help="Put every job on this queue.")
@click.option("--reserved-as", type=click.Choice(["pending", "reserved", "skip"]), default="pending",
              show_default=True, help="Where exported reserved jobs go.")
def import_cmd(ops: Ops, path: str, queue_override: str | None, reserved_as: str) -> None:
    """Read JSON Lines written by export and push the jobs, bytes and scores unchanged."""
    from laraq.migrate import import_jobs

    lines = None
    if path != "-":
        with open(path, "rb") as fh:
            lines = sum(1 for _ in fh)
    with click.open_file(path, "r", encoding="utf-8") as stream, progress(lines, "importing") as bar:
        try:
            counts = import_jobs(ops.queue, stream, queue=queue_override, reserved_as=reserved_as,
                                 progress=bar.update)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo("imported " + ", ".join(f"{n} {state}" for state, n in counts.items()))


# -- doctor --------------------------------------------------------------------------------------------------

LEVEL_STYLES = {"ok": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}


@click.command("doctor")
@settings_options
@click.option("--app", "app_ref", default=None, help="module:app of your laraq handlers (checks coverage).")
@click.option("--timeout", "worker_timeout", type=int, default=60, show_default=True,
              help="The worker --timeout you run with (checked against retry_after).")
@click.option("--json", "as_json", is_flag=True)
def doctor_cmd(ops: Ops, app_ref: str | None, worker_timeout: int, as_json: bool) -> None:
    """Diagnose the queue set-up and print each finding with its fix."""
    from laraq.doctor import diagnose

    findings = diagnose(ops.settings, ops.queue, app_ref=app_ref, worker_timeout=worker_timeout)
    if as_json:
        emit_json([f.to_dict() for f in findings])
    else:
        rows = []
        for f in findings:
            finding = Text(f.title)
            if f.detail:
                finding.append("\n" + f.detail, style="dim")
            rows.append((Text(f.level.upper(), style=LEVEL_STYLES.get(f.level, "")), finding, f.fix))
        print_table([Column("level", no_wrap=True), Column("finding", overflow="fold", min_width=20),
                     Column("fix", overflow="fold", min_width=20)], rows)
    if any(f.level == "error" for f in findings):
        sys.exit(1)


COMMANDS: list[click.Command] = [
    dispatch_cmd, status_cmd, peek_cmd, list_cmd, show_cmd, clear_cmd, restart_cmd, pause_cmd, resume_cmd,
    failed_cmd, retry_cmd, forget_cmd, flush_cmd, prune_failed_cmd, move_cmd, copy_cmd, export_cmd, import_cmd,
    doctor_cmd,
]
