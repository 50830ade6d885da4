"""The worker's side of parked failures (:mod:`laraq.stores.parked`): park, then write the rows later.

When a job has failed for good but its ``failed_jobs`` row cannot be written, :meth:`ParkingListener.park_job`
keeps the job and its failure in Redis (not on a queue: its handler does not run again). As a worker
listener it writes the parked rows of the worker's queues at start and then every
:data:`FLUSH_EVERY` seconds while the loop runs, on a daemon thread so a hanging database never stalls
the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from laraq.stores.parked import ParkedFailures, parked_key
from laraq.worker.events import Looping, WorkerListener, WorkerStarting, WorkerStopping

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["FLUSH_EVERY", "STOP_WAIT", "ParkingListener"]

log = logging.getLogger("laraq.worker.worker")

#: seconds between two attempts to write the parked rows (the first is at start)
FLUSH_EVERY = 15.0
#: how long a stopping worker waits for a flush in progress (a hanging database must not hold the exit)
STOP_WAIT = 5.0


class ParkingListener(WorkerListener):
    """Parks failures the store refused and writes them when it is back."""

    def __init__(self, parked: ParkedFailures, queues: list[str], every: float = FLUSH_EVERY) -> None:
        self.parked = parked
        self.queues = list(queues)
        self.every = every
        self._next = 0.0
        self._thread: threading.Thread | None = None
        self._last_left = 0

    def park_job(self, job: Job, text: str, reason: BaseException) -> bool:
        """Park ``job``'s failure; False if Redis refused it too (the caller then puts the job back)."""
        why = " ".join(str(reason).split())[:300] or type(reason).__name__
        if job.queue not in self.queues:
            self.queues.append(job.queue)
        try:
            self.parked.park(job.connection, job.queue, job.body, text, uuid=job.uuid, job_id=job.id, name=job.name)
        except Exception as exc:
            log.error("%s (uuid %s) failed but failed_jobs could not be written (%s), nor parked in Redis (%s): "
                      "putting it back on the queue in 60s", job.name, job.uuid, why, exc)
            return False
        log.error("%s (uuid %s) failed but failed_jobs could not be written (%s): kept in %s, not run again; its "
                  "row is written when the store is back ('laraq status' shows parked failures)", job.name,
                  job.uuid, why, parked_key(self.parked.queue, job.queue))
        self._next = time.monotonic() + self.every
        return True

    def worker_starting(self, event: WorkerStarting) -> None:
        self._flush_soon()

    def worker_looping(self, event: Looping) -> None:
        if time.monotonic() >= self._next:
            self._flush_soon()

    def worker_stopping(self, event: WorkerStopping) -> None:
        # a short-lived worker (--once, --stop-when-empty) lets the flush it started at start finish
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(STOP_WAIT)

    def _flush_soon(self) -> None:
        self._next = time.monotonic() + self.every
        if self.parked.store is None or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._flush, name="laraq-parked-flush", daemon=True)
        self._thread.start()

    def _flush(self) -> None:
        try:
            written, left = self.parked.flush(self.queues)
        except Exception as exc:  # Redis down: the next pass tries again
            log.debug("could not read parked failures: %s", exc)
            return
        if left and (written or left != self._last_left):  # one line per change, not one per pass
            log.warning("%d parked failure(s) still wait for failed_jobs (%s)%s", left, self.parked.last_error,
                        f"; {written} written" if written else "")
        self._last_left = left
