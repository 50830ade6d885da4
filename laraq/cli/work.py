"""``laraq work``: ``php artisan queue:work`` for Python handlers, with a built-in supervisor.

``laraq work`` parses its options and then becomes the small supervisor of :mod:`laraq.worker.prefork`
(about 10 MB: it imports no laraq code), which runs ``--processes`` worker processes (default 1) and
forwards signals to them. Laravel enforces a job timeout by SIGKILLing its own process and relies on
supervisord to start a new one; laraq's worker does the same when a synchronous handler overruns
(see :mod:`laraq.worker.worker`), and the supervisor starts a fresh worker at once - supervisord + artisan in
one command. Every other exit of a single worker (0, 12 for memory, 1, 2) is passed on unchanged, so
an external process manager sees artisan's exit codes. ``--no-supervise`` runs the worker in this
process (a timeout then kills ``laraq work`` itself, exactly like artisan).

A worker process gets its settings as JSON in ``LARAQ_WORKER_CONFIG`` and reports popped jobs on a
pipe (one byte per job, written per batch), so ``--max-jobs`` and ``--max-time`` keep counting across
restarts and processes (:func:`child_main`). If the supervisor dies, the kernel kills its workers
(``PR_SET_PDEATHSIG``): their jobs stay reserved until ``retry_after``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from typing import Any

import click
import redis

from laraq.app import App, load_app
from laraq.bus.models import ModelLoader
from laraq.config.settings import LaravelSettings, make_redis, parse_redis_url
from laraq.production.listeners import attach_listeners
from laraq.production.logs import JobLogListener, configure_logging, json_logging_active
from laraq.production.multiproc import use_multiprocess_dir
from laraq.protocol.queue import RedisQueue
from laraq.protocol.routing import QueueForwards
from laraq.stores.cache import MaintenanceMode
from laraq.stores.failed import connect_database
from laraq.worker import prefork
from laraq.worker.exitcodes import explain
from laraq.worker.output import Output
from laraq.worker.startup import (
    OpenedStore,
    StartupError,
    check_app_key,
    check_redis,
    describe_setup,
    limiter_warnings,
    open_cache,
    open_failed_store,
    queue_warnings,
    render_setup,
)
from laraq.worker.worker import EXIT_ERROR, EXIT_USAGE, Worker, WorkerOptions

__all__ = ["work_cmd", "build_worker", "child_main", "default_params"]

log = logging.getLogger("laraq.work")

_CONFIG_ENV = "LARAQ_WORKER_CONFIG"
_BANNER_ENV = "LARAQ_BANNER"


@click.command("work")
@click.argument("connection", required=False)
@click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR",
              help="The laraq.App holding your handlers, e.g. myproject.jobs:app.")
@click.option("--queue", default=None, help="Queues to work, in priority order (e.g. high,default).")
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
@click.option("--concurrency", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Jobs run at once by this worker.")
@click.option("--batch", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Most jobs one reserve call takes (acks, migrate and pops in one Lua call). "
                   "1 = the classic loop: artisan's calls, one job at a time.")
@click.option("--prefetch/--no-prefetch", default=True, show_default=True,
              help="Reserve up to ~1 s of measured work beyond the free slots (leases renewed while "
                   "buffered, handed back on shutdown).")
@click.option("--unhandled", type=click.Choice(["leave", "requeue", "release", "fail"]), default="leave",
              show_default=True,
              help="A job that has no Python handler: leave it in the list for PHP workers (never taken), "
                   "or take it and requeue it untouched, release it, or fail it.")
@click.option("--scan-window", type=click.IntRange(1), default=200, show_default=True,
              help="With --unhandled leave: how many jobs at the head of a queue one reserve looks at.")
@click.option("--unhandled-delay", type=click.IntRange(1), default=10, show_default=True,
              help="Delay before an unhandled job is visible again (requeue/release).")
@click.option("--php-queue", default=None,
              help="A queue PHP workers serve: laraq hands chain steps, batch bookkeeping, uniqueId() locks "
                   "and PHP failed() there (default: the connection's default queue).")
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
@click.option("--metrics-addr", default="0.0.0.0", show_default=True, help="Address for --metrics-port.")
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
    4 Redis refused the credentials, 5 database fault, 6 bad settings (APP_KEY).
    """
    params.pop("delay", None)
    params.pop("daemon", None)
    if params.get("metrics_dir"):  # before prometheus_client is imported, here and in the child
        use_multiprocess_dir(params["metrics_dir"])
    processes = params.pop("processes")
    if params.pop("supervise"):
        if processes > 1 and params["once"]:
            raise click.UsageError("--once runs one job: it cannot be combined with --processes")
        _exec_supervisor(params, processes)
    if processes > 1:
        raise click.UsageError("--processes needs the supervisor: drop --no-supervise")
    sys.exit(_run_worker(params))


