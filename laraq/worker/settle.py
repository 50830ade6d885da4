"""The settle step: what a job's outcome does in Redis, in the failed store and for the listeners.

Running a job (:mod:`laraq.worker.process`) ends in an :class:`Outcome`, a value: done, released with a
delay, failed with an error, handed to PHP, left for PHP (no Python handler), or nothing left to do (the
job failed itself, or stays reserved after its timeout). :meth:`Settle.settle` carries it out, once, as
dramatiq's ``post_process_message`` does, and announces it (:mod:`laraq.worker.events`):

* **done**: the ack (``Job::delete``'s ``ZREM``, :class:`~laraq.protocol.acks.Acks`) unless the handler
  deleted, released or failed the job itself;
* **released**: Laravel's release script (``ZREM`` + ``ZADD :delayed``), the attempt counted;
* **failed**: ``Job::fail``: the reservation goes, the ``failed_jobs`` row is written (or the failure is
  parked in Redis until the store is back: :mod:`laraq.stores.parked`), then ``CallQueuedHandler::failed``
  (the Python callback, PHP's ``failed()`` side);
* **php** / **unhandled**: the job goes back to PHP untouched (the PHP queue, or its own queue after
  ``--unhandled-delay``), or by the ``--unhandled`` policy.

:class:`Settle` is also each job's :class:`~laraq.bus.job.JobActions`: a handler's own ``delete()``,
``release()`` and ``fail()`` do the same work, at the moment they are called, as in Laravel. Redis writes
whose outcome is decided are retried while Redis is away (:func:`~laraq.protocol.redis_retry.retrying`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laraq.bus.job import Delay, Job, ManuallyFailedError, UnhandledJobError
from laraq.logtext import short
from laraq.protocol.payload import PayloadError, leading_uuid
from laraq.protocol.redis_retry import retrying
from laraq.stores.failed import format_exception
from laraq.stores.parked import ParkedFailures
from laraq.worker.events import JobFailed, JobProcessed, JobReleased, JobUnhandled

if TYPE_CHECKING:
    from laraq.protocol.acks import Acks
    from laraq.protocol.queue import ReservedJob
    from laraq.protocol.reserve import Reserving
    from laraq.worker.bridge import AsyncBridge
    from laraq.worker.context import WorkerContext

__all__ = ["DONE", "NOTHING", "Outcome", "Settle"]

log = logging.getLogger("laraq.worker.worker")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job's run ended (see the module)."""

    #: ``done``, ``released``, ``failed``, ``php``, ``unhandled`` or ``none``
    kind: str
    #: seconds before a released job is due again
    delay: int = 0
    error: BaseException | None = None
    #: why the job goes back to PHP
    reason: str = ""
    #: the watchdog's failure of a job that timed out (it may fail an abandoned job)
    watchdog: bool = False


DONE = Outcome("done")
NOTHING = Outcome("none")


