"""The worker's side of a queue, which Laravel's ``RedisQueue`` has no counterpart for: batch reserves,
lease renewals, give-backs, put-backs and laraq's unstarted record.

:class:`Reserving` calls only a :class:`laraq.protocol.queue.RedisQueue`'s public names: its settings
(``retry_after``, ``migration_batch_size``), keys, clock and scripts. A queue's ``reserving`` is one with
the default unstarted lease; a worker builds its own with the lease its ack mode calls for. It runs laraq's
own scripts (:mod:`laraq.protocol.lua_laraq`), and a job it reserves is reserved exactly as Laravel's pop
reserves one, by the queue's version's rules (migrate ``LIMIT``, no ``:reserved`` migrate when
``retry_after`` is ``None``, the 11.27+ first-queue rule); a reply is handed back as a :class:`Reserved`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from laraq.protocol.keys import QueueKeys
from laraq.protocol.lua import PendingCall
from laraq.protocol.lua_laraq import RECLAIM_CHUNK

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue, ReservedJob

#: The most due members the worker's reserve script moves per call (at least the jobs it reserves,
#: so the list fills as fast as it drains): keeps one reserve call under 1 ms at the default --batch.
RESERVE_MIGRATE_BOUND = 32

#: The unstarted lease (seconds): how soon after a SIGKILL the jobs its worker had buffered, never
#: started, are given back (attempts not spent) by the next reserve of any laraq worker on the queue.
UNSTARTED_LEASE = 15.0


class Reserved(NamedTuple):
    """What one reserve call took: the jobs in list order, the list members a selective reserve looked at
    and left alone (no Python handler), and the unreadable members it moved to ``:poison``."""

    jobs: list[ReservedJob]
    skipped: int = 0
    poisoned: int = 0
    #: where the next deep look of a selective reserve starts (0: from the window's end again; -1: the ACL
    #: refuses ``LSET``/``LREM``, see :data:`~laraq.protocol.lua_laraq.RESERVE_HANDLED`)
    cursor: int = 0
    #: the list's length after a selective reserve
    depth: int = 0
    #: Python jobs the deep look saw too far from both ends of the list to take
    beyond: int = 0


@dataclass(frozen=True)
class PendingReserve:
    """A :meth:`Reserving.reserve_batch_send` whose reply is not read yet (``sent_at``: its ``now``)."""

    queue: str
    keys: QueueKeys
    call: PendingCall
    sent_at: int
    #: a selective reserve (``handled`` names given): its reply carries the count of members left alone
    selective: bool = False


class Reserving:
    """laraq's reserve protocol on one :class:`~laraq.protocol.queue.RedisQueue` (see the module). It reads
    the queue's public settings, keys and clock, and runs its scripts. ``unstarted_lease``: seconds of the
    record each buffered job gets (0: no records, and no reclaim of dead workers' buffers)."""

    def __init__(self, queue: RedisQueue, unstarted_lease: float = UNSTARTED_LEASE) -> None:
        self.queue = queue
        self.unstarted_lease = unstarted_lease

    @property
    def retry_after(self) -> int | None:
        """The queue's ``retry_after``: how long a reservation lasts."""
        return self.queue.retry_after

    def reserve_batch(self, queue: str | None = None, count: int = 1,
                      acks: list[bytes] | tuple[bytes, ...] = (), *, handled: list[str] | None = None,
                      window: int = 100, deep: int | None = None, record: bool = False,
                      index: int | None = None) -> Reserved:
        """A worker's batch reserve: in ONE script call, ``ZREM`` the ``acks`` (reserved members of
        finished jobs), run Laravel's ``migrate`` and reserve up to ``count`` jobs (never blocks).

        Each job is reserved exactly as :meth:`~laraq.protocol.queue.RedisQueue.pop` reserves it, the
        migrate follows this version's rules (``LIMIT migration_batch_size`` from 9.23, no ``:reserved``
        migrate when ``retry_after`` is ``None``). ``count`` may be 0 (acks and migrate only).

        ``handled`` (names with a Python handler): reserve only such jobs among the first ``window``
        list members and leave every other member where it is (a queue shared with PHP workers; the
        reply's ``skipped`` says how many were left alone). ``deep``: the cursor of the look past the
        window (the reply's ``cursor`` is the next one); None: no look past it.

        ``record``: the jobs go to a buffer, not straight to a handler: each is recorded as unstarted
        (:attr:`unstarted_lease`), and its record must be removed when it starts (:meth:`unstarted`).
        ``index``: the queue's place in a worker's ``--queue`` list, for the first-queue rule
        (:meth:`RedisQueue.popped_at`).
        """
        name, keys, now, args, options = self._reserve_batch_call(queue, count, acks, record)
        reserved = self.queue.reserved_from(name, keys, self.queue.scripts.reserve_batch(
            *args, **options, handled=handled, window=window, deep=deep))
        if index is not None:
            self.queue.popped_at(index, bool(reserved.jobs))
        return reserved

    def reserve_batches(self, plan: Sequence[tuple[str, int, list[bytes]]], *,
                        handled: list[str] | None = None, window: int = 100,
                        record: bool = False,
                        deep: Callable[[str], int | None] | None = None) -> list[Reserved | Exception]:
        """:meth:`reserve_batch` on several queues, ``(queue, count, acks)`` each, in one pipelined round trip
        (a worker's ``--fair`` turns): each call is the batch reserve of its queue, run by Redis back to back.
        A call that failed is its exception in the answer (its acks maybe applied, maybe not). ``deep``
        gives each queue's deep-look cursor (see :meth:`reserve_batch`)."""
        calls, named = [], []
        for queue, count, acks in plan:
            name, keys, _now, args, options = self._reserve_batch_call(queue, count, acks, record)
            list_key, reserved_key, notify_key, poison_key, delayed_key = args
            calls.append({"list_key": list_key, "reserved_key": reserved_key, "notify_key": notify_key,
                          "poison_key": poison_key, "delayed_key": delayed_key, "handled": handled,
                          "window": window, "deep": None if deep is None else deep(name), **options})
            named.append((name, keys))
        results = self.queue.scripts.reserve_batch_many(calls)
        return [result if isinstance(result, Exception) else self.queue.reserved_from(name, keys, result)
                for (name, keys), result in zip(named, results, strict=True)]

    def reserve_batch_send(self, queue: str | None = None, count: int = 1,
                           acks: list[bytes] | tuple[bytes, ...] = (), *,
                           wait: float | None = None, handled: list[str] | None = None,
                           window: int = 100, deep: int | None = None,
                           record: bool = False) -> PendingReserve | None:
        """:meth:`reserve_batch`, sent now and read later with :meth:`reserve_batch_receive`: Redis reserves
        the next jobs while the worker runs the ones it has. None when this client cannot split a call
        (Redis Cluster): use :meth:`reserve_batch`.

        ``wait`` (seconds, 0 = forever): a ``BLPOP :notify`` with that timeout goes first on the same
        connection, so the reserve runs on Redis the moment a token arrives or the wait ends, as
        Laravel's pop retries at once after its ``BLPOP``, without the round trip between the two.
        Read whether a token came with :meth:`reserve_wait` first. The reservation's ``now`` (its
        expiry and the migrate's clock) is the send time, as with any call sent ahead: the worker
        renews a lease the wait made stale before the job starts."""
        name, keys, now, args, options = self._reserve_batch_call(queue, count, acks, record)
        first = None if wait is None else ("BLPOP", keys.notify, wait)
        pending = self.queue.scripts.reserve_batch_send(*args, **options, first=first, handled=handled, window=window,
                                                         deep=deep)
        return None if pending is None else PendingReserve(name, keys, pending, now, handled is not None)

    def reserve_wait(self, pending: PendingReserve) -> bool:
        """The ``BLPOP`` of a :meth:`reserve_batch_send` with ``wait``: True if a ``:notify`` token came,
        False if the wait timed out (blocks until one of the two). The reserve's reply is next."""
        return bool(self.queue.scripts.receive_first(pending.call, self.queue.block_for or 0))

    def reserve_batch_receive(self, pending: PendingReserve) -> Reserved:
        """What a :meth:`reserve_batch_send` reserved (raises what reading the reply raised); it was sent
        for the first queue of a worker's list."""
        result = self.queue.scripts.reserve_batch_result(self.queue.scripts.receive(pending.call),
                                                         selective=pending.selective)
        reserved = self.queue.reserved_from(pending.queue, pending.keys, result)
        self.queue.popped_at(0, bool(reserved.jobs))
        return reserved

    def _reserve_batch_call(self, queue: str | None, count: int, acks: list[bytes] | tuple[bytes, ...],
                            record: bool = False) -> tuple[str, QueueKeys, int, tuple[str, ...], dict[str, Any]]:
        """The ``reserve_batch`` script's keys and arguments for a reserve made now, by this version's rules."""
        name = self.queue.queue_name(queue)
        keys = self.queue.keys(name)
        now = self.queue.current_time()
        expiry = now if self.queue.retry_after is None else now + int(self.queue.retry_after)
        limit = self.reserve_migrate_limit(count)
        options: dict[str, Any] = {"expires_at": expiry, "count": count, "now": now, "migrate_limit": limit,
                                   "migrate_reserved": self.queue.retry_after is not None, "acks": acks}
        lease = self.unstarted_seconds
        if lease > 0:  # expired records are reclaimed by every batch reserve, recording or not
            options.update(unstarted_key=keys.unstarted, unstarted_lease=lease if record else 0.0)
        return name, keys, now, (keys.list, keys.reserved, keys.notify, keys.poison, keys.delayed), options

    def reserve_migrate_limit(self, count: int) -> int:
        """The migrate ``LIMIT`` inside one reserve call: this version's ``migration_batch_size`` (9.23+,
        when set), never more than :data:`RESERVE_MIGRATE_BOUND` or ``count`` (whichever is larger).
        Due jobs left over move on the next calls, which come at once while jobs keep coming."""
        bound = max(int(count), RESERVE_MIGRATE_BOUND)
        configured = self.queue.migration_batch_size if self.queue.version.migrate_has_limit else -1
        return bound if configured < 0 else min(configured, bound)

    def renew(self, queue: str, members: list[bytes]) -> list[bool]:
        """Push the reservations of ``members`` forward by ``retry_after`` (``ZADD XX``); False = gone."""
        if self.queue.retry_after is None or not members:
            return [True] * len(members)
        return self.queue.scripts.renew(self.queue.keys(queue).reserved, members, self.queue.available_at(self.queue.retry_after))

    def renew_send(self, queue: str, members: list[bytes]) -> tuple[PendingCall, int] | None:
        """:meth:`renew`, sent now (``Scripts.receive`` + ``Scripts.renew_result`` read it later): the
        call and the expiry it sets. None when this client cannot split a call or nothing needs it."""
        if self.queue.retry_after is None or not members:
            return None
        expiry = self.queue.available_at(self.queue.retry_after)
        pending = self.queue.scripts.renew_send(self.queue.keys(queue).reserved, members, expiry)
        return None if pending is None else (pending, expiry)

    def renew_receive(self, pending: PendingCall) -> list[bool]:
        """The answer of a :meth:`renew_send`: True per member still reserved (raises what reading raised)."""
        return self.queue.scripts.renew_result(self.queue.scripts.receive(pending))

    def give_back(self, queue: str, jobs: list[ReservedJob]) -> int:
        """Hand reserved, never-started jobs back to the head of the list (original bodies, attempts
        not burned, one ``:notify`` token each), in their order; only those still reserved by us.
        Their unstarted records go too."""
        keys = self.queue.keys(queue)
        return self.queue.scripts.give_back(keys.list, keys.reserved, keys.notify, [(j.reserved, j.body) for j in jobs],
                                      keys.unstarted)

    def requeue(self, job: ReservedJob, delay: int) -> None:
        """Swap a reservation for the untouched body on ``:delayed`` in ``delay`` seconds (attempts not
        spent): a job this worker took and leaves for PHP workers."""
        keys = self.queue.keys(job.queue)
        self.queue.scripts.requeue(keys.reserved, keys.delayed, job.reserved, self.queue.available_at(delay), job.body)

    def put_back(self, job: ReservedJob, delay: int) -> None:
        """The untouched body back on ``:delayed`` in ``delay`` seconds, whatever became of its reservation
        (a failure whose ``failed_jobs`` row could not be written anywhere)."""
        self.queue.client.zadd(self.queue.keys(job.queue).delayed, {job.body: self.queue.available_at(delay)})

    @property
    def unstarted_seconds(self) -> float:
        """The unstarted lease in effect: :attr:`unstarted_lease`, and at most a third of ``retry_after``
        (so that after a SIGKILL the reclaim comes before Laravel's migrate of the same jobs, which would
        bring them back with an attempt spent)."""
        lease = float(self.unstarted_lease or 0.0)
        return lease if self.queue.retry_after is None else min(lease, self.queue.retry_after / 3)

    def unstarted(self, queue: str, starting: Sequence[bytes], buffered: Sequence[bytes] = ()) -> list[bool]:
        """Remove the unstarted records (:func:`~laraq.protocol.lua_laraq.unstarted_member`) of ``starting``
        jobs and renew those of ``buffered`` ones by :attr:`unstarted_seconds`: True per record still there."""
        return self.queue.scripts.unstarted(self.queue.keys(queue).unstarted, self.unstarted_seconds, starting, buffered)

    def reclaim(self, queue: str | None = None) -> int:
        """Give back the jobs of dead workers' buffers (unstarted lease run out) to the head of the list,
        attempts not spent; how many were given back."""
        keys = self.queue.keys(queue)
        total = 0
        while True:
            looked, given = self.queue.scripts.reclaim(keys.list, keys.reserved, keys.notify, keys.unstarted)
            total += given
            if looked < RECLAIM_CHUNK:
                return total
