"""``laraq work``: ``php artisan queue:work`` for Python handlers, with a built-in supervisor.

``laraq work`` parses its options and then becomes the small supervisor of :mod:`laraq.production.prefork`
(about 10 MB: it imports no laraq code), which runs ``--processes`` worker processes (default 1) and
forwards signals to them. Laravel enforces a job timeout by SIGKILLing its own process and relies on
supervisord to start a new one; laraq's worker does the same when a synchronous handler overruns (see
:mod:`laraq.worker.executor`), and the supervisor starts a fresh worker at once - supervisord + artisan in
one command. Every other exit of a single worker (0, 12 for memory, 1, 2) is passed on unchanged, so an
external process manager sees artisan's exit codes. ``--no-supervise`` runs the worker in this process (a
timeout then kills ``laraq work`` itself, exactly like artisan).

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
from collections.abc import Callable, Mapping
from datetime import UTC, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click
import redis

from laraq.app import App, load_app
from laraq.bus.handoffcheck import HandoffCheck, check_handoff
from laraq.bus.models import ModelLoader
from laraq.bus.phpprocess import PhpProcess, PhpStepError, app_on_host
from laraq.bus.phpsteps import PhpSteps, continuation_conflict
from laraq.bus.typed import HandlerAnnotationError
from laraq.cli.output import Output, OutputListener
from laraq.cli.startup import (
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
from laraq.cli.work_command import work_cmd
from laraq.config.effective import effective_settings, with_flags
from laraq.config.faults import explain
from laraq.config.phpworkers import shared_queue_warnings
from laraq.config.settings import LaravelSettings, make_redis, parse_redis_url
from laraq.exitcodes import EXIT_ERROR, EXIT_USAGE
from laraq.production import prefork
from laraq.production.listeners import attach_listeners
from laraq.production.logs import JobLogListener, configure_logging, json_logging_active
from laraq.protocol.discovery import expand
from laraq.protocol.phparray import set_command_limits
from laraq.protocol.queue import RedisQueue
from laraq.protocol.routing import QueueForwards
from laraq.stores.batches import BatchTable
from laraq.stores.cache import MaintenanceMode
from laraq.stores.failed import connect_database
from laraq.worker.context import WorkerOptions
from laraq.worker.eager import loop_name
from laraq.worker.notes import release_free_memory
from laraq.worker.selection import parse_weights
from laraq.worker.worker import Worker

# ``work_cmd`` (the options and the exec into the supervisor) is in laraq.cli.work_command, which imports
# nothing heavy: the ``laraq work`` process does not import this module before it becomes the supervisor.
__all__ = ["work_cmd", "build_worker", "child_main", "default_params"]

log = logging.getLogger("laraq.work")

_CONFIG_ENV = "LARAQ_WORKER_CONFIG"
_BANNER_ENV = "LARAQ_BANNER"


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


def child_main() -> None:
    """Entry point of the supervised worker process."""
    params = json.loads(os.environ.pop(_CONFIG_ENV))
    fd = int(os.environ.pop(prefork.FD_ENV))
    parent = int(os.environ.pop(prefork.PARENT_ENV, "0"))
    _die_with_parent(parent)
    params["worker_slot"] = int(os.environ.pop(prefork.SLOT_ENV, "0") or 0)
    for key, env in (("max_jobs", prefork.MAX_JOBS_ENV), ("max_time", prefork.MAX_TIME_ENV)):
        remaining = os.environ.pop(env, None)
        if remaining is not None and params.get(key):
            params[key] = int(float(remaining))

    def popped(count: int = 1) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, b"j" * count)

    # Horizon may signal the supervisor (it forwards signals here), never this restartable child.
    params["horizon_signal_pid"] = parent or None
    params["worker_parent"] = parent or None
    # the supervisor counts jobs only for --max-jobs: without it, no write (and no wake-up of the
    # supervisor) per batch; the pipe still tells it when this worker is gone
    def ready() -> None:
        with contextlib.suppress(OSError):
            os.write(fd, prefork.READY)

    _exit_ignoring_quit_signals(_run_worker(params, on_jobs_popped=popped if params.get("max_jobs") else None,
                                            ready=ready))


# -- building the worker ------------------------------------------------------------------------------

def _setup_logging(params: dict[str, Any]) -> str:
    """Logging per ``--log-level/--log-format/--log-config`` (:mod:`laraq.production.logs`); after the app is imported,
    so an app that configured logging itself keeps its configuration."""
    return configure_logging(level=params.get("log_level"), fmt=params.get("log_format") or "text",
                             config_file=params.get("log_config"), verbose=params.get("verbose") or 0,
                             quiet=bool(params.get("quiet")))


def _run_worker(params: dict[str, Any], *, on_jobs_popped: Any = None,
                ready: Callable[[], None] | None = None) -> int:
    """Build the worker from ``params`` and run it; ``ready`` is called once it is built, just before it
    takes jobs (a supervised worker tells its supervisor it started)."""
    _return_freed_memory()
    try:
        app = _load_app(params["app_spec"], load_app)
        _setup_logging(params)
        prepared = prepare(params, app=app)
        worker = build_worker(params, on_jobs_popped=on_jobs_popped, prepared=prepared)
        _check_continuations(worker, params)
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

        attach_to_worker(worker, prepared.encrypter)
    # What boot made (modules, the app, settings) lives as long as the process: keep it out of the
    # collector's passes, so a long-running worker's collections only walk what jobs allocate.
    gc.collect()
    gc.freeze()
    release_free_memory()  # what boot freed (the config, the app's first reads) goes back to the system
    if ready is not None:
        ready()
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
    #: The Python jobs' PHP classes without the hand-off, when a PHP worker shares a queue (None: not asked).
    handoff: HandoffCheck | None = None


def prepare(params: dict[str, Any], *, env: Mapping[str, str] | None = None, app: App | None = None,
            checks: bool = True, strict: bool = True) -> Prepared:
    """Resolve the settings, the app and the stores (:mod:`laraq.cli.startup`); raises :class:`StartupError`.

    ``checks`` pings Redis and looks for jobs under other prefixes (off for in-process test workers);
    ``strict=False`` (``laraq config``) reports a store or APP_KEY fault as a warning instead.
    """
    try:
        settings = effective_settings(env, env_file=params.get("env_file"), version=params.get("laravel"),
                                      app_path=params.get("app_path"), app_config=params.get("app_config"),
                                      connection=params.get("connection"))
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read the Laravel settings: {exc}") from exc
    settings = with_flags(settings, prefix=params.get("prefix"), connection=params.get("connection"),
                          queue=params.get("queue"), retry_after=params.get("retry_after"),
                          block_for=params.get("block_for"), redis_url=params.get("redis_url"))
    if params.get("stop_when_empty_for") and not settings.version.has_stop_when_empty_for:
        raise click.UsageError(f"--stop-when-empty-for does not exist in Laravel {settings.version} "
                               "(added in 11.53, 12.60 and 13.10)")
    try:
        loop_name(params.get("loop") or "auto")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if app is None:
        app = _load_app(params["app_spec"], load_app)
    if not app.names and params.get("app_spec"):
        log.warning("the App %s has no handlers: every job will get the --unhandled policy", params["app_spec"])

    url = params.get("redis_url")
    try:
        client = redis.Redis.from_url(url) if url else make_redis(settings, settings.redis_queue_connection)
        shown_url = _mask_url(url) if url else settings.redis_url_for(settings.redis_queue_connection, mask=True)
    except ValueError as exc:
        raise click.UsageError(f"the queue's Redis connection: {exc}") from exc
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
        forwards=forwards, migration_batch_size=settings.migration_batch_size,
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
    handoff: HandoffCheck | None = None
    if checks:
        found = expand(queue, names)  # a pattern's queues, as they are now
        warnings += queue_warnings(client, settings.redis_prefix, found) if found else []
        shared = shared_queue_warnings(client, settings, connection_name, found)
        warnings += shared
        handoff = handoff_check(params, env, app) if shared else None
        warnings += [w for w in (handoff.warning() if handoff else None,) if w]
        warnings += limiter_warnings(client, settings.redis_prefix, found, app)
    info = describe_setup(
        settings, redis_url=shown_url, prefix=settings.redis_prefix, queues=names, retry_after=retry_after,
        block_for=block_for, cache=cache.description, failed=failer.description, handlers=list(app.names),
        app_spec=params.get("app_spec"), warnings=warnings, loop=params.get("loop") or "auto")
    return Prepared(settings, app, queue, queues, cache.store, failer.store, encrypter, info, handoff)


def handoff_check(params: dict[str, Any], env: Mapping[str, str] | None, app: App) -> HandoffCheck:
    """A PHP worker shares one of laraq's queues: which handled classes lack the RunsInPython hand-off."""
    try:
        base = app_on_host(params.get("php_app") or params.get("app_path"), params.get("env_file"))
    except ValueError:  # said by the worker's own check of --php-app
        base = None
    return check_handoff(base, app.names, env=env)


