"""One running job as the executor and the watchdog see it, and who wins its outcome.

A :class:`Running` record ties a job to its deadline and to how it runs (inline, on a pool thread, a task
on the worker's loop). The handler's side (:mod:`laraq.worker.process`) and the watchdog's side
(:mod:`laraq.worker.executor`) each try to move it out of ``"running"``;
:meth:`Running.claim` decides once, under the executor's lock, which of them records the outcome
(Laravel has one process per job and a ``SIGALRM``; laraq has the two sides and this claim).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

from laraq.bus.job import Job

__all__ = ["Flag", "Raised", "Running"]


class Flag:
    """A one-way flag the watchdog polls (``threading.Event``'s ``set``/``is_set`` without its lock).

    Made once per async job, so it has no ``__init__``: its slot stays empty until :meth:`set`."""

    __slots__ = ("_set",)

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return getattr(self, "_set", False)


@dataclass(frozen=True)
class Raised:
    """A ``SystemExit``/``KeyboardInterrupt`` an async handler raised, carried out of the event loop."""

    exc: BaseException


@dataclass(eq=False, slots=True)
class Running:
    job: Job
    deadline: float | None
    #: the executor's lock over every record's ``state`` (see :meth:`claim`)
    lock: threading.RLock
    state: str = "running"  # running -> finishing | timed_out
    is_async: bool = False
    task_done: threading.Event | Flag | None = None
    future: concurrent.futures.Future[Any] | None = None
    cancelled_at: float | None = None
    #: Timed out and done with: bookkeeping finished, and the coroutine unwound or the kill is due.
    settled: bool = False
    #: The task of an async job on the worker's loop (cancelled from the watchdog through the loop).
    task: asyncio.Task[Any] | None = None

    def claim(self, state: str) -> bool:
        """Move out of "running" to ``state``; False if the other side (handler or watchdog) won."""
        with self.lock:
            if self.state != "running":
                return False
            self.state = state
            return True

    def cancel(self) -> None:
        """Cancel the job's task (thread-safe: from the watchdog)."""
        task = self.task
        if task is not None:
            task.get_loop().call_soon_threadsafe(task.cancel)


def claim(running: Running | None, state: str) -> bool:
    """:meth:`Running.claim`, for a job run without a record (``Worker.process`` called directly)."""
    return True if running is None else running.claim(state)
