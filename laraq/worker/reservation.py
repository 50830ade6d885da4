"""Reservation: taking jobs from Redis and keeping them ours until they start (Laravel's ``RedisQueue::pop``
side of ``Illuminate\\Queue\\Worker::getNextJob``).

Owns, for the worker: the classic one-job pop (:meth:`Reservation.next_job`, Laravel's ``getNextJob``
with paused queues skipped), the batched fast path's reserve rounds (several jobs per Lua call, the
pending acks riding along), the next batch asked for while one runs, the wait on ``:notify``
(``block_for``) with the reserve written behind its ``BLPOP``, the adaptive prefetch budget, the
buffer of reserved-but-unstarted jobs (their leases: :mod:`laraq.worker.leases`), giving the buffer back to
the head of its lists on stop/pause, the deferred acks (``Job.delete``'s ``ZREM``), Redis outages, and
wrapping a reservation in a :class:`~laraq.bus.job.Job` (an unreadable body goes to ``failed_jobs`` with a
clear reason).

A mixin of :class:`laraq.worker.worker.Worker`: the state it owns is set up by :meth:`Reservation._init_reservation`.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from laraq.bus.job import Job
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.queue import PendingReserve, ReservedJob
from laraq.stores.failed import format_exception
from laraq.worker.leases import Buffered, Leases

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue
    from laraq.protocol.versions import LaravelVersion
    from laraq.worker.events import Listeners

__all__ = ["REDIS_DOWN", "Reservation"]

log = logging.getLogger("laraq.worker.worker")

#: The errors that mean "Redis is unreachable right now" (retry, never lose the outcome).
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_REDIS_DOWN = REDIS_DOWN
#: Deferred acks are sent at the latest this many seconds after the oldest one.
_ACK_MAX_AGE = 0.05


class Reservation(Leases):
    """The worker's reserving side (mixin of :class:`laraq.worker.worker.Worker`)."""

    queue: RedisQueue
    queues: list[str]
    options: Any
    version: LaravelVersion
    cache: Any
    connection_name: str
    events: Listeners
    on_job_popped: Any
    _loop_thread: int | None
    _reconnect_delay: float

    def _init_reservation(self) -> None:
        #: set by next_job when a reservation was taken (even one rejected as unreadable)
        self._took_reservation = False
        self._took_unreadable = 0
        self._redis_down_since: float | None = None
        self._reconnect_delay = 0.0
        self._auth_refusals = 0
        self._buffer: collections.deque[Buffered] = collections.deque()
        self._acks: dict[str, list[bytes]] = {}
        self._ack_lock = threading.Lock()
        #: held by whoever is sending acks it took from the deferred list (the loop, or the watchdog
        #: for stale ones): a forced flush waits on it, so the stop never returns with an ack on its way
        self._ack_sending = threading.Lock()
        self._ack_since: float | None = None
        self._paused_queues: set[str] = set()
        #: the measured average job duration (seconds) the prefetch budget is based on
        self._avg_duration: float | None = None
        #: the next batch, asked for while this one runs (see _send_ahead): the call, its acks, its size
        self._ahead: PendingReserve | None = None
        self._ahead_acks: list[bytes] = []
        self._ahead_want = 0
        self._init_leases()

    def _reserve_count(self, free: int, jobs_processed: int) -> int:
        """How many jobs to reserve now: the free slots plus an adaptive, time-bounded prefetch."""
        opts = self.options
        want = free
        if opts.prefetch and self._avg_duration is not None:
            budget = opts.prefetch_seconds
            if self.queue.retry_after is not None:
                budget = min(budget, self.queue.retry_after / 4)
            want += int(budget * opts.concurrency / max(self._avg_duration, 1e-6))
        want = min(want, max(opts.batch, free))
        if opts.max_jobs:
            want = min(want, opts.max_jobs - jobs_processed)
        return want

    def _reserve_round(self, want: int) -> int:
        """One reserve round over the ``--queue`` list (first queue first, like consecutive pops),
        the pending acks riding along; buffers the jobs and returns how many usable ones came."""
        acks = self._take_acks()
        self._took_reservation = False
        self._took_unreadable = 0
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
                    reserved = self.queue.reserve_batch(name, want - count, mine)
                except BaseException:
                    acks.setdefault(name, []).extend(mine)
                    raise
                if index == 0:
                    self.queue.secondary_queue_had_job = False
                elif reserved:
                    self.queue.secondary_queue_had_job = True
                count += self._buffer_reserved(reserved, math.floor(expiry_base))
            if acks:
                self.queue.ack(acks)
                acks = {}
            self._redis_up()
        except Exception as exc:
            self._reservation_failed(exc, "reserve jobs from")
        finally:
            if acks:
                self._restore_acks(acks)
        return count

    def _buffer_reserved(self, reserved: list[ReservedJob], reserved_at: int) -> int:
        """Wrap and buffer what one reserve call returned; how many usable jobs that was."""
        lease = reserved_at + (self.queue.retry_after or 0)
        count = 0
        for item in reserved:
            self._took_reservation = True
            job = self.make_job(item)
            if job is None:
                self._took_unreadable += 1
                continue
            self._buffer.append(Buffered(job, lease))
            count += 1
        if reserved and self.queue.retry_after is not None:
            self._renew_at = min(self._renew_at, lease - self.queue.retry_after / 2)
        return count

    def _send_ahead(self, jobs_processed: int) -> None:
        """Ask Redis for the next batch now, while the buffered one runs, so that Redis reserves on its
        core while this process runs jobs on its own (read back by :meth:`_land_ahead` once the buffer is
        empty). Only after a full batch (more jobs are waiting), for one queue, with prefetch on, and
        within the prefetch budget: what is buffered plus what is asked for stays about
        ``prefetch_seconds`` of measured work, the bound a SIGKILL can strand, as before."""
        opts = self.options
        if self._ahead is not None or not opts.prefetch or self._avg_duration is None or len(self.queues) != 1:
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
        total = opts.concurrency + int(budget * opts.concurrency / max(self._avg_duration, 1e-6))
        want = min(opts.batch, total - len(self._buffer) - self._active)  # type: ignore[attr-defined]
        if opts.max_jobs:
            want = min(want, opts.max_jobs - jobs_processed - len(self._buffer))
        if want <= 0:
            return
        acks = self._take_acks()
        mine = acks.pop(name, [])
        if acks:
            self._restore_acks(acks)
        try:
            pending = self.queue.reserve_batch_send(name, want, mine)
        except Exception:  # the next (synchronous) reserve round meets the same fault and reports it
            pending = None
        if pending is None:
            if mine:
                self._restore_acks({name: mine})
            return
        self._ahead, self._ahead_acks, self._ahead_want = pending, mine, want

    def _land_ahead(self) -> int:
        """Read the batch :meth:`_send_ahead` (or :meth:`_wait_then_reserve`) asked for and buffer it; how
        many usable jobs came."""
        pending, acks = self._ahead, self._ahead_acks
        assert pending is not None
        self._ahead, self._ahead_acks = None, []
        self._took_reservation = False
        self._took_unreadable = 0
        try:
            reserved = self.queue.reserve_batch_receive(pending)
        except Exception as exc:
            if acks:  # maybe applied, maybe not: ZREM again (removing a member twice is harmless)
                self._restore_acks({pending.queue: acks})
            self._reservation_failed(exc, "reserve jobs from")
            return 0
        self.queue.secondary_queue_had_job = False
        count = self._buffer_reserved(reserved, pending.sent_at)
        self._redis_up()
        return count

    def _block_for_job(self, jobs_processed: int = 0) -> bool:
        """``block_for``: ``BLPOP :notify`` as Laravel's pop does (only the first queue from 11.27
        unless a later one had a job; every queue in turn before). True if a token arrived, or if the
        reserve sent along with a timed-out wait found jobs (see :meth:`_wait_then_reserve`)."""
        self.output.flush()
        self._collect_renewal()
        block_for = self.queue.block_for
        if block_for is None:
            return False
        first_only = self.version.blocks_only_on_first_queue
        names = [name for index, name in enumerate(self.queues)
                 if name not in self._paused_queues
                 and not (first_only and (index > 0 or self.queue.secondary_queue_had_job))]
        try:
            if len(names) == 1:
                outcome = self._wait_then_reserve(names[0], block_for, jobs_processed)
                if outcome is not None:
                    return outcome
            for name in names:
                if self.queue.wait_for_token(name):
                    return True
        except _REDIS_DOWN as exc:
            self._redis_lost(exc)
        return False

    def _wait_then_reserve(self, name: str, block_for: float, jobs_processed: int) -> bool | None:
        """Wait on one queue's ``:notify`` with the reserve written right behind the ``BLPOP`` (see
        :meth:`RedisQueue.reserve_batch_send`): Redis reserves the moment a token comes, and the worker
        reads the jobs without another round trip. On a token the reply is left for the loop to land as
        a batch asked for ahead (True). On a timeout it is landed here: True if jobs came anyway (pushed
        without a token), False for Laravel's sleep and a fresh reserve round. None: this client cannot
        split a call (Redis Cluster), or nothing may be reserved; the caller does a bare ``BLPOP``."""
        if self._ahead is not None:
            return None
        want = self._reserve_count(self.options.concurrency - self._active, jobs_processed)
        if want <= 0:
            return None
        pending = self.queue.reserve_batch_send(name, want, wait=block_for)
        if pending is None:
            return None
        self._ahead, self._ahead_acks, self._ahead_want = pending, [], want
        try:
            woke = self.queue.reserve_wait(pending)
        except redis.exceptions.ResponseError as exc:  # :notify is not a list, say: the reserve still ran
            self._reservation_failed(exc, "wait on")
            woke = False
        except BaseException:
            self._ahead = None  # the connection is gone with the reply: what it reserved returns after retry_after
            raise
        if woke:
            self._took_unreadable = 0  # counted when the loop lands the batch
            return True
        return self._land_ahead() > 0 or self._took_reservation

    def _give_back_buffer(self) -> None:
        """Hand buffered, unstarted jobs back to the head of their lists (attempts not burned); a batch
        asked for ahead is read first and handed back with them."""
        self._collect_renewal()
        if self._ahead is not None:
            self._land_ahead()
        if not self._buffer:
            return
        by_queue: dict[str, list[ReservedJob]] = {}
        for b in self._buffer:
            by_queue.setdefault(b.job.queue, []).append(b.job.reserved_job)
        self._buffer.clear()
        for name, jobs in by_queue.items():
            try:
                given = self.queue.give_back(name, jobs)
                log.info("gave %d buffered job(s) back to %s", given, name)
            except Exception as exc:
                log.warning("could not give %d buffered job(s) back to %s (%s): they return after "
                            "retry_after", len(jobs), name, exc)

    def _ack(self, job: Job) -> None:
        """``Job.delete`` on the fast path: the ``ZREM`` rides on the next reserve call or flush."""
        with self._ack_lock:
            self._acks.setdefault(job.queue, []).append(job.reserved)
            if self._ack_since is None:
                self._ack_since = time.monotonic()

    def _take_acks(self) -> dict[str, list[bytes]]:
        """The deferred acks, to send now. On the loop thread a renewal still in flight is read first:
        its answer then cannot have met one of these acks (see :meth:`Leases._ours_first`)."""
        if self._renewal is not None and self._loop_thread == threading.get_ident():
            self._collect_renewal()
        with self._ack_lock:
            acks, self._acks, self._ack_since = self._acks, {}, None
        return acks

    def _restore_acks(self, acks: dict[str, list[bytes]]) -> None:
        with self._ack_lock:
            for name, members in acks.items():
                self._acks.setdefault(name, []).extend(members)
            if self._ack_since is None:
                self._ack_since = time.monotonic()

    def _flush_acks(self, *, force: bool = False) -> None:
        """Send the deferred ``ZREM``s now if forced or if the oldest is ``_ACK_MAX_AGE`` old.

        A forced flush first waits for acks another thread took and is still sending: the stop's last
        flush must not return while the watchdog's ``ZREM`` of a finished job is on its way (the
        process would exit with that job left in ``:reserved``, to run again after ``retry_after``).
        An unforced one leaves the sending to whoever is at it."""
        since = self._ack_since
        if not force and (since is None or time.monotonic() - since < _ACK_MAX_AGE):
            return
        if not self._ack_sending.acquire(blocking=force):
            return
        try:
            if self._ack_since is None:
                return
            acks = self._take_acks()
            try:
                self.queue.ack(acks)
            except Exception as exc:
                log.warning("could not send %d ack(s) (%s): retrying", sum(map(len, acks.values())), exc)
                self._restore_acks(acks)
        finally:
            self._ack_sending.release()

    def _flush_stale_acks(self) -> None:
        """From the watchdog thread: send the deferred acks the loop did not send in time (it is busy
        running a synchronous job inline), so a SIGKILL re-runs at most ~``_ACK_MAX_AGE`` of finished
        work besides the running job - a bound in time, however long the running job takes."""
        since = self._ack_since
        if since is not None and time.monotonic() - since >= _ACK_MAX_AGE:
            self._flush_acks()

    def next_job(self) -> Job | None:
        """Laravel's ``getNextJob``: the first job of the queue list, skipping paused queues."""
        try:
            paused: set[str] = set()
            if self.cache is not None and self.version.has_queue_pause:
                paused = set(self.cache.paused_queues(self.connection_name, self.queues))
            for index, name in enumerate(self.queues):
                if name in paused:
                    continue
                reserved = self.queue.pop(name, index)
                if reserved is not None:
                    self._took_reservation = True
                    self._redis_up()
                    if self.on_job_popped is not None:
                        self.on_job_popped()
                    return self.make_job(reserved)
            self._redis_up()
        except Exception as exc:
            self._reservation_failed(exc, "pop a job from")
        return None

    #: Consecutive refused logins (the password changed under a running worker) before it stops with
    #: exit 4: retried with the reconnect backoff (about 15 s), never forever.
    AUTH_RETRIES = 4

    def _refused_credentials(self, exc: BaseException) -> bool:
        """A login Redis refused: retried a few times, then the worker stops with exit 4 (one line)."""
        from laraq.worker.exitcodes import EXIT_REDIS_AUTH, explain

        explained = explain(exc, redis_url=self.queue.redacted_url())
        if explained is None or explained[1] != EXIT_REDIS_AUTH:
            return False
        self._auth_refusals += 1
        self._reconnect_delay = min(30.0, max(1.0, self._reconnect_delay * 2))
        if self._auth_refusals >= self.AUTH_RETRIES:
            log.error("stopping: %s", explained[0])
            self.quit_status = EXIT_REDIS_AUTH
            self.should_quit = True
            self._wake.set()
        else:
            log.warning("%s (attempt %d of %d)", explained[0], self._auth_refusals, self.AUTH_RETRIES)
        return True

    def _reservation_failed(self, exc: Exception, what: str) -> None:
        """Redis lost (retry with backoff), credentials refused (bounded), or anything else (logged)."""
        if isinstance(exc, _REDIS_DOWN):
            self._redis_lost(exc)
        elif not self._refused_credentials(exc):
            log.exception("could not %s %s", what, ",".join(self.queues))
            self._reconnect_delay = 1.0

    def _redis_lost(self, exc: BaseException) -> None:
        if self._refused_credentials(exc):
            return
        now = time.monotonic()
        if self._redis_down_since is None:
            self._redis_down_since = now
        self._reconnect_delay = min(30.0, max(1.0, self._reconnect_delay * 2))
        log.warning("Redis unreachable at %s (%s); retrying in %.0fs",
                    self.queue.redacted_url(), exc, self._reconnect_delay)

    def _redis_up(self) -> None:
        self._auth_refusals = 0
        if self._redis_down_since is not None:
            log.warning("Redis reachable again after %.0fs", time.monotonic() - self._redis_down_since)
        self._redis_down_since = None
        self._reconnect_delay = 0.0

    def make_job(self, reserved: ReservedJob) -> Job | None:
        """Wrap a reservation; a body Python cannot read is failed (or put back) with a clear reason."""
        try:
            payload = Payload.parse(reserved.body, version=self.version)
        except PayloadError as exc:
            self._reject_unreadable(reserved, exc)
            return None
        acker = self._ack if self._loop_thread is not None else None
        job = Job(self.queue, reserved, payload, connection_name=self.connection_name, on_fail=self._job_failed,
                  acker=acker)
        self.events.emit("job_reserved", job)
        return job

    def _reject_unreadable(self, reserved: ReservedJob, exc: PayloadError) -> None:
        error = PayloadError(f"laraq cannot read the job payload on queue {reserved.queue}: {exc}")
        try:
            self._log_failed(self.connection_name, reserved.queue, reserved.body, format_exception(error))
            self.queue.delete_reserved(reserved)
            log.error("%s: moved to failed_jobs", error)
        except Exception as log_exc:
            log.error("%s; could not write failed_jobs (%s): released for 60s", error, log_exc)
            self._retrying(lambda: self.queue.release(reserved, 60))