def _exit_ignoring_quit_signals(code: int) -> None:
    """Exit a worker/supervisor process whose stop is decided, deaf to a late SIGTERM/SIGINT/SIGQUIT/SIGHUP.

    Python resets its signal handlers to the default (terminate) while it shuts down, so a quit signal that
    arrives then (Horizon's terminate signal forwarded just after the worker saw the restart stamp and
    stopped) would turn a clean exit 0 into "died by SIGTERM". Ignored handlers are left as they are.
    """
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


def _exec_supervisor(params: dict[str, Any], processes: int) -> None:
    """Become the small supervisor of :mod:`laraq.worker.prefork` (this process image is replaced)."""
    os.environ[_CONFIG_ENV] = json.dumps(params)
    argv = prefork.spawn_argv(processes, once=bool(params["once"]), max_jobs=params["max_jobs"] or 0,
                              max_time=params["max_time"] or 0, json_logs=params.get("log_format") == "json")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


def child_main() -> None:
    """Entry point of the supervised worker process."""
    params = json.loads(os.environ.pop(_CONFIG_ENV))
    fd = int(os.environ.pop(prefork.FD_ENV))
    parent = int(os.environ.pop(prefork.PARENT_ENV, "0"))
    _die_with_parent(parent)
    os.environ.pop(prefork.SLOT_ENV, None)
    for key, env in (("max_jobs", prefork.MAX_JOBS_ENV), ("max_time", prefork.MAX_TIME_ENV)):
        remaining = os.environ.pop(env, None)
        if remaining is not None and params.get(key):
            params[key] = int(float(remaining))

    def popped(count: int = 1) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, b"j" * count)

    # Horizon may signal the supervisor (it forwards signals here), never this restartable child.
    params["horizon_signal_pid"] = parent or None
    # the supervisor counts jobs only for --max-jobs: without it, no write (and no wake-up of the
    # supervisor) per batch; the pipe still tells it when this worker is gone
    _exit_ignoring_quit_signals(_run_worker(params, on_jobs_popped=popped if params.get("max_jobs") else None))


# -- building the worker ------------------------------------------------------------------------------

def _setup_logging(params: dict[str, Any]) -> str:
    """Logging per ``--log-level/--log-format/--log-config`` (:mod:`laraq.production.logs`); after the app is imported,
    so an app that configured logging itself keeps its configuration."""
    return configure_logging(level=params.get("log_level"), fmt=params.get("log_format") or "text",
                             config_file=params.get("log_config"), verbose=params.get("verbose") or 0,
                             quiet=bool(params.get("quiet")))


def _run_worker(params: dict[str, Any], *, on_jobs_popped: Any = None) -> int:
    _return_freed_memory()
    try:
        app = _load_app(params["app_spec"], load_app)
        _setup_logging(params)
        prepared = prepare(params, app=app)
        worker = build_worker(params, on_jobs_popped=on_jobs_popped, prepared=prepared)
    except click.UsageError as exc:
        click.echo(f"laraq work: {exc.message}", err=True)
        return EXIT_USAGE
    except StartupError as exc:
        click.echo(f"laraq work: {exc.message}", err=True)
        return exc.exit_code
    except Exception as exc:
        explained = explain(exc)
        if explained is None:
            raise
        click.echo(f"laraq work: {explained[0]}", err=True)
        return explained[1]
    if not params.get("quiet"):
        _banner(prepared.info, render_setup)
    else:  # --quiet: no banner, but what the worker cannot do is still said
        for warning in prepared.info["warnings"]:
            log.warning("%s", warning)
    if params.get("schedule"):
        # start-up: the scheduler (cronsim, the entries: ~6 ms) only for --schedule
        from laraq.schedule.scheduler import attach_to_worker

        attach_to_worker(worker)
    # What boot made (modules, the app, settings) lives as long as the process: keep it out of the
    # collector's passes, so a long-running worker's collections only walk what jobs allocate.
    gc.collect()
    gc.freeze()
    try:
        return worker.run()
    except Exception as exc:
        explained = explain(exc)
        if explained is not None:
            log.error("the worker stopped: %s", explained[0])
            return explained[1]
        log.exception("the worker stopped on an unexpected error")
        return EXIT_ERROR


