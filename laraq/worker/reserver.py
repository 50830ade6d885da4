"""The reserve step: taking jobs from Redis and keeping them ours until they start (Laravel's
``Worker::getNextJob`` and ``RedisQueue::pop``).

:meth:`Reserver.take` is one reserve step over the ``--queue`` list, first queue first, skipping paused
queues (12.40+), and hands back a :class:`Taken`, a value saying what it took. With ``--batch 1`` (and
``--once``) a step is Laravel's pop, call for call (migrate, migrate, the pop script, the ``BLPOP
:notify`` wait); otherwise one Lua call per queue reserves up to ``--batch`` jobs, the deferred acks
riding along, and records each as unstarted (:mod:`laraq.worker.unstarted`). Under ``--unhandled leave``,
the default, only jobs with a Python handler are taken and the others stay in the list for PHP workers.
A step that finds nothing waits on ``:notify`` as Laravel's pop does (``block_for``; the reserve is
written right behind the ``BLPOP``, so Redis reserves the moment a token comes). After a full batch the
next one is asked for at once, while this one runs, within the prefetch budget.

The jobs taken wait in a buffer until the loop starts them (:meth:`Reserver.next_jobs`: their leases
renewed if stale, :mod:`laraq.worker.leases`; their unstarted records removed first); on a stop or pause
the buffer goes back to the head of its lists, attempts not spent (:meth:`Reserver.give_back`). A step
that fails (Redis away, refused credentials) is a :class:`Fault` in what it hands back, never an empty queue.

The reserver is the loop's while it runs (:meth:`Reserver.own`), and lent while the loop waits for a job
to end (:meth:`Reserver.lent`): then a slot thread whose ``def`` job just ended may take its next job
(:meth:`Reserver.next_on_thread`). A slot thread waits at most :data:`SLOT_WAIT` for the loop to wait;
past that, the loop starts the next job. The loop's own calls take no lock: a job's path costs nothing
for it.

The reserver holds the step together: when to reserve, how many, the wait and the batch asked for ahead.
Its parts answer in values: :mod:`laraq.worker.levels` (a step's reserve calls over the selection's
levels), :mod:`laraq.worker.deeplook` (a selective reserve's deep look), :mod:`laraq.worker.buffer` (the
jobs waiting to start) and :mod:`laraq.worker.faults` (a failed step's bookkeeping).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from laraq.bus.job import Job
from laraq.protocol.acks import Acks
from laraq.protocol.payload import PayloadError
from laraq.protocol.queue import ReservedJob
from laraq.protocol.redis_retry import REDIS_DOWN
from laraq.protocol.reserve import PendingReserve, Reserving
from laraq.protocol.timers import Timers
from laraq.worker.bridge import AsyncBridge
from laraq.worker.buffer import JobBuffer
from laraq.worker.context import WorkerContext
from laraq.worker.deeplook import DeepLook
from laraq.worker.faults import Fault, ReserveFaults
from laraq.worker.leases import Buffered, Leases
from laraq.worker.levels import LevelRound
from laraq.worker.selection import QueueSelection, Slots
from laraq.worker.unstarted import Unstarted

__all__ = ["Taken", "Fault", "Reserver"]

log = logging.getLogger("laraq.worker.worker")

#: How long a slot thread waits for the loop to wait (and lend it the reserver) before it leaves its next
#: job to the loop (seconds): the loop waits once a round while every slot is taken.
SLOT_WAIT = 0.02


@dataclass(frozen=True, slots=True)
class Taken:
    """What one reserve step took (buffered for :meth:`Reserver.next_jobs`)."""

    #: usable jobs buffered
    count: int = 0
    #: reservations whose body Python cannot read: for the settle step to move to ``failed_jobs``
    unreadable: tuple[tuple[ReservedJob, PayloadError], ...] = ()
    #: list members looked at and left for PHP workers (no Python handler)
    left_for_php: int = 0
    fault: Fault | None = None
    #: the deep look has more of a list to read: the next step comes at once, not after ``--sleep``
    more: bool = False

    @property
    def popped(self) -> bool:
        """Was a job taken (a readable one or not: Laravel's loop had a job)?"""
        return self.count > 0 or bool(self.unreadable)


#: The loop's keep-alive runs at most this often (seconds).
KEEP_ALIVE_EVERY = 0.01

_EMPTY = Taken()


class Reserver:
    """The worker's reserve side (see the module)."""

    def __init__(self, context: WorkerContext, bridge: AsyncBridge, acks: Acks, reserving: Reserving,
                 timers: Timers, selection: QueueSelection | None = None, slots: Slots | None = None) -> None:
        self.queue = context.queue
        #: which queues each step asks, in what order, for how many (priority levels, patterns, --fair)
        self.selection = selection or QueueSelection(context.queue, context.queues)
        #: --max-per-queue: the fleet-wide slots a job holds while reserved (None: no limit)
        self.slots = slots
        self.options = context.options
        self.version = context.version
        self.cache = context.cache
        self.connection_name = context.connection_name
        self.events = context.events
        self.pace = context.pace
        self.bridge = bridge
        self.acks = acks
        self.reserving = reserving
        self.timers = timers
        #: one job per step by Laravel's own pop, as ``queue:work`` does (``--batch 1``, ``--once``)
        self.per_job = self.options.batch <= 1 or self.options.once
        #: reserved jobs not started yet, in order: the one deque the job buffer fills and empties and the
        #: leases and unstarted records watch (read here for its length only)
        self.buffer: collections.deque[Buffered] = collections.deque()
        self.leases = Leases(reserving, context.events.flush, self.buffer, acks.deferred)
        self.unstarted = Unstarted(reserving, acks, self.buffer, self.selection.names)
        self.jobs = JobBuffer(self.buffer, self.leases, self.unstarted, acks, context.queue, context.version,
                              context.events, context.connection_name)
        #: the names Python has handlers for when only those are reserved (``--unhandled leave``)
        self.handled = self._handled_names(context)
        #: how many list heads a selective reserve looks at
        self.window = max(1, self.options.scan_window)
        #: the deep look of a selective reserve: where each queue's stands, and what it saw
        self.deep_look = DeepLook(context.events, selective=self.handled is not None, window=self.window)
        #: the reserve calls of a step over the selection's levels
        self.levels = LevelRound(context.queue, reserving, timers, self.selection, slots, self.deep_look,
                                 handled=self.handled, window=self.window)
        #: failed steps in a row, answered as a :class:`Fault`
        self.faults = ReserveFaults(context.queue, context.queues, context.signals,
                                    stop_when_empty=self.options.stop_when_empty)
        #: the next batch, asked for while this one runs: the call, the acks it carries, its size
        self._ahead: tuple[PendingReserve, list[bytes], int] | None = None
        #: when the next keep-alive pass is due (monotonic seconds)
        self._keep_at = 0.0
        self._paused: set[str] = set()
        #: held by the loop while it runs, released while it waits (see the module)
        self._lock = threading.Lock()
        self._owned = False

    @staticmethod
    def _handled_names(context: WorkerContext) -> list[str] | None:
        """The registry's handler names under ``--unhandled leave`` (the default: a queue shared with PHP
        workers), else None (the head jobs, whatever they are). A registry that cannot list its names
        gets the head jobs, and unhandled ones are requeued."""
        if context.options.unhandled != "leave":
            return None
        names = getattr(context.app, "names", None)
        if not isinstance(names, list | tuple):
            log.warning("the handler registry cannot list its names: jobs without a Python handler are "
                        "taken and requeued untouched (--unhandled requeue)")
            return None
        return [str(n) for n in names]

    @property
    def ready(self) -> int:
        """Jobs reserved and buffered, ready to start."""
        return len(self.buffer)

    @property
    def buffered(self) -> int:
        """Jobs reserved and not started: buffered, or asked for ahead."""
        return len(self.buffer) + (self._ahead[2] if self._ahead is not None else 0)

    # -- the step --------------------------------------------------------------------------------------------

    def take(self, free: int, room: int | None = None, *, idle: bool = True) -> Taken:
        """One reserve step: for ``free`` slots plus the prefetch budget, at most ``room`` jobs (``--max-jobs``
        left; 0: only land what was asked for ahead). ``idle`` (nothing runs): an empty step may wait on
        ``:notify`` as Laravel's pop does."""
        if self._ahead is not None:
            pending, acks, want = self._ahead
            self._ahead = None
            return self._land(pending, acks, want, free, room)
        want = self._want(free, room)
        if want <= 0:
            return _EMPTY
        taken = self._pop() if self.per_job else self._round(want, free, room)
        if taken.popped or taken.fault is not None or not idle or self.per_job or taken.more:
            return taken
        return self._wait(want, taken.left_for_php, free, room)

    def _want(self, free: int, room: int | None) -> int:
        """How many jobs to reserve now: the free slots plus an adaptive, time-bounded prefetch."""
        opts = self.options
        want = free
        if opts.prefetch and self.pace.average is not None:
            want += int(self._budget() * opts.concurrency / max(self.pace.average, 1e-6))
        want = min(want, max(opts.batch, free), 1 if self.per_job else want)
        return want if room is None else min(want, room)

    def _budget(self) -> float:
        budget = self.options.prefetch_seconds
        return budget if self.queue.retry_after is None else min(budget, self.queue.retry_after / 4)

    def _read_paused(self) -> None:
        """``queue:pause`` (12.40+), read before every reserve call."""
        self._paused = set()
        if self.cache is not None and self.version.has_queue_pause:
            self._paused = set(self.cache.paused_queues(self.connection_name, self.selection.names()))

    def _select(self) -> None:
        """The queues of this step: discovery when due (the idle sleep then watches the new set)."""
        if self.selection.refresh():
            self.timers.use(self.selection.names())

    def _pop(self) -> Taken:
        """Laravel's ``getNextJob``: one job by Laravel's pop (:meth:`LevelRound.pop`), started at once."""
        try:
            self._select()
            self._read_paused()
            reserved, left = self.levels.pop(self._paused)
            self.faults.up()
            if reserved is not None:
                return self._buffer([reserved], left, time.time(), record=False)
            return Taken(left_for_php=left, more=self.deep_look.more(self._paused))
        except Exception as exc:
            return Taken(fault=self.faults.failed(exc, "pop a job from"))

    def _round(self, want: int, free: int, room: int | None) -> Taken:
        """One reserve step by batch reserves (:meth:`LevelRound.reserve`), the deferred acks riding on the
        call of their queue; the acks no call carried are sent after it."""
        acks = self._take_acks()
        sent_at = time.time()
        try:
            self._select()
            self._read_paused()
            taken, left = self.levels.reserve(want, acks, self._paused)
            if acks:
                self.acks.send(acks)
                acks = {}
            self.faults.up()
        except Exception as exc:
            return Taken(fault=self.faults.failed(exc, "reserve jobs from"))
        finally:
            self.acks.restore(acks)
        taken_now = self._buffer(taken, left, sent_at, record=True)
        if not taken_now.popped and self.deep_look.more(self._paused):
            taken_now = Taken(left_for_php=left, more=True)
        return self._full(taken_now, want, free, room)

    def _land(self, pending: PendingReserve, acks: list[bytes], want: int, free: int, room: int | None) -> Taken:
        """Read a batch asked for ahead (or along with a wait) and buffer it."""
        try:
            got = self.reserving.reserve_batch_receive(pending)
        except Exception as exc:
            # maybe applied, maybe not: ZREM again (removing a member twice is harmless)
            self.acks.restore({pending.queue: acks})
            return Taken(fault=self.faults.failed(exc, "reserve jobs from"))
        self.faults.up()
        if pending.selective:
            self.deep_look.note(pending.queue, got)
        taken = self._buffer(got.jobs, got.skipped if pending.selective else 0, pending.sent_at, record=True)
        if not taken.popped and self.deep_look.more(self._paused):
            taken = Taken(left_for_php=taken.left_for_php, more=True)
        return self._full(taken, want, free, room)

    def _full(self, taken: Taken, want: int, free: int, room: int | None) -> Taken:
        """After a full batch more jobs are waiting: the next batch is asked for now (:meth:`_ahead_call`)."""
        if taken.count and taken.count + len(taken.unreadable) >= want:
            self._ahead_call(free, room)
        return taken

    def _ahead_call(self, free: int, room: int | None) -> None:
        """Ask Redis for the next batch while this one runs, so that Redis reserves on its core while this
        process runs jobs on its own (landed by the next :meth:`take`). For one queue, with prefetch on, and
        within the prefetch budget: what is buffered plus what is asked for stays about ``prefetch_seconds``
        of measured work, the bound a SIGKILL can strand."""
        opts = self.options
        name = self.selection.single
        if self._ahead is not None or not opts.prefetch or self.pace.average is None or name is None \
                or self.slots is not None:
            return
        try:
            self._read_paused()  # queue:pause is read before every reserve call, this one too
        except Exception:  # the next (synchronous) reserve meets the same fault and reports it
            return
        if name in self._paused:
            return
        active = opts.concurrency - free
        total = opts.concurrency + int(self._budget() * opts.concurrency / max(self.pace.average, 1e-6))
        want = min(opts.batch, total - len(self.buffer) - active)
        if room is not None:
            want = min(want, room - len(self.buffer))
        if want <= 0:
            return
        acks = self._take_acks()
        mine = acks.pop(name, [])
        self.acks.restore(acks)
        try:
            pending = self.reserving.reserve_batch_send(name, want, mine, handled=self.handled, window=self.window,
                                                        deep=self.deep_look.start(name), record=True)
        except Exception:  # the next (synchronous) reserve meets the same fault and reports it
            pending = None
        if pending is None:
            self.acks.restore({name: mine})
            return
        self._ahead = (pending, mine, want)

    def _wait(self, want: int, left_for_php: int, free: int, room: int | None) -> Taken:
        """``block_for``: ``BLPOP :notify`` as Laravel's pop does (only the first queue from 11.27 unless a
        later one had a job; every queue in turn before), then what came. No wait while jobs for PHP wait
        in the list: their tokens would end it at once, again and again."""
        if self.queue.block_for is None or left_for_php or self.selection.dynamic:
            return Taken(left_for_php=left_for_php)
        self.events.flush()
        self.leases.collect()
        self.acks.flush(force=True)
        names = [name for index, name in enumerate(self.selection.names())
                 if name not in self._paused and self.queue.blocks_at(index)]
        try:
            if len(names) == 1:
                taken = self._wait_then_reserve(names[0], want, free, room)
                if taken is not None:
                    return taken
            for name in names:
                if self.queue.wait_for_token(name, self.timers.wait_for):
                    return self._round(want, free, room)
        except REDIS_DOWN as exc:
            return Taken(fault=self.faults.failed(exc, "wait on"))
        return _EMPTY

    def _wait_then_reserve(self, name: str, want: int, free: int, room: int | None) -> Taken | None:
        """Wait on one queue's ``:notify`` with the reserve written right behind the ``BLPOP``: Redis
        reserves the moment a token comes (or the wait ends: a job pushed without a token comes too), and
        the worker reads the jobs without another round trip. None: this client cannot split a call
        (Redis Cluster); the caller does a bare ``BLPOP``."""
        wait = self.queue.block_timeout(self.timers.wait_for)
        if wait is None:  # a delayed job is due now: a fresh round (its migrate) takes it
            return self._round(want, free, room)
        pending = self.reserving.reserve_batch_send(name, want, wait=wait, handled=self.handled,
                                                    window=self.window, deep=self.deep_look.start(name), record=True)
        if pending is None:
            return None
        try:
            self.reserving.reserve_wait(pending)
        except redis.exceptions.ResponseError as exc:  # :notify is not a list, say: the reserve still ran
            if not self.queue.note_wait_refused(exc):
                log.warning("could not wait on %s: %s", name, exc)
        return self._land(pending, [], want, free, room)

    # -- the buffer -----------------------------------------------------------------------------------------

    def _buffer(self, reserved: list[ReservedJob], left: int, sent_at: float, *, record: bool) -> Taken:
        """Buffer what a reserve call sent at ``sent_at`` (unix seconds) took (:meth:`JobBuffer.add`)."""
        count, unreadable = self.jobs.add(reserved, sent_at, record=record)
        return Taken(count, unreadable, left)

    def next_jobs(self, most: int) -> list[Buffered]:
        """Up to ``most`` buffered jobs that may start now, in order (:meth:`JobBuffer.next_jobs`)."""
        return self.jobs.next_jobs(most)

    def own(self) -> None:
        """The loop runs from now on: the reserver is its own until :meth:`disown`, lent only while it waits."""
        self._lock.acquire()
        self._owned = True

    def disown(self) -> None:
        """The loop stopped."""
        self._owned = False
        self._lock.release()

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """While the loop waits for a job to end or a tick: slot threads may take their next jobs."""
        if not self._owned:
            yield
            return
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()

    def next_on_thread(self, fits: Callable[[Job], bool]) -> Job | None:
        """From a slot thread whose job just ended: the next buffered job that may start now (as
        :meth:`next_jobs` hands it out), when ``fits`` says that thread may run it. None when the loop
        does not wait within :data:`SLOT_WAIT`, when the buffer holds nothing that may start, or when its
        next job does not fit (it stays at the head for the loop)."""
        if not self._lock.acquire(timeout=SLOT_WAIT):
            return None
        try:
            buffer = self.buffer
            if not buffer or not fits(buffer[0].job):
                return None
            head = buffer[0]
            ready = self.jobs.next_jobs(1)
            if not ready:
                return None
            if ready[0] is not head and not fits(ready[0].job):  # the head was dropped (its lease lost)
                self.jobs.not_started(ready)
                return None
            return ready[0].job
        finally:
            self._lock.release()

    def next_job(self) -> Job | None:
        """The next buffered job that may start now (see :meth:`next_jobs`), or None."""
        ready = self.next_jobs(1)
        return ready[0].job if ready else None

    def buffered_jobs(self) -> list[Job]:
        """The buffered jobs, in order; any thread (:meth:`JobBuffer.snapshot`)."""
        return self.jobs.snapshot()

    def not_started(self, items: list[Buffered]) -> None:
        """Jobs :meth:`next_jobs` handed out that the loop did not start: back at the head of the buffer
        (:meth:`JobBuffer.not_started`)."""
        self.jobs.not_started(items)

    def give_back(self) -> None:
        """Hand buffered, unstarted jobs back to the head of their lists (attempts not spent); a batch
        asked for ahead is read first and handed back with them."""
        self.leases.collect()
        unreadable: tuple[tuple[ReservedJob, PayloadError], ...] = ()
        if self._ahead is not None:
            pending, acks, want = self._ahead
            self._ahead = None
            unreadable = self._land(pending, acks, want, 0, 0).unreadable  # given back too: the next taker fails them
        by_queue: dict[str, list[ReservedJob]] = {}
        for reserved in self.jobs.drain() + [item for item, _ in unreadable]:
            by_queue.setdefault(reserved.queue, []).append(reserved)
        if self.slots is not None:
            self.slots.forget([r.reserved for jobs in by_queue.values() for r in jobs])
            self.slots.flush()
        for name, jobs in by_queue.items():
            try:
                given = self.reserving.give_back(name, jobs)
                log.info("gave %d buffered job(s) back to %s", given, name)
            except Exception as exc:
                log.warning("could not give %d buffered job(s) back to %s (%s): they return after "
                            "retry_after", len(jobs), name, exc)

    def keep_alive(self) -> None:
        """What a pass of the loop does besides jobs, at most every :data:`KEEP_ALIVE_EVERY`: acks due, a
        renewal's reply, leases and records due (each due on a scale of seconds; replies waiting in the
        socket cost nothing until read)."""
        now = time.monotonic()
        if now < self._keep_at:
            return
        self._keep_at = now + KEEP_ALIVE_EVERY
        self.acks.flush()
        self.leases.collect()
        self.leases.renew_due()
        self.unstarted.renew_due()
        if self.slots is not None:
            self.slots.flush_due()
            self.slots.renew_due()

    def release_slots(self) -> None:
        """At the stop, once running jobs are settled: their ``--max-per-queue`` slots go back now."""
        if self.slots is not None:
            self.slots.flush()

    def settle_replies(self) -> None:
        """Read the replies that still hold finished jobs' bodies here (a lease renewal sent as a job
        started, the written acks): the ``--memory`` check settles before it counts a process as over."""
        self.leases.collect()
        self.acks.flush(force=True)

    def _take_acks(self) -> dict[str, list[bytes]]:
        """The deferred acks, to send now. On the loop thread a renewal still in flight is read first: its
        answer then cannot have met one of these acks (see :class:`~laraq.worker.leases.Leases`)."""
        if self.leases.renewal is not None and self.bridge.on_loop_thread():
            self.leases.collect()
        return self.acks.take()
