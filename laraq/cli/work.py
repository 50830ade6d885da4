"""``laraq work``: ``php artisan queue:work`` for Python handlers, with a built-in supervisor.

``laraq work`` starts a small *supervisor* process that runs the worker in a child process and
forwards signals to it. Laravel enforces a job timeout by SIGKILLing its own process and relies on
supervisord to start a new one; laraq's worker does the same when a synchronous handler overruns
(see :mod:`laraq.worker`), and the supervisor starts a fresh worker at once - supervisord + artisan in
one command. Every other exit of the child (0, 12 for memory, 1, 2) is passed on unchanged, so an
external process manager sees artisan's exit codes. ``--no-supervise`` runs the worker in this
process (a timeout then kills ``laraq work`` itself, exactly like artisan).

The child gets its settings as JSON in ``LARAQ_WORKER_CONFIG`` and reports popped jobs on a pipe
(one byte per job, written per batch), so ``--max-jobs`` and ``--max-time`` keep counting across restarts. If the supervisor dies, the
kernel kills the child (``PR_SET_PDEATHSIG``): its jobs stay reserved until ``retry_after``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from laraq.worker import EXIT_ERROR, EXIT_SUCCESS, EXIT_USAGE, Worker, WorkerOptions

if TYPE_CHECKING:
    from laraq.app import App

__all__ = ["work_cmd", "build_worker", "child_main", "default_params"]

log = logging.getLogger("laraq.work")

_CONFIG_ENV = "LARAQ_WORKER_CONFIG"
_FD_ENV = "LARAQ_WORKER_FD"
_PARENT_ENV = "LARAQ_WORKER_PARENT"


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
@click.option("--unhandled", type=click.Choice(["requeue", "release", "fail"]), default="requeue", show_default=True,
              help="What to do with a job that has no Python handler.")
@click.option("--unhandled-delay", type=click.IntRange(1), default=10, show_default=True,
              help="Delay before an unhandled job is visible again (requeue/release).")
@click.option("--redis-url", default=None, help="Queue Redis URL (overrides REDIS_HOST/PORT/...).")
@click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
@click.option("--retry-after", default=None, help="Override the connection's retry_after (seconds, or 'null').")
@click.option("--block-for", type=float, default=None, help="Override the connection's block_for (seconds).")
@click.option("--supervise/--no-supervise", default=True, show_default=True,
              help="Run the worker in a child process that is restarted after a hard timeout.")
def work_cmd(**params: Any) -> None:
    """Process jobs on the queue (php artisan queue:work), running them with Python handlers.

    Exit codes: 0 stopped normally, 12 memory limit, 1 error, 2 usage error.
    """
    params.pop("delay", None)
    params.pop("daemon", None)
    _setup_logging(params["verbose"], params["quiet"])
    if params.pop("supervise"):
        sys.exit(Supervisor(params).run())
    sys.exit(_run_worker(params))


def child_main() -> None:
    """Entry point of the supervised worker process."""
    params = json.loads(os.environ.pop(_CONFIG_ENV))
    fd = int(os.environ.pop(_FD_ENV))
    parent = int(os.environ.pop(_PARENT_ENV, "0"))
    _die_with_parent(parent)
    _setup_logging(params["verbose"], params["quiet"])

    def popped(count: int = 1) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, b"j" * count)

    sys.exit(_run_worker(params, on_jobs_popped=popped))


# -- building the worker ------------------------------------------------------------------------------

def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.DEBUG if verbose >= 2 else logging.INFO if verbose else logging.WARNING)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s laraq[%(process)d] %(levelname)s %(name)s: %(message)s")


def _run_worker(params: dict[str, Any], *, on_jobs_popped: Any = None) -> int:
    try:
        worker = build_worker(params, on_jobs_popped=on_jobs_popped)
    except click.UsageError as exc:
        click.echo(f"laraq work: {exc.message}", err=True)
        return EXIT_USAGE
    try:
        return worker.run()
    except Exception:
        log.exception("the worker stopped on an unexpected error")
        return EXIT_ERROR


def default_params(**overrides: Any) -> dict[str, Any]:
    """``laraq work``'s options with their defaults (for building a worker in-process)."""
    # get_default, not .default: click 8.3+ keeps an UNSET sentinel (truthy) there for flags
    ctx = click.Context(work_cmd)
    params: dict[str, Any] = {p.name: p.get_default(ctx) for p in work_cmd.params if p.name}
    params.update(connection=None, app_spec=None)
    unknown = set(overrides) - set(params)
    if unknown:
        raise TypeError(f"unknown laraq work options: {sorted(unknown)}")
    params.update(overrides)
    return params


