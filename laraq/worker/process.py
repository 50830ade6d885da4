"""One job from its handler's start to its outcome: Laravel's ``Worker::process``, ``handleJobException``
and the timeout's bookkeeping.

:meth:`Process.run` (a sync handler, on the calling thread) and :meth:`Process.run_async` (an ``async def``
one, a task on the worker's loop) go the same way:

1. no Python handler, or a job only PHP may run: the ``unhandled`` outcome;
2. the command decoded and its models restored; a job PHP must run after all: the ``php`` outcome;
3. ``JobProcessing``; ``markJobAsFailedIfAlreadyExceedsMaxAttempts`` (``retryUntil`` wins over tries);
4. ``CallQueuedHandler::call`` (:class:`laraq.bus.callqueued.CallQueuedHandler`: middleware, ``handle()``,
   then the lock, the chain and the batch);
5. an exception: ``handleJobException`` decides (fail if this attempt was the last or ``maxExceptions``
   is reached, the shared cache counter ``job-exceptions:<uuid>``, so PHP and Python count together;
   else release with the backoff).

The outcome (:class:`~laraq.worker.settle.Outcome`) goes to the settle step once. Who owns it, the
handler's side or the watchdog's, is decided by :meth:`laraq.worker.running.Running.claim`; the watchdog's
side is :meth:`Process.timed_out`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import TYPE_CHECKING, Any

from laraq.bus.job import Job, JobAbandoned
from laraq.logtext import short
from laraq.stores.failed import max_attempts_exceeded
from laraq.worker.events import JobProcessing
from laraq.worker.running import Running, claim
from laraq.worker.settle import DONE, NOTHING, Outcome, Settle

if TYPE_CHECKING:
    from laraq.bus.handlers import Handler
    from laraq.worker.bridge import AsyncBridge
    from laraq.worker.context import WorkerContext

__all__ = ["Process"]

log = logging.getLogger("laraq.worker.worker")

_UNKNOWN: Any = object()


class Process:
    """``Worker::process`` for one worker (see the module)."""

    def __init__(self, context: WorkerContext, bridge: AsyncBridge, settle: Settle,
                 model_loader: Any = None) -> None:
        self.app = context.app
        self.options = context.options
        self.version = context.version
        self.cache = context.cache
        self.events = context.events
        self.callqueued = context.callqueued
        self.bridge = bridge
        self.settle = settle
        self.model_loader = model_loader

    # -- the sync path -------------------------------------------------------------------------------------

    def run(self, job: Job, running: Running | None = None, handler: Any = _UNKNOWN) -> None:
        """Run ``job`` on this thread and settle its outcome (``handler``: the caller's ``app.resolve`` of
        its payload, if it did it already)."""
        outcome = self._outcome(job, running, self.app.resolve(job.payload) if handler is _UNKNOWN else handler)
        if outcome is not None:
            self.settle.settle(job, outcome)

    def _outcome(self, job: Job, running: Running | None, handler: Handler | None) -> Outcome | None:
        before = self._before(job, running, handler)
        if before is not None or handler is None:
            return before
        try:
            exceeded = self._already_exceeded(job)
            if exceeded is not None:
                raise exceeded
            self.callqueued.call(job, handler, self.bridge, running)
            if not claim(running, "finishing"):
                return None
        except (JobAbandoned, concurrent.futures.CancelledError, asyncio.CancelledError):
            if not claim(running, "finishing"):  # cancelled by someone else than the watchdog
                return None
            return self._exception(job, RuntimeError(f"{job.name} was cancelled"))
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt or another BaseException raised by a handler: a job exception
            # like any other (PHP's Throwable); swallowing it would strand the job in :reserved until
            # retry_after with its attempt not counted
            if not claim(running, "finishing"):
                return None
            self._report(job, exc)
            return self._exception(job, exc)
        return self._after(job)

    def _before(self, job: Job, running: Running | None, handler: Handler | None) -> Outcome | None:
        """Steps 1-3 of the module: an outcome when the job does not run here, else None (it runs)."""
        callqueued = self.callqueued
        if handler is None or (job.php_only != "" and callqueued.php_only(job)):  # "": decided, not PHP's
            name = job.payload.command_name or str(job.payload.decoded.get("job") or "") or job.name
            reason = callqueued.php_only(job) or f"No Python handler registered for {name}"
            return Outcome("unhandled", reason=reason) if claim(running, "finishing") else NOTHING
        job.bind(handler, self.settle, self.model_loader)
        php = callqueued.php_reason(job, handler)
        if php is not None:
            return Outcome("php", reason=php) if claim(running, "finishing") else NOTHING
        job.started_at = time.perf_counter()
        self.events.emit(JobProcessing(job))
        return None

    def _after(self, job: Job) -> Outcome:
        """The handler returned and the outcome is ours: what follows it in ``CallQueuedHandler::call``."""
        try:
            self.callqueued.after_success(job)
        except Exception as exc:
            return self._exception(job, exc)
        return DONE

    # -- the async path -------------------------------------------------------------------------------------

    async def run_async(self, job: Job, handler: Handler, running: Running) -> None:
        """:meth:`run` for an ``async def`` handler, as a task on the worker's loop; its blocking bookkeeping
        (an exception's decision, a release, a failure) runs off the loop."""
        if running.task is None:  # started eagerly: the watchdog can cancel it from its first step on
            # the loop named: on 3.11 finding the running loop costs a getpid() system call
            running.task = asyncio.current_task(self.bridge.loop)
        outcome = self._before(job, running, handler)
        if outcome is not None:
            if running.task_done is not None:
                running.task_done.set()
            self.settle.settle(job, outcome)
            return
        off_loop = self.bridge.off_loop
        try:
            try:
                await self.callqueued.call_async(job, handler, off_loop)
            finally:
                if running.task_done is not None:
                    running.task_done.set()
            if not claim(running, "finishing"):
                return
        except (JobAbandoned, asyncio.CancelledError):
            if claim(running, "finishing"):
                await off_loop(self._settle_exception, job, RuntimeError(f"{job.name} was cancelled"))
            return
        except BaseException as exc:  # a handler's exception, SystemExit and KeyboardInterrupt included
            if isinstance(exc, GeneratorExit):
                raise
            if claim(running, "finishing"):
                self._report(job, exc)
                await off_loop(self._settle_exception, job, exc)
            return
        self.settle.settle(job, self._after(job))

    def _settle_exception(self, job: Job, exc: BaseException) -> None:
        self.settle.settle(job, self._exception(job, exc))

    # -- the rules -------------------------------------------------------------------------------------------

    def _report(self, job: Job, exc: BaseException) -> None:
        log.error("%s (id %s, attempt %d) raised %s: %s", job.name, job.id, job.attempts, type(exc).__name__,
                  short(str(exc)), exc_info=(type(exc), exc, exc.__traceback__))

    def _max_tries(self, job: Job) -> int:
        return job.max_tries if job.max_tries is not None else int(self.options.max_tries)

    def precheck_fails(self, job: Job) -> bool:
        """Would ``markJobAsFailedIfAlreadyExceedsMaxAttempts`` fail this job? (no side effects)"""
        get = job.payload.decoded.get
        attempts = get("attempts")
        if type(attempts) is int and get("retryUntil") is None and get("timeoutAt") is None \
                and get("maxTries") is None and 0 <= attempts < int(self.options.max_tries):
            return False  # the usual first attempt: nothing to read twice
        retry_until = job.retry_until
        if retry_until and time.time() <= retry_until:
            return False
        max_tries = self._max_tries(job)
        return bool(retry_until) or not (max_tries == 0 or job.attempts <= max_tries)

    def _already_exceeded(self, job: Job) -> BaseException | None:
        """The ``MaxAttemptsExceededException`` Laravel fails (and throws for) before the handler runs."""
        if not self.precheck_fails(job):
            return None
        exc = max_attempts_exceeded(job.name, self.version)
        if job.mark_failed():
            self.settle.fail(job, exc)
        return exc

    def _will_exceed(self, job: Job) -> bool:
        """``markJobAsFailedIfWillExceedMaxAttempts`` and ``...MaxExceptions``: is this attempt the job's last?
        (The ``maxExceptions`` counter is counted either way, as Laravel counts it.)"""
        retry_until = job.retry_until
        max_tries = self._max_tries(job)
        last = bool(retry_until and retry_until <= time.time()) or \
            (not retry_until and max_tries > 0 and job.attempts >= max_tries)
        if self.cache is not None and job.uuid is not None and job.max_exceptions is not None \
                and job.max_exceptions <= self.cache.job_exceptions_increment(job.uuid):
            self.cache.job_exceptions_forget(job.uuid)
            last = True
        return last

    def _exception(self, job: Job, exc: BaseException) -> Outcome:
        """``handleJobException``: fail, release with the backoff, or nothing left to do."""
        try:
            if not job.has_failed and self._will_exceed(job):
                return Outcome("failed", error=exc)
        except Exception:
            log.exception("could not apply tries/maxExceptions to %s", job.name)
        if job.is_deleted or job.is_released or job.has_failed:
            return NOTHING
        return Outcome("released", delay=job.payload.backoff_seconds(job.attempts, self.options.backoff), error=exc)

    def timed_out(self, job: Job, exc: BaseException) -> None:
        """Laravel's timeout bookkeeping (its ``SIGALRM`` handler), from the watchdog, settled at once: the job
        fails if this attempt was the last, if ``maxExceptions`` is reached, or if it fails on timeout; else it
        stays reserved until ``retry_after``."""
        if self._will_exceed(job) or job.fail_on_timeout:
            self.settle.settle(job, Outcome("failed", error=exc, watchdog=True))
