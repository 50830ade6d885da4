"""Whether the worker runs this round, and whether it stops: Laravel's ``Worker::daemonShouldRun``,
``Worker::stopIfNecessary``, ``Worker::memoryExceeded`` and ``Worker::queueShouldRestart``.

The order of the stop rules is Laravel's: a quit signal, ``--memory`` (exit 12), ``queue:restart``,
``--stop-when-empty``, ``--stop-when-empty-for``, ``--max-time``, ``--max-jobs``. The batched loop reads
the costly ones (:meth:`StopRules.periodic`) once per batch or every ``_CHECK_EVERY`` seconds, not per
job; the per-job loop reads :meth:`StopRules.status` after every job, as Laravel does.

One rule is laraq's own: ``--stop-when-empty`` never takes a reserve round that *failed* for an empty
queue (:meth:`StopRules.failed_not_empty`). It tries again, and after :data:`STOP_WHEN_EMPTY_TRIES`
failed rounds in a row it stops with the fault's exit code, not 0.

Kept by :class:`laraq.worker.worker.Worker`, which passes in what the rules read: the worker context,
its :class:`~laraq.worker.notes.RunNotes` (the log's account of why it stops or pauses), the reservation
source and the executor (through the two small interfaces below), and the maintenance probe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from laraq.worker.context import WorkerContext
from laraq.worker.notes import EXIT_MEMORY_LIMIT, RunNotes

__all__ = ["EXIT_ERROR", "EXIT_SUCCESS", "RESTART_READ_EVERY", "STOP_WHEN_EMPTY_TRIES", "UNKNOWN", "StopRules"]

log = logging.getLogger("laraq.worker.worker")

EXIT_SUCCESS = 0
EXIT_ERROR = 1

#: A ``queue:restart`` stamp that could not be read (never equal to a read one).
UNKNOWN = object()

#: Failed reserve rounds in a row after which ``--stop-when-empty`` stops with the fault's exit code.
STOP_WHEN_EMPTY_TRIES = 4

#: The batched loop reads ``queue:restart``'s stamp (a round trip to the cache) at most this often
#: (seconds): not on every reserve round of a burst, where it would be one wait per batch.
RESTART_READ_EVERY = 0.25


class _Reserving(Protocol):
    """What the rules read of the reservation source."""

    failed_rounds: int
    failure_status: int

    def settle(self) -> None: ...


class _Executing(Protocol):
    """What the rules read of the executor."""

    kill_pending: bool

    @property
    def running(self) -> Collection[Any]: ...


class StopRules:
    """The run and stop rules of one worker, in Laravel's order."""

    def __init__(self, context: WorkerContext, notes: RunNotes, reservation: _Reserving, executor: _Executing,
                 maintenance: Callable[[], bool]) -> None:
        self.options = context.options
        self.signals = context.signals
        self.cache = context.cache
        self.version = context.version
        self.notes = notes
        self.reservation = reservation
        self.executor = executor
        self.maintenance = maintenance
        #: when (monotonic) the last job was taken: ``--stop-when-empty-for`` counts from it
        self.last_job_at: float | None = None
        #: when (monotonic) :meth:`periodic` last read the restart stamp
        self._stamp_read_at = -RESTART_READ_EVERY

    def why(self, status: int, reason: str) -> int:
        """Remember why the worker stops (the stop's log line says it once); returns ``status``."""
        return self.notes.because(status, reason)

    def job_taken(self) -> None:
        self.last_job_at = time.monotonic()

    # -- daemonShouldRun -------------------------------------------------------------------------------

    def should_run(self) -> bool:
        """Not paused (SIGUSR2), not down for maintenance (unless ``--force``), no self-kill pending; a
        change is said once in the log, with its reason."""
        if self.executor.kill_pending:
            return False
        if self.signals.paused:
            self.notes.state("paused (SIGUSR2; SIGCONT resumes)")
            return False
        if self.down() and not self.options.force:
            self.notes.state("paused: the app is down for maintenance (php artisan down; --force works anyway)")
            return False
        self.notes.state("running")
        return True

    def down(self) -> bool:
        """Is the app down for maintenance? (a broken probe counts as "up" and is logged)"""
        try:
            return bool(self.maintenance())
        except Exception as exc:  # a broken maintenance probe must not stop the worker
            log.warning("maintenance-mode check failed: %s", exc)
            return False

    # -- stopIfNecessary -------------------------------------------------------------------------------

    def status(self, last_restart: Any, started: float, jobs_processed: int, *, popped: bool) -> int | None:
        """Laravel's ``stopIfNecessary``: the exit code to stop with, or ``None`` to keep going."""
        opts = self.options
        if self.signals.should_quit:
            return self.why(self.signals.quit_status, self.signals.reason or "told to quit")
        if self.memory_exceeded(opts.memory):
            return self.why(EXIT_MEMORY_LIMIT, "over --memory")
        if self._restarted(last_restart):
            return self.why(EXIT_SUCCESS, "queue:restart was broadcast")
        if opts.stop_when_empty and not popped:
            return self.why(EXIT_SUCCESS, "--stop-when-empty: no job to take")
        if opts.stop_when_empty_for and not popped and not self.executor.running \
                and time.monotonic() - (self.last_job_at or started) >= opts.stop_when_empty_for:
            return self.why(EXIT_SUCCESS, f"--stop-when-empty-for: no job for {opts.stop_when_empty_for:g}s")
        if opts.max_time and time.monotonic() - started >= opts.max_time:
            return self.why(EXIT_SUCCESS, "--max-time reached")
        if opts.max_jobs and jobs_processed >= opts.max_jobs:
            return self.why(EXIT_SUCCESS, "--max-jobs reached")
        return None

    def periodic(self, last_restart: Any, started: float) -> int | None:
        """The rules that cost something (the memory reading, the restart stamp), read by the batched
        loop once per batch / ``_CHECK_EVERY``, in Laravel's order; the stamp at most every
        :data:`RESTART_READ_EVERY` seconds."""
        if self.signals.should_quit:
            return self.why(self.signals.quit_status, self.signals.reason or "told to quit")
        if self.memory_exceeded(self.options.memory):
            return self.why(EXIT_MEMORY_LIMIT, "over --memory")
        now = time.monotonic()
        if now - self._stamp_read_at >= RESTART_READ_EVERY:
            self._stamp_read_at = now
            if self._restarted(last_restart):
                return self.why(EXIT_SUCCESS, "queue:restart was broadcast")
        if self.options.max_time and now - started >= self.options.max_time:
            return self.why(EXIT_SUCCESS, "--max-time reached")
        return None

    def empty_for(self, started: float) -> bool:
        """Has ``--stop-when-empty-for`` run out (no job taken for that long)?"""
        limit = self.options.stop_when_empty_for
        return bool(limit) and time.monotonic() - (self.last_job_at or started) >= limit

    def memory_exceeded(self, limit_mb: int) -> bool:
        """Laravel's ``memoryExceeded``; the resident size it saw is kept for the stop's line."""
        if limit_mb <= 0 and self.version.memory_zero_is_unlimited:
            return False
        return self.notes.over_memory(limit_mb, self.reservation.settle)

    def restart_stamp(self) -> Any:
        """``queue:restart``'s stamp in the cache (:data:`UNKNOWN` when it cannot be read)."""
        if self.cache is None:
            return None
        try:
            return self.cache.restart_timestamp()
        except Exception as exc:
            log.warning("could not read the queue:restart signal: %s", exc)
            return UNKNOWN

    def _restarted(self, last_restart: Any) -> bool:
        stamp = self.restart_stamp()
        return stamp is not UNKNOWN and last_restart is not UNKNOWN and stamp != last_restart

    def failed_not_empty(self) -> int | None:
        """``--stop-when-empty`` after a reserve round that failed: the queue was not seen empty (a reply
        lost on its way may even have reserved a job), so the worker tries again, and after
        :data:`STOP_WHEN_EMPTY_TRIES` failed rounds in a row stops with the fault's exit code, not 0."""
        reservation = self.reservation
        if reservation.failed_rounds < STOP_WHEN_EMPTY_TRIES:
            return None
        return self.why(reservation.failure_status or EXIT_ERROR,
                        f"--stop-when-empty: {reservation.failed_rounds} reserve rounds failed in a row "
                        "(the queue was never seen empty)")
