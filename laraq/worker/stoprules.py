"""Whether the worker runs this round, and whether it stops: Laravel's ``Worker::daemonShouldRun``,
``Worker::stopIfNecessary``, ``Worker::memoryExceeded`` and ``Worker::queueShouldRestart``.

:meth:`StopRules.check` answers once per round with a :class:`Stop` (exit code and reason) or None, in
Laravel's order: a quit signal, ``--memory`` (exit 12), ``queue:restart``, ``--stop-when-empty``,
``--stop-when-empty-for``, ``--max-time``, ``--max-jobs``. ``queue:restart``'s stamp (a round trip to the
cache) is read on every check with ``--batch 1``, as Laravel reads it after every job, and at most every
:data:`RESTART_READ_EVERY` seconds otherwise.

One rule is laraq's own: a reserve step that *failed* is never an empty queue. ``--stop-when-empty`` tries
again, and after :data:`STOP_WHEN_EMPTY_TRIES` failed steps in a row stops with the fault's exit code, not 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from laraq.exitcodes import EXIT_ERROR, EXIT_MEMORY_LIMIT, EXIT_SUCCESS
from laraq.worker.context import WorkerContext
from laraq.worker.faults import Fault
from laraq.worker.notes import RunNotes

__all__ = ["RESTART_READ_EVERY", "STOP_WHEN_EMPTY_TRIES", "UNKNOWN", "Round", "Stop", "StopRules"]

log = logging.getLogger("laraq.worker.worker")

#: A ``queue:restart`` stamp that could not be read (never equal to a read one).
UNKNOWN = object()

#: Failed reserve steps in a row after which ``--stop-when-empty`` stops with the fault's exit code.
STOP_WHEN_EMPTY_TRIES = 4

#: The batched loop reads ``queue:restart``'s stamp at most this often (seconds): not on every reserve
#: step of a burst, where it would be one wait per batch.
RESTART_READ_EVERY = 0.25


class Stop(NamedTuple):
    """Why the worker stops: its exit code and the reason said in the log."""

    status: int
    reason: str


class Round(NamedTuple):
    """What the loop saw this round, for the stop rules."""

    #: jobs taken so far (``--max-jobs``)
    jobs: int
    #: the round's reserve step ran and found no job, and none runs or waits in the buffer
    empty: bool = False
    #: the round's reserve step failed
    fault: Fault | None = None


class StopRules:
    """The run and stop rules of one worker, in Laravel's order."""

    def __init__(self, context: WorkerContext, notes: RunNotes, maintenance: Callable[[], bool],
                 settle: Callable[[], None]) -> None:
        self.options = context.options
        self.signals = context.signals
        self.cache = context.cache
        self.version = context.version
        self.notes = notes
        self.maintenance = maintenance
        #: reads what still holds finished jobs' memory before the memory check counts it
        self.settle = settle
        #: how often the restart stamp is read (0: every check)
        self.stamp_every = 0.0 if context.options.batch <= 1 else RESTART_READ_EVERY
        self.started = time.monotonic()
        self.last_restart: Any = None
        #: when (monotonic) the last job was taken: ``--stop-when-empty-for`` counts from it
        self.last_job_at: float | None = None
        self._stamp_read_at = -RESTART_READ_EVERY

    def begin(self) -> None:
        """The loop starts: ``--max-time`` counts from now, and ``queue:restart``'s stamp is read."""
        self.started = time.monotonic()
        self.last_restart = self.restart_stamp()
        self._stamp_read_at = self.started

    def job_taken(self) -> None:
        self.last_job_at = time.monotonic()

    # -- daemonShouldRun -------------------------------------------------------------------------------

    def should_run(self, kill_pending: bool = False) -> bool:
        """Not paused (SIGUSR2), not down for maintenance (unless ``--force``), no self-kill pending; a change
        is said once in the log, with its reason."""
        if kill_pending:
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

    def check(self, seen: Round) -> Stop | None:
        """Laravel's ``stopIfNecessary``: why to stop, or None to keep going."""
        opts = self.options
        if self.signals.should_quit:
            return Stop(self.signals.quit_status, self.signals.reason or "told to quit")
        if self.memory_exceeded(opts.memory):
            return Stop(EXIT_MEMORY_LIMIT, "over --memory")
        if self._restarted():
            return Stop(EXIT_SUCCESS, "queue:restart was broadcast")
        if seen.fault is not None and (opts.stop_when_empty or opts.stop_when_empty_for):
            failed = self._failed_not_empty(seen.fault)
            if failed is not None:
                return failed
        if opts.stop_when_empty and seen.empty:
            return Stop(EXIT_SUCCESS, "--stop-when-empty: no job to take")
        clock = time.monotonic()
        if opts.stop_when_empty_for and seen.empty \
                and clock - (self.last_job_at or self.started) >= opts.stop_when_empty_for:
            return Stop(EXIT_SUCCESS, f"--stop-when-empty-for: no job for {opts.stop_when_empty_for:g}s")
        if opts.max_time and clock - self.started >= opts.max_time:
            return Stop(EXIT_SUCCESS, "--max-time reached")
        if opts.max_jobs and seen.jobs >= opts.max_jobs:
            return Stop(EXIT_SUCCESS, "--max-jobs reached")
        return None

    def memory_exceeded(self, limit_mb: int) -> bool:
        """Laravel's ``memoryExceeded``; the resident size it saw is kept for the stop's line."""
        if limit_mb <= 0 and self.version.memory_zero_is_unlimited:
            return False
        return self.notes.over_memory(limit_mb, self.settle)

    def restart_stamp(self) -> Any:
        """``queue:restart``'s stamp in the cache (:data:`UNKNOWN` when it cannot be read)."""
        if self.cache is None:
            return None
        try:
            return self.cache.restart_timestamp()
        except Exception as exc:
            log.warning("could not read the queue:restart signal: %s", exc)
            return UNKNOWN

    def _restarted(self) -> bool:
        now = time.monotonic()
        if now - self._stamp_read_at < self.stamp_every:
            return False
        self._stamp_read_at = now
        stamp = self.restart_stamp()
        return stamp is not UNKNOWN and self.last_restart is not UNKNOWN and stamp != self.last_restart

    def _failed_not_empty(self, fault: Fault) -> Stop | None:
        """``--stop-when-empty`` after a reserve step that failed: the queue was not seen empty (a reply lost
        on its way may even have reserved a job), so the worker tries again, and after
        :data:`STOP_WHEN_EMPTY_TRIES` failed steps in a row stops with the fault's exit code, not 0."""
        if fault.rounds < STOP_WHEN_EMPTY_TRIES:
            return None
        return Stop(fault.status or EXIT_ERROR, f"--stop-when-empty: {fault.rounds} reserve rounds failed in a "
                                                "row (the queue was never seen empty)")