def _line_zone(settings: LaravelSettings) -> tzinfo:
    """The zone of the console lines' dates, as artisan's (:attr:`LaravelSettings.line_timezone`); a name
    this host's zone database does not know is said once, and the lines are in UTC."""
    name = settings.line_timezone
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("the app's timezone %r is not in this host's zone database (install tzdata): the job lines' "
                    "dates are in UTC", name)
        return UTC


def _load_app(spec: str, load_app: Any) -> App:
    """Import ``--app``; a missing module, a syntax error or an error raised by the import is one line."""
    try:
        return load_app(spec)
    except SyntaxError as exc:
        raise click.UsageError(f"cannot load --app {spec}: syntax error in {exc.filename} line {exc.lineno}: "
                               f"{exc.msg}; fix the handler module") from exc
    except HandlerAnnotationError as exc:  # the handler's own annotation: the message says what to write
        raise click.UsageError(f"cannot load --app {spec}: {exc}") from exc
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


def _weights(text: str | None) -> list[tuple[str, int]]:
    """``--weights``, or a usage error naming the item."""
    try:
        return parse_weights(text)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def build_worker(params: dict[str, Any], *, env: Mapping[str, str] | None = None, app: App | None = None,
                 on_jobs_popped: Any = None, prepared: Prepared | None = None) -> Worker:
    """Build a :class:`~laraq.worker.worker.Worker` from ``laraq work``'s options and the Laravel settings.

    ``env`` replaces ``os.environ`` as the source of Laravel settings; ``app`` replaces ``--app``.
    """
    p = prepared or prepare(params, env=env, app=app, checks=False)
    settings = p.settings
    set_command_limits(params.get("max_command_bytes"), params.get("max_command_elements"))
    options = WorkerOptions(
        name=params["name"], backoff=str(params["backoff"]), memory=params["memory"], timeout=params["timeout"],
        sleep=params["sleep"], max_tries=params["tries"], force=params["force"],
        stop_when_empty=params["stop_when_empty"], stop_when_empty_for=params.get("stop_when_empty_for") or 0,
        max_jobs=params["max_jobs"], max_time=params["max_time"],
        rest=params["rest"], once=params["once"], concurrency=params["concurrency"],
        unhandled=params["unhandled"], unhandled_delay=params["unhandled_delay"],
        batch=params.get("batch", 32), prefetch=params.get("prefetch", True),
        php_queue=params.get("php_queue"), scan_window=params.get("scan_window", 200),
        acks=params.get("acks") or "at-once", loop=params.get("loop") or "auto",
        fair=bool(params.get("fair")), weights=tuple(_weights(params.get("weights"))),
        max_per_queue=params.get("max_per_queue") or 0, slot_lease=params.get("slot_lease") or 30.0,
        discover_every=params.get("discover_every") or 2.0,
    )
    json_logs = params.get("log_format") == "json"
    listeners: list[Any] = []
    if not (params["quiet"] or (json_logs and not params["json_mode"])):
        listeners.append(OutputListener(Output(settings.version, json_mode=params["json_mode"],
                                               verbosity=params["verbose"], timezone=_line_zone(settings))))
    listeners.append(JobLogListener(job_lines=json_logs))
    connection_name = params.get("connection") or settings.connection_name
    steps = PhpSteps(p.queue, settings.version, cache=p.cache,
                     signing_key=p.encrypter.key if p.encrypter is not None else None,
                     connection_name=connection_name, php_queue=options.php_queue)
    _use_php(steps, params, env)
    worker = Worker(
        p.app, p.queue, p.queues, options=options, connection_name=connection_name, version=settings.version,
        cache=p.cache, failer=p.failer, encrypter=p.encrypter, steps=steps,
        maintenance=MaintenanceMode(settings, p.cache), on_jobs_popped=on_jobs_popped, listeners=listeners,
        model_loader=ModelLoader(lambda name: connect_database(settings.database(name)), p.app.model_schemas,
                                 BatchTable(settings.batch_database, settings.batch_table)),
    )
    for listener in _horizon_listeners(params, settings, p.queue, p.app):
        worker.add_listener(listener)
        ride = getattr(listener, "ride", None)
        if ride is not None:  # Horizon's records ride in the acks' writes (HorizonListener.ride)
            ride(worker.acks)
    attach_listeners(worker, {**params, "handoff": p.handoff})
    return worker


