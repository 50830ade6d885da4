"""The worker loop, with ``php artisan queue:work``'s semantics (Laravel's ``Illuminate\\Queue\\Worker::daemon``).

One loop (:meth:`Worker.daemon`), one round at a time, as Laravel's ``daemon`` runs:

1. unless the worker is told to quit, paused (SIGUSR2) or the app is down (and no ``--force``), one
   reserve step (:class:`~laraq.worker.reserver.Reserver`, a :class:`~laraq.worker.reserver.Taken` back:
   Laravel's pop with ``--batch 1``, a batch reserve otherwise);
2. the jobs taken start on free slots (:class:`~laraq.worker.executor.Executor`); each one's run ends in an
   outcome that the settle step carries out (:mod:`laraq.worker.process`, :mod:`laraq.worker.settle`).
   A pool thread whose ``def`` job ended starts the next buffered job itself while the loop would start
   it at once too (:meth:`Worker._next_for_slot`; never with ``--max-jobs``, ``--rest`` or ``--once``,
   over ``--memory``, paused, down or told to quit); the loop counts those jobs each round;
3. the stop rules answer (:class:`~laraq.worker.stoprules.StopRules`, Laravel's ``stopIfNecessary``
   order): after every job with ``--batch 1``, after every reserve step or 0.25 s otherwise;
4. a round that found nothing sleeps ``--sleep`` (cut short when a delayed job comes due).

``--memory`` is measured as Laravel measures it, after the jobs that ran: over it while jobs run, nothing
new starts until they end and it is measured again; over it with jobs already reserved, those are run
(not given back to be reserved and given back again by the next process), then the worker exits 12.
A stop gives the buffer back, lets running jobs finish and sends the last acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

from laraq.bus.callqueued import CallQueuedHandler
from laraq.bus.handlers import HandlerRegistry
from laraq.bus.job import Job
from laraq.bus.models import ModelLoader
from laraq.bus.phpsteps import PhpSteps
from laraq.exitcodes import EXIT_ERROR, EXIT_MEMORY_LIMIT, EXIT_SUCCESS
from laraq.protocol.acks import Acks
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import Reserving
from laraq.protocol.timers import Timers
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion
from laraq.stores.failed import FailedJobStore
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import CacheLike, WorkerContext, WorkerOptions
from laraq.worker.eager import new_worker_loop, running_loop_name
from laraq.worker.events import Held, Listeners, Looping, WorkerListener, WorkerStarting, WorkerStopping
from laraq.worker.executor import TICK, Executor, SlotFeed
from laraq.worker.notes import RunNotes
from laraq.worker.process import Process
from laraq.worker.reserver import Reserver, Taken
from laraq.worker.selection import QueueSelection, Slots
from laraq.worker.settle import Settle
from laraq.worker.stoprules import Round, Stop, StopRules

__all__ = ["Worker"]

log = logging.getLogger("laraq.worker.worker")

#: The stop rules are read at least this often while jobs run (seconds).
_CHECK_EVERY = 0.25
#: ``Looping`` is announced at most this often (seconds).
_LOOPING_EVERY = 1.0
#: The shortest wait after a reserve that found only jobs for PHP workers (seconds).
_LEFT_FOR_PHP_PAUSE = 0.1


class Worker:
    """Runs jobs from one Redis queue connection through a handler registry: builds the objects it is made
    of (the one place that names them) and runs the loop."""

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
        steps: PhpSteps | None = None,
        maintenance: Callable[[], bool] | None = None,
        kill: Callable[[], None] | None = None,
        on_jobs_popped: Callable[[int], None] | None = None,
        listeners: list[WorkerListener] | None = None,
        model_loader: ModelLoader | None = None,
    ) -> None:
        self.options = options = options or WorkerOptions()
        self.version = version = version or getattr(queue, "version", None) or DEFAULT_VERSION
        self.events = events = Listeners(listeners)
        if steps is None:
            steps = PhpSteps(queue, version, cache=cache, signing_key=encrypter.key if encrypter is not None else None,
                             connection_name=connection_name, php_queue=options.php_queue)
        self.callqueued = CallQueuedHandler(app, version, steps, cache=cache, encrypter=encrypter,
                                            model_loader=model_loader)
        self.queues = names = [q for q in (queues.split(",") if isinstance(queues, str) else queues) if q] or ["default"]
        self.context = context = WorkerContext(
            app=app, queue=queue, queues=names, options=options, version=version, connection_name=connection_name,
            events=events, callqueued=self.callqueued, cache=cache, failer=failer)
        self.queue = queue
        self.signals = context.signals
        #: progress report to the supervisor: called with a count, at most every 0.25 s
        self.on_jobs_popped = on_jobs_popped
        self.bridge = bridge = AsyncBridge(options.loop)
        per_job = options.batch <= 1 or options.once
        self.acks = acks = Acks(queue, "sync" if per_job else options.acks)
        reserving = Reserving(queue, unstarted_lease=0.0 if options.acks == "batched" else options.unstarted_lease)
        #: which queues each reserve step asks, in what order (priority levels, patterns, --fair)
        self.selection = QueueSelection(queue, names, fair=options.fair, weights=options.weights,
                                        discover_every=options.discover_every)
        self.slots = Slots(queue, options.max_per_queue, options.slot_lease) if options.max_per_queue > 0 else None
        if self.slots is not None:
            events.add(self.slots)
        self.timers = Timers(queue, self.selection.names())  # a pattern's queues: once discovered
        self.reserver = reserver = Reserver(context, bridge, acks, reserving, self.timers, self.selection, self.slots)
        self.settle = Settle(context, acks, reserving, bridge)
        self.processing = Process(context, bridge, self.settle, model_loader)
        self.executor = Executor(context, self.processing, bridge, acks, reserver.keep_alive, kill=kill,
                                 before_kill=self._before_kill,
                                 feed=SlotFeed(self._next_for_slot, reserver.lent))
        #: the log's account of the worker: why it stops, pauses, resumes; what --memory measured
        self.notes = RunNotes(options.name, options.memory)
        self.rules = StopRules(context, self.notes, maintenance or (lambda: False), reserver.settle_replies)
        self._looped_at = 0.0
        self._stopped: Stop | None = None
        self._unreported = 0
        #: may a pool thread start the next job itself (the loop's round says so: see _next_for_slot)
        self._slot_starts = False
        #: jobs pool threads started since the loop last counted them (under _slot_count_lock)
        self._slot_taken = 0
        self._slot_count_lock = threading.Lock()

    def add_listener(self, listener: WorkerListener) -> None:
        """Add a :class:`~laraq.worker.events.WorkerListener` (before :meth:`run`)."""
        self.events.add(listener)

    def held(self) -> Held:
        """The reservations this worker holds now, buffered or running; from any thread (the heartbeat's).
        A job with no reserve time of its own counts from now."""
        running = self.executor.running_jobs()
        now = time.time()
        jobs = {str(job.id or ""): now if job.reserved_at is None else job.reserved_at
                for job in (*self.reserver.buffered_jobs(), *running)}
        return Held(jobs, len(running))

    def process(self, job: object) -> None:
        """Laravel's ``Worker::process`` for one job, on this thread (for embedding)."""
        self.processing.run(job)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the watchdog and the asyncio thread, give the ack connection back (for embedding)."""
        self.executor.close()
        self.bridge.close()
        self.acks.close()

    # -- running -----------------------------------------------------------------------------------------

    def run(self) -> int:
        """Run like ``queue:work`` (``--once`` or the daemon) with its signal handlers; the exit code."""
        self.signals.install_handlers()
        return self.daemon()

    def daemon(self) -> int:
        """Laravel's ``Worker::daemon`` on the worker's own event loop; returns the exit code."""
        loop = new_worker_loop(self.options.loop)
        self.bridge.attach(loop)
        try:
            return loop.run_until_complete(self._daemon())
        finally:
            self.events.flush()
            self.bridge.detach()
            self.executor.shutdown_pool()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _daemon(self) -> int:
        self.executor.attach(asyncio.current_task())
        self.reserver.own()
        try:
            return await self._loop()
        finally:
            self.reserver.disown()
            self.executor.attach(None)

    async def _loop(self) -> int:
        opts, signals, rules = self.options, self.signals, self.rules
        reserver, executor = self.reserver, self.executor
        executor.start_watchdog()
        rules.begin()
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d, batch %d%s, %s)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency, 1 if reserver.per_job else opts.batch,
                 ", prefetch" if opts.prefetch and not reserver.per_job else "",
                 running_loop_name(asyncio.get_running_loop()))
        self._starting()
        jobs = 0  # Laravel's $jobsProcessed: jobs taken, unreadable ones included
        next_check = time.monotonic() + _CHECK_EVERY
        can_run = rules.should_run()
        memory = "ok"  # over --memory: "hold" (jobs run: measure again after them), "drain" (run the reserved)
        # may pool threads start jobs themselves in a round that allows it (see _next_for_slot)
        slot_starts = opts.concurrency > 1 and not opts.once and opts.rest <= 0 and not opts.max_jobs
        while True:
            if slot_starts and self._slot_taken:
                jobs += self._count_slot_starts()
            if signals.should_quit:
                return await self._stop(Stop(signals.quit_status, signals.reason or "told to quit"))
            if not can_run or signals.paused or executor.kill_pending:
                stop = await self._paused(jobs)
                if stop is not None:
                    return await self._stop(stop)
                can_run, next_check = rules.should_run(executor.kill_pending), time.monotonic() + _CHECK_EVERY
                continue
            if memory == "hold":
                if executor.active > 0:
                    await executor.wait_changed(TICK)
                    continue
                memory = self._over_memory() if rules.memory_exceeded(opts.memory) else "ok"
                if memory == "stop":
                    return await self._stop(Stop(EXIT_MEMORY_LIMIT, "over --memory"))
            if slot_starts:
                self._slot_starts = memory == "ok"
            free = opts.concurrency - executor.active
            taken: Taken | None = None
            room = 0 if memory == "drain" else opts.max_jobs - jobs if opts.max_jobs else None
            if free > 0 and not reserver.ready and (room != 0 or reserver.buffered):
                taken = reserver.take(free, room, idle=executor.active == 0)
                jobs += self._unreadable(taken)
            elif memory == "drain" and not reserver.buffered:
                return await self._stop(Stop(EXIT_MEMORY_LIMIT, "over --memory"))
            jobs = await self._start(free, jobs)
            if opts.once and taken is not None and (taken.popped or not taken.more):  # a look under way goes on
                if not taken.popped:
                    await executor.idle(opts.sleep)
                return await self._stop(Stop(EXIT_SUCCESS, "--once: one job run" if taken.popped else "--once: no job"))
            now = time.monotonic()
            if taken is not None or now >= next_check or (opts.max_jobs and jobs >= opts.max_jobs):
                next_check = now + _CHECK_EVERY
                stop, memory = self._check(jobs, taken, memory)
                if stop is not None:
                    return await self._stop(stop)
                can_run = rules.should_run(executor.kill_pending)
                if slot_starts:
                    self._slot_starts = can_run and memory == "ok"
            if taken is not None and not taken.popped and executor.active == 0 and not reserver.buffered:
                await self._empty(taken, jobs)
                continue
            # jobs buffered or asked for ahead, or a step that took jobs (the list may hold more): a slot
            # free after the round's tasks ran a step takes the next at once; otherwise the loop waits for
            # a job to finish or a tick to pass
            more = taken is not None and taken.popped and taken.fault is None
            await executor.round_end(taken is not None, startable=bool(reserver.buffered) or more)

    async def _start(self, free: int, jobs: int) -> int:
        """Start buffered jobs on the ``free`` slots (never past ``--max-jobs``, none once told to quit or
        pause: they are given back); the jobs taken after."""
        opts, reserver, executor, rules, signals = self.options, self.reserver, self.executor, self.rules, self.signals
        while free > 0 and not (opts.max_jobs and jobs >= opts.max_jobs) and not signals.should_quit \
                and not signals.paused:
            most = 1 if opts.rest > 0 else free if not opts.max_jobs else min(free, opts.max_jobs - jobs)
            ready = reserver.next_jobs(most)
            if not ready:
                if reserver.ready:  # its head waits on Redis: kept, tried again after a pause
                    await executor.idle(1.0)
                break
            for item in ready:
                if signals.should_quit or signals.paused:
                    reserver.not_started(ready[ready.index(item):])
                    return jobs
                jobs += 1
                self._unreported += 1
                free -= 1
                executor.start(item.job)
                rules.job_taken()
            # a job that finished at once must not stay alive (its command) until the memory check
            del ready, item
            if opts.rest > 0:
                await executor.idle(opts.rest)
        return jobs

    def _next_for_slot(self, fits: Callable[[Job], bool]) -> Job | None:
        """A pool thread's job ended: the next buffered job for that thread to run now (``fits``: one it may
        run), or None, and the loop starts the next job. Only while this round of the loop allows it
        (``_slot_starts``), and not once told to quit or pause, or a self-kill is pending; the job is
        counted as the loop counts those it starts."""
        if not self._slot_starts or self.signals.should_quit or self.signals.paused or self.executor.kill_pending:
            return None
        job = self.reserver.next_on_thread(fits)
        if job is not None:
            with self._slot_count_lock:
                self._slot_taken += 1
            self.rules.job_taken()
        return job

    def _count_slot_starts(self) -> int:
        """The jobs pool threads started since the last count (on the loop thread): added to the jobs taken
        and to the supervisor's next report."""
        with self._slot_count_lock:
            count, self._slot_taken = self._slot_taken, 0
        self._unreported += count
        return count

    def _unreadable(self, taken: Taken) -> int:
        """Reservations Python cannot read go to ``failed_jobs`` (popped all the same: they count)."""
        for reserved, error in taken.unreadable:
            self.settle.unreadable(reserved, error)
        if taken.popped:
            self.rules.job_taken()
        return len(taken.unreadable)

    def _check(self, jobs: int, taken: Taken | None, memory: str) -> tuple[Stop | None, str]:
        """The stop rules for this round, and what ``--memory`` asks for (see the module)."""
        executor, reserver = self.executor, self.reserver
        self._looping()
        self._report_popped()
        empty = taken is not None and taken.fault is None and not taken.popped and not taken.more \
            and executor.active == 0 and not reserver.buffered
        stop = self.rules.check(Round(jobs, empty, None if taken is None else taken.fault))
        if stop is None or stop.status != EXIT_MEMORY_LIMIT:
            return stop, memory
        if memory == "drain":
            return None, memory  # said already: the reserved jobs are being run
        if executor.active > 0:
            return None, "hold"  # measured again once the running jobs have returned
        memory = self._over_memory()
        return (stop if memory == "stop" else None), memory

    def _over_memory(self) -> str:
        """Over ``--memory`` with nothing running: stop, or first run the jobs already reserved (a big one
        among them, maybe), not given back to be reserved and given back again by the next process."""
        reserved = self.reserver.buffered
        if not reserved:
            return "stop"
        log.warning("memory limit of %d MB reached (this process: %.0f MB resident): taking no more jobs; "
                    "running the %d already reserved before it exits with %d",
                    self.options.memory, self.notes.memory_seen, reserved, EXIT_MEMORY_LIMIT)
        return "drain"

    async def _paused(self, jobs: int) -> Stop | None:
        """A round while paused, down or about to kill itself: the buffer goes back, the worker sleeps,
        then Laravel's ``pauseWorker`` reads the stop rules."""
        self._slot_starts = False
        self.reserver.give_back()
        self._looping()  # heartbeats (Horizon) go on while paused or down
        if self.options.once:
            await self.executor.idle(self.options.sleep)
            return Stop(EXIT_SUCCESS, "--once: the app is down")
        await self.executor.idle(self.options.sleep if self.options.sleep > 0 else 1)
        return self.rules.check(Round(jobs, self.executor.active == 0))

    async def _empty(self, taken: Taken, jobs: int) -> None:
        """A round that found nothing: Laravel's sleep (at least a short pause when only jobs for PHP
        workers are in the list, so that ``--sleep 0`` does not rescan them without pause)."""
        if taken.fault is not None:
            await self.executor.idle(taken.fault.retry_in or 1.0)
            return
        if taken.more:  # the deep look goes on at once, one bounded call per round
            await asyncio.sleep(0)
            return
        self.notes.went_idle(jobs)
        seconds = self.timers.sleep_for(self.options.sleep)  # cut short when a delayed job comes due sooner
        if taken.left_for_php:
            seconds = max(seconds, _LEFT_FOR_PHP_PAUSE)
        await self.executor.idle(seconds)

    async def _stop(self, stop: Stop) -> int:
        """Give the buffer back, let running jobs finish (or settle after a timeout), send the last acks."""
        executor = self.executor
        self._slot_starts = False
        self.events.flush()
        self.reserver.give_back()
        await executor.drain()
        self.reserver.release_slots()
        self.acks.drain()
        self._count_slot_starts()
        self._report_popped()
        if executor.kill_pending:
            executor.kill_now()
        self._announce_stop(stop)
        return stop.status

    # -- events ------------------------------------------------------------------------------------------

    def _starting(self) -> None:
        """``WorkerStarting``: settings resolved, the first reserve comes next."""
        level, line = self.callqueued.steps.describe()
        log.log(level, "%s", line)
        self.events.emit(WorkerStarting(self.context.connection_name, self.queues, self.options, self.version))

    def _looping(self) -> None:
        """``Looping``, announced at most once per ``_LOOPING_EVERY``."""
        now = time.monotonic()
        if now - self._looped_at >= _LOOPING_EVERY:
            self._looped_at = now
            self.events.emit(Looping(self.context.connection_name, self.queues, self.signals.paused))

    def _announce_stop(self, stop: Stop) -> None:
        """``WorkerStopping``, once (a self-kill announces it with exit code 1 first), and one log line
        saying why."""
        if self._stopped is not None:
            return
        self._stopped = stop
        self.events.emit(WorkerStopping(stop.status, stop.reason, self.options))
        self.notes.stopped(stop.status, stop.reason)

    def _before_kill(self) -> None:
        """The executor is about to SIGKILL this process: the supervisor's count, then Laravel's
        ``kill(EXIT_ERROR)`` fires ``WorkerStopping`` first."""
        with contextlib.suppress(Exception):
            self._report_popped()
        self._announce_stop(Stop(EXIT_ERROR, "a job outlived its timeout and could not be stopped: killing "
                                             "this process"))

    def _report_popped(self) -> None:
        """Tell the supervisor how many jobs were taken since the last report."""
        count, self._unreported = self._unreported, 0
        if count and self.on_jobs_popped is not None:
            self.on_jobs_popped(count)
