"""Leases: keeping reserved-but-unstarted jobs ours until they start (the ``retry_after`` clock on
``:reserved``, which Laravel's ``migrate`` reads).

Owns, for the worker's reservation side: the buffered job and its lease (:class:`Buffered`), the
check before a buffered job starts (:meth:`Leases.lease_ok`: a lease that a reservation made now
would outlast is renewed first, so a started job gets ``retry_after`` from its start as a Laravel
pop gives it; a job someone else migrated back is dropped, never run), renewals sent without waiting
when no migrate can have taken the job back yet (:meth:`Leases._renew_ahead`, read back by
:meth:`Leases.collect`), and the periodic push of buffered leases past half their
``retry_after`` (:meth:`Leases.renew_due`). Every renewal is ``ZADD XX``: a member that is gone
stays gone.

Owned by the reserver (:class:`laraq.worker.reserver.Reserver`), which builds it with the worker's
:class:`~laraq.protocol.reserve.Reserving`, the listeners' flush (a held console line does not wait on a
round trip), the buffer (the one deque it and :class:`~laraq.worker.buffer.JobBuffer` work on, changed in
place) and the question whether a job's ack is still among the deferred ones
(:meth:`laraq.protocol.acks.Acks.deferred`).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laraq.bus.job import Job
from laraq.repeated import Repeated

if TYPE_CHECKING:
    from laraq.protocol.lua import PendingCall
    from laraq.protocol.reserve import Reserving

__all__ = ["Buffered", "Leases"]

log = logging.getLogger("laraq.worker.worker")


@dataclass(eq=False)
class Buffered:
    """A prefetched job: reserved (its lease runs until ``lease_until``, unix seconds), not started."""

    job: Job
    lease_until: float
    #: its unstarted record's lease is known to last at least until then (unix seconds; see
    #: :mod:`laraq.worker.unstarted`); inf: not recorded
    unstarted_until: float = math.inf
    #: its member in the unstarted record (:func:`laraq.protocol.lua_laraq.unstarted_member`), made when needed
    unstarted: bytes = b""


def _apply_renewal(items: list[Buffered], alive: list[bool], lease: float, lost: str) -> set[int]:
    """Record a renewal's answer: ours get the new lease; the ids of those taken back are returned."""
    gone = set()
    for b, ours in zip(items, alive, strict=False):
        if ours:
            b.lease_until = lease
        else:
            gone.add(id(b))
            log.warning("%s (id %s) was taken back from :reserved %s", b.job.name, b.job.id, lost)
    return gone


def _drop(buffer: collections.deque[Buffered], gone: set[int]) -> None:
    """Remove the jobs whose ids are in ``gone`` from ``buffer``, in place (the owner holds the same deque)."""
    kept = [b for b in buffer if id(b) not in gone]
    buffer.clear()
    buffer.extend(kept)