def _return_freed_memory() -> None:
    """Hand big freed blocks back to the OS (glibc): a 10 MB job must not leave the worker 10 MB larger.

    glibc serves blocks above ``M_MMAP_THRESHOLD`` with ``mmap`` and unmaps them on ``free``, but raises
    that threshold to the size of every block it frees (up to 32 MB), so after one big job the next
    big bodies come from the heap and stay counted in the RSS that ``--memory`` checks. A fixed
    threshold (``MALLOC_MMAP_THRESHOLD_`` if set) keeps them unmapped. A no-op off glibc.
    """
    import ctypes  # start-up: ctypes (~2 ms) only in a worker process, not for laraq --version/--help

    try:
        libc = ctypes.CDLL(None)
        threshold = int(os.environ.get("MALLOC_MMAP_THRESHOLD_") or 256 * 1024)
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError, ValueError):
        pass


def _banner(info: dict[str, Any], render: Any) -> None:
    """Say once what this worker is connected to (stderr; one JSON log line with --log-format json)."""
    if os.environ.pop(_BANNER_ENV, None) == "shown":  # a restarted supervised child does not repeat it
        return
    banner_log = logging.getLogger("laraq.banner")
    if json_logging_active():
        banner_log.info("laraq work starting", extra={"setup": info})
        for warning in info["warnings"]:
            log.warning("%s", warning)
        return
    click.echo(render(info), err=True)


def default_params(**overrides: Any) -> dict[str, Any]:
    """``laraq work``'s options with their defaults (for building a worker in-process).

    The defaults are resolved as the command line resolves them (``Parameter.get_default``): a flag option
    declared without ``default=`` is ``False``, never click 8.3's truthy ``UNSET`` placeholder (which
    ``.default`` holds there and would turn ``once``/``force``/``stop_when_empty`` on).
    """
    ctx = click.Context(work_cmd)
    params: dict[str, Any] = {p.name: p.get_default(ctx) for p in work_cmd.params if p.name}
    params.update(connection=None, app_spec=None)
    unknown = set(overrides) - set(params)
    if unknown:
        raise TypeError(f"unknown laraq work options: {sorted(unknown)}")
    params.update(overrides)
    return params


@dataclasses.dataclass
class Prepared:
    """Everything ``laraq work`` resolved before building the worker, and the banner's facts."""

    settings: Any
    app: App
    queue: Any
    queues: str
    cache: Any
    failer: Any
    encrypter: Any
    info: dict[str, Any]


