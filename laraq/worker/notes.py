"""The worker's own account of itself in the log: one line when it stops (exit code and why), when it
pauses and when it resumes (and why), and the resident size its ``--memory`` check measured
(Laravel's ``Worker::memoryExceeded``, which compares ``memory_get_usage(true)``); and the memory an
idle worker gives back.

:class:`RunNotes` is kept by :class:`laraq.worker.worker.Worker`: its run checks say whether it runs
through :meth:`RunNotes.state`, and the stop is said once by :meth:`RunNotes.stopped`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import threading
from collections.abc import Callable

from laraq.exitcodes import EXIT_MEMORY_LIMIT

__all__ = ["RunNotes", "release_free_memory", "rss_mb"]

log = logging.getLogger("laraq.worker.worker")



#: MB per page of resident memory
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 1048576
#: ``/proc/self/statm``, held open by this process (a forked child opens its own: see _forget_statm)
_statm: int | None = None
_statm_lock = threading.Lock()


def rss_mb() -> float:
    """Resident memory of this process in MB (Laravel compares ``memory_get_usage(true)``): one
    ``pread`` of ``/proc/self/statm``, held open (the loop reads it after every reserve step, and each
    system call of an open-read-close hands the GIL to the slot threads and waits to get it back)."""
    try:
        fd = _statm if _statm is not None else _open_statm()
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _open_statm() -> int:
    global _statm
    with _statm_lock:
        if _statm is None:
            _statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        return _statm


def _forget_statm() -> None:
    """In a forked child: the inherited descriptor reads the parent's ``/proc/self``; the child opens its own."""
    global _statm
    if _statm is not None:
        fd, _statm = _statm, None
        with contextlib.suppress(OSError):
            os.close(fd)


os.register_at_fork(after_in_child=_forget_statm)


def release_free_memory() -> bool:
    """Give the memory the C allocator keeps after objects are freed back to the system (glibc's
    ``malloc_trim``, through the C build; nothing without it). PHP's ``memory_get_usage(true)``, which
    Laravel's check reads, counts only what its allocator holds for live data; a resident size read
    right after a big job would also count the freed pages glibc had not returned yet."""
    try:
        from laraq import _speedups  # optional dependency: the C build may be absent
    except ImportError:
        return False
    return bool(_speedups.release_free_memory())


class RunNotes:
    """Why the worker stops, whether it runs or is paused, and what its memory check measured."""

    def __init__(self, name: str, memory_limit: int) -> None:
        self.name = name
        self.memory_limit = memory_limit
        self.current = "running"
        #: the resident size (MB) the last ``--memory`` check measured
        self.memory_seen = 0.0
        #: the job count when freed memory was last given back (see :meth:`went_idle`)
        self._settled_at = 0

    def over_memory(self, limit_mb: int, settle: Callable[[], None] | None = None) -> bool:
        """Measure the resident size now and compare it with ``limit_mb``. A size at or over it is
        measured again once ``settle`` has let go of what finished jobs still held and the freed memory
        is given back (:func:`release_free_memory`); only what is resident then counts."""
        self.memory_seen = rss_mb()
        if self.memory_seen >= limit_mb:
            if settle is not None:
                try:
                    settle()
                except Exception as exc:  # Redis away: what it holds stays counted
                    log.debug("could not settle before the memory check: %s", exc)
                gc.collect()
            release_free_memory()
            self.memory_seen = rss_mb()
        return self.memory_seen >= limit_mb

    def went_idle(self, jobs_processed: int) -> None:
        """Once per busy spell, as the worker goes idle: the young cycles the burst left are collected
        (boot's objects are frozen, not scanned) and the freed memory is given back, so an idle worker's
        resident size is what it holds, not the high-water mark of the last burst."""
        if jobs_processed != self._settled_at:
            self._settled_at = jobs_processed
            gc.collect(1)
            release_free_memory()

    def state(self, state: str) -> None:
        """One line when the worker pauses or resumes, saying why."""
        if state == self.current:
            return
        previous, self.current = self.current, state
        if state == "running":
            log.info("worker %s resumed (it was %s)", self.name, previous)
        else:
            log.info("worker %s %s", self.name, state)

    def stopped(self, status: int, reason: str) -> None:
        """The stop's one line: the exit code and why (over ``--memory``: the size the check measured,
        before anything was given back)."""
        if status == EXIT_MEMORY_LIMIT:
            log.warning("worker %s stopping (exit %d): memory limit of %d MB reached (this process: %.0f MB "
                        "resident when checked)", self.name, status, self.memory_limit, self.memory_seen)
        else:
            log.info("worker %s stopping (exit %d): %s", self.name, status, reason or "done")
