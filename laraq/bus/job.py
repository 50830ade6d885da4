"""One reserved job as a handler sees it: Laravel's ``RedisJob`` (``Jobs/Job.php`` + ``Jobs/RedisJob.php``).

A :class:`Job` wraps the two strings a reserve returned: ``body`` (the member as it was in the list:
payload accessors and ``failed_jobs.payload``) and ``reserved`` (the re-encoded member in ``:reserved``,
the only string that deletes or releases the reservation).

Its state (deleted, released, failed) is recorded here, as Laravel's ``Job`` records it; what each action
does in Redis and in the failed store belongs to a :class:`JobActions`: in a worker its settle step
(:class:`laraq.worker.settle.Settle`: the ack, the release script, the failure bookkeeping), elsewhere
:class:`QueueActions` (straight on the queue). A handler's own ``release()``/``delete()``/``fail()`` go
through the same actions as the worker's, at the moment they are called, as in Laravel.

Once the worker's watchdog has declared the job timed out, the job is *abandoned*: a handler thread
that is still running can no longer delete, release or fail it (Laravel would have killed the
process), so the reservation is left exactly as the timeout bookkeeping left it.

The exceptions the worker records in ``failed_jobs`` carry the PHP class name Laravel uses
(``php_class``), so ``queue:failed`` shows what PHP would show; the max-attempts and timeout ones come
from :mod:`laraq.stores.failed`.
"""

from __future__ import annotations

import _thread
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from laraq.protocol.payload import Payload
from laraq.protocol.queue import RedisQueue, ReservedJob
from laraq.stores import batches
from laraq.stores.failed import (
    MaxAttemptsExceededError,
    TimeoutExceededError,
    max_attempts_exceeded,
    timeout_exceeded,
)

__all__ = [
    "Job",
    "JobActions",
    "QueueActions",
    "JobAbandoned",
    "LaraqJobError",
    "ManuallyFailedError",
    "MaxAttemptsExceededError",
    "TimeoutExceededError",
    "UnhandledJobError",
    "max_attempts_exceeded",
    "timeout_exceeded",
]

log = logging.getLogger(__name__)

FailHook = Callable[["Job", BaseException | None], None]
Delay = int | float | timedelta | datetime


# -- exceptions with PHP identities ---------------------------------------------------------------

class LaraqJobError(Exception):
    """Base of the exceptions laraq records for a job; ``php_class`` is what ``failed_jobs`` shows."""

    php_class = "RuntimeException"


class ManuallyFailedError(LaraqJobError):
    """``$job->fail()`` without an exception."""

    php_class = "Illuminate\\Queue\\ManuallyFailedException"


class UnhandledJobError(LaraqJobError):
    """No Python handler is registered for the job's class (``--unhandled=fail``)."""


