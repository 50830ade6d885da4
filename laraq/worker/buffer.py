"""The reserved jobs waiting to start: what a reserve call took, wrapped as jobs and buffered in order, and
handed to the loop when they may start.

A reservation becomes a :class:`~laraq.bus.job.Job` (the ``RedisJob`` Laravel's ``RedisQueue::pop`` makes,
announced by :class:`~laraq.worker.events.JobReserved`, Laravel's ``JobPopped``) or, when Python cannot
read its body, the error that says why (for the settle step to fail). :class:`JobBuffer` keeps the jobs
in a deque it shares with their watchers: the leases
(:class:`~laraq.worker.leases.Leases`, renewed if stale) and the unstarted records
(:class:`~laraq.worker.unstarted.Unstarted`, removed before a job starts, in one write with the held acks).
Laravel's own pop (``--batch 1``) starts its job at once: no lease to watch, no unstarted record.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from laraq.bus.job import Job
from laraq.protocol.lua_laravel import RECORD_MAX_BYTES
from laraq.protocol.payload import Payload, PayloadError
from laraq.worker.events import JobReserved
from laraq.worker.leases import Buffered

if TYPE_CHECKING:
    import collections

    from laraq.protocol.acks import Acks
    from laraq.protocol.queue import RedisQueue, ReservedJob
    from laraq.protocol.versions import LaravelVersion
    from laraq.worker.events import Listeners
    from laraq.worker.leases import Leases
    from laraq.worker.unstarted import Unstarted

__all__ = ["JobBuffer"]


class JobBuffer:
    """Reserved jobs not started yet, in order (see the module). ``buffer`` is the deque the leases and the
    unstarted records watch."""

    def __init__(self, buffer: collections.deque[Buffered], leases: Leases, unstarted: Unstarted, acks: Acks,
                 queue: RedisQueue, version: LaravelVersion, events: Listeners, connection_name: str) -> None:
        self.buffer = buffer
        self.leases = leases
        self.unstarted = unstarted
        self.acks = acks
        self.queue = queue
        self.version = version
        self.events = events
        self.connection_name = connection_name

    def add(self, reserved: list[ReservedJob], sent_at: float, *,
            record: bool) -> tuple[int, tuple[tuple[ReservedJob, PayloadError], ...]]:
        """Wrap and buffer what a reserve call sent at ``sent_at`` (unix seconds) took: how many jobs were
        buffered, and the reservations whose body Python cannot read. Laravel's own pop (``record`` False)
        starts its job at once: no lease to watch, no unstarted record."""
        lease = math.floor(sent_at) + (self.queue.retry_after or 0) if record else math.inf
        unstarted_until = self.unstarted.recorded(sent_at) if reserved and record else math.inf
        unreadable = []
        count = 0
        for item in reserved:
            job = self._job(item, sent_at)
            if isinstance(job, PayloadError):
                unreadable.append((item, job))
                continue
            recorded = unstarted_until if len(item.body) <= RECORD_MAX_BYTES else math.inf
            self.buffer.append(Buffered(job, lease, recorded))
            count += 1
        if reserved and record:
            self.leases.note_lease(lease)
        return count, tuple(unreadable)

    def _job(self, reserved: ReservedJob, sent_at: float) -> Job | PayloadError:
        """A reservation as a job; a body Python cannot read (or PHP's ``Job::fire`` fails before any
        handler) is the error that says why."""
        try:
            payload = Payload.parse(reserved.body, version=self.version)
            unrunnable = payload.unrunnable()
            if unrunnable is not None:
                raise unrunnable
        except PayloadError as exc:
            return exc
        job = Job(self.queue, reserved, payload, connection_name=self.connection_name, reserved_at=sent_at)
        if self.events.wants(JobReserved):
            self.events.emit(JobReserved(job))
        return job

    def next_jobs(self, most: int) -> list[Buffered]:
        """Up to ``most`` buffered jobs that may start now, in order: each one's reservation still ours
        (renewed if stale) and its unstarted record removed. The removals go in one write with the acks the
        worker holds, and nothing starts before it (see :mod:`laraq.protocol.acks`). Empty when the buffer
        is empty, or when its head waits on Redis (then it stays buffered: the loop pauses and tries again)."""
        buffer, unstarted, lease_ok = self.buffer, self.unstarted, self.leases.lease_ok
        ready: list[Buffered] = []
        starts: dict[str, list[bytes]] = {}
        while buffer and len(ready) < most:
            item = buffer.popleft()
            if not lease_ok(item):
                if buffer and buffer[0] is item:  # kept: Redis did not answer
                    break
                continue
            if item.unstarted_until != math.inf:  # recorded: its record goes before it starts
                member = unstarted.riding(item)
                if member is not None:
                    starts.setdefault(item.job.queue, []).append(member)
                elif not unstarted.start_alone(item):
                    if buffer and buffer[0] is item:
                        break
                    continue
            ready.append(item)
        if ready and not self.acks.send_held(starts) and starts:
            # the write failed: each rider's removal is a round trip instead (the last first: one kept is
            # put back at the head of the buffer, ahead of those after it)
            riding = {m for members in starts.values() for m in members}
            refused = {id(item) for item in reversed(ready)
                       if item.unstarted in riding and not unstarted.start_alone(item)}
            ready = [item for item in ready if id(item) not in refused]
        return ready

    def not_started(self, items: list[Buffered]) -> None:
        """Jobs :meth:`next_jobs` handed out that the loop did not start (told to stop or pause meanwhile):
        back at the head of the buffer, in order, without their unstarted records (removed already), so a
        stop gives them back to the queue."""
        for item in reversed(items):
            item.unstarted_until = math.inf
            self.buffer.appendleft(item)

    def snapshot(self) -> list[Job]:
        """The buffered jobs, in order; from any thread (the deque is copied in one step under the GIL)."""
        return [b.job for b in list(self.buffer)]

    def drain(self) -> list[ReservedJob]:
        """Every buffered reservation, in order, the buffer emptied (to be given back)."""
        reserved = [b.job.reserved_job for b in self.buffer]
        self.buffer.clear()
        return reserved
