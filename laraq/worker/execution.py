"""Execution: where and how a job's handler runs, and what happens at its timeout (Laravel's
``Illuminate\\Queue\\Worker`` ``registerTimeoutHandler`` / ``kill`` side, plus laraq's threads and asyncio).

Jobs run on ``--concurrency`` slots: daemon threads on the classic loop; on the batched fast path a
sync handler runs inline at concurrency 1 or on a thread pool, and an ``async def`` handler is a task
on the worker's own event loop. Elsewhere async handlers run on one asyncio loop thread, each awaited
by its slot. A watchdog thread enforces the timeout (payload ``timeout``, else ``--timeout``; 0 =
none). At the deadline it does Laravel's timeout bookkeeping (fail if this attempt was the last, if
``maxExceptions`` is reached, or if ``failOnTimeout``) and abandons the job: unless it failed, the job
stays in ``:reserved`` until ``retry_after`` (what a SIGKILLed PHP worker leaves behind). An async
handler is then cancelled; a sync handler cannot be interrupted, so the worker stops popping, lets the
other slots finish and SIGKILLs its own process, as Laravel's ``Worker::kill`` does; ``laraq work``'s
supervisor starts a new worker process (see :mod:`laraq.cli.work`).

Who wins a job's outcome (handler or watchdog) is decided once, by :meth:`Execution._claim`.
A mixin of :class:`laraq.worker.worker.Worker`: its state is set up by :meth:`Execution._init_execution`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laraq.bus.job import Job
from laraq.stores.failed import timeout_exceeded

try:  # asyncio's own bookkeeping of the running task (CPython 3.11+); without it no task steps early
    from asyncio.tasks import _enter_task, _leave_task
except ImportError:  # pragma: no cover - another asyncio implementation
    _enter_task = _leave_task = None  # type: ignore[assignment]

#: Python 3.12+ starts a task eagerly itself (``asyncio.Task(..., eager_start=True)``): its first step runs
#: in the constructor, with the task current and in its own context, at a fifth of what a scheduled task
#: costs; on 3.11 the worker does the same through :class:`WorkerLoop`.
_NATIVE_EAGER = sys.version_info >= (3, 12)

#: The name of every job's task (``asyncio.current_task().get_name()`` in an ``async def`` handler). A
#: given name also spares CPython 3.11 formatting a ``Task-<n>`` string for each job's task.
JOB_TASK_NAME = "laraq-job"

if TYPE_CHECKING:
    from laraq.bus.handlers import Handler, HandlerRegistry
    from laraq.protocol.versions import LaravelVersion
    from laraq.worker.events import Listeners
    from laraq.worker.output import Output

__all__ = ["Execution", "WorkerLoop", "new_worker_loop", "sigkill_self"]

log = logging.getLogger("laraq.worker.worker")

#: Fast path: housekeeping tick (deferred acks, lease renewal, signals) while jobs run.
_TICK = 0.05


class _Flag:
    """A one-way flag the watchdog polls (``threading.Event``'s ``set``/``is_set`` without its lock).

    Made once per async job, so it has no ``__init__``: its slot stays empty until :meth:`set`."""

    __slots__ = ("_set",)

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return getattr(self, "_set", False)


@dataclass(frozen=True)
class _Raised:
    """A ``SystemExit``/``KeyboardInterrupt`` an async handler raised, carried out of the event loop."""

    exc: BaseException


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(eq=False, slots=True)
class _Running:
    job: Job
    deadline: float | None
    state: str = "running"  # running -> finishing | timed_out
    is_async: bool = False
    task_done: threading.Event | _Flag | None = None
    future: concurrent.futures.Future[Any] | None = None
    cancelled_at: float | None = None
    #: Timed out and done with: bookkeeping finished, and the coroutine unwound or the kill is due.
    settled: bool = False
    #: The task of an async job on the fast path's loop (cancelled from the watchdog through the loop).
    task: asyncio.Task[Any] | None = None

    def cancel(self) -> None:
        """Cancel the job's task (thread-safe: from the watchdog)."""
        task = self.task
        if task is not None:
            task.get_loop().call_soon_threadsafe(task.cancel)


class WorkerLoop(asyncio.SelectorEventLoop):
    """The fast path's event loop: asyncio's selector loop with one hook for :meth:`Execution._start_job`.

    While the worker creates a job's task it sets ``catch_step``; the ``call_soon`` that
    ``asyncio.Task`` makes for its first step then hands (callback, context) to the worker instead of
    queueing a handle, and the worker runs that step at once (what Python 3.12's eager tasks do). Any
    other ``call_soon`` goes to asyncio as usual."""

    catch_step: list[tuple[Any, Any]] | None = None

    def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:
        caught = self.catch_step
        if caught is not None and not args and not caught:
            caught.append((callback, context))
            return None
        return super().call_soon(callback, *args, context=context)


def new_worker_loop() -> asyncio.AbstractEventLoop:
    """:class:`WorkerLoop` under asyncio's default policy; whatever loop an installed policy makes otherwise."""
    policy = asyncio.get_event_loop_policy()
    if type(policy) is asyncio.DefaultEventLoopPolicy and issubclass(policy._loop_factory, asyncio.SelectorEventLoop):  # type: ignore[attr-defined]
        return WorkerLoop()
    return asyncio.new_event_loop()


def sigkill_self() -> None:
    """``Worker::kill``: die by SIGKILL, leaving reserved jobs for ``retry_after``."""
    os.kill(os.getpid(), signal.SIGKILL)


class Execution:
    """The worker's running side (mixin of :class:`laraq.worker.worker.Worker`)."""

    app: HandlerRegistry
    options: Any
    version: LaravelVersion
    events: Listeners
    output: Output
    should_quit: bool
    _wake: threading.Event
    _kill: Callable[[], None]
    _flush_stale_acks: Callable[[], None]

    def _init_execution(self) -> None:
        self._slots = threading.Semaphore(max(1, self.options.concurrency))
        self._tasks: queue_mod.Queue[_Running | None] = queue_mod.Queue()
        self._closed = False
        self._running: set[_Running] = set()
        #: guards _running and each one's state; the per-job paths take the lock itself (``with`` on a
        #: Condition goes through two Python-level calls), waiters use the Condition around it
        self._running_mutex = threading.RLock()
        self._running_lock = threading.Condition(self._running_mutex)
        self._threads_started = False
        self._kill_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._watchdog_started = False
        self._active = 0
        self._waiter: asyncio.Future[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._aux_pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: tasks started in this loop pass that have no done callback yet (see _reap_fresh)
        self._fresh: list[tuple[asyncio.Task[None], _Running, float]] = []
        #: the fast path's daemon task while it runs (new tasks' first steps are run from it)
        self._daemon_task: asyncio.Task[Any] | None = None

    def _start_job(self, job: Job) -> None:
        timeout = self._timeout_for(job)
        running = _Running(job, time.monotonic() + timeout if timeout > 0 else None)
        with self._running_mutex:
            self._running.add(running)
        handler = self.app.resolve(job.payload)
        started = time.perf_counter()
        loop = self._loop
        assert loop is not None
        if handler is not None and handler.is_async and not self._php_only(job) and not self._precheck_fails(job):
            running.is_async = True
            running.task_done = _Flag()
            coro = self._process_async(job, handler, running)
            step: Any = None
            stepped = False
            self._active += 1  # counted before its first step runs: that step may finish it
            try:
                if _NATIVE_EAGER and loop._task_factory is None and self._daemon_task is not None:  # type: ignore[attr-defined]
                    task = running.task = asyncio.Task(coro, loop=loop, name=JOB_TASK_NAME, eager_start=True)  # type: ignore[call-arg]
                    stepped = True
                elif type(loop) is WorkerLoop and loop._task_factory is None and self._daemon_task is not None \
                        and _enter_task is not None:  # type: ignore[attr-defined]
                    caught: list[tuple[Any, Any]] = []
                    loop.catch_step = caught
                    try:
                        task = running.task = asyncio.Task(coro, loop=loop, name=JOB_TASK_NAME)
                    finally:
                        loop.catch_step = None
                    step = caught[0] if caught else None
                else:
                    ready = self._eager_queue(loop)
                    queued = len(ready) if ready is not None else -1
                    # asyncio.Task itself, as loop.create_task makes it when no task factory is set (one call less)
                    task = running.task = asyncio.Task(coro, loop=loop, name=JOB_TASK_NAME) \
                        if loop._task_factory is None else loop.create_task(coro, name=JOB_TASK_NAME)  # type: ignore[attr-defined]
                    if ready is not None and len(ready) == queued + 1:
                        step = ready.pop()
            except BaseException:
                self._active -= 1
                raise
            if step is not None:
                self._step_now(loop, step)
                stepped = True
            if stepped and task.done():  # it never suspended (the usual short job): finished in this pass
                if task.cancelled() or task.exception() is not None or self._waiter is not None:
                    self._task_done(running, started, task)
                else:  # _task_done's common case, without its reporting
                    self._active -= 1
                    self._job_finished(running, started)
                return
            self._fresh.append((task, running, started))
        elif self.options.concurrency == 1 and (handler is None or not handler.is_async):
            try:  # a sync handler at concurrency 1 runs right here: no thread hop
                self.process(job, running, handler)
            except BaseException:
                log.exception("unexpected error while running %s", job.name)
            finally:
                self._job_finished(running, started)
        else:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.options.concurrency,
                                                                   thread_name_prefix="laraq-slot")
            self._active += 1
            future = self._pool.submit(self.process, job, running)
            future.add_done_callback(
                lambda f: loop.call_soon_threadsafe(self._task_done, running, started, f))

    def _eager_queue(self, loop: asyncio.AbstractEventLoop) -> Any:
        """The loop's ready queue, when a new task's first step may be run at once (see :meth:`_step_now`)
        on a loop that is not a :class:`WorkerLoop` (an asyncio ``BaseEventLoop``), from the daemon task."""
        ready = getattr(loop, "_ready", None)
        if type(ready) is not collections.deque or self._daemon_task is None or _enter_task is None:
            return None
        return ready

    def _step_now(self, loop: asyncio.AbstractEventLoop, handle: Any) -> None:
        """Run a just-created task's first step now instead of in the next loop pass (what Python 3.12's
        eager tasks do): the step is the task's own scheduled handle, run in the task's context with the
        task as ``current_task()``, so a handler cannot tell the difference; a job that finishes without
        suspending then costs no loop pass, no wake-up of the daemon and no ``epoll`` call."""
        daemon = self._daemon_task
        _leave_task(loop, daemon)
        try:
            if type(handle) is tuple:  # (callback, context), caught by WorkerLoop
                callback, context = handle
                if context is None:
                    callback()
                else:
                    context.run(callback)
            else:
                handle._run()
        finally:
            _enter_task(loop, daemon)

    def _submit(self, job: Job) -> None:
        self._start_threads()
        self._slots.acquire()
        timeout = self._timeout_for(job)
        running = _Running(job, time.monotonic() + timeout if timeout > 0 else None)
        with self._running_lock:
            self._running.add(running)
        self._tasks.put(running)

    def _wait_for_slot(self) -> None:
        self._slots.acquire()
        self._slots.release()

    def _start_threads(self) -> None:
        if self._threads_started:
            return
        self._threads_started = True
        for i in range(max(1, self.options.concurrency)):
            threading.Thread(target=self._slot_loop, name=f"laraq-slot-{i}", daemon=True).start()
        self._start_watchdog()

    def _slot_loop(self) -> None:
        while True:
            running = self._tasks.get()
            if running is None:
                return
            try:
                self.process(running.job, running)
            except BaseException:  # never let a slot die
                log.exception("unexpected error while running %s", running.job.name)
            finally:
                with self._running_lock:
                    if running.state != "timed_out":
                        self._running.discard(running)
                    self._running_lock.notify_all()
                self._slots.release()

    def _fire(self, job: Job, handler: Handler, running: _Running | None) -> None:
        argument = self._decode(job, handler)
        if not handler.is_async:
            handler.func(argument, job)
            return
        done = threading.Event()

        async def runner() -> Any:
            try:
                return await handler.func(argument, job)  # type: ignore[misc]
            except (SystemExit, KeyboardInterrupt) as exc:
                # asyncio re-raises these out of the loop (killing its thread): hand them over instead
                return _Raised(exc)
            finally:
                done.set()

        future = asyncio.run_coroutine_threadsafe(runner(), self._event_loop())
        if running is not None:
            running.is_async, running.task_done, running.future = True, done, future
        result = future.result()
        if isinstance(result, _Raised):
            raise result.exc

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="laraq-asyncio", daemon=True).start()
            self._loop = loop
        return self._loop

    async def _off_loop(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run blocking bookkeeping (release, fail, failed callbacks) off the loop thread."""
        if self._aux_pool is None:
            self._aux_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="laraq-aux")
        assert self._loop is not None
        return await self._loop.run_in_executor(self._aux_pool, func, *args)

    def _run_coroutine(self, coro: Any, timeout: float | None) -> Any:
        """Run a coroutine to completion from synchronous code (a ``failed`` callback)."""
        if self._loop is not None and self._loop_thread == threading.get_ident():
            # on the fast path's own loop thread (a sync job run inline): a private loop elsewhere
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                return ex.submit(asyncio.run, coro).result(timeout)
        return asyncio.run_coroutine_threadsafe(coro, self._event_loop()).result(timeout)

    def _reap_fresh(self) -> None:
        """Finish the bookkeeping of this pass's tasks that are done; the others get a done callback."""
        fresh, self._fresh = self._fresh, []
        for task, running, started in fresh:
            if task.done():
                self._task_done(running, started, task)
            else:
                task.add_done_callback(functools.partial(self._task_done, running, started))

    def _task_done(self, running: _Running, started: float, future: Any = None) -> None:
        """A job of a task or of the thread pool finished (on the loop thread)."""
        self._active -= 1
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

    def _job_finished(self, running: _Running, started: float) -> None:
        lock = self._running_lock
        with self._running_mutex:
            if running.state != "timed_out":
                self._running.discard(running)
            if lock._waiters:  # type: ignore[attr-defined]  # nobody waits on the fast path: skip notify
                lock.notify_all()
        took = time.perf_counter() - started
        avg = self._avg_duration
        self._avg_duration = took if avg is None else avg * 0.8 + took * 0.2

    async def _yield(self) -> None:
        """One pass of the event loop (the tasks that are ready run), held output written first."""
        self.output.flush()
        await asyncio.sleep(0)

    async def _wait_changed(self, timeout: float) -> None:
        """Wait until a job finishes or ``timeout`` passes (a quit signal is seen within ``_TICK``)."""
        self.output.flush()
        if self._fresh:
            self._reap_fresh()
        loop = self._loop
        assert loop is not None
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        handle = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiter = None

    async def _idle(self, seconds: float) -> None:
        """Sleep ``seconds`` without stalling running tasks; wakes early for signals."""
        if seconds <= 0:
            return
        self.output.flush()
        if self._fresh:
            self._reap_fresh()
        self._flush_acks(force=True)
        self._wake.clear()
        deadline = time.monotonic() + seconds
        while not self.should_quit and not self._wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._active == 0 and left > _TICK and not self._running:
                self._wake.wait(min(left, 0.5))
            else:
                await self._wait_changed(min(left, _TICK))
                self._housekeeping()

    def _drain(self) -> None:
        """Wait until every job has finished or settled after its timeout; then die if one cannot stop."""
        with self._running_lock:
            while any(r.state != "timed_out" or not r.settled for r in self._running):
                self._running_lock.wait(0.2)
        if self._kill_pending:
            self._kill_now()

    def close(self) -> None:
        """Stop the idle slot threads and the watchdog (for embedding; the CLI just exits)."""
        self._closed = True
        if self._threads_started:
            for _ in range(max(1, self.options.concurrency)):
                self._tasks.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _claim(self, running: _Running | None, state: str) -> bool:
        """Move ``running`` out of "running"; False if the other side (handler or watchdog) won."""
        if running is None:
            return True
        with self._running_mutex:
            if running.state != "running":
                return False
            running.state = state
            return True

    def _timeout_for(self, job: Job) -> int:
        return job.timeout if job.timeout is not None else self.options.timeout

    def _start_watchdog(self) -> None:
        if self._watchdog_started:
            return
        self._watchdog_started = True
        threading.Thread(target=self._watchdog_loop, name="laraq-watchdog", daemon=True).start()

    def _watchdog_loop(self) -> None:
        while not self._closed:
            time.sleep(0.05)
            try:
                self._watchdog_tick()
                self._flush_stale_acks()
            except Exception:  # the watchdog must survive anything
                log.exception("watchdog error")

    def _watchdog_tick(self) -> None:
        now = time.monotonic()
        with self._running_lock:
            expired = [r for r in self._running
                       if r.state == "running" and r.deadline is not None and now >= r.deadline]
        for running in expired:
            if self._claim(running, "timed_out"):
                self._timed_out(running)
        with self._running_lock:
            for r in list(self._running):
                if r.state != "timed_out" or r.cancelled_at is None or r.task_done is None:
                    continue
                if r.task_done.is_set():  # the cancelled coroutine unwound: its slot is free
                    self._running.discard(r)
                elif now - r.cancelled_at > self.options.cancel_grace and not r.settled:
                    log.error("%s ignored its cancellation", r.job.name)
                    r.settled = True
                    self._kill_pending = True
            self._running_lock.notify_all()
            others_busy = any(r.state != "timed_out" for r in self._running)
        if self._kill_pending and not others_busy:
            self._kill_now()

    def _timed_out(self, running: _Running) -> None:
        """Laravel's SIGALRM handler: timeout bookkeeping, then abandon the job."""
        job = running.job
        job.abandon()
        exc = timeout_exceeded(job.name, self.version)
        log.error("%s (id %s, attempt %d) timed out after %ss",
                  job.name, job.id, job.attempts, self._timeout_for(job))
        self.events.emit("job_timed_out", job)
        try:
            self._fail_if_will_exceed_max_attempts(job, exc, force=True)
            self._fail_if_will_exceed_max_exceptions(job, exc, force=True)
            if job.fail_on_timeout:
                job.fail_internal(exc, from_watchdog=True)
        except Exception:
            log.exception("timeout bookkeeping for %s failed", job.name)
        if not job.has_failed:
            log.warning("%s stays reserved until retry_after expires", job.name)
        with self._running_lock:
            if running.is_async and (running.future is not None or running.task is not None):
                running.cancelled_at = time.monotonic()
                if running.task is not None:
                    running.cancel()
                else:
                    running.future.cancel()  # type: ignore[union-attr]
            else:
                running.settled = True
                self._kill_pending = True
            self._running_lock.notify_all()

    def _kill_now(self) -> None:
        with contextlib.suppress(Exception):
            self._report_popped(force=True)
        log.error("a job timed out in a thread that cannot be interrupted: killing this worker process")
        with contextlib.suppress(Exception):
            self._announce_stop(1)  # Laravel's kill(EXIT_ERROR) fires WorkerStopping first
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        self._kill()
