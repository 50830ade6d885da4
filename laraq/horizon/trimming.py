"""What Horizon's master trims, done by laraq while no PHP Horizon master is alive.

Horizon trims only in its master's loop (``MasterSupervisorLooped``): ``TrimRecentJobs`` (every
minute: ``recent_jobs``, ``recent_failed_jobs``, ``pending_jobs``, ``completed_jobs``,
``silenced_jobs``), ``TrimFailedJobs`` and ``TrimMonitoredJobs`` (every ``trim.failed / 12`` and
``trim.monitored / 12`` minutes, at least 1) and ``ExpireSupervisors`` (masters and supervisors
older than 14 s leave their sorted sets). Each cut is ``ZREMRANGEBYSCORE <set> -(now - minutes) +inf``
on the −microtime scores (``RedisJobRepository::trimRecentJobs`` / ``trimFailedJobs`` /
``trimMonitoredJobs``). The job hashes themselves expire by their EXPIREATs.

A fleet where only laraq works Horizon's queues has no PHP master, so nothing would ever cut those
sets: :class:`Trimmer` does Horizon's cuts on Horizon's schedule. As soon as a PHP master is alive
(a ``masters`` entry without laraq's marker) laraq leaves trimming to it, so the work is never done
twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from laraq.horizon.settings import HorizonSettings
from laraq.horizon.supervisors import MASTER_WINDOW

__all__ = ["Trimmer"]


class Trimmer:
    """Runs Horizon's master-side trims on their schedules (call :meth:`tick` about once a second)."""

    def __init__(self, client: Any, settings: HorizonSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        trim = settings.trim
        #: seconds between runs of each trim, as Horizon's listeners compute them
        self.every = {
            "recent": 60.0,
            "failed": 60.0 * max(1, trim.failed // 12),
            "monitored": 60.0 * max(1, trim.monitored // 12),
        }
        # Horizon's listeners run on their first loop.
        self._last: dict[str, float | None] = dict.fromkeys(self.every)

    def _k(self, name: str) -> str:
        return self.settings.prefix + name

    def _cutoff(self, minutes: int) -> int:
        """``CarbonImmutable::now()->subMinutes(m)->getTimestamp() * -1``."""
        return -(int(self.clock()) - minutes * 60)

    def tick(self) -> list[str]:
        """Run whichever trims are due; returns their names."""
        now = self.clock()
        due = [name for name, last in self._last.items() if last is None or now - last >= self.every[name]]
        pipe = self.client.pipeline(transaction=False)
        trim = self.settings.trim
        if "recent" in due:
            for zset, minutes in (("recent_jobs", trim.recent), ("recent_failed_jobs", trim.recent_failed_minutes),
                                  ("pending_jobs", trim.pending), ("completed_jobs", trim.completed),
                                  ("silenced_jobs", trim.completed)):
                pipe.zremrangebyscore(self._k(zset), self._cutoff(minutes), "+inf")
        if "failed" in due:
            pipe.zremrangebyscore(self._k("failed_jobs"), self._cutoff(trim.failed), "+inf")
        if "monitored" in due:
            pipe.zremrangebyscore(self._k("monitored_jobs"), self._cutoff(trim.monitored), "+inf")
        # ExpireSupervisors: every loop.
        stale = int(now) - MASTER_WINDOW
        pipe.zremrangebyscore(self._k("masters"), "-inf", stale)
        pipe.zremrangebyscore(self._k("supervisors"), "-inf", stale)
        pipe.execute()
        for name in due:
            self._last[name] = now
        return due
