"""The job lifecycle: what happens around a handler, as Laravel's ``Illuminate\\Queue\\Worker::process``
and ``Illuminate\\Queue\\CallQueuedHandler`` do it.

Owns, for the worker: the pre-run max-attempts check (``retryUntil`` wins over tries), decoding the
command (decrypting an encrypted one), success (release the unique lock unless the job released
itself, delete unless released/deleted/failed), a handler's exception (fail if this was the last
attempt or ``maxExceptions`` is reached - the shared cache counter ``job-exceptions:<uuid>``, so PHP
and Python count together - else release with the backoff), failing (``Job::fail``'s ``JobFailed``
side: Python ``failed`` callback, ShouldBeUnique lock release, a ``failed_jobs`` row with the original
body, or the job parked in Redis until that row can be written: laraq.stores.parked), and jobs without a Python handler
(``--unhandled``: requeued untouched, released, or failed). Every outcome is announced once through
the worker's :mod:`laraq.worker.events` listeners.

:class:`Lifecycle` is built with the worker's :class:`~laraq.worker.context.WorkerContext` and a
:class:`HandlerRunner` (:class:`laraq.worker.bridge.AsyncBridge`: where an ``async def`` handler and
blocking bookkeeping run). The executor calls it through :class:`laraq.worker.execution.JobRules`, the
reservation source through :class:`laraq.worker.reservation.Failures`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from laraq.bus import middleware, models, schema
from laraq.bus.job import Job, JobAbandoned, ManuallyFailedError, UnhandledJobError
from laraq.protocol.payload import PayloadError
from laraq.protocol.phparray import loads_php_arrays, php_arrays
from laraq.protocol.serializer import PHPSerializeError
from laraq.stores.failed import format_exception, max_attempts_exceeded
from laraq.stores.parked import ParkedFailures
from laraq.worker.context import REDIS_DOWN, CacheLike, UnhandledPolicy, WorkerContext
from laraq.worker.logtext import short
from laraq.worker.parking import ParkingListener
from laraq.worker.running import Running, claim

if TYPE_CHECKING:
    from laraq.bus.handlers import Handler

__all__ = ["CacheLike", "HandlerRunner", "Lifecycle", "UnhandledPolicy"]

log = logging.getLogger("laraq.worker.worker")

T = TypeVar("T")

_REDIS_DOWN = REDIS_DOWN
_UNKNOWN: Any = object()


class HandlerRunner(Protocol):
    """Where a handler and blocking bookkeeping run (:class:`laraq.worker.bridge.AsyncBridge`)."""

    def call(self, handler: Handler, argument: Any, job: Job, running: Running | None) -> None:
        """Run ``handler`` to completion from a slot thread (an ``async def`` one on the asyncio thread)."""

    async def off_loop(self, func: Callable[..., T], *args: Any) -> T:
        """Run blocking ``func`` off the event loop's thread."""

    def run_coroutine(self, coro: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
        """Run ``coro`` to completion from synchronous code."""


#: A non-empty ``debounceOwner`` property in a serialized command (13.6+ debounce).
_DEBOUNCED = re.compile(r's:13:"debounceOwner";s:[1-9][0-9]*:')


class Lifecycle:
    """The worker's per-job rules: Laravel's ``Worker::process`` and ``CallQueuedHandler`` around a handler."""

    def __init__(self, context: WorkerContext, runner: HandlerRunner) -> None:
        self.context = context
        self.app = context.app
        self.queue = context.queue
        self.options = context.options
        self.version = context.version
        self.cache = context.cache
        self.failer = context.failer
        self.encrypter = context.encrypter
        self.events = context.events
        self.callqueued = context.callqueued
        self.model_loader = context.model_loader
        self.runner = runner
        self._failer_lock = threading.Lock()
        #: failures whose failed_jobs row waits for the store; flushed at start and on a timer
        self.parked = ParkingListener(ParkedFailures(context.queue, context.failer), context.queues)
        context.events.add(self.parked)

    def process(self, job: Job, running: Running | None = None, handler: Any = _UNKNOWN) -> None:
        """Laravel's ``Worker::process`` for one job (``running`` ties it to the watchdog; ``handler``:
        the caller's ``app.resolve`` of this payload, if it did it already)."""
        if handler is _UNKNOWN:
            handler = self.app.resolve(job.payload)
        if handler is None or self.php_only(job):
            self._unhandled(job)
            claim(running, "finishing")
            return
        job.handler, job.app_db = handler, self.model_loader
        if self._sent_to_php(job, handler):
            claim(running, "finishing")
            return
        self._processing(job)
        try:
            self._fail_if_already_exceeds_max_attempts(job)
            if job.restore_error is not None:
                self._settle_missing_model(job)
            if job.is_deleted:
                if claim(running, "finishing"):
                    self._processed(job)
                return
            self.callqueued.before_handle(job)
            gate = middleware.enter(job, self.cache, self.app.rate_limiters) if self.callqueued.facts(job).middleware else None
            try:
                if gate is None or gate.proceed:
                    self.runner.call(handler, self.decode(job, handler), job, running)
                    if gate is not None:
                        gate.succeeded()
            except Exception as exc:  # a ThrottlesExceptions around the handler may take it (PHP's catch)
                if gate is None or isinstance(exc, JobAbandoned) or not gate.caught(job, exc):
                    raise
            finally:
                if gate is not None:
                    gate.exit()
            if not claim(running, "finishing"):
                return
            self._after_success(job, handler)
            self._processed(job)
        except (JobAbandoned, concurrent.futures.CancelledError, asyncio.CancelledError):
            if claim(running, "finishing"):  # cancelled by someone else than the watchdog
                self.handle_job_exception(job, RuntimeError(f"{job.name} was cancelled"))
        except Exception as exc:
            if not claim(running, "finishing"):
                return
            self._report(job, exc)
            self.handle_job_exception(job, exc)
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt or another BaseException raised by a handler: a job
            # exception like any other (PHP's Throwable); swallowing it would strand the job in
            # :reserved until retry_after with its attempt not counted
            if not claim(running, "finishing"):
                return
            self._report(job, exc)
            self.handle_job_exception(job, exc)

    async def process_async(self, job: Job, handler: Handler, running: Running) -> None:
        """:meth:`process` for an async handler, as a task on the fast path's loop (pre-check done)."""
        if running.task is None:  # started eagerly (3.12+): the watchdog can cancel it from its first step on
            running.task = asyncio.current_task()
        job.handler, job.app_db = handler, self.model_loader
        if self._sent_to_php(job, handler):
            claim(running, "finishing")
            if running.task_done is not None:
                running.task_done.set()
            return
        self._processing(job)
        try:
            try:
                argument = self.decode(job, handler)
                if job.restore_error is not None:  # raises unless the job is deleted
                    await self.runner.off_loop(self._settle_missing_model, job)
                else:
                    self.callqueued.before_handle(job)
                    gate = middleware.enter(job, self.cache, self.app.rate_limiters) if self.callqueued.facts(job).middleware else None
                    try:
                        if gate is None or gate.proceed:
                            await handler.func(argument, job)
                            if gate is not None:
                                await self.runner.off_loop(gate.succeeded)
                    except Exception as exc:  # as in process(): a ThrottlesExceptions may take it
                        if gate is None or isinstance(exc, JobAbandoned) or not await self.runner.off_loop(
                                gate.caught, job, exc):
                            raise
                    finally:
                        if gate is not None:
                            gate.exit()
            finally:
                if running.task_done is not None:
                    running.task_done.set()
            if not claim(running, "finishing"):
                return
            if job.restore_error is None:
                self._after_success(job, handler)
            self._processed(job)
        except (JobAbandoned, asyncio.CancelledError):
            if claim(running, "finishing"):
                await self.runner.off_loop(self.handle_job_exception, job, RuntimeError(f"{job.name} was cancelled"))
        except BaseException as exc:  # a handler's exception, SystemExit and KeyboardInterrupt included
            if isinstance(exc, GeneratorExit):
                raise
            if not claim(running, "finishing"):
                return
            self._report(job, exc)
            await self.runner.off_loop(self.handle_job_exception, job, exc)

    def decode(self, job: Job, handler: Handler) -> Any:
        """The handler's first argument: the unserialized (decrypted) command, or ``data``."""
        if job.command is not None:
            return job.command
        if handler.kind == "string":
            job.command = php_arrays(job.payload.data)
            return job.command
        text = job.payload.command
        if text is None:
            raise PayloadError(f"{job.name} (uuid {job.uuid}) has no data.command to unserialize")
        raw: bytes | str
        if job.payload.is_encrypted_command:
            if self.encrypter is None:
                raise RuntimeError(f"Unable to extract job payload: {job.name} is encrypted and APP_KEY is not set")
            try:
                raw = self.encrypter.decrypt(text, unserialize=True)
            except Exception as exc:
                raise RuntimeError(f"Cannot decrypt the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        else:
            raw = text  # the str itself: an ASCII command is read in place, without a copy at the peak
        try:
            job.command = loads_php_arrays(raw)
        except PHPSerializeError as exc:
            raise PHPSerializeError(f"Cannot unserialize the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        return job.command

    def _after_success(self, job: Job, handler: Handler) -> None:
        """CallQueuedHandler after ``handle()``: unique lock, next chain step, batch (see
        :mod:`laraq.bus.callqueued`), then delete unless released. If that hand-over cannot be made, the
        job is released like after an exception, never deleted with its chain lost."""
        if not job.is_released and not job.has_failed:
            try:
                self.callqueued.after_success(job)
            except Exception as exc:
                log.error("%s (uuid %s) ran, but what follows it could not be queued: %s",
                          job.name, job.uuid, exc)
                self.handle_job_exception(job, exc)
                return
        if not job.is_deleted_or_released and not job.has_failed:
            self.retrying(job.delete)

    def _sent_to_php(self, job: Job, handler: Handler) -> bool:
        """Decode the command; True if the job was sent back to PHP because laraq cannot finish it.
        (A command that cannot be decoded fails later, in the handler's run, as before.)"""
        if handler.kind != "command":
            return False
        try:
            self.decode(job, handler)
        except Exception:
            return False
        reason = self.callqueued.unsupported(job) or schema.handler_reason(
            self.app.job_schemas.get(handler.name), handler)
        if reason is None and self.callqueued.facts(job).middleware:
            reason = middleware.unsupported(job, self.cache, self.app.rate_limiters)
        if reason is None:
            facts = self.callqueued.facts(job)
            reason = models.prepare(job, self.model_loader, self.app.enums,
                                    php_settles=facts.batch_id is not None or facts.unique_id is not None
                                    or bool(handler.unique))
        if reason is None:
            return False
        if self.retrying(lambda: self.callqueued.send_to_php(job, reason, self.context.queues)):
            self.events.emit("job_unhandled", job, "requeue", f"moved to the PHP queue: {reason}")
            return True
        delay = max(1, int(self.options.unhandled_delay))
        self.retrying(lambda: self.put_back(job, delay))
        detail = f"requeued untouched in {delay}s for PHP: {reason}"
        log.error("%s (id %s on %s): %s", job.name, job.id, job.queue, detail)
        self.events.emit("job_unhandled", job, "requeue", detail)
        return True

    def _settle_missing_model(self, job: Job) -> None:
        """``CallQueuedHandler::handleModelNotFound`` (see :func:`laraq.bus.models.settle`)."""
        models.settle(job, self.app.job_schemas.get(getattr(job.handler, "name", "")), self.retrying)

    def _processing(self, job: Job) -> None:
        """Laravel's ``JobProcessing``: the handler is about to run."""
        job.started_at = time.perf_counter()
        self.events.emit("job_processing", job)

    def _processed(self, job: Job) -> None:
        """Laravel's ``JobProcessed`` (a job that released itself is announced as released first)."""
        if job.is_released:
            self.events.emit("job_released", job, job.release_delay, None)
        started = job.started_at
        self.events.emit("job_processed", job, 0.0 if started is None else time.perf_counter() - started)

    def _report(self, job: Job, exc: BaseException) -> None:
        log.error("%s (id %s, attempt %d) raised %s: %s", job.name, job.id, job.attempts,
                  type(exc).__name__, short(str(exc)), exc_info=(type(exc), exc, exc.__traceback__))

    def _max_tries(self, job: Job) -> int:
        return job.max_tries if job.max_tries is not None else int(self.options.max_tries)

    def precheck_fails(self, job: Job) -> bool:
        """Would :meth:`_fail_if_already_exceeds_max_attempts` fail this job? (no side effects)"""
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

    def _fail_if_already_exceeds_max_attempts(self, job: Job) -> None:
        retry_until = job.retry_until
        if retry_until and time.time() <= retry_until:
            return
        max_tries = self._max_tries(job)
        if not retry_until and (max_tries == 0 or job.attempts <= max_tries):
            return
        exc = max_attempts_exceeded(job.name, self.version)
        job.fail(exc)
        raise exc

    def _fail_if_will_exceed_max_attempts(self, job: Job, exc: BaseException, *, force: bool = False) -> None:
        retry_until = job.retry_until
        if retry_until and retry_until <= time.time():
            job.fail_internal(exc, from_watchdog=force)
        max_tries = self._max_tries(job)
        if not retry_until and max_tries > 0 and job.attempts >= max_tries:
            job.fail_internal(exc, from_watchdog=force)

    def _fail_if_will_exceed_max_exceptions(self, job: Job, exc: BaseException, *, force: bool = False) -> None:
        if self.cache is None or job.uuid is None or job.max_exceptions is None:
            return
        if job.max_exceptions <= self.cache.job_exceptions_increment(job.uuid):
            self.cache.job_exceptions_forget(job.uuid)
            job.fail_internal(exc, from_watchdog=force)

    def handle_job_exception(self, job: Job, exc: BaseException) -> None:
        try:
            if not job.has_failed:
                self._fail_if_will_exceed_max_attempts(job, exc)
                self._fail_if_will_exceed_max_exceptions(job, exc)
        except Exception:
            log.exception("could not apply tries/maxExceptions to %s", job.name)
        finally:
            if not (job.is_deleted or job.is_released or job.has_failed):
                backoff = job.payload.backoff_seconds(job.attempts, self.options.backoff)
                self.retrying(lambda: job.release(backoff))
                self.events.emit("job_released", job, backoff, exc)

    def timed_out(self, job: Job, exc: BaseException) -> None:
        """Laravel's timeout bookkeeping (its ``SIGALRM`` handler), from the watchdog: fail the job if this
        attempt was the last, if ``maxExceptions`` is reached, or if it fails on timeout."""
        self._fail_if_will_exceed_max_attempts(job, exc, force=True)
        self._fail_if_will_exceed_max_exceptions(job, exc, force=True)
        if job.fail_on_timeout:
            job.fail_internal(exc, from_watchdog=True)

    def job_failed(self, job: Job, exc: BaseException | None) -> None:
        """The ``JobFailed`` side of ``Job::fail``: callback, unique lock, ``failed_jobs`` row, event."""
        error = exc if exc is not None else ManuallyFailedError("")
        text = format_exception(error, job_name=job.name)
        # The row first. If failed_jobs cannot be written the job is parked in Redis with its failure
        # (laraq.stores.parked) and the row is written when the store is back: the attempt was real, so
        # the handler never runs again. Only if Redis refuses the parking too does it go back on :delayed.
        try:
            self.log_failed(job.connection, job.queue, job.body, text)
        except Exception as log_exc:
            if not self.parked.park_job(job, text, log_exc):
                self.retrying(lambda: self.put_back(job, 60, require_reservation=False))
                self.events.emit("job_released", job, 60, error)
                return
        try:
            callback = None if job.restore_error is not None else self.app.failed_callback(job.payload)
            if callback is not None:
                result = callback(job.command, job, error)
                if asyncio.iscoroutine(result):
                    self.runner.run_coroutine(result, self.options.timeout or None)
        except Exception:
            log.exception("the failed() callback of %s raised", job.name)
        finally:
            self._php_side_of_failure(job, error)
            log.warning("%s (uuid %s) failed: %s", job.name, job.uuid, short(text.partition("\n")[0]))
            started = job.started_at
            self.events.emit("job_failed", job, error,
                             None if started is None else time.perf_counter() - started)

    def _php_side_of_failure(self, job: Job, error: BaseException) -> None:
        """``CallQueuedHandler::failed``: unique lock, batch, chain catch callbacks, PHP ``failed()``."""
        handler = job.handler
        try:
            if job.command is None and handler is not None and handler.kind == "command":
                self.decode(job, handler)  # failed before it ran (max attempts): still PHP's failed()
        except Exception as exc:
            log.warning("%s (uuid %s): cannot read its command for the failure steps: %s", job.name, job.uuid, exc)
        if isinstance(job.restore_error, models.ModelNotFoundError):
            return  # PHP cannot rebuild the command either: no failed(), catch or batch step runs
        try:
            self.retrying(lambda: self.callqueued.after_failure(job, error))
        except Exception as exc:
            log.error("%s (uuid %s): could not hand its failure steps (chain catch, batch, failed()) to PHP: %s",
                      job.name, job.uuid, exc)

    def log_failed(self, connection: str, queue: str, body: bytes, text: str) -> None:
        if self.failer is None:
            return
        with self._failer_lock:
            self.failer.log(connection, queue, body, text)

    def php_only(self, job: Job) -> str | None:
        """Why only PHP's ``CallQueuedHandler`` can run this job as meant, or None.

        A debounced job (13.6+ ``#[DebounceFor]``: a non-empty ``debounceOwner`` in its command) must be
        deleted unsent when a newer dispatch superseded it, which is decided by the job's own
        ``debounceId()``/``debounceVia()`` PHP methods; laraq cannot evaluate them, so the job goes back
        to PHP through the ``--unhandled`` policy, loudly, instead of running superseded copies.
        The verdict is kept on the job: the executor, ``process`` and ``_unhandled`` all ask, and an
        encrypted command is decrypted for it once.
        """
        if job.php_only is None:
            job.php_only = self._php_only_reason(job) or ""
        return job.php_only or None

    def _php_only_reason(self, job: Job) -> str | None:
        text = job.payload.command
        if not text or not self.version.since("13.6"):
            return None
        if job.payload.is_encrypted_command:
            if self.encrypter is None:
                return None  # the decode step reports the missing key
            try:
                text = self.encrypter.decrypt(text, unserialize=True).decode("utf-8", "replace")
            except Exception:
                return None  # the decode step reports it
        if _DEBOUNCED.search(text):
            return (f"{job.name} is debounced (#[DebounceFor], Laravel 13.6+): only PHP can tell whether a "
                    "newer dispatch superseded it")
        return None

    def _unhandled(self, job: Job) -> None:
        name = job.payload.command_name or str(job.payload.decoded.get("job") or "") or job.name
        reason = self.php_only(job) or f"No Python handler registered for {name}"
        policy = self.options.unhandled
        delay = max(1, int(self.options.unhandled_delay))
        if self.php_only(job) and self.retrying(lambda: self.callqueued.send_to_php(job, reason, self.context.queues)):
            self.events.emit("job_unhandled", job, "requeue", f"moved to the PHP queue: {reason}")
            return
        if policy == "fail":
            self.events.emit("job_unhandled", job, "fail", reason)
            job.fail(UnhandledJobError(reason))
            return
        if policy == "release":
            self.retrying(lambda: job.release(delay))
            detail = f"released for {delay}s"
        else:  # requeue; leave, when a job without a handler was taken all the same (PHP-only, say)
            self.retrying(lambda: self.put_back(job, delay))
            detail = f"requeued untouched in {delay}s"
        log.warning("%s (id %s on %s): %s", reason, job.id, job.queue, detail)
        self.events.emit("job_unhandled", job, "requeue" if policy == "leave" else policy, detail)

    def put_back(self, job: Job, delay: int, *, require_reservation: bool = True) -> None:
        """Put the original body back on ``:delayed`` (attempts not burned)."""
        keys = self.queue.keys(job.queue)
        if require_reservation:
            self.queue.scripts.requeue(keys.reserved, keys.delayed, job.reserved, self.queue.available_at(delay),
                                       job.body)
        else:
            self.queue.client.zadd(keys.delayed, {job.body: self.queue.available_at(delay)})

    def retrying(self, action: Callable[[], T], attempts: int = 4) -> T | None:
        """Run a Redis write, retrying while Redis is unreachable (the outcome is known; keep it)."""
        delay = 0.5
        for attempt in range(attempts):
            try:
                return action()
            except _REDIS_DOWN as exc:
                if attempt == attempts - 1:
                    log.error("Redis write failed after %d attempts (%s): the job stays reserved "
                              "until retry_after", attempts, exc)
                    return None
                time.sleep(delay)
                delay *= 2
        return None