def _use_php(steps: PhpSteps, params: dict[str, Any], env: Mapping[str, str] | None) -> None:
    """The in-process PHP of :mod:`laraq.bus.phpprocess` when the app is on this host."""
    try:
        base = app_on_host(params.get("php_app") or params.get("app_path"), params.get("env_file"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if base is not None:
        steps.use_php(PhpProcess(base, env=env))


def _check_continuations(worker: Worker, params: dict[str, Any]) -> None:
    """At start: boot the in-process PHP (a broken app is said now, and the worker hands off instead);
    refuse a hand-off whose continuations this worker would take itself (bounce or starve)."""
    steps = worker.callqueued.steps
    if steps.php is not None:
        try:
            steps.php.ping()
        except PhpStepError as exc:
            log.error("the app at %s cannot be booted by PHP (%s): chain steps, batches, unique locks and PHP "
                      "failed() are handed to PHP by continuation instead", steps.php.base_path, exc)
            steps.use_php(None)
    problem = continuation_conflict(worker.queues, params.get("php_queue"), worker.queue.default_queue,
                                    in_process=steps.php is not None,
                                    signing_key=steps.signing_key is not None,
                                    unhandled=params.get("unhandled") or "leave")
    if problem is not None and problem[0] == "refuse":
        raise click.UsageError(problem[1])
    if problem is not None:
        log.warning("%s", problem[1])


def _horizon_listeners(params: dict[str, Any], settings: Any, queue: RedisQueue, app: App) -> list[Any]:
    """The Horizon listener and the check for jobs waiting for PHP (:mod:`laraq.horizon.phpwait`) when
    ``--horizon`` or the app uses Horizon (``laraq.horizon``)."""
    client = queue.client
    # start-up: the horizon package (~3 ms) is not loaded for laraq --version/--help
    from laraq.horizon.settings import app_horizon, records_client

    hs = app_horizon(settings, params.get("horizon"))
    if hs is None:
        return []
    # start-up: importing these runs the horizon package too; only for a worker that writes Horizon's records
    from laraq.horizon.listener import HorizonListener
    from laraq.horizon.phpwait import PhpWaitWatch  # start-up: as the line above
    from laraq.horizon.supervisors import NO_SIGNAL_PID  # start-up: as the line above

    if params.get("horizon_signals", True):
        signal_pid = params.get("horizon_signal_pid") or None
    else:
        signal_pid = NO_SIGNAL_PID
    # --redis-url points every connection at one server: the records go on the queue's client
    horizon_client = client if params.get("redis_url") else records_client(settings, hs, client)
    log.info("horizon: writing Horizon's records under prefix %r", hs.prefix)
    listeners: list[Any] = [HorizonListener(
        horizon_client, hs, signal_pid=signal_pid, forward_pid=params.get("worker_parent"),
        slot=int(params.get("worker_slot") or 0), slots=int(params.get("worker_processes") or 1))]
    if (params.get("unhandled") or "leave") != "fail":  # with "fail", laraq fails them: nothing waits for PHP
        listeners.append(PhpWaitWatch(queue, horizon_client, hs.prefix, app.resolve,
                                      window=int(params.get("scan_window") or 200)))
    return listeners


# -- the worker process under the supervisor (laraq.production.prefork) ---------------------------------------

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
