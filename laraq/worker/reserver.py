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
"""

from __future__ import annotations

import collections
import logging
import math
import time
from dataclasses import dataclass

import redis

from laraq.bus.job import Job
from laraq.config.faults import explain, is_acl_denial
from laraq.exitcodes import EXIT_ERROR, EXIT_REDIS_AUTH, EXIT_REDIS_UNREACHABLE
from laraq.protocol.acks import Acks
from laraq.protocol.lua_laraq import DEEP_REACH
from laraq.protocol.lua_laravel import RECORD_MAX_BYTES
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.queue import ReservedJob
from laraq.protocol.redis_retry import REDIS_DOWN
from laraq.protocol.reserve import PendingReserve, Reserved, Reserving
from laraq.protocol.timers import Timers
from laraq.repeated import Repeated
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import WorkerContext
from laraq.worker.events import JobReserved, JobsOutOfReach
from laraq.worker.leases import Buffered, Leases
from laraq.worker.selection import Level, QueueSelection, Slots
from laraq.worker.unstarted import Unstarted

__all__ = ["Taken", "Fault", "Reserver"]

log = logging.getLogger("laraq.worker.worker")


@dataclass(frozen=True, slots=True)
class Fault:
    """A reserve step that failed: the exit code it calls for (3 Redis unreachable, 4 credentials, 1 anything
    else), how many steps failed in a row, and how long to wait before the next."""

    status: int
    rounds: int
    retry_in: float


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

    #: Consecutive refused logins (the password changed under a running worker) before it stops with
    #: exit 4: retried with the reconnect backoff (about 15 s), never forever.
    AUTH_RETRIES = 4

    def __init__(self, context: WorkerContext, bridge: AsyncBridge, acks: Acks, reserving: Reserving,
                 timers: Timers, selection: QueueSelection | None = None, slots: Slots | None = None) -> None:
        self.queue = context.queue
        self.queues = context.queues
        #: which queues each step asks, in what order, for how many (priority levels, patterns, --fair)
        self.selection = selection or QueueSelection(context.queue, context.queues)
        #: --max-per-queue: the fleet-wide slots a job holds while reserved (None: no limit)
        self.slots = slots
        self.options = context.options
        self.version = context.version
        self.cache = context.cache
        self.connection_name = context.connection_name
        self.events = context.events
        self.signals = context.signals
        self.pace = context.pace
        self.bridge = bridge
        self.acks = acks
        self.reserving = reserving
        self.timers = timers
        #: one job per step by Laravel's own pop, as ``queue:work`` does (``--batch 1``, ``--once``)
        self.per_job = self.options.batch <= 1 or self.options.once
        #: reserved jobs not started yet, in order
        self.buffer: collections.deque[Buffered] = collections.deque()
        self.leases = Leases(reserving, context.events.flush, self.buffer, acks.deferred)
        self.unstarted = Unstarted(reserving, acks, self.buffer, self.selection.names)
        #: the names Python has handlers for when only those are reserved (``--unhandled leave``)
        self.handled = self._handled_names(context)
        #: how many list heads a selective reserve looks at
        self.window = max(1, self.options.scan_window)
        #: per queue, where the next deep look past the window starts (see :meth:`_deep`)
        self._cursor: dict[str, int] = {}
        self._deep_refused = False
        #: per queue, Python jobs beyond reach: seen so far in the look under way, and told at its last end
        self._beyond_now: dict[str, int] = {}
        self._beyond_told: dict[str, int] = {}
        #: the next batch, asked for while this one runs: the call, the acks it carries, its size
        self._ahead: tuple[PendingReserve, list[bytes], int] | None = None
        #: when the next keep-alive pass is due (monotonic seconds)
        self._keep_at = 0.0
        self._paused: set[str] = set()
        self._down_since: float | None = None
        self._retry_in = 0.0
        self._failed_rounds = 0
        self._auth_refusals = 0
        #: a window full of jobs for PHP at the head of a queue: said once a minute at most
        self._left_alone = Repeated(log, "the first %d job(s) of queue %s (%d in all) have no Python handler: "
                                    "left for PHP workers (--unhandled leave); laraq looks for Python jobs "
                                    "behind them", every=60.0, level=logging.INFO)
        #: Python jobs the deep look cannot take (too far from both ends of a long list): warned once a minute
        self._beyond = Repeated(log, "queue %s: %d Python job(s) wait more than %d members from both ends of "
                                "its list (%d jobs, PHP workers not taking them): laraq takes them once the "
                                "jobs for PHP ahead of them are taken", every=60.0)

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
        """Laravel's ``getNextJob``: the first job of the queue list by Laravel's pop (selective under
        ``--unhandled leave``), blocking as its pop does; the list's levels, patterns and turns by the
        selection, each queue's slot (``--max-per-queue``) asked for first."""
        try:
            self._select()
            self._read_paused()
            left = 0
            for attempt in range(2):
                self.selection.probe_due(idle=False)
                for level in self.selection.levels:
                    for name in self.selection.order(level):
                        if name in self._paused:
                            continue
                        tokens: dict[str, list[str]] = {}
                        if self.slots is not None:
                            granted, tokens = self.slots.acquire([(name, 1)])
                            if not granted:
                                continue
                        try:
                            index = self.selection.position(name)
                            if self.handled is None and not self.selection.dynamic:
                                reserved = self.queue.pop(name, index, self.timers.wait_for)
                            else:  # a pattern's queues are many and come and go: no wait on one's :notify
                                reserved, left = self._pop_handled(name, index, wait=not self.selection.dynamic)
                        except BaseException:
                            if self.slots is not None:
                                self.slots.unused(tokens)
                            raise
                        self.selection.took(level, name, 1, 0 if reserved is None else 1)
                        if self.slots is not None:
                            self.slots.assign(name, tokens[name], [] if reserved is None else [reserved.reserved])
                        if reserved is not None:
                            self.selection.served(level, name)
                            self._up()
                            return self._buffer([reserved], left, time.time(), record=False)
                if attempt or not self.selection.wake():
                    break
            self._up()
            return Taken(left_for_php=left, more=self._more())
        except Exception as exc:
            return self._failed(exc, "pop a job from")

    def _pop_handled(self, name: str, index: int, *, wait: bool = True) -> tuple[ReservedJob | None, int]:
        """Laravel's pop (migrate, pop, ``BLPOP :notify`` and one more try) taking the first job with a
        Python handler among the list's first ``window`` members, then past them (the deep look), the head
        job whatever it is when no handler names are given; the others stay where they are. No wait when
        jobs for PHP were left (their tokens would wake it at once), nor without ``wait``."""
        block = wait and self.queue.blocks_at(index)
        got = self.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window, deep=self._deep(name))
        if not got.jobs and not got.skipped and block and self.queue.block_for is not None \
                and self.queue.wait_for_token(name, self.timers.wait_for):
            got = self.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window,
                                               deep=self._deep(name))
        self.queue.popped_at(index, bool(got.jobs))
        self._note_left(name, got)
        return (got.jobs[0] if got.jobs else None), got.skipped

    def _round(self, want: int, free: int, room: int | None) -> Taken:
        """One reserve step: the selection's levels in priority order until ``want`` jobs came, one batch
        reserve call per queue (sent together for the turns of a ``--fair`` level), the deferred acks
        riding on the call of their queue. A round that found nothing while queues were known empty
        probes them and goes once more."""
        acks = self._take_acks()
        taken: list[ReservedJob] = []
        left, sent_at = 0, time.time()
        try:
            self._select()
            self._read_paused()
            for attempt in range(2):
                self.selection.probe_due(idle=False)
                for level in self.selection.levels:
                    if len(taken) >= want:
                        break
                    jobs, skipped = self._level(level, want - len(taken), acks)
                    taken += jobs
                    left += skipped
                if taken or attempt or not self.selection.wake():
                    break
            if acks:
                self.acks.send(acks)
                acks = {}
            self._up()
        except Exception as exc:
            return self._failed(exc, "reserve jobs from")
        finally:
            self.acks.restore(acks)
        taken_now = self._buffer(taken, left, sent_at, record=True)
        if not taken_now.popped and self._more():
            taken_now = Taken(left_for_php=left, more=True)
        return self._full(taken_now, want, free, room)

    def _level(self, level: Level, want: int, acks: dict[str, list[bytes]]) -> tuple[list[ReservedJob], int]:
        """Reserve from one level: its plan, then, while queues of it turned out empty and jobs are still
        wanted, a new plan without them (a turn that found nothing passes to the next queue)."""
        taken: list[ReservedJob] = []
        skipped = 0
        for _ in range(len(level.names) + 1):
            jobs, left, short = self._plan_once(level, want - len(taken), acks)
            taken += jobs
            skipped += left
            if not short or len(taken) >= want:
                break
        return taken, skipped

    def _plan_once(self, level: Level, want: int,
                   acks: dict[str, list[bytes]]) -> tuple[list[ReservedJob], int, bool]:
        """One plan of a level (cut to the slots granted), one call per queue; the jobs, the members left
        for PHP, and whether a queue of a ``--fair`` level gave fewer jobs than its turn."""
        short = False
        plan = [(name, n) for name, n in self.selection.plan(level, want) if name not in self._paused]
        tokens: dict[str, list[str]] = {}
        if plan and self.slots is not None:
            plan, tokens = self.slots.acquire(plan)
        taken: list[ReservedJob] = []
        skipped = 0
        try:
            if level.fair and len(plan) > 1:
                results = self._together(plan, acks)
            else:
                results = []
                count = 0
                for name, n in plan:
                    n = min(n, want - count)
                    if n <= 0:
                        break
                    mine = acks.pop(name, [])
                    try:
                        got = self.reserving.reserve_batch(name, n, mine, handled=self.handled, window=self.window,
                                                           deep=self._deep(name), record=True,
                                                           index=self.selection.position(name))
                    except BaseException:
                        acks.setdefault(name, []).extend(mine)
                        raise
                    results.append((name, n, got))
                    count += len(got.jobs)
            for name, n, got in results:
                skipped += got.skipped
                self._note_left(name, got)
                self.selection.took(level, name, n, len(got.jobs))
                short = short or (level.fair and len(got.jobs) < n)
                if self.slots is not None:
                    self.slots.assign(name, tokens.pop(name, []), [j.reserved for j in got.jobs])
            taken = self.selection.interleave(level, [(name, got.jobs) for name, _, got in results])
        finally:
            if tokens and self.slots is not None:
                self.slots.unused(tokens)
        return taken, skipped, short

    def _together(self, plan: list[tuple[str, int]],
                  acks: dict[str, list[bytes]]) -> list[tuple[str, int, Reserved]]:
        """The calls of a ``--fair`` level's turns in one pipelined round trip (each the batch reserve of its
        queue, with that queue's acks). A call that failed is left out (its acks kept, to be sent again);
        if none came back, the first fault is raised."""
        mine = {name: acks.pop(name, []) for name, _ in plan}
        try:
            answers = self.reserving.reserve_batches([(name, n, mine[name]) for name, n in plan],
                                                     handled=self.handled, window=self.window, record=True,
                                                     deep=self._deep)
        except BaseException:
            for name, sent in mine.items():
                acks.setdefault(name, []).extend(sent)
            raise
        results: list[tuple[str, int, Reserved]] = []
        fault: Exception | None = None
        for (name, n), got in zip(plan, answers, strict=True):
            if isinstance(got, Exception):
                acks.setdefault(name, []).extend(mine[name])  # maybe applied, maybe not: a ZREM twice is harmless
                fault = fault or got
            else:
                results.append((name, n, got))
        if fault is not None and not any(got.jobs for _, _, got in results):
            raise fault
        return results

    def _land(self, pending: PendingReserve, acks: list[bytes], want: int, free: int, room: int | None) -> Taken:
        """Read a batch asked for ahead (or along with a wait) and buffer it."""
        try:
            got = self.reserving.reserve_batch_receive(pending)
        except Exception as exc:
            # maybe applied, maybe not: ZREM again (removing a member twice is harmless)
            self.acks.restore({pending.queue: acks})
            return self._failed(exc, "reserve jobs from")
        self._up()
        if pending.selective:
            self._note_left(pending.queue, got)
        taken = self._buffer(got.jobs, got.skipped if pending.selective else 0, pending.sent_at, record=True)
        if not taken.popped and self._more():
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
                                                        deep=self._deep(name), record=True)
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
            return self._failed(exc, "wait on")
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
                                                    window=self.window, deep=self._deep(name), record=True)
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
        """Wrap and buffer what a reserve call sent at ``sent_at`` (unix seconds) took. Laravel's own pop
        (``record`` False) starts its job at once: no lease to watch, no unstarted record."""
        lease = math.floor(sent_at) + (self.queue.retry_after or 0) if record else math.inf
        unstarted_until = self.unstarted.recorded(sent_at) if reserved and record else math.inf
        unreadable = []
        count = 0
        for item in reserved:
            job = self._job(item)
            if isinstance(job, PayloadError):
                unreadable.append((item, job))
                continue
            self.buffer.append(Buffered(job, lease, unstarted_until if len(item.body) <= RECORD_MAX_BYTES else math.inf))
            count += 1
        if reserved and record:
            self.leases.note_lease(lease)
        return Taken(count, tuple(unreadable), left)

    def _job(self, reserved: ReservedJob) -> Job | PayloadError:
        """A reservation as a job; a body Python cannot read (or PHP's ``Job::fire`` fails before any
        handler) is the error that says why."""
        try:
            payload = Payload.parse(reserved.body, version=self.version)
            unrunnable = payload.unrunnable()
            if unrunnable is not None:
                raise unrunnable
        except PayloadError as exc:
            return exc
        job = Job(self.queue, reserved, payload, connection_name=self.connection_name)
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

    def next_job(self) -> Job | None:
        """The next buffered job that may start now (see :meth:`next_jobs`), or None."""
        ready = self.next_jobs(1)
        return ready[0].job if ready else None

    def not_started(self, items: list[Buffered]) -> None:
        """Jobs :meth:`next_jobs` handed out that the loop did not start (told to stop or pause meanwhile):
        back at the head of the buffer, in order, without their unstarted records (removed already), so a
        stop gives them back to the queue."""
        for item in reversed(items):
            item.unstarted_until = math.inf
            self.buffer.appendleft(item)

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
        for reserved in [b.job.reserved_job for b in self.buffer] + [item for item, _ in unreadable]:
            by_queue.setdefault(reserved.queue, []).append(reserved)
        self.buffer.clear()
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

    def _deep(self, name: str) -> int | None:
        """Where the deep look of a selective reserve of ``name`` starts (None: no deep look: every job is
        taken from the head, or the ACL refuses what the look needs)."""
        if self.handled is None or self._deep_refused:
            return None
        return self._cursor.get(name, 0)

    def _more(self) -> bool:
        """Has a deep look more of some list to read (the next step comes at once)?"""
        return any(at > 0 for name, at in self._cursor.items() if name not in self._paused)

    def _note_left(self, name: str, got: Reserved) -> None:
        """What a selective reserve saw: the deep look's next cursor; a whole window of jobs without a Python
        handler, and none taken (said now and then, info); Python jobs beyond the deep look's reach (a
        warning, once a minute)."""
        if got.cursor < 0:
            if not self._deep_refused:
                log.warning("Redis refuses LSET/LREM to this ACL user: laraq looks for Python jobs among the "
                            "first %d jobs of a queue only (grant them: ACL SETUSER <user> +lset +lrem)",
                            self.window)
            self._deep_refused = True
            self._cursor.clear()
        else:
            self._cursor[name] = got.cursor
        if not got.jobs and got.skipped >= self.window:
            self._left_alone.warn(self.window, name, got.depth)
        if got.beyond:
            self._beyond.warn(name, got.beyond, DEEP_REACH, got.depth)
        seen = self._beyond_now[name] = self._beyond_now.get(name, 0) + got.beyond
        if got.cursor <= 0:  # a whole look ended (or the next starts over): its count is told when it changed
            self._beyond_now[name] = 0
            if seen != self._beyond_told.get(name, 0):
                self._beyond_told[name] = seen
                if self.events.wants(JobsOutOfReach):
                    self.events.emit(JobsOutOfReach(name, seen, got.depth))

    # -- faults ----------------------------------------------------------------------------------------------

    def _failed(self, exc: Exception, what: str) -> Taken:
        """Redis lost (retry with backoff), credentials refused (bounded), or anything else (logged)."""
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
        return Taken(fault=Fault(status, self._failed_rounds, self._retry_in))

    def _refused_credentials(self, exc: BaseException) -> bool:
        """A login Redis refused: retried a few times, then the worker stops with exit 4 (one line)."""
        explained = explain(exc, redis_url=self.queue.redacted_url())
        if explained is None or explained[1] != EXIT_REDIS_AUTH:
            return False
        self._auth_refusals += 1
        self._retry_in = min(30.0, max(1.0, self._retry_in * 2))
        # an ACL denial does not pass by itself, and with --stop-when-empty a refusal must not read as empty
        if self._auth_refusals >= self.AUTH_RETRIES or is_acl_denial(exc) or self.options.stop_when_empty:
            log.error("stopping: %s", explained[0])
            self.signals.quit(EXIT_REDIS_AUTH, "Redis keeps refusing the credentials")
        else:
            log.warning("%s (attempt %d of %d)", explained[0], self._auth_refusals, self.AUTH_RETRIES)
        return True

    def _up(self) -> None:
        self._auth_refusals = 0
        self._failed_rounds = 0
        if self._down_since is not None:
            log.warning("Redis reachable again after %.0fs", time.monotonic() - self._down_since)
        self._down_since = None
        self._retry_in = 0.0
