"""One reserved job as a handler sees it: Laravel's ``RedisJob`` (``Jobs/Job.php`` + ``Jobs/RedisJob.php``).

A :class:`Job` wraps the two strings :meth:`laraq.protocol.queue.RedisQueue.pop` returned: ``body`` (the
member as it was in the list: payload accessors and ``failed_jobs.payload``) and ``reserved`` (the
re-encoded member in ``:reserved``, the only string that deletes or releases the reservation).

* :meth:`Job.delete` is ``ZREM :reserved <reserved>`` (sent with the worker's next reserve call on
  its batched fast path);
* :meth:`Job.release` is Laravel's release script (``ZREM`` + ``ZADD :delayed now+delay``);
* :meth:`Job.fail` marks the job failed, deletes it, and hands it to the worker's failure hook, which
  calls the Python ``failed`` callback, releases a ShouldBeUnique lock and writes ``failed_jobs``
  (in Laravel the ``JobFailed`` listener of ``queue:work`` writes that row).

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
from typing import Any

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
AckHook = Callable[["Job"], None]


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
        on_fail: FailHook | None = None,
        acker: AckHook | None = None,
    ) -> None:
        self.redis_queue = queue
        #: The worker's fast path defers ``delete()``'s ``ZREM`` to its next reserve call (see
        #: ``compat-docs/worker.md``); without an acker the ``ZREM`` is sent at once.
        self._acker = acker
        self.reserved_job = reserved
        self.payload = payload
        self.connection_name = connection_name
        self._on_fail = on_fail
        self._lock = _thread.RLock()  # the C lock itself: threading.RLock() is a Python call per job
        self._deleted = False
        self._released = False
        self._failed = False
        self._abandoned = False
        #: The unserialized command (object jobs) or ``data`` (string jobs), once the worker decoded it.
        self.command: Any = None
        #: The :class:`laraq.app.Handler` running this job (set by the worker).
        self.handler: Any = None
        #: What :mod:`laraq.bus.callqueued` read from the command (chain, batch, uniqueId), once.
        self.model_facts: Any = None
        #: ``time.perf_counter()`` when the handler started (set by the worker; ``None`` before).
        self.started_at: float | None = None
        #: The delay of the last :meth:`release`, in whole seconds from the moment of the release.
        self.release_delay: int = 0
        #: A model the command names is missing (or could not be loaded): see :mod:`laraq.bus.models`.
        self.restore_error: BaseException | None = None
        #: The app's database (a :class:`laraq.bus.models.ModelLoader`), set by the worker; None without DB_*.
        self.app_db: Any = None
        #: Why only PHP can run this job (a reason string), ``""`` when laraq can; ``None`` until the
        #: worker looked (see ``Lifecycle._php_only``: decided once per job, not once per caller).
        self.php_only: str | None = None

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

    # -- actions -----------------------------------------------------------------------------------

    def delete(self) -> None:
        """Remove the reservation (``ZREM :reserved``): the job is done."""
        with self._lock:
            if not self._check_live("delete"):
                return
            self._deleted = True
            if self._acker is not None:
                self._acker(self)
            else:
                self.redis_queue.delete_reserved(self.reserved_job)

    def release(self, delay: int | float | timedelta | datetime = 0) -> None:
        """Put the job back on the queue after ``delay`` seconds; the attempt counts."""
        with self._lock:
            if not self._check_live("release"):
                return
            self._released = True
            queue = self.redis_queue
            self.release_delay = max(0, queue.available_at(delay) - queue.current_time())
            queue.release(self.reserved_job, delay)

    def batch_cancelled(self) -> bool:
        """``$this->batch()?->cancelled()``: was this job's batch cancelled? (False outside a batch)."""
        return batches.batch_cancelled(self)

    def fail(self, exc: BaseException | None = None) -> None:
        """Fail the job: delete it, run the failed callback and write ``failed_jobs``."""
        self.fail_internal(exc, from_watchdog=False)

    def fail_internal(self, exc: BaseException | None, *, from_watchdog: bool) -> None:
        """``Job::fail``; the watchdog may still fail an abandoned job (timeout bookkeeping)."""
        with self._lock:
            if self._abandoned and not from_watchdog:
                self._check_live("fail")
                return
            self._failed = True
            if self._deleted:
                return
            try:
                self._deleted = True
                self.redis_queue.delete_reserved(self.reserved_job)
            finally:
                if self._on_fail is not None:
                    self._on_fail(self, exc)
