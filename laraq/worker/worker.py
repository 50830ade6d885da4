"""The worker loop and its stop rules, with ``php artisan queue:work``'s semantics (Laravel's
``Illuminate\\Queue\\Worker::daemon`` / ``runNextJob`` / ``stopIfNecessary``).

Loop (:meth:`Worker.daemon`): unless the app is down (and no ``--force``) or the worker is paused
(SIGUSR2), pop the first job of the ``--queue`` list (skipping paused queues, 12.40+), run it, rest;
else sleep ``--sleep``. After every iteration :meth:`Worker.stop_status` decides whether to stop:
quit signal, ``--memory`` (exit 12), ``queue:restart``, ``--stop-when-empty``,
``--stop-when-empty-for``, ``--max-time``, ``--max-jobs`` - in Laravel's order. Restart, pause, maintenance
and ``maxExceptions`` go through a :class:`laraq.stores.cache.CacheStore` (Redis, file or database store).

The rest of the worker lives where a reader of Laravel would look for it; :class:`Worker` combines:

* :mod:`laraq.worker.reservation` - popping/reserving, prefetch, leases and renewals, acks, give-back;
* :mod:`laraq.worker.execution` - threads, asyncio, timeouts, the watchdog and the self-kill;
* :mod:`laraq.worker.lifecycle` - ``Worker::process`` + ``CallQueuedHandler``: attempts, backoff,
  ``maxExceptions``, release, fail, unique locks, jobs without a Python handler;
* :mod:`laraq.worker.events` - the listener seam every worker and job event goes through (console output
  included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from laraq.bus.callqueued import CallQueued
from laraq.bus.handlers import HandlerRegistry
from laraq.bus.models import ModelLoader
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion
from laraq.stores.failed import FailedJobStore
from laraq.worker.events import Listeners, OutputListener, WorkerListener
from laraq.worker.execution import _TICK, Execution, new_worker_loop, sigkill_self
from laraq.worker.lifecycle import CacheLike, Lifecycle, UnhandledPolicy
from laraq.worker.output import Output
from laraq.worker.reservation import Reservation

__all__ = [
    "EXIT_ERROR",
    "EXIT_MEMORY_LIMIT",
    "EXIT_SUCCESS",
    "EXIT_USAGE",
    "CacheLike",
    "Worker",
    "WorkerOptions",
]

log = logging.getLogger("laraq.worker.worker")

EXIT_SUCCESS = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_MEMORY_LIMIT = 12

_UNKNOWN = object()

#: restart / memory / max-time are read once per reserve round and at least this often.
_CHECK_EVERY = 0.25
#: ``worker_looping`` is announced at most this often (seconds).
_LOOPING_EVERY = 1.0


@dataclass
class WorkerOptions:
    """``queue:work``'s options (Laravel's ``WorkerOptions``) plus laraq's own."""

    name: str = "default"
    backoff: str = "0"
    memory: int = 128
    timeout: int = 60
    sleep: float = 3
    max_tries: int = 1
    force: bool = False
    stop_when_empty: bool = False
    #: ``--stop-when-empty-for`` (11.53/12.60/13.10): stop once no job was taken for this many seconds.
    stop_when_empty_for: float = 0
    max_jobs: int = 0
    max_time: float = 0
    rest: float = 0
    once: bool = False
    concurrency: int = 1
    unhandled: UnhandledPolicy = "requeue"
    unhandled_delay: int = 10
    #: Seconds a cancelled async handler gets to unwind before the hard-kill path.
    cancel_grace: float = 2.0
    #: The most jobs one reserve call takes (the batched fast path). 1 = the classic per-job loop,
    #: round trip for round trip what ``queue:work`` sends (migrate, migrate, pop, ZREM, restart GET).
    batch: int = 100
    #: Reserve more jobs than free slots (at most about ``prefetch_seconds`` of measured work,
    #: leases renewed while they wait). False: reserve only what free slots start at once.
    prefetch: bool = True
    prefetch_seconds: float = 1.0
    #: The queue PHP workers serve, where laraq hands over what only PHP can finish (the next job of a
    #: chain, batch bookkeeping, ``uniqueId()`` locks, PHP ``failed()``); None: the connection's default.
    php_queue: str | None = None


