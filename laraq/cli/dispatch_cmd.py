"""``laraq dispatch``: push jobs that PHP workers run (``dispatch()`` / ``Queue::push``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from laraq.bus.dispatch import Dispatcher
from laraq.bus.schema import SchemaError, load_schema_file
from laraq.cli.common import (
    Ops,
    emit_json,
    fmt_time,
    parse_assignments,
    parse_delay,
    settings_options,
)

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
@click.option("--tries", type=int, default=None, help="maxTries in the payload (the job's $tries).")
@click.option("--backoff", default=None, help="Seconds, or a comma list such as 1,5,10.")
@click.option("--timeout", type=int, default=None, help="Seconds the job may run (the job's $timeout).")
@click.option("--retry-until", default=None, help="Deadline: seconds from now, 5m/2h/1d or an ISO date-time.")
@click.option("--max-exceptions", type=int, default=None,
              help="Fail after this many unhandled exceptions (the job's $maxExceptions).")
@click.option("--fail-on-timeout", is_flag=True, help="Fail instead of retrying when the job times out.")
@click.option("--encrypt", is_flag=True, help="ShouldBeEncrypted: encrypt the command with APP_KEY.")
@click.option("--count", type=int, default=1, show_default=True, help="Dispatch this many copies (one round trip).")
@click.option("--horizon/--no-horizon", default=None,
              help="Push the way Horizon's queue does (payload fields + pending record); default: when the app uses Horizon.")
@click.option("--tag", "tags", multiple=True, help="Horizon tag of a job class (repeatable).")
@click.option("--silenced", is_flag=True, help="Horizon: silence this job (else: when listed in horizon.silenced).")
@click.option("--schema", "schema_file", type=click.Path(dir_okay=False, exists=True), envvar="LARAQ_SCHEMA",
              default=None, help="Job schema JSON from `laraq schema --from APP`: the class's defaults and unique "
                                 "lock, as PHP's dispatch() (env LARAQ_SCHEMA).")
@click.option("--unique-id", default=None, help="The uniqueId() a ShouldBeUnique class computes in PHP.")
@click.option("--unique-for", type=int, default=None, help="The uniqueFor() seconds a ShouldBeUnique class computes.")
@click.option("--json", "as_json", is_flag=True, help="Print the dispatched ids as JSON.")
def dispatch_cmd(ops: Ops, job: str, props: tuple[str, ...], protected_props: tuple[str, ...],
                 private_props: tuple[str, ...], data: str | None, queue_name: str | None, delay: str | None,
                 tries: int | None, backoff: str | None, timeout: int | None, retry_until: str | None,
                 max_exceptions: int | None, fail_on_timeout: bool, encrypt: bool, count: int,
                 horizon: bool | None, tags: tuple[str, ...], silenced: bool, schema_file: str | None,
                 unique_id: str | None, unique_for: int | None, as_json: bool) -> None:
    """Dispatch JOB (a job class, or Class@method) so that PHP workers run it."""
    # start-up: the horizon package (5 modules, ~3 ms) is not loaded for laraq --version/--help or other commands
    from laraq.horizon.settings import app_horizon, records_client

    hs = app_horizon(ops.settings, horizon)
    # --redis-url points every connection at one server: the records go on the queue's client
    horizon_client = None if hs is None or ops.redis_url else records_client(ops.settings, hs, ops.queue.client)
    schemas: dict[str, Any] = {}
    if schema_file:
        try:
            schemas = load_schema_file(schema_file)[0]
        except SchemaError as exc:
            raise click.ClickException(str(exc)) from exc
    cache = ops.cache() if job.lstrip("\\") in schemas else None
    dispatcher = Dispatcher(ops.queue, encrypter=ops.encrypter, horizon=hs, schemas=schemas, cache=cache,
                            horizon_client=horizon_client)
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
            unique = bool(unique_id or unique_for)  # neither given (or both empty): the class's own lock, if any
            prepared = [
                dispatcher.prepare_job(
                    job, parse_assignments(props, "--prop"), protected=parse_assignments(protected_props, "--protected"),
                    private=parse_assignments(private_props, "--private"), retry_until=deadline, encrypt=encrypt,
                    tags=list(tags) if tags else None, silenced=silenced,
                    unique_id=unique_id if unique else None, unique_for=unique_for if unique else None,
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
        if r.skipped:
            click.echo(f"not dispatched {job}: its unique lock is held (PHP drops such a dispatch too)")
            continue
        when = f" (due {fmt_time(r.available_at)} UTC)" if r.available_at is not None else ""
        click.echo(f"dispatched {job} to {r.queue}: id {r.id} uuid {r.uuid}{when}")
