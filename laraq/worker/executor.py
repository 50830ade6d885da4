"""The executor: where and how a job's handler runs, and what happens at its timeout (Laravel's
``Illuminate\\Queue\\Worker`` ``registerTimeoutHandler`` / ``kill`` side, plus laraq's threads and asyncio).

Jobs run on ``--concurrency`` slots of the worker's own event loop: an ``async def`` handler as a task
(its first step run at once, :mod:`laraq.worker.eager`), a sync handler inline at concurrency 1 (as
artisan runs it) or on a thread pool. A pool thread whose job ended asks the worker for the next one
(:class:`SlotFeed`) and runs it itself while one may start at once, as Sidekiq's threads each fetch
their own next job: the loop is woken when the thread has no next job, not after each job (a wake of
the loop and of a second thread would cost each job three hand-offs of the GIL). A watchdog thread
enforces the timeout (payload ``timeout``, else ``--timeout``; 0 = none). At the deadline it does
Laravel's timeout bookkeeping (:meth:`laraq.worker.process.Process.timed_out`, settled at once) and
abandons the job: unless it failed, the job stays in ``:reserved`` until ``retry_after`` (what a
SIGKILLed PHP worker leaves behind). An async handler is then cancelled; a sync handler cannot be
interrupted, so the worker stops taking jobs, lets the others finish and SIGKILLs its own process, as
Laravel's ``Worker::kill`` does; ``laraq work``'s supervisor starts a new worker process.

Who wins a job's outcome (handler or watchdog) is decided once, by :meth:`laraq.worker.running.Running.claim`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from laraq.bus.handlers import Handler
from laraq.bus.job import Job
from laraq.stores.failed import timeout_exceeded
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import WorkerContext
from laraq.worker.eager import JOB_TASK_NAME, start_task
from laraq.worker.events import JobTimedOut
from laraq.worker.running import Flag, Running

if TYPE_CHECKING:
    from laraq.protocol.acks import Acks
    from laraq.worker.process import Process

__all__ = ["JOB_TASK_NAME", "TICK", "Executor", "SlotFeed", "sigkill_self"]

log = logging.getLogger("laraq.worker.worker")

#: Housekeeping tick (acks, lease renewal, signals) while jobs run.
TICK = 0.05


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _no_next_job(fits: Callable[[Job], bool]) -> Job | None:
    return None


@dataclasses.dataclass(frozen=True)
class SlotFeed:
    """The worker's side of a pool thread taking its next job: ``next_job`` (given what fits a thread,
    the next job for it to run now, or None and the loop starts it), and ``lend`` (held while the loop
    waits: what the pool threads may use meanwhile, the reserver)."""

    next_job: Callable[[Callable[[Job], bool]], Job | None] = _no_next_job
    lend: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext


def sigkill_self() -> None:
    """``Worker::kill``: die by SIGKILL, leaving reserved jobs for ``retry_after``."""
    os.kill(os.getpid(), signal.SIGKILL)


class Executor:
    """Runs jobs: the loop's tasks, inline runs and pool, timeouts, the watchdog, the self-kill."""

    def __init__(self, context: WorkerContext, process: Process, bridge: AsyncBridge, acks: Acks,
                 keep_alive: Callable[[], None], *, kill: Callable[[], None] | None = None,
                 before_kill: Callable[[], None] | None = None,
                 feed: SlotFeed | None = None) -> None:
        self.options = context.options
        self.app = context.app
        self.version = context.version
        self.events = context.events
        self.signals = context.signals
        self.pace = context.pace
        self.php_only = context.callqueued.php_only
        self.process = process
        self.bridge = bridge
        self.acks = acks
        #: what a wait keeps going (acks, lease renewals): the reserver's keep-alive
        self.keep_alive = keep_alive
        #: ``Worker::kill``: SIGKILL this process (tests pass their own)
        self.kill = kill or sigkill_self
        #: told before the kill (the supervisor's count, ``WorkerStopping`` with exit 1)
        self.before_kill = before_kill
        #: the worker's side of a pool thread taking its next job (see the module)
        self.feed = feed or SlotFeed()
        #: jobs a pool thread took up itself after its previous one (see the module)
        self.continued = 0
        # Process's entry points, bound once: they are called per job
        self._run = process.run
        self._run_async = process.run_async
        self._precheck_fails = process.precheck_fails
        self._closed = False
        #: the jobs running now (and those timed out until they settle)
        self.running: set[Running] = set()
        #: guards ``running`` and each one's state; the per-job paths take the lock itself (``with`` on a
        #: Condition goes through two Python-level calls), waiters use the Condition around it
        self._running_mutex = threading.RLock()
        self._running_lock = threading.Condition(self._running_mutex)
        #: a job that cannot be interrupted timed out: stop taking jobs, the process dies when the others end
        self.kill_pending = False
        self._watchdog_started = False
        #: jobs started and not finished
        self.active = 0
        self._waiter: asyncio.Future[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: tasks started in this loop pass that have no done callback yet (see reap_fresh)
        self.fresh: list[tuple[asyncio.Task[None], Running, float]] = []
        #: the daemon's task while it runs (new tasks' first steps are run from it)
        self.daemon_task: asyncio.Task[Any] | None = None

    def attach(self, task: asyncio.Task[Any] | None) -> None:
        """The daemon's task runs the loop from now (None: it ended): new jobs' first steps run from it."""
        self.daemon_task = task

    def shutdown_pool(self) -> None:
        """The daemon stopped: stop its thread pool."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def start(self, job: Job) -> None:
        """Start one job: an ``async def`` handler as a task on the daemon's loop (its first step run at
        once, see :mod:`laraq.worker.eager`), a sync one inline at concurrency 1, else on the thread pool."""
        # _continue_with's record and _on_loop's test, written out: this is every job's path, and two
        # calls cost it 1 % of its instructions
        timeout = job.timeout if job.timeout is not None else self.options.timeout
        running = Running(job, time.monotonic() + timeout if timeout > 0 else None, self._running_mutex)
        with self._running_mutex:
            self.running.add(running)
        handler = self.app.resolve(job.payload)
        started = time.perf_counter()
        loop = self.bridge.loop
        assert loop is not None
        if handler is not None and handler.is_async and not self.php_only(job) and not self._precheck_fails(job):
            running.is_async = True
            running.task_done = Flag()
            self.active += 1  # counted before its first step runs: that step may finish it
            try:
                task, stepped = start_task(loop, self._run_async(job, handler, running), self.daemon_task)
            except BaseException:
                self.active -= 1
                raise
            if running.task is None:
                running.task = task
            if stepped and task.done():  # it never suspended (the usual short job): finished in this pass
                if task.cancelled() or task.exception() is not None or self._waiter is not None:
                    self._task_done(running, started, task)
                else:  # _task_done's common case, without its reporting
                    self.active -= 1
                    self._job_finished(running, started)
                return
            self.fresh.append((task, running, started))
        elif self.options.concurrency == 1 and (handler is None or not handler.is_async):
            try:  # a sync handler at concurrency 1 runs right here: no thread hop
                self._run(job, running, handler)
            except BaseException:
                log.exception("unexpected error while running %s", job.name)
            finally:
                self._job_finished(running, started)
        else:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.options.concurrency,
                                                                   thread_name_prefix="laraq-slot",
                                                                   initializer=self.bridge.enter_slot)
            self.active += 1
            future = self._pool.submit(self._slot, job, running, started)
            future.add_done_callback(
                lambda f: loop.call_soon_threadsafe(self._slot_done, f, running, started))

    def _continue_with(self, job: Job) -> Running:
        """The record of a job a pool thread takes up after its previous one, with its deadline, among
        those the watchdog watches."""
        timeout = job.timeout if job.timeout is not None else self.options.timeout
        running = Running(job, time.monotonic() + timeout if timeout > 0 else None, self._running_mutex)
        with self._running_mutex:
            self.running.add(running)
            self.continued += 1
        return running

    def _on_loop(self, job: Job, handler: Handler) -> bool:
        """Does ``job`` run as a task on the loop (an ``async def`` handler, and PHP need not run it)?"""
        return handler.is_async and not self.php_only(job) and not self._precheck_fails(job)

    def _fits_thread(self, job: Job) -> bool:
        """May a pool thread run ``job`` (one that does not run as a task on the loop)?"""
        handler = self.app.resolve(job.payload)
        return handler is None or not self._on_loop(job, handler)

    def _slot(self, job: Job, running: Running, started: float) -> tuple[Running, float]:
        """A pool thread's turn: ``job``, then each next job :attr:`feed` hands it. The last job's
        record is handed back for the loop's bookkeeping; those before it are finished here."""
        while True:
            try:
                self._run(job, running)
            except BaseException:
                log.exception("unexpected error while running %s", job.name)
                return running, started
            try:
                following = self.feed.next_job(self._fits_thread)
            except Exception:
                log.exception("could not take the next job on a slot thread: the loop starts it")
                following = None
            if following is None:
                return running, started
            self._job_finished(running, started)
            job, running, started = following, self._continue_with(following), time.perf_counter()

    def _slot_done(self, future: concurrent.futures.Future[tuple[Running, float]], first: Running,
                   started: float) -> None:
        """A pool thread's turn ended (on the loop thread): its last job's bookkeeping."""
        if not future.cancelled() and future.exception() is None:
            first, started = future.result()
        self._task_done(first, started, future)

    def running_jobs(self) -> list[Job]:
        """The jobs running now (the timed-out ones left out: they are no longer this worker's); any thread."""
        with self._running_mutex:
            return [r.job for r in self.running if r.state != "timed_out"]

    def reap_fresh(self) -> None:
        """Finish the bookkeeping of this pass's tasks that are done; the others get a done callback."""
        fresh, self.fresh = self.fresh, []
        for task, running, started in fresh:
            if task.done():
                self._task_done(running, started, task)
            else:
                task.add_done_callback(functools.partial(self._task_done, running, started))

    def _task_done(self, running: Running, started: float, future: Any = None) -> None:
        """A job of a task or of the thread pool finished (on the loop thread)."""
        self.active -= 1
        if future is not None:
            try:
                exc = None if future.cancelled() else future.exception()
                if exc is not None:
                    log.error("unexpected error while running %s", running.job.name, exc_info=exc)
            except BaseException:  # noqa: S110 - reporting must never break the loop
                pass
        self._job_finished(running, started)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _job_finished(self, running: Running, started: float) -> None:
        lock = self._running_lock
        with self._running_mutex:
            if running.state != "timed_out":
                self.running.discard(running)
            if lock._waiters:  # type: ignore[attr-defined]  # nobody waits on the loop's path: skip notify
                lock.notify_all()
        took = time.perf_counter() - started
        pace = self.pace
        avg = pace.average
        pace.average = took if avg is None else avg * 0.8 + took * 0.2

    async def yield_(self) -> None:
        """One pass of the event loop (the tasks that are ready run), held output written first."""
        self.events.flush()
        await asyncio.sleep(0)

    async def wait_changed(self, timeout: float) -> None:
        """Wait until a job finishes or ``timeout`` passes (a quit signal is seen within ``TICK``); the acks
        held for the next start go out first. Meanwhile the reserver is lent to the slot threads."""
        self.events.flush()
        if self.acks.holding:
            self.acks.send_held()
        if self.fresh:
            self.reap_fresh()
        loop = self.bridge.loop
        assert loop is not None
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        handle = loop.call_later(timeout, _resolve, waiter)
        try:
            with self.feed.lend():
                await waiter
        finally:
            handle.cancel()
            self._waiter = None

    async def idle(self, seconds: float) -> None:
        """Sleep ``seconds`` without stalling running tasks; wakes early for signals."""
        if seconds <= 0:
            return
        self.events.flush()
        if self.fresh:
            self.reap_fresh()
        self.acks.flush(force=True)
        signals = self.signals
        signals.wake.clear()
        deadline = time.monotonic() + seconds
        while not signals.should_quit and not signals.wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.active == 0 and left > TICK and not self.running:
                signals.wake.wait(min(left, 0.5))
            else:
                await self.wait_changed(min(left, TICK))
                self.keep_alive()

    async def round_end(self, started: bool, *, startable: bool) -> None:
        """The end of a round with jobs about: the tasks started run a step (a job that finishes at once never
        yields: the loop runs once a round), the finished ones are reaped without a done callback and a
        wake-up each; then, while every slot is taken or no job waits to start (``startable``: buffered,
        asked for ahead, or the list may hold more), until a job finishes or a tick passes. Slots are counted
        after that step: jobs that finished in it free theirs for the next round at once. Then leases and
        acks are kept up."""
        if self.fresh:
            await self.yield_()
            self.reap_fresh()
        elif started:
            await self.yield_()
        if self.active > 0 and (self.active >= self.options.concurrency or not startable):
            await self.wait_changed(TICK)
        self.keep_alive()

    async def drain(self) -> None:
        """Wait until every job has finished, or settled after its timeout (a kill is then due), writing acks."""
        while self.active > 0 or any(r.state != "timed_out" or not r.settled for r in list(self.running)):
            await self.wait_changed(TICK)
            self.acks.flush()
            if self.kill_pending and not any(r.state != "timed_out" for r in list(self.running)):
                return

    def close(self) -> None:
        """Stop the watchdog (for embedding; the CLI just exits)."""
        self._closed = True

    def _timeout_for(self, job: Job) -> int:
        return job.timeout if job.timeout is not None else self.options.timeout

    def start_watchdog(self) -> None:
        """Start the watchdog thread (once): timeouts, stale acks."""
        if self._watchdog_started:
            return
        self._watchdog_started = True
        threading.Thread(target=self._watchdog_loop, name="laraq-watchdog", daemon=True).start()

    def _watchdog_loop(self) -> None:
        while not self._closed:
            time.sleep(0.05)
            try:
                self._watchdog_tick()
                self.acks.flush_stale()
            except Exception:  # the watchdog must survive anything
                log.exception("watchdog error")

    def _watchdog_tick(self) -> None:
        now = time.monotonic()
        with self._running_lock:
            expired = [r for r in self.running
                       if r.state == "running" and r.deadline is not None and now >= r.deadline]
        for running in expired:
            if running.claim("timed_out"):
                self._timed_out(running)
        with self._running_lock:
            for r in list(self.running):
                if r.state != "timed_out" or r.cancelled_at is None or r.task_done is None:
                    continue
                if r.task_done.is_set():  # the cancelled coroutine unwound: its slot is free
                    self.running.discard(r)
                elif now - r.cancelled_at > self.options.cancel_grace and not r.settled:
                    log.error("%s ignored its cancellation", r.job.name)
                    r.settled = True
                    self.kill_pending = True
            self._running_lock.notify_all()
            others_busy = any(r.state != "timed_out" for r in self.running)
        if self.kill_pending and not others_busy:
            self.kill_now()

    def _timed_out(self, running: Running) -> None:
        """Laravel's SIGALRM handler: timeout bookkeeping, then abandon the job."""
        job = running.job
        job.abandon()
        exc = timeout_exceeded(job.name, self.version)
        log.error("%s (id %s, attempt %d) timed out after %ss",
                  job.name, job.id, job.attempts, self._timeout_for(job))
        self.events.emit(JobTimedOut(job))
        try:
            self.process.timed_out(job, exc)
        except Exception:
            log.exception("timeout bookkeeping for %s failed", job.name)
        if not job.has_failed:
            log.warning("%s stays reserved until retry_after expires", job.name)
        with self._running_lock:
            if running.is_async and (running.future is not None or running.task is not None):
                running.cancelled_at = time.monotonic()
                if running.task is not None:
                    running.cancel()
                elif running.future is not None:
                    running.future.cancel()
            else:
                running.settled = True
                self.kill_pending = True
            self._running_lock.notify_all()

    def kill_now(self) -> None:
        """``Worker::kill``: tell the supervisor and the listeners, then SIGKILL this process."""
        log.error("a job timed out in a thread that cannot be interrupted: killing this worker process")
        if self.before_kill is not None:
            with contextlib.suppress(Exception):
                self.before_kill()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        self.kill()
