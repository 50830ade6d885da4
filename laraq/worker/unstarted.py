"""Unstarted records: what makes a SIGKILL cost a buffered, never-started job nothing.

Every job the batched reserve buffers is also recorded, in the same Lua call, in laraq's own ZSET
``queues:NAME:laraq-unstarted`` with a short lease on Redis' clock (``Reserving.unstarted_seconds``: 15 s,
at most a third of ``retry_after``). While it waits in the buffer the worker renews that lease
(:meth:`Unstarted.renew_due`). When it starts, its record is removed *before* the handler runs
(:meth:`Unstarted.start`). Any laraq batch reserve on the queue first gives back the jobs whose record
expired (their worker died): each one still in ``:reserved`` goes back to the head of the list as it was
pushed, attempts not spent; the running job's record was removed, so it stays in ``:reserved`` and comes
back after ``retry_after`` with its attempt spent, as artisan's running job does. See
:data:`laraq.protocol.lua_laraq.UNSTARTED`.

The order that makes it exact: a started job's record is gone from Redis before its handler can have
done anything. The removals of the jobs the loop starts together are written on the ack connection in
one ``send()``, with the acks it holds (:meth:`laraq.protocol.acks.Acks.send_held`; the replies are read
later), when each record's lease has at least a third of its length left (:meth:`Unstarted.riding`), so
the command reaches Redis long before anyone may reclaim the job (once the bytes are in the kernel, killing
this process no longer stops them). Otherwise (the buffer waited behind a long job, a reply was lost,
Redis Cluster) the removal is one round trip whose answer decides: a record another worker reclaimed
meanwhile means the job is not run here, it is already back in the list.

Owned by the reserver (:class:`laraq.worker.reserver.Reserver`), which builds it with the worker's
:class:`~laraq.protocol.reserve.Reserving`, its acks and the buffer (the one deque it and
:class:`~laraq.worker.buffer.JobBuffer` work on, changed in place).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import TYPE_CHECKING

from laraq.protocol.lua_laraq import unstarted_member
from laraq.repeated import Repeated

if TYPE_CHECKING:
    from collections.abc import Callable

    from laraq.protocol.acks import Acks
    from laraq.protocol.reserve import Reserving
    from laraq.worker.leases import Buffered

__all__ = ["Unstarted"]

log = logging.getLogger("laraq.worker.worker")


def _member(item: Buffered) -> bytes:
    if not item.unstarted:
        reserved = item.job.reserved_job
        item.unstarted = unstarted_member(reserved.reserved, reserved.body)
    return item.unstarted


class Unstarted:
    """The unstarted records of the buffered jobs: removed at start, renewed while they wait."""

    def __init__(self, reserving: Reserving, acks: Acks, buffer: collections.deque[Buffered],
                 queues: list[str] | Callable[[], list[str]] | None = None) -> None:
        self.reserving = reserving
        #: the unstarted lease in effect (seconds; 0: no records)
        self.lease = reserving.unstarted_seconds
        self.acks = acks
        self.buffer = buffer
        #: the queues whose dead workers' buffers this worker reclaims between reserves (see reclaim_due)
        self.queues = queues if callable(queues) else list(queues or [])
        self._reclaim_at = 0.0
        #: when (unix seconds) the next renewal of buffered records is due
        self._renew_at = math.inf
        self._unsent = Repeated(log, "could not remove the unstarted record of %s (%s): not starting it; "
                                     "it is given back to the queue when its lease runs out")
        self._unrenewed = Repeated(log, "could not renew the unstarted records of %d buffered job(s) (%s)")

    def recorded(self, reserved_at: float) -> float:
        """Jobs reserved (and recorded) by a call sent at ``reserved_at`` (unix seconds): the time until
        which their records surely last, to store on each :class:`Buffered`."""
        lease = self.lease
        if not lease:
            return math.inf
        until = reserved_at + lease
        self._renew_at = min(self._renew_at, until - lease / 3 * 2)
        return until

    def riding(self, item: Buffered) -> bytes | None:
        """``item``'s record, if its removal may ride on the ack connection's next write (the loop starts
        it right after): the lease must leave a third of its length, so the command reaches Redis long
        before anyone may reclaim the job. None: no record to remove, or :meth:`start_alone` removes it."""
        if item.unstarted_until == math.inf or self.acks.pipe is None \
                or item.unstarted_until - time.time() < self.lease / 3:
            return None
        return item.unstarted or _member(item)

    def start_alone(self, item: Buffered) -> bool:
        """Remove ``item``'s record with a round trip before it runs (renewing the other buffered records
        of its queue in the same call); False: do not run it now (reclaimed by another worker; or Redis
        could not be told: then it is put back at the head of the buffer, still reserved and recorded, for
        the loop to try again after a pause or give back at the stop)."""
        if item.unstarted_until == math.inf:
            return True
        member = item.unstarted or _member(item)
        name = item.job.queue
        now = time.time()
        others = [b for b in self.buffer if b.job.queue == name and b.unstarted_until != math.inf]
        try:
            alive = self.reserving.unstarted(name, [member], [_member(b) for b in others])
        except Exception as exc:
            self._unsent.warn(f"{item.job.name} (id {item.job.id})", exc)
            self.buffer.appendleft(item)  # kept: started once Redis answers, or given back at the stop
            return False
        self._unsent.clear("unstarted records removed again")
        self._renewed(others, alive[1:], now + self.lease)
        if not alive[0]:
            log.warning("%s (id %s) was given back to the queue by another worker while buffered (its "
                        "unstarted lease ran out): not running it here", item.job.name, item.job.id)
        return alive[0]

    def resend(self) -> None:
        """Send again the removals whose replies a broken ack connection lost (removing twice is harmless)."""
        for name, members in self.acks.lost_starts().items():
            try:
                self.reserving.unstarted(name, members)
            except Exception as exc:
                self._unrenewed.warn(len(members), exc)
                self.acks.keep_lost_starts(name, members)

    def reclaim_due(self) -> None:
        """Every half lease, give back the buffers of dead workers on this worker's queues even while it
        does not reserve (its own buffer is full): every batch reserve reclaims too, but the sooner the
        better, for Laravel's migrate of the same jobs from ``:reserved`` would bring them back with an
        attempt spent. A fault is left to the next reserve, which meets and reports it."""
        lease = self.lease
        now = time.monotonic()
        if not lease or now < self._reclaim_at:
            return
        self._reclaim_at = now + lease / 2
        for name in self.queues() if callable(self.queues) else self.queues:
            try:
                given = self.reserving.reclaim(name)
            except Exception:  # the next reserve call meets the same fault and reports it
                return
            if given:
                log.info("gave back %d job(s) a dead worker had buffered on %s (attempts not spent)", given, name)

    def renew_due(self) -> None:
        """Push the records of buffered jobs forward once a third of their lease has passed."""
        self.resend()
        self.reclaim_due()
        now = time.time()
        if now < self._renew_at:
            return
        if not self.buffer:
            self._renew_at = math.inf
            return
        lease = self.lease
        by_queue: dict[str, list[Buffered]] = {}
        for b in self.buffer:
            if b.unstarted_until != math.inf:
                by_queue.setdefault(b.job.queue, []).append(b)
        self._renew_at = math.inf
        for name, items in by_queue.items():
            try:
                alive = self.reserving.unstarted(name, [], [_member(b) for b in items])
            except Exception as exc:
                self._unrenewed.warn(len(items), exc)
                self._renew_at = min(self._renew_at, now + 1.0)
                continue
            self._unrenewed.clear("unstarted records renewed again")
            self._renewed(items, alive, now + lease)

    def _renewed(self, items: list[Buffered], alive: list[bool], until: float) -> None:
        """Record a renewal's answer: ours get the new lease; those reclaimed meanwhile leave the buffer."""
        gone = set()
        for b, ours in zip(items, alive, strict=False):
            if ours:
                b.unstarted_until = until
            else:
                gone.add(id(b))
                log.warning("%s (id %s) was given back to the queue by another worker while buffered: dropped",
                            b.job.name, b.job.id)
        if items:
            self._renew_at = min(self._renew_at, until - self.lease / 3 * 2)
        if gone:
            kept = [b for b in self.buffer if id(b) not in gone]
            self.buffer.clear()
            self.buffer.extend(kept)