class Settle:
    """Carries out outcomes, and is every job's :class:`~laraq.bus.job.JobActions` (see the module)."""

    def __init__(self, context: WorkerContext, acks: Acks, reserving: Reserving, bridge: AsyncBridge) -> None:
        self.context = context
        self.options = context.options
        self.events = context.events
        self.callqueued = context.callqueued
        self.queue = context.queue
        self.failer = context.failer
        self.acks = acks
        self.reserving = reserving
        self.bridge = bridge
        #: failures whose failed_jobs row waits for the store; written at start and on a timer
        self.parked = ParkedFailures(context.queue, context.failer, context.queues)
        context.events.add(self.parked)

    def settle(self, job: Job, outcome: Outcome) -> None:
        kind = outcome.kind
        if kind == "done":
            if not (job.is_deleted_or_released or job.has_failed) and job.mark_deleted():
                self.delete(job)
            events = self.events
            if job.is_released:
                events.emit(JobReleased(job, job.release_delay, None))
            started = job.started_at
            events.emit(JobProcessed(job, 0.0 if started is None else time.perf_counter() - started))
        elif kind == "released":
            if job.mark_released(outcome.delay):
                self.release(job, outcome.delay)
            self.events.emit(JobReleased(job, outcome.delay, outcome.error))
        elif kind == "failed":
            if job.mark_failed(from_watchdog=outcome.watchdog):
                self.fail(job, outcome.error)
        elif kind == "php":
            self._to_php(job, outcome.reason)
        elif kind == "unhandled":
            self._unhandled(job, outcome.reason)

    # -- JobActions -------------------------------------------------------------------------------------

    def delete(self, job: Job) -> None:
        """The ack: held until the loop's next start or wait when the loop runs before any job starts (its
        own thread, a slot thread: see :mod:`laraq.protocol.acks`), else written at once."""
        self.acks.ack(job.queue, job.reserved, hold=self.bridge.loop_follows())

    def release(self, job: Job, delay: Delay) -> None:
        retrying(lambda: self.queue.release(job.reserved_job, delay))

    def fail(self, job: Job, exc: BaseException | None) -> None:
        """``Job::fail`` once marked failed: the reservation goes, then the failure is recorded."""
        try:
            retrying(lambda: self.queue.delete_reserved(job.reserved_job))
        finally:
            self._failed(job, exc)

    # -- failures ---------------------------------------------------------------------------------------

    def _failed(self, job: Job, exc: BaseException | None) -> None:
        """The ``JobFailed`` side: the ``failed_jobs`` row first, then ``CallQueuedHandler::failed``. If the
        row cannot be written the job is parked in Redis with its failure and the row is written when the
        store is back: the attempt was real, so the handler never runs again. Only if Redis refuses the
        parking too does it go back on ``:delayed``."""
        error = exc if exc is not None else ManuallyFailedError("")
        text = format_exception(error, job_name=job.name)
        try:
            if self.failer is not None:
                self.failer.log(job.connection, job.queue, job.body, text)
        except Exception as log_exc:
            if not self.parked.park_job(job, text, log_exc):
                retrying(lambda: self.reserving.put_back(job.reserved_job, 60))
                self.events.emit(JobReleased(job, 60, error))
                return
        try:
            self.callqueued.failed(job, error, self._run_callback)
        finally:
            log.warning("%s (uuid %s) failed: %s", job.name, job.uuid, short(text.partition("\n")[0]))
            started = job.started_at
            self.events.emit(JobFailed(job, error, None if started is None else time.perf_counter() - started))

    def _run_callback(self, coro: object) -> object:
        """An ``async def`` failed callback, run to its end (within ``--timeout``)."""
        return self.bridge.run_coroutine(coro, self.options.timeout or None)  # type: ignore[arg-type]

    def unreadable(self, reserved: ReservedJob, exc: PayloadError) -> None:
        """A reservation whose body Python cannot read: to ``failed_jobs`` with a clear reason (released for
        60 s when that row cannot be written)."""
        uuid = leading_uuid(reserved.body)
        named = f" (uuid {uuid})" if uuid else ""
        error = exc if hasattr(exc, "php_class") else \
            PayloadError(f"laraq cannot read the job payload on queue {reserved.queue}{named}: {exc}")
        try:
            if self.failer is not None:
                self.failer.log(self.context.connection_name, reserved.queue, reserved.body, format_exception(error))
            self.queue.delete_reserved(reserved)
            log.error("%s: moved to failed_jobs", error)
        except Exception as log_exc:
            log.error("%s; could not write failed_jobs (%s): released for 60s", error, log_exc)
            retrying(lambda: self.queue.release(reserved, 60))

    # -- back to PHP ------------------------------------------------------------------------------------

    def _moved_to_php(self, job: Job, reason: str) -> bool:
        """Move ``job`` untouched to the PHP queue; False when there is none (see PhpSteps.send_to_php)."""
        steps = self.callqueued.steps
        if not retrying(lambda: steps.send_to_php(job, reason, self.context.queues)):
            return False
        self.events.emit(JobUnhandled(job, "requeue", f"moved to the PHP queue: {reason}"))
        return True

    def _requeue(self, job: Job, delay: int) -> None:
        retrying(lambda: self.reserving.requeue(job.reserved_job, delay))

    def _to_php(self, job: Job, reason: str) -> None:
        """A job Python has a handler for but cannot run as PHP would: back to PHP untouched."""
        if self._moved_to_php(job, reason):
            return
        delay = max(1, int(self.options.unhandled_delay))
        self._requeue(job, delay)
        detail = f"requeued untouched in {delay}s for PHP: {reason}"
        log.error("%s (id %s on %s): %s", job.name, job.id, job.queue, detail)
        self.events.emit(JobUnhandled(job, "requeue", detail))

    def _unhandled(self, job: Job, reason: str) -> None:
        """A job without a Python handler (or one only PHP may run), by ``--unhandled``."""
        if self.callqueued.php_only(job) and self._moved_to_php(job, reason):
            return
        policy = self.options.unhandled
        delay = max(1, int(self.options.unhandled_delay))
        if policy == "fail":
            self.events.emit(JobUnhandled(job, "fail", reason))
            if job.mark_failed():
                self.fail(job, UnhandledJobError(reason))
            return
        if policy == "release":
            if job.mark_released(delay):
                self.release(job, delay)
            detail = f"released for {delay}s"
        else:  # requeue; leave, when a job without a handler was taken all the same (PHP-only, say)
            self._requeue(job, delay)
            detail = f"requeued untouched in {delay}s"
        log.warning("%s (id %s on %s): %s", reason, job.id, job.queue, detail)
        self.events.emit(JobUnhandled(job, "requeue" if policy == "leave" else policy, detail))
