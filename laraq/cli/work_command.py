"""``laraq work``'s command line: its options, and the exec into the supervisor (:mod:`laraq.production.prefork`).

This module imports click and a few standard modules, no worker and no Redis client, so that looking
the command up (``laraq --help``, ``laraq work --help``, a usage error) stays light. When the command
runs, :mod:`laraq.cli.work` (where the worker is built and run) is imported once: in this process for
``--no-supervise``, and with the supervisor (the default) just before the worker processes are forked
from this one, which then execs the supervisor (:func:`_exec_supervisor`). A start-up is thus one
interpreter with the worker's imports plus the small ``python -S`` supervisor, not three interpreters
(see ``compat-docs/performance-history.md``, "Second pass on items 3 and 4: lean workers and start-up").
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
from typing import Any

import click

from laraq.exitcodes import EXIT_ERROR

__all__ = ["work_cmd"]

#: the worker's settings, as JSON, handed from ``laraq work`` to each worker process (the name
#: :func:`laraq.cli.work.child_main` reads; tests/test_cli_lazy.py checks the two agree)
_CONFIG_ENV = "LARAQ_WORKER_CONFIG"


@click.command("work")
@click.argument("connection", required=False)
@click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR",
              help="The laraq.App holding your handlers, e.g. myproject.jobs:app.")
@click.option("--queue", default=None,
              help="Queues to work, in priority order (e.g. high,default); a pattern ('tenant-*') works every "
                   "queue it matches, as one priority level.")
@click.option("--fair", is_flag=True,
              help="The queues a pattern matches (without a pattern: all the listed queues) take turns, one "
                   "job each per turn, instead of going in order.")
@click.option("--weights", default=None, metavar="NAME=N,...",
              help="With --fair: jobs per turn for some queues (names or patterns, e.g. 'tenant-vip=4').")
@click.option("--max-per-queue", type=click.IntRange(0), default=0, show_default=True, metavar="N",
              help="At most N jobs of one queue reserved or running at once across all laraq workers on the "
                   "connection (slot leases in Redis; a killed worker's slots expire). 0 = no limit.")
@click.option("--slot-lease", type=click.FloatRange(1), default=30.0, show_default=True, metavar="SECONDS",
              help="With --max-per-queue: how long a slot outlives a worker that stopped renewing it.")
@click.option("--discover-every", type=click.FloatRange(0.1), default=2.0, show_default=True, metavar="SECONDS",
              help="How often a --queue pattern looks for new queues (a bounded SCAN).")
@click.option("--once", is_flag=True, help="Process one job, then exit.")
@click.option("--stop-when-empty", is_flag=True, help="Exit when the queues are empty.")
@click.option("--stop-when-empty-for", type=click.IntRange(0), default=0, show_default=True, metavar="SECONDS",
              help="Exit once the queues have been empty for this many seconds (Laravel 11.53/12.60/13.10+).")
@click.option("--max-jobs", type=int, default=0, show_default=True, help="Exit after this many jobs (0 = no limit).")
@click.option("--max-time", type=int, default=0, show_default=True, help="Exit after this many seconds (0 = none).")
@click.option("--memory", type=int, default=128, show_default=True, help="Exit with code 12 above this RSS (MB).")
@click.option("--sleep", type=float, default=3, show_default=True, help="Seconds to sleep when no job is available.")
@click.option("--rest", type=float, default=0, show_default=True, help="Seconds to rest after each job.")
@click.option("--timeout", type=int, default=60, show_default=True, help="Seconds a job may run (0 = no limit).")
@click.option("--tries", type=int, default=1, show_default=True, help="Attempts before failing (0 = unlimited).")
@click.option("--backoff", default="0", show_default=True, help="Seconds before retrying; a comma list per attempt.")
@click.option("--delay", type=int, default=None, hidden=True, help="Deprecated by Laravel; ignored.")
@click.option("--daemon", is_flag=True, hidden=True, help="Deprecated by Laravel; ignored.")
@click.option("--force", is_flag=True, help="Work even in maintenance mode.")
@click.option("--name", default="default", show_default=True, help="The worker's name.")
@click.option("--json", "json_mode", is_flag=True, help="One JSON object per job event.")
@click.option("-q", "--quiet", is_flag=True, help="No job output.")
@click.option("-v", "--verbose", count=True, help="More output (-v job ids, -vv debug logs).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error", "critical"]), default=None,
              help="Log level (default: info, so handlers' log.info lines show; -vv = debug).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text, or json: one JSON object per line (job fields, traceback) - job lines included.")
@click.option("--log-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A logging config file (.json dictConfig, .ini fileConfig) used as is.")
@click.option("--env-file", type=click.Path(dir_okay=False), default=None, help="The Laravel app's .env file.")
@click.option("--laravel", default=None, help="Laravel version profile (default: detected, else 13).")
@click.option("--app-path", type=click.Path(file_okay=False), default=None,
              help="The Laravel app's directory, whose config laraq reads (default: LARAQ_APP_PATH, else the "
                   "--env-file's directory when artisan is there).")
@click.option("--app-config", type=click.Path(dir_okay=False), default=None,
              help="The app's config exported by `laraq config --from APP -o FILE` (default: LARAQ_APP_CONFIG).")
@click.option("--loop", "loop", type=click.Choice(["auto", "asyncio", "uvloop"]), default="auto", show_default=True,
              help="The event loop async def handlers run on. auto: $LARAQ_LOOP if set, else an "
                   "event-loop policy the app installed, else uvloop where it is installed, else "
                   "asyncio's own.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Jobs run at once by this worker.")
@click.option("--batch", type=click.IntRange(1, 1000), default=32, show_default=True,
              help="Most jobs one reserve call takes (acks, migrate and pops in one Lua call). "
                   "1 = each reserve step is artisan's pop: artisan's calls, one job at a time.")
@click.option("--prefetch/--no-prefetch", default=True, show_default=True,
              help="Reserve up to ~1 s of measured work beyond the free slots (leases renewed while "
                   "buffered, handed back on shutdown).")
@click.option("--unhandled", type=click.Choice(["leave", "requeue", "release", "fail"]), default="leave",
              show_default=True,
              help="A job that has no Python handler: leave it in the list for PHP workers (never taken), "
                   "or take it and requeue it untouched, release it, or fail it.")
@click.option("--scan-window", type=click.IntRange(1), default=200, show_default=True,
              help="With --unhandled leave: how many jobs at the head of a queue a reserve looks at first "
                   "(deeper jobs are read page by page after it).")
@click.option("--acks", type=click.Choice(["at-once", "batched"]), default="at-once", show_default=True,
              help="at-once: a finished job's ZREM is written the moment it is done and buffered jobs are "
                   "recorded, so a SIGKILL re-runs only the running jobs. batched: acks ride on the next "
                   "reserve (within 50 ms): fewer system calls per job; a SIGKILL may re-run up to 50 ms of "
                   "finished jobs and leaves buffered ones reserved until retry_after.")
@click.option("--unhandled-delay", type=click.IntRange(1), default=10, show_default=True,
              help="Delay before an unhandled job is visible again (requeue/release).")
@click.option("--php-queue", default=None,
              help="A queue PHP workers serve: laraq hands chain steps, batch bookkeeping, uniqueId() locks "
                   "and PHP failed() there (default: the connection's default queue).")
@click.option("--php-app", default=None, type=click.Path(file_okay=False),
              help="The Laravel app on this host: PHP runs chain steps, batch bookkeeping, unique locks and "
                   "failed() in-process, at artisan's moment (default: the --env-file's directory if it has artisan).")
@click.option("--max-command-bytes", type=click.IntRange(1), default=None, metavar="BYTES",
              help="Fail a job whose serialized command is larger (default: LARAQ_MAX_COMMAND_BYTES, else no "
                   "limit, as PHP's unserialize()).")
@click.option("--max-command-elements", type=click.IntRange(1), default=None, metavar="COUNT",
              help="Fail a job whose command holds more values and keys (default: LARAQ_MAX_COMMAND_ELEMENTS, "
                   "else no limit).")
@click.option("--redis-url", default=None, help="Queue Redis URL (overrides REDIS_HOST/PORT/...).")
@click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
@click.option("--retry-after", default=None, help="Override the connection's retry_after (seconds, or 'null').")
@click.option("--block-for", type=float, default=None, help="Override the connection's block_for (seconds).")
@click.option("--schedule", is_flag=True, help="Also run the app's schedule entries (laraq.schedule.scheduler) in a thread.")
@click.option("--supervise/--no-supervise", default=True, show_default=True,
              help="Run the worker in a child process that is restarted after a hard timeout.")
@click.option("--processes", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker processes under the one supervisor (prefork: use every core; each runs "
                   "--concurrency jobs).")
@click.option("--horizon/--no-horizon", default=None,
              help="Write Laravel Horizon's records (default: when the app uses Horizon; see compat-docs/horizon.md).")
@click.option("--horizon-signals/--no-horizon-signals", default=True, show_default=True,
              help="Let horizon:pause/continue/terminate signal this process (off: they reach it only "
                   "through Horizon's command lists; for containers sharing a hostname).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve Prometheus metrics on this port (see compat-docs/production.md).")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address for --metrics-port: loopback only by default; 0.0.0.0 (or this host's address) lets "
                   "other hosts scrape it (a container's port mapping, a remote Prometheus).")
@click.option("--metrics-jobs", multiple=True, default=(), metavar="CLASSES",
              help="Job classes labelled by name in the job metrics besides the app's handlers (comma-separated, "
                   "repeatable); every other class is counted as job=\"other\", so the series stay bounded.")
@click.option("--metrics-interval", type=click.FloatRange(0.1), default=15.0, show_default=True, metavar="SECONDS",
              help="How often the queue-size gauges are sampled (one pipelined round per queue).")
@click.option("--metrics-dir", type=click.Path(file_okay=False), default=None, envvar="PROMETHEUS_MULTIPROC_DIR",
              help="Multiprocess dir shared by the workers of a host: the port serves their sum.")
@click.option("--heartbeat-file", type=click.Path(dir_okay=False), default=None,
              help="Write this worker's heartbeat id here (for laraq health --id-file).")
@click.option("--heartbeat/--no-heartbeat", default=True, show_default=True,
              help="Keep a heartbeat record in Redis (laraq workers / laraq health).")
def work_cmd(**params: Any) -> None:
    """Process jobs on the queue (php artisan queue:work), running them with Python handlers.

    Exit codes: 0 stopped normally, 12 memory limit, 1 error, 2 usage error, 3 Redis unreachable,
    4 Redis refused the credentials, 5 database fault, 6 bad settings (APP_KEY, a Redis TLS certificate refused).

    \b
    Environment:
      LARAQ_OTEL=1      an OpenTelemetry span per job (pip install 'laraq[otel]')
      LARAQ_REPORT=log  handler exceptions to the laraq.report logger
      LARAQ_SCHEMA      the job schema laraq schema --from APP -o FILE wrote
    """
    params.pop("delay", None)
    params.pop("daemon", None)
    if params.get("metrics_dir"):  # before prometheus_client is imported, here and in the child
        from laraq.production.multiproc import use_multiprocess_dir  # start-up: only with --metrics-dir

        use_multiprocess_dir(params["metrics_dir"])
    processes = params.pop("processes")
    if params.pop("supervise"):
        if processes > 1 and params["once"]:
            raise click.UsageError("--once runs one job: it cannot be combined with --processes")
        _exec_supervisor(params, processes)
    if processes > 1:
        raise click.UsageError("--processes needs the supervisor: drop --no-supervise")
    # The worker in this process (--no-supervise): laraq.cli.work, which imports this module for its
    # option defaults, is looked up by name when the command runs, never while either module loads.
    runner = importlib.import_module("laraq.cli.work")
    sys.exit(runner._run_worker(params))


def _exec_supervisor(params: dict[str, Any], processes: int) -> None:
    """Fork the workers, then become the small supervisor of :mod:`laraq.production.prefork` (this process
    image is replaced; the workers, forked before, are its children and are adopted).

    The workers go on in this interpreter (:func:`laraq.production.prefork.fork_workers`): a worker of its own
    ``posix_spawn`` would start a third interpreter and import everything again (about 0.1 s of CPU and
    more of wall time on a loaded host; see ``compat-docs/performance-history.md``, "lean workers and start-up").
    """
    from laraq.production import prefork  # start-up: the supervisor's module, imported just before the exec

    os.environ[_CONFIG_ENV] = json.dumps(dict(params, worker_processes=processes))
    # The worker's modules, imported once before the fork (the workers share those pages until they
    # write to them) and then kept out of the collector's passes, which would otherwise touch (copy)
    # every page holding an object. No gc.collect() first: the imports leave no garbage (it finds 0
    # objects) and a full pass over their ~42,000 objects cost 70-100 ms here. The worker's own
    # collect-and-freeze after its boot then walks only what was made after the fork.
    runner = importlib.import_module("laraq.cli.work")
    gc.freeze()
    in_worker, adopted = prefork.fork_workers(processes, max_jobs=params["max_jobs"] or 0,
                                              max_time=params["max_time"] or 0)
    if in_worker:
        runner.child_main()  # exits (SystemExit): never returns into the supervisor's code
        sys.exit(EXIT_ERROR)
    argv = prefork.spawn_argv(processes, once=bool(params["once"]), max_jobs=params["max_jobs"] or 0,
                              max_time=params["max_time"] or 0, json_logs=params.get("log_format") == "json",
                              adopted=adopted)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