class JobAbandoned(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised in a handler's thread when its job timed out and was taken over by the watchdog."""


# -- what the actions do ---------------------------------------------------------------------------

class JobActions(Protocol):
    """What a job's delete, release and fail do beyond its own state (see the module)."""

    def delete(self, job: Job) -> None:
        """``ZREM :reserved``: the job is done."""

    def release(self, job: Job, delay: Delay) -> None:
        """Laravel's release script: back on ``:delayed`` after ``delay``; the attempt counts."""

    def fail(self, job: Job, exc: BaseException | None) -> None:
        """The reservation goes and the failure is recorded (``failed_jobs``, callbacks, ``JobFailed``)."""


class QueueActions:
    """A job's actions outside a worker: straight on its queue; a failure goes to ``on_fail`` (if any)."""

    def __init__(self, on_fail: FailHook | None = None) -> None:
        self.on_fail = on_fail

    def delete(self, job: Job) -> None:
        job.redis_queue.delete_reserved(job.reserved_job)

    def release(self, job: Job, delay: Delay) -> None:
        job.redis_queue.release(job.reserved_job, delay)

    def fail(self, job: Job, exc: BaseException | None) -> None:
        try:
            job.redis_queue.delete_reserved(job.reserved_job)
        finally:
            if self.on_fail is not None:
                self.on_fail(job, exc)


_DIRECT = QueueActions()


# -- the job -------------------------------------------------------------------------------------

class Job:
    """A job popped from a Laravel Redis queue (Laravel's ``RedisJob``)."""

    def __init__(
        self,
        queue: RedisQueue,
        reserved: ReservedJob,
        payload: Payload,
        *,
        connection_name: str = "redis",
        actions: JobActions | None = None,
        reserved_at: float | None = None,
    ) -> None:
        self.redis_queue = queue
        self.reserved_job = reserved
        self.payload = payload
        self.connection_name = connection_name
        #: When (unix seconds) the worker's reserve call that took it was sent; None: not taken by a worker.
        self.reserved_at = reserved_at
        self._actions: JobActions = actions or _DIRECT
        self._lock = _thread.RLock()  # the C lock itself: threading.RLock() is a Python call per job
        self._deleted = False
        self._released = False
        self._failed = False
        self._abandoned = False
        #: The unserialized command (object jobs) or ``data`` (string jobs), once the worker decoded it.
        self.command: Any = None
        #: The :class:`laraq.bus.handlers.Handler` running this job (see :meth:`bind`).
        self.handler: Any = None
        #: What :mod:`laraq.bus.phpsteps` read from the command (chain, batch, uniqueId), once.
        self.model_facts: Any = None
        #: ``time.perf_counter()`` when the handler started (set by the worker; ``None`` before).
        self.started_at: float | None = None
        #: The delay of the last :meth:`release`, in whole seconds from the moment of the release.
        self.release_delay: int = 0
        #: A model the command names is missing (or could not be loaded): see :mod:`laraq.bus.models`.
        self.restore_error: BaseException | None = None
        #: The app's database (a :class:`laraq.bus.models.ModelLoader`), see :meth:`bind`; None without DB_*.
        self.app_db: Any = None
        #: Why only PHP can run this job (a reason string), ``""`` when laraq can; ``None`` until
        #: :class:`laraq.bus.callqueued.CallQueuedHandler` looked (decided once per job).
        self.php_only: str | None = None

    def bind(self, handler: Any, actions: JobActions, app_db: Any = None) -> None:
        """The worker's handler for this job, where its actions go, and the app's database."""
        self.handler, self._actions, self.app_db = handler, actions, app_db

    def __repr__(self) -> str:
        return f"<Job {self.name} id={self.id} attempts={self.attempts} queue={self.queue}>"

    # -- identity ----------------------------------------------------------------------------------

    @property
    def body(self) -> bytes:
        """The raw body as popped (``getRawBody()``)."""
        return self.reserved_job.body

    @property
    def reserved(self) -> bytes:
        """The member in ``:reserved`` (``getReservedJob()``)."""
        return self.reserved_job.reserved

    @property
    def queue(self) -> str:
        """The queue name without ``queues:`` (``getQueue()``)."""
        return self.reserved_job.queue

    @property
    def connection(self) -> str:
        return self.connection_name

    @property
    def id(self) -> str | None:
        return self.payload.id

    @property
    def uuid(self) -> str | None:
        return self.payload.uuid

    @property
    def name(self) -> str:
        """``resolveName()``: the display name, else the ``job`` string."""
        return self.payload.resolve_name

    @property
    def display_name(self) -> str | None:
        return self.payload.display_name

    @property
    def attempts(self) -> int:
        """Laravel's ``attempts()``: the body's ``attempts`` + 1 (1 on the first run)."""
        return self.payload.attempts + 1

    # -- settings carried by the payload --------------------------------------------------------------

    @property
    def max_tries(self) -> int | None:
        return self.payload.max_tries

    @property
    def max_exceptions(self) -> int | None:
        return self.payload.max_exceptions

    @property
    def timeout(self) -> int | None:
        return self.payload.timeout

    @property
    def retry_until(self) -> int | None:
        return self.payload.retry_until

    @property
    def backoff(self) -> Any:
        return self.payload.backoff

    @property
    def fail_on_timeout(self) -> bool:
        return self.payload.fail_on_timeout

    @property
    def data(self) -> Any:
        return self.payload.data

    # -- state -------------------------------------------------------------------------------------

    @property
    def is_deleted(self) -> bool:
        return self._deleted

    @property
    def is_released(self) -> bool:
        return self._released

    @property
    def has_failed(self) -> bool:
        return self._failed

    @property
    def is_deleted_or_released(self) -> bool:
        return self._deleted or self._released

    @property
    def is_abandoned(self) -> bool:
        """True once the watchdog took the job over after its timeout."""
        return self._abandoned

    def abandon(self) -> bool:
        """Freeze the job (watchdog only). False if it had already been deleted or released."""
        with self._lock:
            self._abandoned = True
            return not (self._deleted or self._released)

    def _check_live(self, action: str) -> bool:
        if self._abandoned:
            log.warning("%s: ignored %s() after the job timed out (id %s)", self.name, action, self.id)
            return False
        return True

    # -- state: what happened, recorded once; True when the caller does the action's work -------------

    def mark_deleted(self) -> bool:
        """Record a delete; False when it must not happen (abandoned after its timeout)."""
        with self._lock:
            if not self._check_live("delete"):
                return False
            self._deleted = True
            return True

    def mark_released(self, delay: Delay) -> bool:
        """Record a release after ``delay``; False when it must not happen."""
        with self._lock:
            if not self._check_live("release"):
                return False
            self._released = True
            queue = self.redis_queue
            self.release_delay = max(0, queue.available_at(delay) - queue.current_time())
            return True

    def mark_failed(self, *, from_watchdog: bool = False) -> bool:
        """Record a failure (``Job::fail``'s ``markAsFailed``); True when the reservation must still go and
        the failure be recorded: not once the job was deleted. The watchdog may fail an abandoned job
        (its timeout bookkeeping)."""
        with self._lock:
            if self._abandoned and not from_watchdog:
                self._check_live("fail")
                return False
            self._failed = True
            if self._deleted:
                return False
            self._deleted = True
            return True

    # -- actions (InteractsWithQueue) ---------------------------------------------------------------------

    def delete(self) -> None:
        """Remove the reservation (``ZREM :reserved``): the job is done."""
        if self.mark_deleted():
            self._actions.delete(self)

    def release(self, delay: Delay = 0) -> None:
        """Put the job back on the queue after ``delay`` seconds; the attempt counts."""
        if self.mark_released(delay):
            self._actions.release(self, delay)

    def batch_cancelled(self) -> bool:
        """``$this->batch()?->cancelled()``: was this job's batch cancelled? (False outside a batch)."""
        return batches.batch_cancelled(self)

    def fail(self, exc: BaseException | None = None) -> None:
        """Fail the job: delete it, run the failed callbacks and write ``failed_jobs``."""
        if self.mark_failed():
            self._actions.fail(self, exc)
