"""Production commands: ``laraq workers``, ``laraq health`` and ``laraq metrics``.

* ``workers`` lists the live heartbeat records (:mod:`laraq.production.heartbeat`) as a table or ``--json``;
* ``health`` exits 0 when a matching worker beat within ``--within`` seconds, else 1 (container
  liveness/readiness probes, systemd/Nagios checks);
* ``metrics`` prints Prometheus exposition text once (:mod:`laraq.production.metrics`), for cron jobs and the
  node_exporter textfile collector.

:data:`COMMANDS` lists these commands; :mod:`laraq.cli` registers them through its own lazy table
(:data:`laraq.cli.COMMANDS`), which ``tests/test_cli_lazy.py`` checks against this list.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from typing import Any

import click

from laraq.cli.common import Ops, emit_json, human_age, settings_options
from laraq.cli.render import Column, print_table
from laraq.exitcodes import EXIT_ERROR, EXIT_SUCCESS
from laraq.logtext import visible
from laraq.production.heartbeat import _redis_now, check_health, live_workers, read_id_file

__all__ = ["COMMANDS"]


@click.command("workers")
@settings_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--ttl", type=click.FloatRange(1), default=30, show_default=True,
              help="Records older than this many seconds count as dead.")
def workers_cmd(ops: Ops, as_json: bool, ttl: float) -> None:
    """List the running laraq workers (their heartbeat records in Redis)."""
    client = ops.queue.client
    records = live_workers(client, ops.queue.prefix, ttl=ttl)
    now = _redis_now(client)
    if as_json:
        emit_json([{**r.as_dict(), "age": round(now - r.beat, 3)} for r in records])
        return
    if not records:
        click.echo("No live laraq workers.")
        return
    rows = [[r.host, r.pid, r.name, ",".join(r.queues), r.laravel, human_age(now - r.started),
             f"{now - r.beat:.1f}s", r.jobs_done, r.jobs_failed, r.in_flight,
             "-" if r.memory_mb is None else f"{r.memory_mb:.0f}M", r.id] for r in records]
    print_table([Column("host", overflow="fold"), Column("pid", justify="right"), Column("name"),
                 Column("queues", overflow="fold"), Column("laravel"), Column("up", justify="right"),
                 Column("beat", justify="right"), Column("done", justify="right"),
                 Column("failed", justify="right"), Column("running", justify="right"),
                 Column("rss", justify="right"), Column("id", overflow="fold")], rows)


@click.command("health")
@settings_options
@click.option("--within", type=click.FloatRange(0.1), default=30, show_default=True, metavar="SECONDS",
              help="Healthy if the worker beat within this many seconds.")
@click.option("--id-file", type=click.Path(dir_okay=False), default=None,
              help="This worker's id, as written by laraq work --heartbeat-file.")
@click.option("--pid", type=int, default=None, help="This worker's pid (the worker or its laraq work supervisor).")
@click.option("--host", default=None, help="Host of --pid (default: this host).")
@click.option("--queue", "queues", default=None, help="Any worker on one of these queues (comma list).")
@click.option("--quiet", "-q", is_flag=True, help="No output, only the exit code.")
def health_cmd(ops: Ops, within: float, id_file: str | None, pid: int | None, host: str | None,
               queues: str | None, quiet: bool) -> None:
    """Exit 0 if a worker beat within --within seconds, else 1 (for container probes).

    Picks the worker by --id-file, else --pid, else --queue, else any worker.
    """
    worker_id = None
    if id_file is not None:
        worker_id = read_id_file(id_file)
        if worker_id is None:
            _report(False, f"no worker id in {id_file} (is laraq work running with --heartbeat-file?)", quiet)
    try:
        ok, reason = check_health(ops.queue.client, ops.queue.prefix, within=within, worker_id=worker_id,
                                  pid=pid, host=host or socket.gethostname(),
                                  queues=(queues or "").split(","))
    except Exception as exc:
        ok, reason = False, f"cannot read the heartbeat records from Redis: {exc}"
    _report(ok, reason, quiet)


def _report(ok: bool, reason: str, quiet: bool) -> None:
    if not quiet:
        click.echo(("healthy: " if ok else "unhealthy: ") + visible(reason), err=not ok)
    sys.exit(EXIT_SUCCESS if ok else EXIT_ERROR)


@click.command("metrics")
@settings_options
@click.option("--queue", "queues", default=None,
              help="Queues to sample (comma list, patterns such as 'tenant-*' allowed; default: every queue found).")
@click.option("--metrics-dir", type=click.Path(file_okay=False), default=None, envvar="PROMETHEUS_MULTIPROC_DIR",
              help="Add the job counters the workers wrote to this multiprocess dir.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write to this file atomically (textfile collector) instead of stdout.")
def metrics_cmd(ops: Ops, queues: str | None, metrics_dir: str | None, output: str | None) -> None:
    """Print Prometheus metrics once: queue sizes, oldest pending age, live workers (and job counters)."""
    # this process only reads the workers' files: its own gauges must not become files in that dir
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    os.environ.pop("prometheus_multiproc_dir", None)
    # start-up: prometheus_client (~40 modules, ~15 ms) only for this command, once the variables are gone
    from laraq.production.metrics import exposition

    names: list[str] = ops.queues([q for q in (queues or "").split(",") if q])  # a pattern: its queues now
    text = exposition(ops.queue, names, heartbeat_prefix=ops.queue.prefix, metrics_dir=metrics_dir)
    if output is None:
        click.echo(text.decode(), nl=False)
        return
    _write_atomic(output, text)


def _write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".laraq-metrics-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


COMMANDS: list[Any] = [workers_cmd, health_cmd, metrics_cmd]