class Leases:
    """The leases of buffered jobs: checked before a start, renewed while they wait."""

    def __init__(self, reserving: Reserving, flush: Callable[[], None], buffer: collections.deque[Buffered],
                 ack_deferred: Callable[[str, bytes], bool]) -> None:
        self.reserving = reserving
        #: how long a reservation lasts (the queue's ``retry_after``; None: forever)
        self.retry_after = reserving.retry_after
        self.flush = flush
        self.buffer = buffer
        self.ack_deferred = ack_deferred
        #: the earliest time (unix seconds) at which a buffered lease needs renewing
        self._renew_at = math.inf
        #: a lease renewal sent without waiting (see _renew_ahead): the call, and each job with its
        #: lease before it
        self.renewal: tuple[PendingCall, list[tuple[Buffered, float]]] | None = None
        #: "could not renew" while Redis is away or full: one line, then a count every few seconds
        self._unrenewed = Repeated(log, "could not renew the reservation of %s (%s)")

    def lease_ok(self, item: Buffered) -> bool:
        """A buffered job may start only while its reservation is still ours. Its lease is renewed
        first whenever a reservation made now would expire later (so a started job gets the same
        ``retry_after`` from its start as a Laravel pop gives it); the rest of the buffer is renewed
        in the same call. A job someone else migrated back is dropped, never run."""
        retry_after = self.retry_after
        if retry_after is None:
            return True
        now = time.time()
        fresh = math.floor(now) + retry_after
        if fresh <= item.lease_until:
            return True
        items = [item, *(b for b in self.buffer if b.job.queue == item.job.queue and b.lease_until < fresh)]
        if item.lease_until - now >= retry_after / 2 and self._renew_ahead(items):
            return True
        self.flush()  # a held success line does not wait on this round trip
        try:
            alive = self.reserving.renew(item.job.queue, [b.job.reserved for b in items])
        except Exception as exc:
            # kept at the head of the buffer: started once Redis answers, or given back at the stop (a
            # job dropped here would wait in :reserved for retry_after and come back with an attempt spent)
            self._unrenewed.warn(f"{item.job.name}: kept, not started yet", exc)
            self.buffer.appendleft(item)
            return False
        self._unrenewed.clear("buffered reservations renewed again")
        gone = _apply_renewal(items, alive, fresh, "before it started: not running it")
        if len(gone) > (id(item) in gone):
            _drop(self.buffer, gone)
        return id(item) not in gone

    def note_lease(self, lease: float) -> None:
        """Jobs were buffered with a lease until ``lease`` (unix seconds): renew them past its half."""
        if self.retry_after is not None:
            self._renew_at = min(self._renew_at, lease - self.retry_after / 2)

    def _renew_ahead(self, items: list[Buffered]) -> bool:
        """Renew leases that are stale but far from over without waiting for the reply: no migrate can
        have taken them back (over half of ``retry_after`` is left), so the job starts at once and the
        ``ZADD XX`` lands on Redis as it starts; :meth:`collect` reads the reply. This is the
        usual case for a batch reserved along with a wait (its ``now`` is the time the wait began)."""
        self.collect()
        try:
            sent = self.reserving.renew_send(items[0].job.queue, [b.job.reserved for b in items])
        except Exception:  # the synchronous renewal meets the same fault and reports it
            return False
        if sent is None:
            return False
        pending, expiry = sent
        self.renewal = (pending, [(b, b.lease_until) for b in items])
        for b in items:
            b.lease_until = expiry
        return True

    def collect(self) -> None:
        """Read the reply of a :meth:`_renew_ahead`: buffered jobs found gone are dropped, as a
        synchronous renewal drops them; a started one is only reported, unless this worker's own
        removal of it may have come first (see :meth:`_ours_first`). If the reply is lost, the
        buffered jobs keep their earlier leases (renewed again when due)."""
        if self.renewal is None:
            return
        pending, items = self.renewal
        self.renewal = None
        try:
            alive = self.reserving.renew_receive(pending)
        except Exception as exc:
            self._unrenewed.warn(f"{len(items)} job(s): they keep their earlier lease", exc)
            for b, before in items:
                b.lease_until = before
                self._renew_at = min(self._renew_at, before - (self.retry_after or 0) / 2)
            return
        gone = {id(b) for (b, _before), ok in zip(items, alive, strict=False) if not ok}
        if not gone:
            return
        buffered = {id(b) for b in self.buffer}
        for b, _before in items:
            if id(b) in gone and id(b) not in buffered:
                if not self._ours_first(b.job):
                    log.warning("%s (id %s) left :reserved as it started (deleted by someone else?)",
                                b.job.name, b.job.id)
            elif id(b) in gone:
                log.warning("%s (id %s) was taken back from :reserved while buffered: dropped",
                            b.job.name, b.job.id)
        _drop(self.buffer, gone)

    def _ours_first(self, job: Job) -> bool:
        """May this worker's own removal of a started job have reached Redis before the renewal sent
        as it started? Its ack (or release, or fail) and that renewal travel on different
        connections, so Redis may run either first. True once the removal was sent; False while the
        job runs or its ``ZREM`` still waits among the deferred acks: then someone else took it."""
        if job.is_released or job.has_failed:
            return True
        if not job.is_deleted:
            return False
        return not self.ack_deferred(job.queue, job.reserved)

    def renew_due(self) -> None:
        """Push the reservation of buffered jobs past half their ``retry_after`` forward (``ZADD XX``)."""
        retry_after = self.retry_after
        if retry_after is None or not self.buffer:
            return
        now = time.time()
        if now < self._renew_at:  # no buffered lease is due yet: skip the scan
            return
        half = retry_after / 2
        due = [b for b in self.buffer if b.lease_until - now < half]
        self._renew_at = min((b.lease_until - half for b in self.buffer if b.lease_until - now >= half),
                             default=math.inf)
        if not due:
            return
        gone: set[int] = set()
        by_queue: dict[str, list[Buffered]] = {}
        for b in due:
            by_queue.setdefault(b.job.queue, []).append(b)
        for name, items in by_queue.items():
            try:
                alive = self.reserving.renew(name, [b.job.reserved for b in items])
            except Exception as exc:
                self._unrenewed.warn(f"{len(items)} buffered job(s) on {name}", exc)
                self._renew_at = now  # still due: try again on the next pass
                continue
            lease = math.floor(time.time()) + retry_after
            self._renew_at = min(self._renew_at, lease - half)
            gone |= _apply_renewal(items, alive, lease, "while buffered: dropped")
        if gone:
            _drop(self.buffer, gone)