def build_worker(params: dict[str, Any], *, on_job_popped: Any = None, env: Mapping[str, str] | None = None,
                 app: App | None = None, on_jobs_popped: Any = None) -> Worker:
    """Build a :class:`~laraq.worker.Worker` from ``laraq work``'s options and the Laravel settings.

    ``env`` replaces ``os.environ`` as the source of Laravel settings; ``app`` replaces ``--app``.
    """
    import dataclasses

    import redis

    from laraq.app import load_app
    from laraq.cache import MaintenanceMode, UnsupportedCacheStore, make_cache
    from laraq.config import LaravelSettings, make_redis
    from laraq.output import Output
    from laraq.queue import RedisQueue
    from laraq.routing import QueueForwards

    try:
        settings = LaravelSettings.from_env(env, env_file=params.get("env_file"), version=params.get("laravel"))
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot read the Laravel settings: {exc}") from exc
    if params.get("prefix") is not None:
        settings = dataclasses.replace(settings, redis_prefix=params["prefix"])
    if app is None:
        try:
            app = load_app(params["app_spec"])
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise click.UsageError(f"cannot load --app {params['app_spec']}: {exc}") from exc
    if not app.names:
        log.warning("the App %s has no handlers: every job will get the --unhandled policy", params["app_spec"])

    url = params.get("redis_url")
    client = redis.Redis.from_url(url) if url else make_redis(settings, "default")
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

    if params.get("stop_when_empty_for") and not settings.version.has_stop_when_empty_for:
        raise click.UsageError(f"--stop-when-empty-for does not exist in Laravel {settings.version} "
                               "(added in 11.53, 12.60 and 13.10)")
    cache = None
    try:
        cache = make_cache(settings, redis_url=url)
    except UnsupportedCacheStore as exc:
        log.warning("%s: queue:restart, queue:pause, maxExceptions and unique locks are invisible to laraq",
                    exc)
    except Exception as exc:
        raise click.UsageError(f"cannot open the {settings.cache_store!r} cache store: {exc}") from exc

    encrypter = None
    if settings.app_key:
        from laraq.encryption import Encrypter

        try:
            encrypter = Encrypter.from_app_key(settings.app_key, previous_keys=settings.app_previous_keys)
        except ValueError as exc:
            log.warning("APP_KEY is unusable (%s): encrypted jobs will fail", exc)

    options = WorkerOptions(
        name=params["name"], backoff=str(params["backoff"]), memory=params["memory"], timeout=params["timeout"],
        sleep=params["sleep"], max_tries=params["tries"], force=params["force"],
        stop_when_empty=params["stop_when_empty"], stop_when_empty_for=params.get("stop_when_empty_for") or 0,
        max_jobs=params["max_jobs"], max_time=params["max_time"],
        rest=params["rest"], once=params["once"], concurrency=params["concurrency"],
        unhandled=params["unhandled"], unhandled_delay=params["unhandled_delay"],
        batch=params.get("batch", 100), prefetch=params.get("prefetch", True),
    )
    output = Output(settings.version, json_mode=params["json_mode"], quiet=params["quiet"],
                    verbosity=params["verbose"])
    queues = params.get("queue") or settings.redis_queue
    return Worker(
        app, queue, queues, options=options, connection_name=connection_name, version=settings.version,
        cache=cache, failer=_failed_store(settings), encrypter=encrypter, output=output,
        maintenance=MaintenanceMode(settings, cache), on_job_popped=on_job_popped,
        on_jobs_popped=on_jobs_popped,
    )


def _failed_store(settings: Any) -> Any:
    """The failed-job store (its connection is safe to use from the worker's threads)."""
    from laraq.failed import LazyFailedJobStore, make_failed_store

    try:
        return make_failed_store(settings)
    except Exception as exc:
        # Like artisan, start anyway: failed_jobs is only needed when a job fails, and a job that
        # cannot be logged then is put back on its queue, never dropped.
        logging.getLogger("laraq.work").warning(
            "the failed-job store is not reachable now (%s); laraq retries it when a job fails", exc)
        return LazyFailedJobStore(lambda: make_failed_store(settings))


# -- the supervisor -------------------------------------------------------------------------------------

class Supervisor:
    """Runs the worker in a child process; restarts it only after it was killed (timeout, OOM, kill -9)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.jobs_done = 0
        self.started = time.monotonic()

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR2, signal.SIGCONT, signal.SIGHUP):
            signal.signal(sig, self._forward)
        failures = 0
        while True:
            born = time.monotonic()
            code = self._run_child()
            if code >= 0:
                return code
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            if self.stopping or self.params["once"]:
                log.warning("worker process died by %s", name)
                return EXIT_ERROR
            if self.params["max_jobs"] and self.jobs_done >= self.params["max_jobs"]:
                return EXIT_SUCCESS
            if self.params["max_time"] and time.monotonic() - self.started >= self.params["max_time"]:
                return EXIT_SUCCESS
            failures = failures + 1 if time.monotonic() - born < 1 else 0
            pause = min(30.0, 0.5 * 2 ** failures) if failures else 0.0
            log.warning("worker process died by %s (its jobs stay reserved until retry_after); "
                        "starting a new one%s", name, f" in {pause:.0f}s" if pause else "")
            if pause:
                time.sleep(pause)
            if self.stopping:
                return EXIT_SUCCESS

    def _child_params(self) -> dict[str, Any]:
        params = dict(self.params)
        if params["max_jobs"]:
            params["max_jobs"] = max(1, params["max_jobs"] - self.jobs_done)
        if params["max_time"]:
            params["max_time"] = max(1, int(params["max_time"] - (time.monotonic() - self.started)))
        return params

    def _run_child(self) -> int:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env[_CONFIG_ENV] = json.dumps(self._child_params())
        env[_FD_ENV] = str(write_fd)
        env[_PARENT_ENV] = str(os.getpid())
        code = "from laraq.cli.work import child_main; child_main()"
        try:
            self.child = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(write_fd,),
                                          start_new_session=True)
        finally:
            os.close(write_fd)
        try:
            while True:
                ready, _, _ = select.select([read_fd], [], [], 0.5)
                if ready:
                    data = os.read(read_fd, 4096)
                    self.jobs_done += len(data)
                    if not data:  # the child closed the pipe: it is exiting
                        break
                elif self.child.poll() is not None:
                    break
            return self.child.wait()
        finally:
            os.close(read_fd)

    def _forward(self, signum: int, _frame: Any) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
            self.stopping = True
            if signum == signal.SIGHUP:
                signum = signal.SIGTERM
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when the supervisor dies (best effort elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the supervisor is already gone
        os._exit(EXIT_ERROR)
