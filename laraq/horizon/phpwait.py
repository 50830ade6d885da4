"""Jobs only PHP can run, waiting on a queue that no PHP worker works: what ``horizon:status`` cannot say.

Horizon's ``StatusCommand`` answers from ``MasterSupervisorRepository::all()``: any live master record
means "Horizon is running" (exit 0) unless one is paused. ``horizon:pause``, ``horizon:continue`` and
``horizon:terminate`` find the pids they signal through the same ``all()``, so a laraq master that those
commands reach is a master ``horizon:status`` counts (compat-docs/horizon.md, "horizon:status and laraq's
masters"). With PHP's Horizon dead and ``laraq work`` alive, ``horizon:status`` therefore says running
while jobs only PHP can run (classes without a Python handler) pile up.

laraq says it instead. Every :data:`CHECK_EVERY` seconds a worker with Horizon's records looks, per queue
it works, for a live PHP Horizon supervisor working that queue (``supervisors`` records that are not
laraq's, :func:`laraq.config.phpworkers.php_supervisors`). When there is none, it counts the jobs among
the first ``window`` of the queue's list that have no Python handler (the app's own lookup) and, when
there are some, logs a WARNING and records the count in the hash ``<prefix>laraq:php-waiting`` (field
``<connection>:<queue>``, JSON ``{"jobs", "looked_at", "checked_at", "worker"}``; the hash expires
:data:`TTL` seconds after the last write; a queue with nothing waiting, or one PHP works, is removed
from it). ``laraq status``, ``laraq doctor`` and the ``laraq_php_only_jobs_waiting`` gauge read that
hash (:func:`read_php_waiting`); ``laraq doctor --app`` also makes the check itself (:func:`php_only_waiting`).
Plain ``php artisan queue:work`` processes leave no record in Redis: on an app that uses Horizon they
are not counted as alive.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from laraq.config.phpworkers import php_supervisors
from laraq.protocol.payload import Payload, PayloadError
from laraq.repeated import Repeated
from laraq.worker.events import Looping, WorkerListener

__all__ = ["CHECK_EVERY", "PhpWaitWatch", "PhpWaiting", "php_only_waiting", "read_php_waiting", "waiting_key"]

log = logging.getLogger("laraq.horizon")

#: seconds between two checks of one worker
CHECK_EVERY = 15.0
#: seconds a record lives after its last write (a few checks: a stopped worker's record goes away)
TTL = 60


def waiting_key(prefix: str) -> str:
    """The hash of waiting counts, under the queue connection's Laravel key prefix."""
    return f"{prefix}laraq:php-waiting"


@dataclass(frozen=True)
class PhpWaiting:
    """Jobs only PHP can run on one queue, counted among the first ``looked_at`` of its list."""

    connection: str
    queue: str
    jobs: int
    looked_at: int
    checked_at: float
    worker: str = ""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _worked_queues(horizon_client: Any, horizon_prefix: str) -> set[tuple[str, str]]:
    """The ``(connection, queue)`` pairs a live PHP Horizon supervisor works."""
    return {pair for sup in php_supervisors(horizon_client, horizon_prefix) for pair in sup.queues}


def php_only_waiting(queue: Any, names: Iterable[str], resolve: Callable[[Payload], Any], *, connection: str,
                     worked: set[tuple[str, str]], window: int = 200,
                     now: float | None = None) -> list[PhpWaiting]:
    """Per queue of ``names`` that no PHP worker works (not in ``worked``): the jobs among the first
    ``window`` of its list that ``resolve`` finds no Python handler for (unreadable members are not counted)."""
    now = time.time() if now is None else now
    out = []
    for name in names:
        if (connection, name) in worked:
            continue
        members = queue.client.lrange(queue.keys(name).list, 0, max(1, window) - 1)
        count = 0
        for member in members:
            try:
                payload = Payload.parse(member)
            except PayloadError:
                continue
            if resolve(payload) is None:
                count += 1
        out.append(PhpWaiting(connection, name, count, len(members), now))
    return out


def read_php_waiting(client: Any, prefix: str) -> list[PhpWaiting]:
    """What live workers recorded (only queues where jobs wait), in ``<connection>:<queue>`` order."""
    out = []
    for field, raw in sorted(client.hgetall(waiting_key(prefix)).items()):
        connection, _, name = _text(field).partition(":")
        try:
            data = json.loads(raw)
            out.append(PhpWaiting(connection, name, int(data["jobs"]), int(data["looked_at"]),
                                  float(data["checked_at"]), str(data.get("worker") or "")))
        except (ValueError, KeyError, TypeError):
            continue
    return out


class PhpWaitWatch(WorkerListener):
    """The worker's periodic check (see the module docstring)."""

    def __init__(self, queue: Any, horizon_client: Any, horizon_prefix: str, resolve: Callable[[Payload], Any], *,
                 window: int = 200, every: float = CHECK_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.queue = queue
        self.horizon_client = horizon_client
        self.horizon_prefix = horizon_prefix
        self.resolve = resolve
        self.window = window
        self.every = every
        self.clock = clock
        self._next = 0.0
        self._warning = Repeated(log, "%d job(s) among the first %d of queue %s have no Python handler and no PHP "
                                 "worker works that queue (no PHP Horizon supervisor alive for it): they wait "
                                 "for PHP. horizon:status still says running while laraq's master is alive; "
                                 "start php artisan horizon", every=300.0)

    def worker_looping(self, event: Looping) -> None:
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.every
        try:
            self.check(event.connection, event.queues)
        except Exception as exc:  # a check that cannot be made must not stop the worker
            log.debug("horizon: could not check for jobs waiting for PHP: %s", exc)

    def check(self, connection: str, names: Iterable[str]) -> list[PhpWaiting]:
        """One check: log, record and return the queues where jobs only PHP can run wait."""
        names = list(names)
        worked = _worked_queues(self.horizon_client, self.horizon_prefix)
        found = php_only_waiting(self.queue, names, self.resolve, connection=connection, worked=worked,
                                 window=self.window)
        key = waiting_key(self.queue.prefix)
        pipe = self.queue.client.pipeline(transaction=False)
        waiting = [w for w in found if w.jobs]
        for w in waiting:
            pipe.hset(key, f"{w.connection}:{w.queue}", json.dumps({
                "jobs": w.jobs, "looked_at": w.looked_at, "checked_at": round(w.checked_at, 3),
                "worker": f"{os.uname().nodename}:{os.getpid()}"}))
        # a queue PHP works, or where nothing waits: no record
        gone = [f"{connection}:{name}" for name in names if name not in {w.queue for w in waiting}]
        if gone:
            pipe.hdel(key, *gone)
        if waiting:
            pipe.expire(key, TTL)
        pipe.execute()
        for w in waiting:
            self._warning.warn(w.jobs, w.looked_at, w.queue)
        if not waiting and self._warning.active:
            self._warning.clear()
        return waiting
