"""A failed reserve step as a value: what Laravel's ``Worker::getNextJob`` does when the pop throws (report
it, stop on a lost connection with ``stopWorkerIfLostConnection``, sleep), kept as bookkeeping that answers
a :class:`Fault` instead.

:class:`ReserveFaults` owns the state between failed steps: since when Redis has been unreachable, the
backoff before the next try (1 s doubling to 30 s), how many steps failed in a row, and how many logins
Redis refused in a row. Redis lost is retried with the backoff; a refused login is retried a few times
(:attr:`ReserveFaults.AUTH_RETRIES`), then the worker is told to stop with exit 4; anything else is
logged and retried after a second. The reserver (:class:`~laraq.worker.reserver.Reserver`) calls
:meth:`ReserveFaults.failed` for a step that raised and :meth:`ReserveFaults.up` for one that answered.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laraq.config.faults import explain, is_acl_denial
from laraq.exitcodes import EXIT_ERROR, EXIT_REDIS_AUTH, EXIT_REDIS_UNREACHABLE
from laraq.protocol.redis_retry import REDIS_DOWN

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue
    from laraq.worker.context import Signals

__all__ = ["Fault", "ReserveFaults"]

log = logging.getLogger("laraq.worker.worker")


@dataclass(frozen=True, slots=True)
class Fault:
    """A reserve step that failed: the exit code it calls for (3 Redis unreachable, 4 credentials, 1 anything
    else), how many steps failed in a row, and how long to wait before the next."""

    status: int
    rounds: int
    retry_in: float


class ReserveFaults:
    """The reserve step's faults in a row (see the module)."""

    #: Consecutive refused logins (the password changed under a running worker) before it stops with
    #: exit 4: retried with the reconnect backoff (about 15 s), never forever.
    AUTH_RETRIES = 4

    def __init__(self, queue: RedisQueue, queues: list[str], signals: Signals, *, stop_when_empty: bool) -> None:
        self.queue = queue
        #: the ``--queue`` list, named in the line that logs an unexpected fault
        self.queues = queues
        self.signals = signals
        #: ``--stop-when-empty``: a refused login stops at once (it must not read as an empty queue)
        self.stop_when_empty = stop_when_empty
        self._down_since: float | None = None
        self._retry_in = 0.0
        self._failed_rounds = 0
        self._auth_refusals = 0

    @property
    def down_since(self) -> float | None:
        """Since when Redis has been unreachable (monotonic seconds); None while it answers."""
        return self._down_since

    def failed(self, exc: Exception, what: str) -> Fault:
        """Redis lost (retry with backoff), credentials refused (bounded), or anything else (logged);
        ``what`` names the step in that last line ("reserve jobs from")."""
        status = EXIT_REDIS_UNREACHABLE
        if self._refused_credentials(exc):
            status = EXIT_REDIS_AUTH
        elif isinstance(exc, REDIS_DOWN):
            if self._down_since is None:
                self._down_since = time.monotonic()
            self._retry_in = min(30.0, max(1.0, self._retry_in * 2))
            log.warning("Redis unreachable at %s (%s); retrying in %.0fs", self.queue.redacted_url(), exc,
                        self._retry_in)
        else:
            log.exception("could not %s %s", what, ",".join(self.queues))
            self._retry_in = 1.0
            status = EXIT_ERROR
        self._failed_rounds += 1
        return Fault(status, self._failed_rounds, self._retry_in)

    def _refused_credentials(self, exc: BaseException) -> bool:
        """A login Redis refused: retried a few times, then the worker stops with exit 4 (one line)."""
        explained = explain(exc, redis_url=self.queue.redacted_url())
        if explained is None or explained[1] != EXIT_REDIS_AUTH:
            return False
        self._auth_refusals += 1
        self._retry_in = min(30.0, max(1.0, self._retry_in * 2))
        # an ACL denial does not pass by itself, and with --stop-when-empty a refusal must not read as empty
        if self._auth_refusals >= self.AUTH_RETRIES or is_acl_denial(exc) or self.stop_when_empty:
            log.error("stopping: %s", explained[0])
            self.signals.quit(EXIT_REDIS_AUTH, "Redis keeps refusing the credentials")
        else:
            log.warning("%s (attempt %d of %d)", explained[0], self._auth_refusals, self.AUTH_RETRIES)
        return True

    def up(self) -> None:
        """A step Redis answered: the counts start over, and a return after an outage is said once."""
        self._auth_refusals = 0
        self._failed_rounds = 0
        if self._down_since is not None:
            log.warning("Redis reachable again after %.0fs", time.monotonic() - self._down_since)
        self._down_since = None
        self._retry_in = 0.0