class Worker(Reservation, Execution, Lifecycle):
    """Runs jobs from one Redis queue connection through an :class:`~laraq.app.App`."""

    def __init__(
        self,
        app: HandlerRegistry,
        queue: RedisQueue,
        queues: list[str] | str,
        *,
        options: WorkerOptions | None = None,
        connection_name: str = "redis",
        version: LaravelVersion | None = None,
        cache: CacheLike | None = None,
        failer: FailedJobStore | None = None,
        encrypter: Encrypter | None = None,
        output: Output | None = None,
        maintenance: Callable[[], bool] | None = None,
        on_job_popped: Callable[[], None] | None = None,
        kill: Callable[[], None] | None = None,
        on_jobs_popped: Callable[[int], None] | None = None,
        listeners: list[WorkerListener] | None = None,
        model_loader: ModelLoader | None = None,
    ) -> None:
        self.app = app
        self.queue = queue
        self.queues = [q for q in (queues.split(",") if isinstance(queues, str) else queues) if q] or ["default"]
        self.options = options or WorkerOptions()
        self.connection_name = connection_name
        self.version = version or getattr(queue, "version", DEFAULT_VERSION)
        self.cache = cache
        self.failer = failer
        self.encrypter = encrypter
        self.output = output or Output(self.version, quiet=True)
        #: Every worker and job event goes through here (:mod:`laraq.worker.events`); the console output first.
        self.events = Listeners()
        if not self.output.quiet:
            self.events.add(OutputListener(self.output))
        for listener in listeners or ():
            self.events.add(listener)
        self.maintenance = maintenance or (lambda: False)
        self.on_job_popped = on_job_popped
        #: Progress report to the supervisor: called with a count, at most every ~100 ms / per batch.
        self.on_jobs_popped = on_jobs_popped
        self._kill = kill or sigkill_self
        self.should_quit = False
        #: the exit code a quit stops with (0; 4 when Redis keeps refusing the credentials)
        self.quit_status = EXIT_SUCCESS
        self.paused = False
        self._wake = threading.Event()
        self._failer_lock = threading.Lock()
        self._last_job_at: float | None = None
        self._looped_at = 0.0
        self._stop_announced = False
        self._unreported = 0
        self._reported_at = 0.0
        #: chain, batch, unique lock and PHP failed() steps around the handler (CallQueuedHandler's)
        self.callqueued = CallQueued(queue, self.version, cache=cache,
                                     signing_key=encrypter.key if encrypter is not None else None,
                                     connection_name=connection_name, php_queue=self.options.php_queue)
        #: loads SerializesModels rows through the app's DB_* settings (None: no database configured)
        self.model_loader = model_loader
        self._init_reservation()
        self._init_execution()

    def add_listener(self, listener: WorkerListener) -> None:
        """Add a :class:`~laraq.worker.events.WorkerListener` (before :meth:`run`, or from any thread later)."""
        self.events.add(listener)

    def _starting(self) -> None:
        """``WorkerStarting``: settings resolved, the first pop comes next."""
        if self.encrypter is None:
            log.warning("APP_KEY is not set: jobs in a chain or a batch, or with a uniqueId() method, cannot be "
                        "finished by PHP and are sent back to PHP untouched")
        else:
            log.info("chain steps, batch bookkeeping, uniqueId() locks and PHP failed() are handed to PHP on "
                     "queue %s: keep a PHP worker on it", self.options.php_queue or self.queue.default_queue)
        self.events.emit("worker_starting", self)

    def _announce_stop(self, status: int) -> None:
        """``WorkerStopping``, once (a self-kill announces it with exit code 1 first)."""
        if not self._stop_announced:
            self._stop_announced = True
            self.events.emit("worker_stopping", self, status)

    def _looping(self) -> None:
        """``Looping``, announced at most once per ``_LOOPING_EVERY``."""
        now = time.monotonic()
        if now - self._looped_at >= _LOOPING_EVERY:
            self._looped_at = now
            self.events.emit("worker_looping", self)

    def run(self) -> int:
        """Run like ``queue:work`` (``--once`` or the daemon); returns the exit code."""
        self.install_signal_handlers()
        return self.run_once() if self.options.once else self.daemon()

    def daemon(self) -> int:
        """Laravel's ``Worker::daemon``: loop until a stop condition; returns the exit code.

        ``batch`` > 1 (the default) runs the batched fast path (:meth:`_fast_daemon`), ``batch`` = 1
        the classic loop, one job per round of Laravel's own calls (:meth:`classic_daemon`).
        """
        if self.options.batch <= 1:
            return self.classic_daemon()
        loop = new_worker_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        try:
            return loop.run_until_complete(self._fast_daemon())
        finally:
            self._loop = None
            self._loop_thread = None
            for pool in (self._pool, self._aux_pool):
                if pool is not None:
                    pool.shutdown(wait=False)
            self._pool = self._aux_pool = None
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def classic_daemon(self) -> int:
        """The per-job loop: what ``queue:work`` does, call for call (``--batch 1``)."""
        opts = self.options
        last_restart = self._restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency)
        self._starting()
        while True:
            self._looping()
            if not self._should_run():
                self.sleep(opts.sleep if opts.sleep > 0 else 1)
                status = self.stop_status(last_restart, started, 0, popped=False)
                if status is not None:
                    return self._stop(status)
                continue
            self._wait_for_slot()
            self._took_reservation = False
            job = self.next_job()
            # a payload moved to failed_jobs was still a popped job (Laravel's loop had a Job object)
            popped = job is not None or self._took_reservation
            if job is not None:
                jobs_processed += 1
                self._submit(job)
                self._wait_for_slot()
                self._last_job_at = time.monotonic()
                if opts.rest > 0:
                    self.sleep(opts.rest)
            elif popped:
                jobs_processed += 1
                self._last_job_at = time.monotonic()
            else:
                self.sleep(self._reconnect_delay or opts.sleep)
            status = self.stop_status(last_restart, started, jobs_processed, popped=popped)
            if status is not None:
                return self._stop(status)

    def run_once(self) -> int:
        """``--once``: one pop, one job (Laravel's ``runNextJob``), still under the timeout watchdog."""
        if self._down() and not self.options.force:
            self.sleep(self.options.sleep)
            return EXIT_SUCCESS
        self._starting()
        job = self.next_job()
        if job is None:
            self.sleep(self.options.sleep)
            self._announce_stop(EXIT_SUCCESS)
            return EXIT_SUCCESS
        self._submit(job)
        self._drain()
        self._announce_stop(EXIT_SUCCESS)
        return EXIT_SUCCESS

    def _should_run(self) -> bool:
        if self._kill_pending or self.paused:
            return False
        return not (self._down() and not self.options.force)

    def _down(self) -> bool:
        """Is the app down for maintenance? (a broken probe counts as "up" and is logged)"""
        try:
            return bool(self.maintenance())
        except Exception as exc:  # a broken maintenance probe must not stop the worker
            log.warning("maintenance-mode check failed: %s", exc)
            return False

    def stop_status(self, last_restart: Any, started: float, jobs_processed: int, *, popped: bool) -> int | None:
        """Laravel's ``stopIfNecessary``: the exit code to stop with, or ``None`` to keep going."""
        opts = self.options
        if self.should_quit:
            return self.quit_status
        if self.memory_exceeded(opts.memory):
            return EXIT_MEMORY_LIMIT
        stamp = self._restart_stamp()
        if stamp is not _UNKNOWN and last_restart is not _UNKNOWN and stamp != last_restart:
            return EXIT_SUCCESS
        if opts.stop_when_empty and not popped:
            return EXIT_SUCCESS
        if opts.stop_when_empty_for and not popped and not self._running \
                and time.monotonic() - (self._last_job_at or started) >= opts.stop_when_empty_for:
            return EXIT_SUCCESS
        if opts.max_time and time.monotonic() - started >= opts.max_time:
            return EXIT_SUCCESS
        if opts.max_jobs and jobs_processed >= opts.max_jobs:
            return EXIT_SUCCESS
        return None

    def _stop(self, status: int) -> int:
        self._drain()
        self._announce_stop(status)
        if status == EXIT_MEMORY_LIMIT:
            log.warning("memory limit of %d MB reached (this process: %.0f MB resident): stopping (exit %d)",
                        self.options.memory, _rss_mb(), status)
        return status

    def memory_exceeded(self, limit_mb: int) -> bool:
        if limit_mb <= 0 and self.version.memory_zero_is_unlimited:
            return False
        return _rss_mb() >= limit_mb

    def _restart_stamp(self) -> Any:
        if self.cache is None:
            return None
        try:
            return self.cache.restart_timestamp()
        except Exception as exc:
            log.warning("could not read the queue:restart signal: %s", exc)
            return _UNKNOWN

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early for a quit/pause/resume signal."""
        if seconds <= 0 or self.should_quit:
            return
        self._wake.clear()
        if self.should_quit:
            return
        self._wake.wait(seconds)

    async def _fast_daemon(self) -> int:
        self._daemon_task = asyncio.current_task()
        # a job that finishes without waiting may leave its success line for the next line's write
        # (see laraq.worker.output): every wait below writes what is held first (_idle, _wait_changed, _yield)
        self.output.hold()
        try:
            return await self._fast_loop()
        finally:
            self.output.release()
            self._daemon_task = None

    async def _fast_loop(self) -> int:
        opts = self.options
        self._start_watchdog()
        last_restart = self._restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        next_check = started + _CHECK_EVERY
        can_run = self._should_run()
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d, batch %d%s)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency, opts.batch, ", prefetch" if opts.prefetch else "")
        self._starting()
        while True:
            if self.should_quit:
                return await self._fast_stop(EXIT_SUCCESS)
            if not can_run or self.paused or self._kill_pending:
                self._give_back_buffer()
                self._looping()  # as in classic_daemon: heartbeats (Horizon) go on while paused or down
                await self._idle(opts.sleep if opts.sleep > 0 else 1)
                status = self.stop_status(last_restart, started, jobs_processed, popped=False)
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self._should_run()
                next_check = time.monotonic() + _CHECK_EVERY
                continue

            free = opts.concurrency - self._active
            reserved_round = False
            popped = False
            full_batch = False
            if free > 0 and not self._buffer:
                want = self._reserve_count(free, jobs_processed)
                if want > 0 or self._ahead is not None:
                    reserved_round = True
                    if self._ahead is not None:  # asked for while the last batch ran
                        want = self._ahead_want
                        got = self._land_ahead()
                    else:
                        got = self._reserve_round(want)
                    popped = got > 0 or self._took_reservation
                    jobs_processed += self._took_unreadable
                    if popped:
                        self._last_job_at = time.monotonic()
                    # a full batch: more are waiting; asked for after this pass's status reads, which
                    # would otherwise queue behind the reserve script on Redis
                    full_batch = got + self._took_unreadable >= want and got > 0
            while free > 0 and self._buffer:
                if opts.max_jobs and jobs_processed >= opts.max_jobs:
                    break
                item = self._buffer.popleft()
                if not self._lease_ok(item):
                    continue
                jobs_processed += 1
                self._unreported += 1
                free -= 1
                popped = True
                self._start_job(item.job)
                self._last_job_at = time.monotonic()
                if opts.rest > 0:
                    await self._idle(opts.rest)
            now = time.monotonic()
            if reserved_round or now >= next_check:
                next_check = now + _CHECK_EVERY
                self._looping()
                self._report_popped()
                status = self._periodic_status(last_restart, started)
                if status is None and opts.max_jobs and jobs_processed >= opts.max_jobs:
                    status = EXIT_SUCCESS
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self._should_run()
            if full_batch and can_run and not self.paused:
                self._send_ahead(jobs_processed)
            if opts.max_jobs and jobs_processed >= opts.max_jobs and not self._buffer:
                return await self._fast_stop(EXIT_SUCCESS)

            if reserved_round and not popped and self._active == 0 and not self._buffer:
                # an empty loop: Laravel's stop_when_empty / block / sleep
                if opts.stop_when_empty:
                    return await self._fast_stop(EXIT_SUCCESS)
                if opts.stop_when_empty_for and \
                        time.monotonic() - (self._last_job_at or started) >= opts.stop_when_empty_for:
                    return await self._fast_stop(EXIT_SUCCESS)
                self._flush_acks(force=True)
                if self._reconnect_delay:
                    await self._idle(self._reconnect_delay)
                elif self._block_for_job(jobs_processed):
                    jobs_processed += self._took_unreadable  # a batch that came along with a timed-out wait
                else:
                    await self._idle(opts.sleep)
                continue
            if self._fresh:
                # one pass of the loop runs the tasks that suspended; the ones that finished are
                # reaped here, without a done callback and a wake-up each
                await self._yield()
                self._reap_fresh()
            elif reserved_round:
                await self._yield()  # jobs that finish at once never yield: let the loop run once a round
            if self._active > 0 and (free <= 0 or not self._buffer):
                await self._wait_changed(_TICK)
            self._housekeeping()

    def _housekeeping(self) -> None:
        self._flush_acks()
        self._collect_renewal()
        self._renew_leases()

    def _periodic_status(self, last_restart: Any, started: float) -> int | None:
        """The stop conditions that cost something, once per batch / ``_CHECK_EVERY`` (Laravel's order)."""
        if self.should_quit:
            return self.quit_status
        if self.memory_exceeded(self.options.memory):
            return EXIT_MEMORY_LIMIT
        stamp = self._restart_stamp()
        if stamp is not _UNKNOWN and last_restart is not _UNKNOWN and stamp != last_restart:
            return EXIT_SUCCESS
        if self.options.max_time and time.monotonic() - started >= self.options.max_time:
            return EXIT_SUCCESS
        return None

    async def _fast_stop(self, status: int) -> int:
        """Give the buffer back, let running jobs finish (or settle after a timeout), flush acks."""
        self.output.release()
        self._give_back_buffer()
        while self._active > 0 or any(r.state != "timed_out" or not r.settled for r in list(self._running)):
            await self._wait_changed(_TICK)
            self._flush_acks()
            if self._kill_pending and not any(r.state != "timed_out" for r in list(self._running)):
                break
        for _ in range(4):
            self._flush_acks(force=True)
            if self._ack_since is None:
                break
            time.sleep(0.5)
        self._report_popped(force=True)
        if self._kill_pending:
            self._kill_now()
        self._announce_stop(status)
        if status == EXIT_MEMORY_LIMIT:
            log.warning("memory limit of %d MB reached (this process: %.0f MB resident): stopping (exit %d)",
                        self.options.memory, _rss_mb(), status)
        return status

    def _report_popped(self, *, force: bool = False) -> None:
        """Tell the supervisor how many jobs were taken, per batch (not per job)."""
        count = self._unreported
        if not count:
            return
        self._unreported = 0
        if self.on_jobs_popped is not None:
            self.on_jobs_popped(count)
        elif self.on_job_popped is not None:
            for _ in range(count):
                self.on_job_popped()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT/SIGQUIT: finish running jobs, then exit 0 (a second one: stop now).
        SIGUSR2: pause. SIGCONT: resume. Only possible in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_quit_signal)
        signal.signal(signal.SIGUSR2, self._on_pause_signal)
        signal.signal(signal.SIGCONT, self._on_resume_signal)

    def _on_quit_signal(self, signum: int, _frame: Any) -> None:
        if self.should_quit:
            log.warning("second %s: stopping now; running jobs stay reserved until retry_after",
                        signal.Signals(signum).name)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(EXIT_ERROR)
        self.should_quit = True
        self._wake.set()

    def _on_pause_signal(self, _signum: int, _frame: Any) -> None:
        self.paused = True
        self._wake.set()

    def _on_resume_signal(self, _signum: int, _frame: Any) -> None:
        self.paused = False
        self._wake.set()


def _rss_mb() -> float:
    """Resident memory of this process in MB (Laravel compares ``memory_get_usage(true)``)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1048576
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