def prepare(params: dict[str, Any], *, env: Mapping[str, str] | None = None, app: App | None = None,
            checks: bool = True, strict: bool = True) -> Prepared:
    """Resolve the settings, the app and the stores (:mod:`laraq.worker.startup`); raises :class:`StartupError`.

    ``checks`` pings Redis and looks for jobs under other prefixes (off for in-process test workers);
    ``strict=False`` (``laraq config``) reports a store or APP_KEY fault as a warning instead.
    """
    try:
        settings = LaravelSettings.from_env(env, env_file=params.get("env_file"), version=params.get("laravel"))
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read the Laravel settings: {exc}") from exc
    if params.get("prefix") is not None:
        settings = dataclasses.replace(settings, redis_prefix=params["prefix"])
    if params.get("stop_when_empty_for") and not settings.version.has_stop_when_empty_for:
        raise click.UsageError(f"--stop-when-empty-for does not exist in Laravel {settings.version} "
                               "(added in 11.53, 12.60 and 13.10)")
    if app is None:
        app = _load_app(params["app_spec"], load_app)
    if not app.names and params.get("app_spec"):
        log.warning("the App %s has no handlers: every job will get the --unhandled policy", params["app_spec"])

    url = params.get("redis_url")
    client = redis.Redis.from_url(url) if url else make_redis(settings, "default")
    shown_url = _mask_url(url) if url else settings.redis_url_for("default", mask=True)
    if checks:
        check_redis(client, shown_url)
    retry_after: int | None = settings.retry_after
    if params.get("retry_after") is not None:
        text = str(params["retry_after"]).strip().lower()
        retry_after = None if text in ("null", "none", "") else int(text)
    block_for = params["block_for"] if params.get("block_for") is not None else settings.block_for
    connection_name = params.get("connection") or settings.connection_name
    try:
        forwards = QueueForwards.parse(settings.env.get("LARAQ_QUEUE_FORWARD"))
    except ValueError as exc:
        raise click.UsageError(f"LARAQ_QUEUE_FORWARD: {exc}") from exc
    queue = RedisQueue(
        client, connection_name=connection_name, default_queue=settings.redis_queue,
        prefix=settings.redis_prefix, retry_after=retry_after, block_for=block_for, version=settings.version,
        forwards=forwards,
    )
    faults: list[str] = []

    def attempt(step: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return step(*args, **kwargs)
        except StartupError as exc:
            if strict:
                raise
            faults.append(exc.message)
            return OpenedStore(None, f"unusable (exit {exc.exit_code} in laraq work)")

    encrypter = attempt(check_app_key, settings)
    if isinstance(encrypter, OpenedStore):
        encrypter = None
    cache = attempt(open_cache, settings, redis_url=url)
    failer = attempt(open_failed_store, settings)
    queues = params.get("queue") or settings.redis_queue
    names = [q for q in str(queues).split(",") if q]
    warnings = [w for w in (settings.version_warning,) if w] + faults + cache.warnings + failer.warnings
    schema_file = (settings.env or {}).get("LARAQ_SCHEMA")
    if schema_file:  # `laraq schema --from APP -o FILE`: class defaults, middleware() methods, enums
        try:
            app.load_schema(schema_file)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    warnings += app.problems(settings.version)
    if checks:
        warnings += queue_warnings(client, settings.redis_prefix, names)
        warnings += limiter_warnings(client, settings.redis_prefix, names, app)
    info = describe_setup(
        settings, redis_url=shown_url, prefix=settings.redis_prefix, queues=names, retry_after=retry_after,
        block_for=block_for, cache=cache.description, failed=failer.description, handlers=list(app.names),
        app_spec=params.get("app_spec"), warnings=warnings)
    return Prepared(settings, app, queue, queues, cache.store, failer.store, encrypter, info)


def _load_app(spec: str, load_app: Any) -> App:
    """Import ``--app``; a missing module, a syntax error or an error raised by the import is one line."""
    try:
        return load_app(spec)
    except SyntaxError as exc:
        raise click.UsageError(f"cannot load --app {spec}: syntax error in {exc.filename} line {exc.lineno}: "
                               f"{exc.msg}; fix the handler module") from exc
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise click.UsageError(f"cannot load --app {spec}: {type(exc).__name__}: {exc}; check the module path "
                               "(run from the project root, or set PYTHONPATH) and its imports") from exc
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise click.UsageError(f"cannot load --app {spec}: importing it raised {type(exc).__name__}: {exc} "
                               f"({frame.filename} line {frame.lineno}); fix the handler module") from exc


def _mask_url(url: str) -> str:
    try:
        parts = parse_redis_url(url)
    except ValueError:
        return "(unparseable --redis-url)"
    auth = ""
    if parts.get("password"):
        auth = f"{parts.get('username') or ''}:********@"
    scheme = "rediss" if str(parts.get("scheme", "")).lower() in ("tls", "rediss") else "redis"
    return f"{scheme}://{auth}{parts.get('host', '127.0.0.1')}:{parts.get('port', 6379)}/{parts.get('database', 0)}"


def build_worker(params: dict[str, Any], *, on_job_popped: Any = None, env: Mapping[str, str] | None = None,
                 app: App | None = None, on_jobs_popped: Any = None, prepared: Prepared | None = None) -> Worker:
    """Build a :class:`~laraq.worker.worker.Worker` from ``laraq work``'s options and the Laravel settings.

    ``env`` replaces ``os.environ`` as the source of Laravel settings; ``app`` replaces ``--app``.
    """
    p = prepared or prepare(params, env=env, app=app, checks=False)
    settings = p.settings
    options = WorkerOptions(
        name=params["name"], backoff=str(params["backoff"]), memory=params["memory"], timeout=params["timeout"],
        sleep=params["sleep"], max_tries=params["tries"], force=params["force"],
        stop_when_empty=params["stop_when_empty"], stop_when_empty_for=params.get("stop_when_empty_for") or 0,
        max_jobs=params["max_jobs"], max_time=params["max_time"],
        rest=params["rest"], once=params["once"], concurrency=params["concurrency"],
        unhandled=params["unhandled"], unhandled_delay=params["unhandled_delay"],
        batch=params.get("batch", 100), prefetch=params.get("prefetch", True),
        php_queue=params.get("php_queue"), scan_window=params.get("scan_window", 200),
    )
    json_logs = params.get("log_format") == "json"
    output = Output(settings.version, json_mode=params["json_mode"],
                    quiet=params["quiet"] or (json_logs and not params["json_mode"]), verbosity=params["verbose"])
    connection_name = params.get("connection") or settings.connection_name
    worker = Worker(
        p.app, p.queue, p.queues, options=options, connection_name=connection_name, version=settings.version,
        cache=p.cache, failer=p.failer, encrypter=p.encrypter, output=output,
        maintenance=MaintenanceMode(settings, p.cache), on_job_popped=on_job_popped,
        on_jobs_popped=on_jobs_popped, listeners=[JobLogListener(job_lines=json_logs)],
        model_loader=ModelLoader(lambda name: connect_database(settings.database(name)), p.app.model_schemas),
    )
    horizon = _horizon_listener(params, settings, p.queue.client)
    if horizon is not None:
        worker.add_listener(horizon)
    attach_listeners(worker, params)
    return worker


def _horizon_listener(params: dict[str, Any], settings: Any, client: Any) -> Any:
    """The Horizon listener when ``--horizon`` or the app uses Horizon (``laraq.horizon``)."""
    # start-up: the horizon package (~3 ms) is not loaded for laraq --version/--help
    from laraq.horizon import HorizonSettings, horizon_in_use

    wanted = params.get("horizon")
    if wanted is False or (wanted is None and not horizon_in_use(settings.env, settings.base_path)):
        return None
    # start-up: importing these runs the horizon package too; only for a worker that writes Horizon's records
    from laraq.horizon.listener import HorizonListener
    from laraq.horizon.supervisors import NO_SIGNAL_PID  # start-up: as the line above

    hs = HorizonSettings.from_app(settings.env, settings.base_path)
    if params.get("horizon_signals", True):
        signal_pid = params.get("horizon_signal_pid") or None
    else:
        signal_pid = NO_SIGNAL_PID
    horizon_client = client
    if hs.use == "cache" and not params.get("redis_url"):
        horizon_client = make_redis(settings, "cache")
    elif hs.use not in ("default", "cache"):
        log.warning("horizon: config/horizon.php uses Redis connection %r, which laraq does not know; "
                    "writing Horizon's records on the queue's connection", hs.use)
    log.info("horizon: writing Horizon's records under prefix %r", hs.prefix)
    return HorizonListener(horizon_client, hs, signal_pid=signal_pid)


# -- the worker process under the supervisor (laraq.worker.prefork) ---------------------------------------

def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when the supervisor dies (best effort elsewhere)."""
    try:
        import ctypes  # start-up: ctypes (~2 ms) only in a worker process, not for laraq --version/--help

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the supervisor is already gone
        os._exit(EXIT_ERROR)
