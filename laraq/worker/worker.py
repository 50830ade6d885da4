"""The worker loop and its stop rules, with ``php artisan queue:work``'s semantics (Laravel's
``Illuminate\\Queue\\Worker::daemon`` / ``runNextJob`` / ``stopIfNecessary``).

Loop (:meth:`Worker.daemon`): unless the app is down (and no ``--force``) or the worker is paused
(SIGUSR2), pop the first job of the ``--queue`` list (skipping paused queues, 12.40+), run it, rest;
else sleep ``--sleep``. After every iteration the stop rules (:class:`~laraq.worker.stoprules.StopRules`)
decide whether to stop: quit signal, ``--memory`` (exit 12), ``queue:restart``, ``--stop-when-empty``,
``--stop-when-empty-for``, ``--max-time``, ``--max-jobs`` - in Laravel's order. Restart, pause, maintenance
and ``maxExceptions`` go through a :class:`laraq.stores.cache.CacheStore` (Redis, file or database store).

The rest of the worker lives where a reader of Laravel would look for it, in objects :class:`Worker`
builds and wires (its constructor is the one place that names them) and calls through the small
interfaces declared here (:class:`ReservationSource`, :class:`JobExecutor`):

* :class:`~laraq.worker.reservation.Reservation` - popping/reserving, prefetch, leases and renewals
  (:class:`~laraq.worker.leases.Leases`), acks, give-back;
* :class:`~laraq.worker.execution.Executor` - threads, asyncio, timeouts, the watchdog and the self-kill
  (a job's task started by :mod:`laraq.worker.eager`);
* :class:`~laraq.worker.lifecycle.Lifecycle` - ``Worker::process`` + ``CallQueuedHandler``: attempts,
  backoff, ``maxExceptions``, release, fail, unique locks, jobs without a Python handler;
* :class:`~laraq.worker.bridge.AsyncBridge` - the event loop async handlers run on;
* :class:`~laraq.worker.stoprules.StopRules` - ``daemonShouldRun`` and ``stopIfNecessary``: whether the
  worker runs this round, and whether it stops;
* :mod:`laraq.worker.events` - the listener seam every worker and job event goes through (console output
  included).

What they all read is one :class:`~laraq.worker.context.WorkerContext`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from laraq.bus.callqueued import CallQueued
from laraq.bus.handlers import HandlerRegistry
from laraq.bus.job import Job
from laraq.bus.models import ModelLoader
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import PendingReserve
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion
from laraq.stores.failed import FailedJobStore
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import CacheLike, Signals, UnhandledPolicy, WorkerContext, WorkerOptions
from laraq.worker.eager import new_worker_loop
from laraq.worker.events import Listeners, OutputListener, WorkerListener
from laraq.worker.execution import TICK, Executor
from laraq.worker.leases import Buffered
from laraq.worker.lifecycle import Lifecycle
from laraq.worker.notes import EXIT_MEMORY_LIMIT, RunNotes
from laraq.worker.output import Output
from laraq.worker.reservation import Reservation
from laraq.worker.running import Running
from laraq.worker.stoprules import EXIT_ERROR, EXIT_SUCCESS, StopRules
from laraq.worker.timers import Timers

__all__ = [
    "EXIT_ERROR",
    "EXIT_MEMORY_LIMIT",
    "EXIT_SUCCESS",
    "EXIT_USAGE",
    "CacheLike",
    "JobExecutor",
    "ReservationSource",
    "UnhandledPolicy",
    "Worker",
    "WorkerOptions",
]

log = logging.getLogger("laraq.worker.worker")

EXIT_USAGE = 2

#: restart / memory / max-time are read once per reserve round and at least this often.
_CHECK_EVERY = 0.25
#: ``worker_looping`` is announced at most this often (seconds).
_LOOPING_EVERY = 1.0
#: The shortest wait after a reserve that found only jobs for PHP workers (seconds).
_LEFT_FOR_PHP_PAUSE = 0.1


class ReservationSource(Protocol):
    """What the loop asks of the reservation source (:class:`laraq.worker.reservation.Reservation`)."""

    buffer: collections.deque[Buffered]
    took_reservation: bool
    took_unreadable: int
    reconnect_delay: float
    failed_rounds: int
    failure_status: int
    ahead: PendingReserve | None
    ahead_want: int
    ack_since: float | None
    left_for_php: int

    def next_job(self) -> Job | None: ...
    def reserve_count(self, free: int, jobs_processed: int) -> int: ...
    def reserve_round(self, want: int) -> int: ...
    def land_ahead(self) -> int: ...
    def send_ahead(self, jobs_processed: int, active: int) -> None: ...
    def lease_ok(self, item: Buffered) -> bool: ...
    def block_for_job(self, jobs_processed: int = 0, active: int = 0) -> bool: ...
    def give_back_buffer(self) -> None: ...
    def flush_acks(self, *, force: bool = False) -> None: ...
    def housekeeping(self) -> None: ...
    def settle(self) -> None: ...


class JobExecutor(Protocol):
    """What the loop asks of the executor (:class:`laraq.worker.execution.Executor`)."""

    active: int
    kill_pending: bool
    running: set[Running]
    fresh: list[Any]
    daemon_task: asyncio.Task[Any] | None

    def start_job(self, job: Job) -> None: ...
    def submit(self, job: Job) -> None: ...
    def wait_for_slot(self) -> None: ...
    def start_watchdog(self) -> None: ...
    def reap_fresh(self) -> None: ...
    async def yield_(self) -> None: ...
    async def wait_changed(self, timeout: float) -> None: ...
    async def idle(self, seconds: float) -> None: ...
    def busy(self) -> bool: ...
    def drain(self) -> None: ...
    def kill_now(self) -> None: ...
    def shutdown_pool(self) -> None: ...
    def close(self) -> None: ...


class Worker:
    """Runs jobs from one Redis queue connection through an :class:`~laraq.app.App`: the loop and its
    stop rules, calling a reservation source, an executor and the job lifecycle it builds here."""

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
        options = options or WorkerOptions()
        version = version or getattr(queue, "version", None) or DEFAULT_VERSION
        output = output or Output(version, quiet=True)
        #: Every worker and job event goes through here (:mod:`laraq.worker.events`); the console output first.
        events = Listeners()
        if not output.quiet:
            events.add(OutputListener(output))
        for listener in listeners or ():
            events.add(listener)
        callqueued = CallQueued(queue, version, cache=cache,
                                signing_key=encrypter.key if encrypter is not None else None,
                                connection_name=connection_name, php_queue=options.php_queue)
        names = [q for q in (queues.split(",") if isinstance(queues, str) else queues) if q] or ["default"]
        #: what every object of the worker reads
        self.context = context = WorkerContext(
            app=app, queue=queue, queues=names, options=options, version=version,
            connection_name=connection_name, events=events, output=output, callqueued=callqueued, cache=cache,
            failer=failer, encrypter=encrypter, model_loader=model_loader, signals=Signals(),
            on_job_popped=on_job_popped)
        self.app = app
        self.queue = queue
        self.queues = names
        self.timers = Timers(queue, names)  # the idle sleep ends when the next delayed job is due
        queue.wait_bound = self.timers.wait_for  # and so does a block_for wait
        self.options = options
        self.connection_name = connection_name
        self.version = version
        self.cache = cache
        self.failer = failer
        self.encrypter = encrypter
        self.output = output
        self.events = events
        self.callqueued = callqueued
        self.model_loader = model_loader
        self.signals = context.signals
        self.maintenance = maintenance or (lambda: False)
        self.on_job_popped = on_job_popped
        #: Progress report to the supervisor: called with a count, at most every ~100 ms / per batch.
        self.on_jobs_popped = on_jobs_popped
        self.bridge = AsyncBridge()
        self.lifecycle = Lifecycle(context, self.bridge)
        self.reservation: ReservationSource = Reservation(context, self.bridge, self.lifecycle)
        self.executor: JobExecutor = Executor(context, self.lifecycle, self.bridge, self.reservation,
                                              kill=kill, before_kill=self._before_kill)
        self._looped_at = 0.0
        self._stop_announced = False
        self._unreported = 0
        #: the log's account of the worker: why it stops, pauses, resumes; what --memory measured
        self.notes = RunNotes(options.name, options.memory)
        #: whether it runs this round, and whether (and why) it stops: Laravel's order
        self.rules = StopRules(context, self.notes, self.reservation, self.executor, self.maintenance)

    # -- what others read and set on the worker (listeners, the CLI, tests) --------------------------------

    @property
    def should_quit(self) -> bool:
        return self.signals.should_quit

    @should_quit.setter
    def should_quit(self, value: bool) -> None:
        self.signals.should_quit = value

    @property
    def quit_status(self) -> int:
        """The exit code a quit stops with (0; 4 when Redis keeps refusing the credentials)."""
        return self.signals.quit_status

    @property
    def paused(self) -> bool:
        return self.signals.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self.signals.paused = value

    def add_listener(self, listener: WorkerListener) -> None:
        """Add a :class:`~laraq.worker.events.WorkerListener` (before :meth:`run`, or from any thread later)."""
        self.events.add(listener)

    def process(self, job: Job, running: Running | None = None) -> None:
        """Laravel's ``Worker::process`` for one job (see :class:`~laraq.worker.lifecycle.Lifecycle`)."""
        self.lifecycle.process(job, running)

    def close(self) -> None:
        """Stop the idle slot threads, the watchdog and the asyncio thread (for embedding; the CLI just exits)."""
        self.executor.close()
        self.bridge.close()
        pipe = getattr(self.reservation, "pipe", None)
        if pipe is not None:  # the connection acks were written on goes back to the pool
            pipe.close()

    # -- events ------------------------------------------------------------------------------------------

    def _starting(self) -> None:
        """``WorkerStarting``: settings resolved, the first pop comes next."""
        if self.callqueued.php is not None:
            log.info("chain steps, batch bookkeeping, uniqueId() locks and PHP failed() run in the app's PHP: %s",
                     self.callqueued.path)
        elif self.encrypter is None:
            log.warning("APP_KEY is not set: jobs in a chain or a batch, or with a uniqueId() method, cannot be "
                        "finished by PHP and are sent back to PHP untouched")
        else:
            log.info("chain steps, batch bookkeeping, uniqueId() locks and PHP failed() are handed to PHP on "
                     "queue %s: keep a PHP worker on it", self.options.php_queue or self.queue.default_queue)
        self.events.emit("worker_starting", self)

    def _why(self, status: int, reason: str) -> int:
        """Remember why the worker stops (said once by :meth:`_announce_stop`); returns ``status``."""
        return self.notes.because(status, reason)

    def _announce_stop(self, status: int) -> None:
        """``WorkerStopping``, once (a self-kill announces it with exit code 1 first), and one log line
        saying why."""
        if self._stop_announced:
            return
        self._stop_announced = True
        self.events.emit("worker_stopping", self, status)
        self.notes.stopped(status)

    def _before_kill(self) -> None:
        """The executor is about to SIGKILL this process: the supervisor's count, then Laravel's
        ``kill(EXIT_ERROR)`` fires ``WorkerStopping`` first."""
        with contextlib.suppress(Exception):
            self._report_popped(force=True)
        self._why(EXIT_ERROR, "a job outlived its timeout and could not be stopped: killing this process")
        self._announce_stop(EXIT_ERROR)

    def _looping(self) -> None:
        """``Looping``, announced at most once per ``_LOOPING_EVERY``."""
        now = time.monotonic()
        if now - self._looped_at >= _LOOPING_EVERY:
            self._looped_at = now
            self.events.emit("worker_looping", self)

    # -- the loops ---------------------------------------------------------------------------------------

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
        self.bridge.attach(loop)
        try:
            return loop.run_until_complete(self._fast_daemon())
        finally:
            self.bridge.detach()
            self.executor.shutdown_pool()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def classic_daemon(self) -> int:
        """The per-job loop: what ``queue:work`` does, call for call (``--batch 1``)."""
        opts = self.options
        reservation, executor = self.reservation, self.executor
        last_restart = self.rules.restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency)
        self._starting()
        while True:
            self._looping()
            if not self.rules.should_run():
                self.sleep(opts.sleep if opts.sleep > 0 else 1)
                status = self.rules.status(last_restart, started, 0, popped=False)
                if status is not None:
                    return self._stop(status)
                continue
            executor.wait_for_slot()
            reservation.took_reservation = False
            job = reservation.next_job()
            # a payload moved to failed_jobs was still a popped job (Laravel's loop had a Job object)
            popped = job is not None or reservation.took_reservation
            if job is not None:
                jobs_processed += 1
                executor.submit(job)
                executor.wait_for_slot()
                self.rules.job_taken()
                if opts.rest > 0:
                    self.sleep(opts.rest)
            elif popped:
                jobs_processed += 1
                self.rules.job_taken()
            else:
                self.notes.went_idle(jobs_processed)
                self.sleep(reservation.reconnect_delay or self.timers.sleep_for(opts.sleep))
            # a pop that failed is not an empty queue (see _failed_not_empty)
            failed = not popped and bool(reservation.failed_rounds) and bool(opts.stop_when_empty or opts.stop_when_empty_for)
            status = self.rules.failed_not_empty() if failed else None
            if status is None:
                status = self.rules.status(last_restart, started, jobs_processed, popped=popped or failed)
            if status is not None:
                return self._stop(status)

    def run_once(self) -> int:
        """``--once``: one pop, one job (Laravel's ``runNextJob``), still under the timeout watchdog."""
        if self.rules.down() and not self.options.force:
            self.sleep(self.options.sleep)
            return EXIT_SUCCESS
        self._starting()
        job = self.reservation.next_job()
        if job is None:
            self.sleep(self.options.sleep)
            self._announce_stop(EXIT_SUCCESS)
            return EXIT_SUCCESS
        self.executor.submit(job)
        self.executor.drain()
        self._announce_stop(EXIT_SUCCESS)
        return EXIT_SUCCESS

    def _stop(self, status: int) -> int:
        self.executor.drain()
        self._announce_stop(status)
        return status

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early for a quit/pause/resume signal."""
        signals = self.signals
        if seconds <= 0 or signals.should_quit:
            return
        signals.wake.clear()
        if signals.should_quit:
            return
        signals.wake.wait(seconds)

    async def _fast_daemon(self) -> int:
        self.executor.daemon_task = asyncio.current_task()
        # a job that finishes without waiting may leave its success line for the next line's write
        # (see laraq.worker.output): every wait below writes what is held first (idle, wait_changed, yield_)
        self.output.hold()
        try:
            return await self._fast_loop()
        finally:
            self.output.release()
            self.executor.daemon_task = None

    async def _fast_loop(self) -> int:
        opts = self.options
        signals = self.signals
        reservation, executor = self.reservation, self.executor
        # bound once: called per job
        buffer = reservation.buffer
        lease_ok = reservation.lease_ok
        start_job = executor.start_job
        executor.start_watchdog()
        last_restart = self.rules.restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        next_check = started + _CHECK_EVERY
        can_run = self.rules.should_run()
        #: over --memory: no more reserve rounds; the buffer is run, then the worker stops
        draining = False
        #: over --memory while jobs ran: nothing new starts until they end, then it is measured again
        #: (Laravel measures after its job returns, so a running job's own memory is not counted)
        held = False
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d, batch %d%s)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency, opts.batch, ", prefetch" if opts.prefetch else "")
        self._starting()
        while True:
            if signals.should_quit:
                return await self._fast_stop(self._why(EXIT_SUCCESS, signals.reason or "told to quit"))
            if not can_run or signals.paused or executor.kill_pending:
                reservation.give_back_buffer()
                self._looping()  # as in classic_daemon: heartbeats (Horizon) go on while paused or down
                await executor.idle(opts.sleep if opts.sleep > 0 else 1)
                status = self.rules.status(last_restart, started, jobs_processed, popped=False)
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self.rules.should_run()
                next_check = time.monotonic() + _CHECK_EVERY
                continue

            if held:
                if executor.active > 0:
                    await executor.wait_changed(TICK)
                    continue
                held = False
                if not draining and self.rules.memory_exceeded(opts.memory):
                    if not (buffer or reservation.ahead is not None):
                        return await self._fast_stop(self._why(EXIT_MEMORY_LIMIT, "over --memory"))
                    draining = self._run_reserved_then_stop()
            free = opts.concurrency - executor.active
            reserved_round = False
            popped = False
            full_batch = False
            if draining and not buffer:
                if reservation.ahead is not None:  # already reserved: run it too, never give it back
                    reservation.land_ahead()
                else:
                    return await self._fast_stop(EXIT_MEMORY_LIMIT)
            if free > 0 and not buffer and not draining:
                want = reservation.reserve_count(free, jobs_processed)
                if want > 0 or reservation.ahead is not None:
                    reserved_round = True
                    if reservation.ahead is not None:  # asked for while the last batch ran
                        want = reservation.ahead_want
                        got = reservation.land_ahead()
                    else:
                        got = reservation.reserve_round(want)
                    unreadable = reservation.took_unreadable
                    popped = got > 0 or reservation.took_reservation
                    jobs_processed += unreadable
                    if popped:
                        self.rules.job_taken()
                    # a full batch: more are waiting; asked for after this pass's status reads, which
                    # would otherwise queue behind the reserve script on Redis
                    full_batch = got + unreadable >= want and got > 0
            while free > 0 and buffer:
                if opts.max_jobs and jobs_processed >= opts.max_jobs:
                    break
                item = buffer.popleft()
                if not lease_ok(item):
                    if buffer and buffer[0] is item:  # Redis did not answer: kept, tried again after a pause
                        del item
                        await executor.idle(1.0)
                        break
                    continue
                jobs_processed += 1
                self._unreported += 1
                free -= 1
                popped = True
                start_job(item.job)
                del item  # a job that finished at once must not stay alive (its command) until the memory check
                self.rules.job_taken()
                if opts.rest > 0:
                    await executor.idle(opts.rest)
            now = time.monotonic()
            if reserved_round or now >= next_check:
                next_check = now + _CHECK_EVERY
                self._looping()
                self._report_popped()
                status = self.rules.periodic(last_restart, started)
                if status is None and opts.max_jobs and jobs_processed >= opts.max_jobs:
                    status = self._why(EXIT_SUCCESS, "--max-jobs reached")
                if status == EXIT_MEMORY_LIMIT and draining:
                    status = None  # said already; the buffer is being run
                if status == EXIT_MEMORY_LIMIT and executor.active > 0:
                    held, status = True, None  # measured again once the running jobs have returned
                    continue
                if status == EXIT_MEMORY_LIMIT and (buffer or reservation.ahead is not None):
                    # no restart storm: the jobs already reserved (a big one among them, maybe) are run,
                    # not given back to be reserved and given back again by the next process
                    draining, status = self._run_reserved_then_stop(), None
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self.rules.should_run()
            if full_batch and can_run and not signals.paused and not draining:
                reservation.send_ahead(jobs_processed, executor.active)
            if opts.max_jobs and jobs_processed >= opts.max_jobs and not buffer:
                return await self._fast_stop(self._why(EXIT_SUCCESS, "--max-jobs reached"))

            if reserved_round and not popped and executor.active == 0 and not buffer:
                # an empty loop: Laravel's stop_when_empty / block / sleep
                if reservation.failed_rounds and (opts.stop_when_empty or opts.stop_when_empty_for):
                    status = self.rules.failed_not_empty()
                    if status is not None:
                        return await self._fast_stop(status)
                    await executor.idle(reservation.reconnect_delay or 1.0)
                    continue
                if opts.stop_when_empty:
                    return await self._fast_stop(self._why(EXIT_SUCCESS, "--stop-when-empty: no job to take"))
                if self.rules.empty_for(started):
                    return await self._fast_stop(self._why(
                        EXIT_SUCCESS, f"--stop-when-empty-for: no job for {opts.stop_when_empty_for:g}s"))
                reservation.flush_acks(force=True)
                self.notes.went_idle(jobs_processed)
                if reservation.reconnect_delay:
                    await executor.idle(reservation.reconnect_delay)
                elif reservation.block_for_job(jobs_processed, executor.active):
                    jobs_processed += reservation.took_unreadable  # a batch that came along with a timed-out wait
                else:
                    await self._idle_sleep(reservation.left_for_php)
                continue
            if executor.fresh:
                # one pass of the loop runs the tasks that suspended; the ones that finished are
                # reaped here, without a done callback and a wake-up each
                await executor.yield_()
                executor.reap_fresh()
            elif reserved_round:
                await executor.yield_()  # jobs that finish at once never yield: let the loop run once a round
            if executor.active > 0 and (free <= 0 or not buffer):
                await executor.wait_changed(TICK)
            reservation.housekeeping()

    async def _idle_sleep(self, left_for_php: int) -> None:
        """Laravel's sleep after an empty pop; the hook where an idle worker waits. When the queue holds
        only jobs for PHP workers (left in the list by the selective reserve) the wait is at least
        :data:`_LEFT_FOR_PHP_PAUSE`, so that a ``--sleep 0`` worker does not rescan them without pause."""
        seconds = self.timers.sleep_for(self.options.sleep)  # cut short when a delayed job comes due sooner
        if left_for_php:
            seconds = max(seconds, _LEFT_FOR_PHP_PAUSE)
        await self.executor.idle(seconds)

    def _run_reserved_then_stop(self) -> bool:
        """Over ``--memory`` with jobs already reserved (a big one among them, maybe): they are run, not
        given back to be reserved and given back again by the next process (no restart storm); says so
        and returns True (the loop's ``draining``)."""
        reservation = self.reservation
        reserved = len(reservation.buffer) + reservation.ahead_want * (reservation.ahead is not None)
        log.warning("memory limit of %d MB reached (this process: %.0f MB resident): taking no more jobs; "
                    "running the %d already reserved before it exits with %d",
                    self.options.memory, self.notes.memory_seen, reserved, EXIT_MEMORY_LIMIT)
        return True

    async def _fast_stop(self, status: int) -> int:
        """Give the buffer back, let running jobs finish (or settle after a timeout), flush acks."""
        reservation, executor = self.reservation, self.executor
        self.output.release()
        reservation.give_back_buffer()
        while executor.active > 0 or executor.busy():
            await executor.wait_changed(TICK)
            reservation.flush_acks()
            if executor.kill_pending and not any(r.state != "timed_out" for r in list(executor.running)):
                break
        for _ in range(4):
            reservation.flush_acks(force=True)
            if reservation.ack_since is None:
                break
            time.sleep(0.5)
        self._report_popped(force=True)
        if executor.kill_pending:
            executor.kill_now()
        self._announce_stop(status)
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
        SIGUSR2: pause. SIGCONT: resume. Only possible in the main thread (see :class:`Signals`)."""
        self.signals.install_handlers()
