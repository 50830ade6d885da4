"""Reservation: taking jobs from Redis and keeping them ours until they start (Laravel's ``RedisQueue::pop``
side of ``Illuminate\\Queue\\Worker::getNextJob``).

Owns, for the worker: the classic one-job pop (:meth:`Reservation.next_job`, Laravel's ``getNextJob``
with paused queues skipped), the batched fast path's reserve rounds (several jobs per Lua call, the
pending acks riding along; under ``--unhandled leave``, the default, only jobs with a Python handler
are taken and the others stay in the list for PHP workers), the next batch asked for while one runs, the wait on ``:notify``
(``block_for``) with the reserve written behind its ``BLPOP``, the adaptive prefetch budget, the
buffer of reserved-but-unstarted jobs (their leases: :mod:`laraq.worker.leases`), giving the buffer back to
the head of its lists on stop/pause, the acks (``Job.delete``'s ``ZREM``, written at once through
:class:`~laraq.worker.acks.AckPipe`, or deferred while Redis is away), Redis outages, and
wrapping a reservation in a :class:`~laraq.bus.job.Job` (an unreadable body goes to ``failed_jobs`` with a
clear reason).

:class:`Reservation` is built with the worker's :class:`~laraq.worker.context.WorkerContext`, the
:class:`~laraq.worker.bridge.AsyncBridge` (is the caller the daemon's loop thread?) and the job
lifecycle's :class:`Failures` (an unreadable body's ``failed_jobs`` row, a job's ``on_fail``); it owns
its :class:`~laraq.worker.leases.Leases`. The loop calls it through
:class:`laraq.worker.worker.ReservationSource`, the executor through
:class:`laraq.worker.execution.Housekeeping`.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

import redis

from laraq.bus.job import Job
from laraq.protocol.lua_laravel import RECORD_MAX_BYTES
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.queue import ReservedJob
from laraq.protocol.reserve import PendingReserve
from laraq.stores.failed import format_exception
from laraq.worker.acks import AckPipe
from laraq.worker.bridge import AsyncBridge
from laraq.worker.context import REDIS_DOWN, WorkerContext
from laraq.worker.exitcodes import EXIT_ERROR, EXIT_REDIS_AUTH, EXIT_REDIS_UNREACHABLE, explain, is_acl_denial
from laraq.worker.leases import Buffered, Leases
from laraq.worker.ratelimit import Repeated
from laraq.worker.unstarted import Unstarted

__all__ = ["REDIS_DOWN", "Failures", "Reservation"]

log = logging.getLogger("laraq.worker.worker")

_REDIS_DOWN = REDIS_DOWN
T = TypeVar("T")
#: Deferred acks are sent at the latest this many seconds after the oldest one.
_ACK_MAX_AGE = 0.05
#: Written acks whose replies are read together (a reply is 4 bytes; the socket holds thousands): one
#: ``recv`` per job cost more than the job on a VM's loopback. A forced flush reads them all.
_READ_REPLIES_EVERY = 64


class Failures(Protocol):
    """What the reservation source asks of the job lifecycle (:class:`laraq.worker.lifecycle.Lifecycle`)."""

    def job_failed(self, job: Job, exc: BaseException | None) -> None:
        """``Job::fail``'s ``JobFailed`` side (a job's ``on_fail``)."""

    def log_failed(self, connection: str, queue: str, body: bytes, text: str) -> None:
        """Write a ``failed_jobs`` row."""

    def retrying(self, action: Callable[[], T], attempts: int = 4) -> T | None:
        """Run a Redis write, retrying while Redis is unreachable."""


class Reservation:
    """The worker's reserving side: Laravel's ``RedisQueue::pop``, batched, with a prefetch buffer."""

    def __init__(self, context: WorkerContext, bridge: AsyncBridge, failures: Failures) -> None:
        self.context = context
        self.queue = context.queue
        self.queues = context.queues
        self.options = context.options
        self.version = context.version
        self.cache = context.cache
        self.connection_name = context.connection_name
        self.events = context.events
        self.output = context.output
        self.signals = context.signals
        self.pace = context.pace
        self.bridge = bridge
        self.failures = failures
        #: set by next_job when a reservation was taken (even one rejected as unreadable)
        self.took_reservation = False
        #: how many of the last round's reservations were unreadable (moved to failed_jobs)
        self.took_unreadable = 0
        self._redis_down_since: float | None = None
        #: seconds to wait before the next try while Redis is unreachable (0: it is reachable)
        self.reconnect_delay = 0.0
        #: reserve rounds that failed in a row (0: the last one ran), and the exit code their fault
        #: calls for (3: Redis unreachable, 1: anything else); a failed round is never an empty queue
        self.failed_rounds = 0
        self.failure_status = 0
        self._auth_refusals = 0
        #: reserved jobs not started yet, in order
        self.buffer: collections.deque[Buffered] = collections.deque()
        self._acks: dict[str, list[bytes]] = {}
        self._ack_lock = threading.Lock()
        #: acks written the moment a job is done, replies read later (None: Redis Cluster, pipelined ZREMs)
        self.pipe = AckPipe(self.queue) if AckPipe.usable(self.queue) and self.options.acks == "at-once" else None
        if self.options.acks == "batched":
            self.queue.unstarted_lease = 0  # no unstarted records either: their removal is a write per job
        #: a window full of jobs for PHP at the head of a queue: said once a minute at most
        self._left_alone = Repeated(log, "the first %d job(s) of queue %s have no Python handler: left for PHP "
                                    "workers (--unhandled leave)", every=60.0, level=logging.INFO)
        #: "could not send acks" while Redis is away: one line, then a count every few seconds
        self._acks_unsent = Repeated(log, "could not send %d ack(s) (%s): retrying")
        #: held by whoever is sending acks it took from the deferred list (the loop, or the watchdog
        #: for stale ones): a forced flush waits on it, so the stop never returns with an ack on its way
        self._ack_sending = threading.Lock()
        #: when the oldest deferred ack was made (None: none is waiting)
        self.ack_since: float | None = None
        self._paused_queues: set[str] = set()
        #: the next batch, asked for while this one runs (see send_ahead): the call, its acks, its size
        self.ahead: PendingReserve | None = None
        self._ahead_acks: list[bytes] = []
        self.ahead_want = 0
        self.leases = Leases(self.queue, self.output, self.buffer, self.ack_deferred)
        #: the names Python has handlers for, when only those are reserved (see :meth:`selection`)
        self.handled = self._handled_names()
        #: how many list heads a selective reserve looks at
        self.window = max(1, self.options.scan_window)
        #: list members the last reserve looked at and left for PHP (no Python handler)
        self.left_for_php = 0
        #: the buffered jobs' unstarted records (given back at once if this process dies)
        self.unstarted = Unstarted(self.queue, self.pipe, self.buffer, list(self.queues))

    def lease_ok(self, item: Buffered) -> bool:
        """The check before a buffered job starts: its reservation is still ours (:meth:`Leases.lease_ok`)
        and its unstarted record is gone from Redis before it runs (:meth:`Unstarted.start`)."""
        return self.leases.lease_ok(item) and self.unstarted.start(item)

    def _handled_names(self) -> list[str] | None:
        """The registry's handler names when the reserve takes only those (``--unhandled leave``, the
        default: a queue shared with PHP workers), else None (the head jobs, whatever they are). A
        registry that cannot list its names gets the head jobs, and unhandled ones are requeued."""
        if self.options.unhandled != "leave":
            return None
        names = getattr(self.context.app, "names", None)
        if not isinstance(names, list | tuple):
            log.warning("the handler registry cannot list its names: jobs without a Python handler are "
                        "taken and requeued untouched (--unhandled requeue)")
            return None
        return [str(n) for n in names]

    def housekeeping(self) -> None:
        """Acks due, a renewal's reply, leases due: what a pass of the fast loop does besides jobs."""
        self.flush_acks()
        self.leases.collect()
        self.leases.renew_due()
        self.unstarted.renew_due()

    def settle(self) -> None:
        """Read the replies that still hold finished jobs' bodies here: a lease renewal sent as a job
        started (its call keeps the members it renewed, and the buffered entries with them) and the
        written acks (kept to be sent again if the connection breaks). The ``--memory`` check settles
        before it counts a process as over, so a big job that is done is not counted (Laravel measures
        once its job has returned)."""
        self.leases.collect()
        self.flush_acks(force=True)

    def ack_deferred(self, job: Job) -> bool:
        """Is ``job``'s ``ZREM`` still among the deferred acks (not sent yet)?"""
        with self._ack_lock:
            return job.reserved in self._acks.get(job.queue, ())

    def reserve_count(self, free: int, jobs_processed: int) -> int:
        """How many jobs to reserve now: the free slots plus an adaptive, time-bounded prefetch."""
        opts = self.options
        want = free
        if opts.prefetch and self.pace.average is not None:
            budget = opts.prefetch_seconds
            if self.queue.retry_after is not None:
                budget = min(budget, self.queue.retry_after / 4)
            want += int(budget * opts.concurrency / max(self.pace.average, 1e-6))
        want = min(want, max(opts.batch, free))
        if opts.max_jobs:
            want = min(want, opts.max_jobs - jobs_processed)
        return want

    def reserve_round(self, want: int) -> int:
        """One reserve round over the ``--queue`` list (first queue first, like consecutive pops),
        the pending acks riding along; buffers the jobs and returns how many usable ones came."""
        acks = self._take_acks()
        self.took_reservation = False
        self.took_unreadable = 0
        self.left_for_php = 0
        count = 0
        try:
            self._paused_queues = set()
            if self.cache is not None and self.version.has_queue_pause:
                self._paused_queues = set(self.cache.paused_queues(self.connection_name, self.queues))
            expiry_base = time.time()
            for index, name in enumerate(self.queues):
                mine = acks.pop(name, [])
                if name in self._paused_queues or count >= want:
                    if mine:
                        acks[name] = mine
                    continue
                try:
                    reserved = self.queue.reserving.reserve_batch(name, want - count, mine, handled=self.handled,
                                                        window=self.window, record=True)
                except BaseException:
                    acks.setdefault(name, []).extend(mine)
                    raise
                if self.handled is not None:
                    self.left_for_php += self.queue.last_skipped
                    self._note_left(name, bool(reserved))
                if index == 0:
                    self.queue.secondary_queue_had_job = False
                elif reserved:
                    self.queue.secondary_queue_had_job = True
                count += self._buffer_reserved(reserved, math.floor(expiry_base), expiry_base)
            if acks:
                self.queue.reserving.ack(acks)
                acks = {}
            self._redis_up()
        except Exception as exc:
            self._reservation_failed(exc, "reserve jobs from")
        finally:
            if acks:
                self._restore_acks(acks)
        return count

    def _buffer_reserved(self, reserved: list[ReservedJob], reserved_at: int, sent_at: float) -> int:
        """Wrap and buffer what one reserve call (sent at ``sent_at``, unix seconds) returned; how many
        usable jobs that was."""
        lease = reserved_at + (self.queue.retry_after or 0)
        unstarted_until = self.unstarted.recorded(sent_at) if reserved else math.inf
        count = 0
        for item in reserved:
            self.took_reservation = True
            job = self.make_job(item)
            if job is None:
                self.took_unreadable += 1
                continue
            self.buffer.append(Buffered(job, lease, unstarted_until if len(item.body) <= RECORD_MAX_BYTES else math.inf))
            count += 1
        if reserved:
            self.leases.note_lease(lease)
        return count

    def send_ahead(self, jobs_processed: int, active: int) -> None:
        """Ask Redis for the next batch now, while the buffered one runs, so that Redis reserves on its
        core while this process runs jobs on its own (read back by :meth:`land_ahead` once the buffer is
        empty). Only after a full batch (more jobs are waiting), for one queue, with prefetch on, and
        within the prefetch budget: what is buffered plus what is asked for stays about
        ``prefetch_seconds`` of measured work, the bound a SIGKILL can strand, as before."""
        opts = self.options
        if self.ahead is not None or not opts.prefetch or self.pace.average is None or len(self.queues) != 1:
            return
        name = self.queues[0]
        if self.cache is not None and self.version.has_queue_pause:
            # queue:pause (12.40+) is read before every reserve call, this one too
            try:
                self._paused_queues = set(self.cache.paused_queues(self.connection_name, self.queues))
            except Exception:  # the next (synchronous) reserve round meets the same fault and reports it
                return
        if name in self._paused_queues:
            return
        budget = opts.prefetch_seconds
        if self.queue.retry_after is not None:
            budget = min(budget, self.queue.retry_after / 4)
        total = opts.concurrency + int(budget * opts.concurrency / max(self.pace.average, 1e-6))
        want = min(opts.batch, total - len(self.buffer) - active)
        if opts.max_jobs:
            want = min(want, opts.max_jobs - jobs_processed - len(self.buffer))
        if want <= 0:
            return
        acks = self._take_acks()
        mine = acks.pop(name, [])
        if acks:
            self._restore_acks(acks)
        try:
            pending = self.queue.reserving.reserve_batch_send(name, want, mine, handled=self.handled, window=self.window,
                                                    record=True)
        except Exception:  # the next (synchronous) reserve round meets the same fault and reports it
            pending = None
        if pending is None:
            if mine:
                self._restore_acks({name: mine})
            return
        self.ahead, self._ahead_acks, self.ahead_want = pending, mine, want

    def land_ahead(self) -> int:
        """Read the batch :meth:`send_ahead` (or :meth:`_wait_then_reserve`) asked for and buffer it; how
        many usable jobs came."""
        pending, acks = self.ahead, self._ahead_acks
        assert pending is not None
        self.ahead, self._ahead_acks = None, []
        self.took_reservation = False
        self.took_unreadable = 0
        self.left_for_php = 0
        try:
            reserved = self.queue.reserving.reserve_batch_receive(pending)
        except Exception as exc:
            if acks:  # maybe applied, maybe not: ZREM again (removing a member twice is harmless)
                self._restore_acks({pending.queue: acks})
            self._reservation_failed(exc, "reserve jobs from")
            return 0
        self.queue.secondary_queue_had_job = False
        self.left_for_php = self.queue.last_skipped if pending.selective else 0
        count = self._buffer_reserved(reserved, pending.sent_at, pending.sent_at)
        self._redis_up()
        return count

    def block_for_job(self, jobs_processed: int = 0, active: int = 0) -> bool:
        """``block_for``: ``BLPOP :notify`` as Laravel's pop does (only the first queue from 11.27
        unless a later one had a job; every queue in turn before). True if a token arrived, or if the
        reserve sent along with a timed-out wait found jobs (see :meth:`_wait_then_reserve`)."""
        self.output.flush()
        self.leases.collect()
        block_for = self.queue.block_for
        if block_for is None or self.left_for_php:
            # jobs for PHP wait in the list with their :notify tokens: a BLPOP would return at once, again
            # and again; the caller sleeps instead (see worker.Worker._fast_loop)
            return False
        first_only = self.version.blocks_only_on_first_queue
        names = [name for index, name in enumerate(self.queues)
                 if name not in self._paused_queues
                 and not (first_only and (index > 0 or self.queue.secondary_queue_had_job))]
        try:
            if len(names) == 1:
                outcome = self._wait_then_reserve(names[0], jobs_processed, active)
                if outcome is not None:
                    return outcome
            for name in names:
                if self.queue.wait_for_token(name):
                    return True
        except _REDIS_DOWN as exc:
            self._redis_lost(exc)
        return False

    def _wait_then_reserve(self, name: str, jobs_processed: int, active: int) -> bool | None:
        """Wait on one queue's ``:notify`` with the reserve written right behind the ``BLPOP`` (see
        :meth:`Reserving.reserve_batch_send`): Redis reserves the moment a token comes, and the worker
        reads the jobs without another round trip. On a token the reply is left for the loop to land as
        a batch asked for ahead (True). On a timeout it is landed here: True if jobs came anyway (pushed
        without a token), False for Laravel's sleep and a fresh reserve round. None: this client cannot
        split a call (Redis Cluster), or nothing may be reserved; the caller does a bare ``BLPOP``."""
        if self.ahead is not None:
            return None
        want = self.reserve_count(self.options.concurrency - active, jobs_processed)
        if want <= 0:
            return None
        wait = self.queue.block_timeout()  # block_for, cut short when a delayed job comes due sooner
        if wait is None:  # one is due now: a fresh reserve round (its migrate) takes it
            self.took_unreadable = 0
            return True
        pending = self.queue.reserving.reserve_batch_send(name, want, wait=wait, handled=self.handled, window=self.window,
                                                record=True)
        if pending is None:
            return None
        self.ahead, self._ahead_acks, self.ahead_want = pending, [], want
        try:
            woke = self.queue.reserving.reserve_wait(pending)
        except redis.exceptions.ResponseError as exc:  # :notify is not a list, say: the reserve still ran
            if not self.queue.note_wait_refused(exc):
                self._reservation_failed(exc, "wait on")
            woke = False
        except BaseException:
            self.ahead = None  # the connection is gone with the reply: what it reserved returns after retry_after
            raise
        if woke:
            self.took_unreadable = 0  # counted when the loop lands the batch
            return True
        return self.land_ahead() > 0 or self.took_reservation

    def give_back_buffer(self) -> None:
        """Hand buffered, unstarted jobs back to the head of their lists (attempts not burned); a batch
        asked for ahead is read first and handed back with them."""
        self.leases.collect()
        if self.ahead is not None:
            self.land_ahead()
        if not self.buffer:
            return
        by_queue: dict[str, list[ReservedJob]] = {}
        for b in self.buffer:
            by_queue.setdefault(b.job.queue, []).append(b.job.reserved_job)
        self.buffer.clear()
        for name, jobs in by_queue.items():
            try:
                given = self.queue.reserving.give_back(name, jobs)
                log.info("gave %d buffered job(s) back to %s", given, name)
            except Exception as exc:
                log.warning("could not give %d buffered job(s) back to %s (%s): they return after "
                            "retry_after", len(jobs), name, exc)

    def _ack(self, job: Job) -> None:
        """``Job.delete`` on the fast path: the ``ZREM`` is written at once (:class:`AckPipe`, its reply
        read later), so that a SIGKILL after the job finished does not run it again; while earlier acks
        wait to be sent again (Redis away), it waits with them for the next reserve call or flush."""
        with self._ack_lock:
            if self.pipe is not None and not self._acks:
                # the next buffered job's unstarted record goes in the same write (one send() for both)
                claimed = self.unstarted.claim_next() if self.bridge.on_loop_thread() else None
                try:
                    self.pipe.write_one(job.queue, job.reserved,
                                        None if claimed is None else self.unstarted.record_of(claimed))
                    return
                except Exception:  # kept below; the next flush meets the fault and reports it
                    if claimed is not None:
                        claimed.start_sent = False
            self._acks.setdefault(job.queue, []).append(job.reserved)
            if self.ack_since is None:
                self.ack_since = time.monotonic()

    def _take_acks(self) -> dict[str, list[bytes]]:
        """The deferred acks, to send now. On the loop thread a renewal still in flight is read first:
        its answer then cannot have met one of these acks (see :class:`~laraq.worker.leases.Leases`)."""
        if self.leases.renewal is not None and self.bridge.on_loop_thread():
            self.leases.collect()
        with self._ack_lock:
            acks, self._acks, self.ack_since = self._acks, {}, None
        return acks

    def _restore_acks(self, acks: dict[str, list[bytes]]) -> None:
        with self._ack_lock:
            for name, members in acks.items():
                self._acks.setdefault(name, []).extend(members)
            if self.ack_since is None:
                self.ack_since = time.monotonic()

    def flush_acks(self, *, force: bool = False) -> None:
        """Send the deferred ``ZREM``s now if forced or if the oldest is ``_ACK_MAX_AGE`` old.

        A forced flush first waits for acks another thread took and is still sending: the stop's last
        flush must not return while the watchdog's ``ZREM`` of a finished job is on its way (the
        process would exit with that job left in ``:reserved``, to run again after ``retry_after``).
        An unforced one leaves the sending to whoever is at it."""
        pipe = self.pipe
        if pipe is not None and pipe.unconfirmed and (force or len(pipe.unconfirmed) >= _READ_REPLIES_EVERY):
            lost = pipe.collect(wait=force)
            if lost:
                self._restore_acks(lost)
        since = self.ack_since
        if not force and (since is None or time.monotonic() - since < _ACK_MAX_AGE):
            return
        if not self._ack_sending.acquire(blocking=force):
            return
        try:
            if self.ack_since is None:
                return
            acks = self._take_acks()
            lost = {}
            try:
                if pipe is None:
                    self.queue.reserving.ack(acks)
                else:
                    pipe.write(acks)  # when it raises, nothing of acks was sent
                    lost = pipe.collect(wait=force)
            except Exception as exc:
                self._acks_unsent.warn(sum(map(len, acks.values())), exc)
                self._restore_acks(acks)
                return
            if lost:
                self._acks_unsent.warn(sum(map(len, lost.values())), "the connection broke before Redis answered")
                self._restore_acks(lost)
            else:
                self._acks_unsent.clear("deferred acks sent again")
        finally:
            self._ack_sending.release()

    def flush_stale_acks(self) -> None:
        """From the watchdog thread: send the deferred acks the loop did not send in time (it is busy
        running a synchronous job inline), so a SIGKILL re-runs at most ~``_ACK_MAX_AGE`` of finished
        work besides the running job - a bound in time, however long the running job takes."""
        since = self.ack_since
        if since is not None and time.monotonic() - since >= _ACK_MAX_AGE:
            self.flush_acks()

    def next_job(self) -> Job | None:
        """Laravel's ``getNextJob``: the first job of the queue list, skipping paused queues."""
        try:
            paused: set[str] = set()
            if self.cache is not None and self.version.has_queue_pause:
                paused = set(self.cache.paused_queues(self.connection_name, self.queues))
            for index, name in enumerate(self.queues):
                if name in paused:
                    continue
                reserved = self.queue.pop(name, index) if self.handled is None else self._pop_handled(name, index)
                if reserved is not None:
                    self.took_reservation = True
                    self._redis_up()
                    if self.context.on_job_popped is not None:
                        self.context.on_job_popped()
                    return self.make_job(reserved)
            self._redis_up()
        except Exception as exc:
            self._reservation_failed(exc, "pop a job from")
        return None

    def _pop_handled(self, name: str, index: int) -> ReservedJob | None:
        """Laravel's pop (migrate, pop, ``BLPOP :notify`` and one more try) for ``--unhandled leave``:
        the first job with a Python handler among the list's first ``window`` members; the others stay
        where they are. No wait when jobs for PHP were left (their tokens would wake it at once)."""
        queue = self.queue
        first_rule = self.version.blocks_only_on_first_queue
        block = (not queue.secondary_queue_had_job and index == 0) if first_rule else True
        got = queue.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window)
        self.left_for_php = queue.last_skipped
        if not got and not self.left_for_php and block and queue.block_for is not None and queue.wait_for_token(name):
            got = queue.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window)
            self.left_for_php = queue.last_skipped
        if first_rule and index == 0:
            queue.secondary_queue_had_job = False
        if got and first_rule and index > 0:
            queue.secondary_queue_had_job = True
        self._note_left(name, bool(got))
        return got[0] if got else None

    def _note_left(self, name: str, took: bool) -> None:
        """A whole window of jobs without a Python handler, and none taken: said now and then (info)."""
        if not took and self.left_for_php >= self.window:
            self._left_alone.warn(self.left_for_php, name)

    #: Consecutive refused logins (the password changed under a running worker) before it stops with
    #: exit 4: retried with the reconnect backoff (about 15 s), never forever.
    AUTH_RETRIES = 4

    def _refused_credentials(self, exc: BaseException) -> bool:
        """A login Redis refused: retried a few times, then the worker stops with exit 4 (one line)."""
        explained = explain(exc, redis_url=self.queue.redacted_url())
        if explained is None or explained[1] != EXIT_REDIS_AUTH:
            return False
        self._auth_refusals += 1
        self.reconnect_delay = min(30.0, max(1.0, self.reconnect_delay * 2))
        # an ACL denial does not pass by itself, and with --stop-when-empty a refusal must not read as empty
        if self._auth_refusals >= self.AUTH_RETRIES or is_acl_denial(exc) or self.options.stop_when_empty:
            log.error("stopping: %s", explained[0])
            self.signals.quit(EXIT_REDIS_AUTH, "Redis keeps refusing the credentials")
        else:
            log.warning("%s (attempt %d of %d)", explained[0], self._auth_refusals, self.AUTH_RETRIES)
        return True

    def _reservation_failed(self, exc: Exception, what: str) -> None:
        """Redis lost (retry with backoff), credentials refused (bounded), or anything else (logged)."""
        if isinstance(exc, _REDIS_DOWN):
            self._redis_lost(exc)
        elif not self._refused_credentials(exc):
            log.exception("could not %s %s", what, ",".join(self.queues))
            self.reconnect_delay = 1.0
            self.failed_rounds += 1
            self.failure_status = EXIT_ERROR

    def _redis_lost(self, exc: BaseException) -> None:
        if self._refused_credentials(exc):
            return
        now = time.monotonic()
        self.failed_rounds += 1
        self.failure_status = EXIT_REDIS_UNREACHABLE
        if self._redis_down_since is None:
            self._redis_down_since = now
        self.reconnect_delay = min(30.0, max(1.0, self.reconnect_delay * 2))
        log.warning("Redis unreachable at %s (%s); retrying in %.0fs",
                    self.queue.redacted_url(), exc, self.reconnect_delay)

    def _redis_up(self) -> None:
        self._auth_refusals = 0
        self.failed_rounds = 0
        if self._redis_down_since is not None:
            log.warning("Redis reachable again after %.0fs", time.monotonic() - self._redis_down_since)
        self._redis_down_since = None
        self.reconnect_delay = 0.0

    def make_job(self, reserved: ReservedJob) -> Job | None:
        """Wrap a reservation; a body Python cannot read is failed (or put back) with a clear reason."""
        try:
            payload = Payload.parse(reserved.body, version=self.version)
            unrunnable = payload.unrunnable()  # what PHP's Job::fire fails before any handler (no 'job')
            if unrunnable is not None:
                raise unrunnable
        except PayloadError as exc:
            self._reject_unreadable(reserved, exc)
            return None
        acker = self._ack if self.bridge.loop_thread is not None else None
        job = Job(self.queue, reserved, payload, connection_name=self.connection_name, on_fail=self.failures.job_failed,
                  acker=acker)
        self.events.emit("job_reserved", job)
        return job

    def _reject_unreadable(self, reserved: ReservedJob, exc: PayloadError) -> None:
        error = exc if hasattr(exc, "php_class") else \
            PayloadError(f"laraq cannot read the job payload on queue {reserved.queue}: {exc}")
        try:
            self.failures.log_failed(self.connection_name, reserved.queue, reserved.body, format_exception(error))
            self.queue.delete_reserved(reserved)
            log.error("%s: moved to failed_jobs", error)
        except Exception as log_exc:
            log.error("%s; could not write failed_jobs (%s): released for 60s", error, log_exc)
            self.failures.retrying(lambda: self.queue.release(reserved, 60))
