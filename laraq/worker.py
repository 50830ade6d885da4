"""The worker loop with ``php artisan queue:work``'s semantics (Laravel's ``Illuminate\\Queue\\Worker``).

Loop (:meth:`Worker.daemon`): unless the app is down (and no ``--force``) or the worker is paused
(SIGUSR2), pop the first job of the ``--queue`` list (skipping paused queues, 12.40+), run it, rest;
else sleep ``--sleep``. After every iteration :meth:`Worker.stop_status` decides whether to stop:
quit signal, ``--memory`` (exit 12), ``queue:restart``, ``--stop-when-empty``,
``--stop-when-empty-for``, ``--max-time``, ``--max-jobs`` - in Laravel's order. Restart, pause, maintenance
and ``maxExceptions`` go through a :class:`laraq.cache.CacheStore` (Redis, file or database store).

Lifecycle (:meth:`Worker.process`, Laravel's ``process``): pre-run max-attempts check (``retryUntil``
wins over tries), run the handler, delete on success unless the job was released, deleted or failed;
on an exception fail it if this was the last attempt or ``maxExceptions`` is reached (the shared cache
counter ``job-exceptions:<uuid>``, so PHP and Python count together), else release it with the
backoff. Failing = ``ZREM`` + Python ``failed`` callback + ShouldBeUnique lock release + a
``failed_jobs`` row holding the original body.

Execution model: jobs run on ``--concurrency`` daemon threads ("slots"); ``async def`` handlers run
on one asyncio loop thread, each awaited by its slot. A watchdog thread enforces the timeout
(payload ``timeout``, else ``--timeout``; 0 = none). At the deadline it does Laravel's timeout
bookkeeping (fail if this attempt was the last, if ``maxExceptions`` is reached, or if
``failOnTimeout``) and abandons the job: unless it failed, the job stays in ``:reserved`` until
``retry_after`` (what a SIGKILLed PHP worker leaves behind). An async handler is then cancelled; a
sync handler cannot be interrupted, so the worker stops popping, lets the other slots finish and
SIGKILLs its own process, as Laravel's ``Worker::kill`` does; ``laraq work``'s supervisor starts a new
worker process (see :mod:`laraq.cli.work`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import math
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import redis

from laraq.app import App, Handler
from laraq.encryption import Encrypter
from laraq.failed import FailedJobStore, format_exception, max_attempts_exceeded, timeout_exceeded
from laraq.job import Job, JobAbandoned, ManuallyFailedError, UnhandledJobError
from laraq.output import Output
from laraq.payload import Payload, PayloadError
from laraq.queue import RedisQueue, ReservedJob
from laraq.serializer import PHPObject, PHPSerializeError, loads
from laraq.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
    "EXIT_ERROR",
    "EXIT_MEMORY_LIMIT",
    "EXIT_SUCCESS",
    "EXIT_USAGE",
    "Worker",
    "WorkerOptions",
]

log = logging.getLogger("laraq.worker")

EXIT_SUCCESS = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_MEMORY_LIMIT = 12

UnhandledPolicy = Literal["fail", "release", "requeue"]
T = TypeVar("T")

_REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_UNKNOWN = object()

#: Fast path: housekeeping tick (deferred acks, lease renewal, signals) while jobs run.
_TICK = 0.05
#: Deferred acks are sent at the latest this many seconds after the oldest one.
_ACK_MAX_AGE = 0.05
#: restart / memory / max-time are read once per reserve round and at least this often.
_CHECK_EVERY = 0.25


class _Flag:
    """A one-way flag the watchdog polls (``threading.Event``'s ``set``/``is_set`` without its lock)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@dataclass(frozen=True)
class _Raised:
    """A ``SystemExit``/``KeyboardInterrupt`` an async handler raised, carried out of the event loop."""

    exc: BaseException


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class CacheLike(Protocol):
    def restart_timestamp(self) -> int | None: ...
    def paused_queues(self, connection: str, queues: list[str]) -> list[str]: ...
    def job_exceptions_increment(self, uuid: str) -> int: ...
    def job_exceptions_forget(self, uuid: str) -> bool: ...
    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool: ...


@dataclass
class WorkerOptions:
    """``queue:work``'s options (Laravel's ``WorkerOptions``) plus laraq's own."""

    name: str = "default"
    backoff: str = "0"
    memory: int = 128
    timeout: int = 60
    sleep: float = 3
    max_tries: int = 1
    force: bool = False
    stop_when_empty: bool = False
    #: ``--stop-when-empty-for`` (11.53/12.60/13.10): stop once no job was taken for this many seconds.
    stop_when_empty_for: float = 0
    max_jobs: int = 0
    max_time: float = 0
    rest: float = 0
    once: bool = False
    concurrency: int = 1
    unhandled: UnhandledPolicy = "requeue"
    unhandled_delay: int = 10
    #: Seconds a cancelled async handler gets to unwind before the hard-kill path.
    cancel_grace: float = 2.0
    #: The most jobs one reserve call takes (the batched fast path). 1 = the classic per-job loop,
    #: round trip for round trip what ``queue:work`` sends (migrate, migrate, pop, ZREM, restart GET).
    batch: int = 100
    #: Reserve more jobs than free slots (at most about ``prefetch_seconds`` of measured work,
    #: leases renewed while they wait). False: reserve only what free slots start at once.
    prefetch: bool = True
    prefetch_seconds: float = 1.0


@dataclass(eq=False)
class _Running:
    job: Job
    deadline: float | None
    state: str = "running"  # running -> finishing | timed_out
    is_async: bool = False
    task_done: threading.Event | _Flag | None = None
    future: concurrent.futures.Future[Any] | None = None
    cancelled_at: float | None = None
    #: Timed out and done with: bookkeeping finished, and the coroutine unwound or the kill is due.
    settled: bool = False
    #: Cancels an async job running as a task on the fast path's loop (thread-safe).
    cancel: Callable[[], Any] | None = None


@dataclass(eq=False)
class _Buffered:
    """A prefetched job: reserved (its lease runs until ``lease_until``, unix seconds), not started."""

    job: Job
    lease_until: float


class Worker:
    """Runs jobs from one Redis queue connection through an :class:`~laraq.app.App`."""

    def __init__(
        self,
        app: App,
        queue: RedisQueue,
        queues: list[str] | str,
        *,
        options: WorkerOptions | None = None,
        connection_name: str = "redis",
        version: LaravelVersion | None = None,
        cache: CacheLike | None = None,
        failer: FailedJobStore | None = None,
        encrypter: Encrypter | None = None,
        output: Output | None = None,
        maintenance: Callable[[], bool] | None = None,
        on_job_popped: Callable[[], None] | None = None,
        kill: Callable[[], None] | None = None,
        on_jobs_popped: Callable[[int], None] | None = None,
    ) -> None:
        self.app = app
        self.queue = queue
        self.queues = [q for q in (queues.split(",") if isinstance(queues, str) else queues) if q] or ["default"]
        self.options = options or WorkerOptions()
        self.connection_name = connection_name
        self.version = version or getattr(queue, "version", DEFAULT_VERSION)
        self.cache = cache
        self.failer = failer
        self.encrypter = encrypter
        self.output = output or Output(self.version, quiet=True)
        self.maintenance = maintenance or (lambda: False)
        self.on_job_popped = on_job_popped
        #: Progress report to the supervisor: called with a count, at most every ~100 ms / per batch.
        self.on_jobs_popped = on_jobs_popped
        self._kill = kill or _sigkill_self
        self.should_quit = False
        self.paused = False
        self._wake = threading.Event()
        self._failer_lock = threading.Lock()
        #: set by next_job when a reservation was taken (even one rejected as unreadable)
        self._took_reservation = False
        self._last_job_at: float | None = None
        # slots, watchdog, async loop
        self._slots = threading.Semaphore(max(1, self.options.concurrency))
        self._tasks: queue_mod.Queue[_Running | None] = queue_mod.Queue()
        self._closed = False
        self._running: set[_Running] = set()
        self._running_lock = threading.Condition()
        self._threads_started = False
        self._kill_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._redis_down_since: float | None = None
        self._reconnect_delay = 0.0
        self._watchdog_started = False
        # the batched fast path (see _fast_daemon)
        self._buffer: collections.deque[_Buffered] = collections.deque()
        self._acks: dict[str, list[bytes]] = {}
        self._ack_lock = threading.Lock()
        self._ack_since: float | None = None
        self._active = 0
        self._avg_duration: float | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._loop_thread: int | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._aux_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._unreported = 0
        self._reported_at = 0.0
        self._paused_queues: set[str] = set()
        self._took_unreadable = 0
        #: tasks started in this loop pass that have no done callback yet (see _reap_fresh)
        self._fresh: list[tuple[asyncio.Task[None], _Running, float]] = []
        #: the earliest time (unix seconds) at which a buffered lease needs renewing
        self._renew_at = math.inf

    # == the daemon loop ============================================================================

    def run(self) -> int:
        """Run like ``queue:work`` (``--once`` or the daemon); returns the exit code."""
        self.install_signal_handlers()
        return self.run_once() if self.options.once else self.daemon()

    def daemon(self) -> int:
        """Laravel's ``Worker::daemon``: loop until a stop condition; returns the exit code.

        ``batch`` > 1 (the default) runs the batched fast path (:meth:`_fast_daemon`), ``batch`` = 1
        the classic loop, one job per round of Laravel's own calls (:meth:`classic_daemon`).
        """
        if self.options.batch <= 1:
            return self.classic_daemon()
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        try:
            return loop.run_until_complete(self._fast_daemon())
        finally:
            self._loop = None
            self._loop_thread = None
            for pool in (self._pool, self._aux_pool):
                if pool is not None:
                    pool.shutdown(wait=False)
            self._pool = self._aux_pool = None
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def classic_daemon(self) -> int:
        """The per-job loop: what ``queue:work`` does, call for call (``--batch 1``)."""
        opts = self.options
        last_restart = self._restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency)
        self.output.starting_banner(",".join(self.queues))
        while True:
            if not self._should_run():
                self.sleep(opts.sleep if opts.sleep > 0 else 1)
                status = self.stop_status(last_restart, started, 0, popped=False)
                if status is not None:
                    return self._stop(status)
                continue
            self._wait_for_slot()
            self._took_reservation = False
            job = self.next_job()
            # a payload moved to failed_jobs was still a popped job (Laravel's loop had a Job object)
            popped = job is not None or self._took_reservation
            if job is not None:
                jobs_processed += 1
                self._submit(job)
                self._wait_for_slot()
                self._last_job_at = time.monotonic()
                if opts.rest > 0:
                    self.sleep(opts.rest)
            elif popped:
                jobs_processed += 1
                self._last_job_at = time.monotonic()
            else:
                self.sleep(self._reconnect_delay or opts.sleep)
            status = self.stop_status(last_restart, started, jobs_processed, popped=popped)
            if status is not None:
                return self._stop(status)

    def run_once(self) -> int:
        """``--once``: one pop, one job (Laravel's ``runNextJob``), still under the timeout watchdog."""
        if self._down() and not self.options.force:
            self.sleep(self.options.sleep)
            return EXIT_SUCCESS
        job = self.next_job()
        if job is None:
            self.sleep(self.options.sleep)
            return EXIT_SUCCESS
        self._submit(job)
        self._drain()
        return EXIT_SUCCESS

    def _should_run(self) -> bool:
        if self._kill_pending or self.paused:
            return False
        return not (self._down() and not self.options.force)

    def _down(self) -> bool:
        """Is the app down for maintenance? (a broken probe counts as "up" and is logged)"""
        try:
            return bool(self.maintenance())
        except Exception as exc:  # a broken maintenance probe must not stop the worker
            log.warning("maintenance-mode check failed: %s", exc)
            return False

    def stop_status(self, last_restart: Any, started: float, jobs_processed: int, *, popped: bool) -> int | None:
        """Laravel's ``stopIfNecessary``: the exit code to stop with, or ``None`` to keep going."""
        opts = self.options
        if self.should_quit:
            return EXIT_SUCCESS
        if self.memory_exceeded(opts.memory):
            return EXIT_MEMORY_LIMIT
        stamp = self._restart_stamp()
        if stamp is not _UNKNOWN and last_restart is not _UNKNOWN and stamp != last_restart:
            return EXIT_SUCCESS
        if opts.stop_when_empty and not popped:
            return EXIT_SUCCESS
        if opts.stop_when_empty_for and not popped and not self._running \
                and time.monotonic() - (self._last_job_at or started) >= opts.stop_when_empty_for:
            return EXIT_SUCCESS
        if opts.max_time and time.monotonic() - started >= opts.max_time:
            return EXIT_SUCCESS
        if opts.max_jobs and jobs_processed >= opts.max_jobs:
            return EXIT_SUCCESS
        return None

    def _stop(self, status: int) -> int:
        self._drain()
        if status == EXIT_MEMORY_LIMIT:
            log.warning("memory limit of %d MB reached: stopping (exit %d)", self.options.memory, status)
        return status

    def memory_exceeded(self, limit_mb: int) -> bool:
        if limit_mb <= 0 and self.version.memory_zero_is_unlimited:
            return False
        return _rss_mb() >= limit_mb

    def _restart_stamp(self) -> Any:
        if self.cache is None:
            return None
        try:
            return self.cache.restart_timestamp()
        except Exception as exc:
            log.warning("could not read the queue:restart signal: %s", exc)
            return _UNKNOWN

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early for a quit/pause/resume signal."""
        if seconds <= 0 or self.should_quit:
            return
        self._wake.clear()
        if self.should_quit:
            return
        self._wake.wait(seconds)

    # == the batched fast path ========================================================================
    #
    # One asyncio loop in the main thread runs everything: the reserve calls, async handlers as
    # tasks, sync handlers inline (concurrency 1) or on a thread pool, and a ~50 ms housekeeping tick
    # (deferred acks, lease renewal, restart/memory/max-time checks). See compat-docs/worker.md.

    async def _fast_daemon(self) -> int:
        opts = self.options
        self._start_watchdog()
        last_restart = self._restart_stamp()
        started = time.monotonic()
        jobs_processed = 0
        next_check = started + _CHECK_EVERY
        can_run = self._should_run()
        log.info("worker %s (pid %d) processing [%s] on %s (Laravel %s profile, concurrency %d, batch %d%s)",
                 opts.name, os.getpid(), ",".join(self.queues), self.queue.redacted_url(), self.version,
                 opts.concurrency, opts.batch, ", prefetch" if opts.prefetch else "")
        self.output.starting_banner(",".join(self.queues))
        while True:
            if self.should_quit:
                return await self._fast_stop(EXIT_SUCCESS)
            if not can_run or self.paused or self._kill_pending:
                self._give_back_buffer()
                await self._idle(opts.sleep if opts.sleep > 0 else 1)
                status = self.stop_status(last_restart, started, jobs_processed, popped=False)
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self._should_run()
                next_check = time.monotonic() + _CHECK_EVERY
                continue

            free = opts.concurrency - self._active
            reserved_round = False
            popped = False
            if free > 0 and not self._buffer:
                want = self._reserve_count(free, jobs_processed)
                if want > 0:
                    reserved_round = True
                    got = self._reserve_round(want)
                    popped = got > 0 or self._took_reservation
                    jobs_processed += self._took_unreadable
                    if popped:
                        self._last_job_at = time.monotonic()
            while free > 0 and self._buffer:
                if opts.max_jobs and jobs_processed >= opts.max_jobs:
                    break
                item = self._buffer.popleft()
                if not self._lease_ok(item):
                    continue
                jobs_processed += 1
                self._unreported += 1
                free -= 1
                popped = True
                self._start_job(item.job)
                self._last_job_at = time.monotonic()
                if opts.rest > 0:
                    await self._idle(opts.rest)
            now = time.monotonic()
            if reserved_round or now >= next_check:
                next_check = now + _CHECK_EVERY
                self._report_popped()
                status = self._periodic_status(last_restart, started)
                if status is None and opts.max_jobs and jobs_processed >= opts.max_jobs:
                    status = EXIT_SUCCESS
                if status is not None:
                    return await self._fast_stop(status)
                can_run = self._should_run()
            if opts.max_jobs and jobs_processed >= opts.max_jobs and not self._buffer:
                return await self._fast_stop(EXIT_SUCCESS)

            if reserved_round and not popped and self._active == 0 and not self._buffer:
                # an empty loop: Laravel's stop_when_empty / block / sleep
                if opts.stop_when_empty:
                    return await self._fast_stop(EXIT_SUCCESS)
                if opts.stop_when_empty_for and \
                        time.monotonic() - (self._last_job_at or started) >= opts.stop_when_empty_for:
                    return await self._fast_stop(EXIT_SUCCESS)
                self._flush_acks(force=True)
                if self._reconnect_delay:
                    await self._idle(self._reconnect_delay)
                elif not self._block_for_job():
                    await self._idle(opts.sleep)
                continue
            if self._fresh:
                # one pass of the loop runs the new tasks (scheduled before this yield); the ones
                # that finished are reaped here, without a done callback and a wake-up each
                await asyncio.sleep(0)
                self._reap_fresh()
            if self._active > 0 and (free <= 0 or not self._buffer):
                await self._wait_changed(_TICK)
            self._housekeeping()

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
                lease = math.floor(expiry_base) + (self.queue.retry_after or 0)
                for item in reserved:
                    self._took_reservation = True
                    job = self.make_job(item)
                    if job is None:
                        self._took_unreadable += 1
                        continue
                    self._buffer.append(_Buffered(job, lease))
                    count += 1
                if reserved and self.queue.retry_after is not None:
                    self._renew_at = min(self._renew_at, lease - self.queue.retry_after / 2)
            if acks:
                self.queue.ack(acks)
                acks = {}
            self._redis_up()
        except _REDIS_DOWN as exc:
            self._redis_lost(exc)
        except Exception:
            log.exception("could not reserve jobs from %s", ",".join(self.queues))
            self._reconnect_delay = 1.0
        finally:
            if acks:
                self._restore_acks(acks)
        return count

    def _block_for_job(self) -> bool:
        """``block_for``: ``BLPOP :notify`` as Laravel's pop does (only the first queue from 11.27
        unless a later one had a job; every queue in turn before). True if a token arrived."""
        block_for = self.queue.block_for
        if block_for is None:
            return False
        first_only = self.version.blocks_only_on_first_queue
        try:
            for index, name in enumerate(self.queues):
                if name in self._paused_queues:
                    continue
                if first_only and (index > 0 or self.queue.secondary_queue_had_job):
                    continue
                if self.queue.client.blpop([self.queue.keys(name).notify], timeout=block_for):
                    return True
        except _REDIS_DOWN as exc:
            self._redis_lost(exc)
        return False

    def _lease_ok(self, item: _Buffered) -> bool:
        """A buffered job may start only while its reservation is still ours. Its lease is renewed
        first whenever a reservation made now would expire later (so a started job gets the same
        ``retry_after`` from its start as a Laravel pop gives it); the rest of the buffer is renewed
        in the same call. A job someone else migrated back is dropped, never run."""
        retry_after = self.queue.retry_after
        if retry_after is None:
            return True
        fresh = math.floor(time.time()) + retry_after
        if fresh <= item.lease_until:
            return True
        items = [item, *(b for b in self._buffer if b.job.queue == item.job.queue and b.lease_until < fresh)]
        try:
            alive = self.queue.renew(item.job.queue, [b.job.reserved for b in items])
        except Exception as exc:
            log.warning("could not renew the reservation of %s (%s): not starting it", item.job.name, exc)
            return False
        gone = set()
        for b, ours in zip(items, alive, strict=False):
            if ours:
                b.lease_until = fresh
            else:
                gone.add(id(b))
                log.warning("%s (id %s) was taken back from :reserved before it started: not running it",
                            b.job.name, b.job.id)
        if len(gone) > (id(item) in gone):
            self._buffer = collections.deque(b for b in self._buffer if id(b) not in gone)
        return id(item) not in gone

    def _renew_leases(self) -> None:
        """Push the reservation of buffered jobs past half their ``retry_after`` forward (``ZADD XX``)."""
        retry_after = self.queue.retry_after
        if retry_after is None or not self._buffer:
            return
        now = time.time()
        if now < self._renew_at:  # no buffered lease is due yet: skip the scan
            return
        half = retry_after / 2
        due = [b for b in self._buffer if b.lease_until - now < half]
        self._renew_at = min((b.lease_until - half for b in self._buffer if b.lease_until - now >= half),
                             default=math.inf)
        if not due:
            return
        gone: set[int] = set()
        by_queue: dict[str, list[_Buffered]] = {}
        for b in due:
            by_queue.setdefault(b.job.queue, []).append(b)
        for name, items in by_queue.items():
            try:
                alive = self.queue.renew(name, [b.job.reserved for b in items])
            except Exception as exc:
                log.warning("could not renew buffered reservations on %s: %s", name, exc)
                self._renew_at = now  # still due: try again on the next pass
                continue
            lease = math.floor(time.time()) + retry_after
            self._renew_at = min(self._renew_at, lease - half)
            for b, ours in zip(items, alive, strict=False):
                if ours:
                    b.lease_until = lease
                else:
                    gone.add(id(b))
                    log.warning("%s (id %s) was taken back from :reserved while buffered: dropped",
                                b.job.name, b.job.id)
        if gone:
            self._buffer = collections.deque(b for b in self._buffer if id(b) not in gone)

    def _give_back_buffer(self) -> None:
        """Hand buffered, unstarted jobs back to the head of their lists (attempts not burned)."""
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

    # -- acks ------------------------------------------------------------------------------------------

    def _ack(self, job: Job) -> None:
        """``Job.delete`` on the fast path: the ``ZREM`` rides on the next reserve call or flush."""
        with self._ack_lock:
            self._acks.setdefault(job.queue, []).append(job.reserved)
            if self._ack_since is None:
                self._ack_since = time.monotonic()

    def _take_acks(self) -> dict[str, list[bytes]]:
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
        """Send the deferred ``ZREM``s now if forced or if the oldest is ``_ACK_MAX_AGE`` old."""
        since = self._ack_since
        if since is None or (not force and time.monotonic() - since < _ACK_MAX_AGE):
            return
        acks = self._take_acks()
        try:
            self.queue.ack(acks)
        except Exception as exc:
            log.warning("could not send %d ack(s) (%s): retrying", sum(map(len, acks.values())), exc)
            self._restore_acks(acks)

    # -- running jobs ------------------------------------------------------------------------------------

    def _start_job(self, job: Job) -> None:
        timeout = self._timeout_for(job)
        running = _Running(job, time.monotonic() + timeout if timeout > 0 else None)
        with self._running_lock:
            self._running.add(running)
        handler = self.app.resolve(job.payload)
        started = time.perf_counter()
        loop = self._loop
        assert loop is not None
        if handler is not None and handler.is_async and not self._precheck_fails(job):
            running.is_async = True
            running.task_done = _Flag()
            task = loop.create_task(self._process_async(job, handler, running))
            running.cancel = functools.partial(loop.call_soon_threadsafe, task.cancel)
            self._active += 1
            self._fresh.append((task, running, started))
        elif self.options.concurrency == 1 and (handler is None or not handler.is_async):
            try:  # a sync handler at concurrency 1 runs right here: no thread hop
                self.process(job, running, handler)
            except BaseException:
                log.exception("unexpected error while running %s", job.name)
            finally:
                self._job_finished(running, started)
        else:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.options.concurrency,
                                                                   thread_name_prefix="laraq-slot")
            self._active += 1
            future = self._pool.submit(self.process, job, running)
            future.add_done_callback(
                lambda f: loop.call_soon_threadsafe(self._task_done, running, started, f))

    def _precheck_fails(self, job: Job) -> bool:
        """Would :meth:`_fail_if_already_exceeds_max_attempts` fail this job? (no side effects)"""
        retry_until = job.retry_until
        if retry_until and time.time() <= retry_until:
            return False
        max_tries = self._max_tries(job)
        return bool(retry_until) or not (max_tries == 0 or job.attempts <= max_tries)

    async def _process_async(self, job: Job, handler: Handler, running: _Running) -> None:
        """:meth:`process` for an async handler, as a task on the fast path's loop (pre-check done)."""
        job.handler = handler
        self.output.job(job, "starting")
        try:
            try:
                argument = self._decode(job, handler)
                await handler.func(argument, job)  # type: ignore[misc]
            finally:
                if running.task_done is not None:
                    running.task_done.set()
            if not self._claim(running, "finishing"):
                return
            self._after_success(job, handler)
            self.output.job(job, "success")
        except (JobAbandoned, asyncio.CancelledError):
            if self._claim(running, "finishing"):
                await self._off_loop(self._handle_job_exception, job, RuntimeError(f"{job.name} was cancelled"))
        except BaseException as exc:  # a handler's exception, SystemExit and KeyboardInterrupt included
            if isinstance(exc, GeneratorExit):
                raise
            if not self._claim(running, "finishing"):
                return
            self._report(job, exc)
            await self._off_loop(self._handle_job_exception, job, exc)

    async def _off_loop(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run blocking bookkeeping (release, fail, failed callbacks) off the loop thread."""
        if self._aux_pool is None:
            self._aux_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="laraq-aux")
        assert self._loop is not None
        return await self._loop.run_in_executor(self._aux_pool, func, *args)

    def _reap_fresh(self) -> None:
        """Finish the bookkeeping of this pass's tasks that are done; the others get a done callback."""
        fresh, self._fresh = self._fresh, []
        for task, running, started in fresh:
            if task.done():
                self._task_done(running, started, task)
            else:
                task.add_done_callback(functools.partial(self._task_done, running, started))

    def _task_done(self, running: _Running, started: float, future: Any = None) -> None:
        """A job of a task or of the thread pool finished (on the loop thread)."""
        self._active -= 1
        if future is not None:
            try:
                exc = None if future.cancelled() else future.exception()
                if exc is not None:
                    log.error("unexpected error while running %s", running.job.name, exc_info=exc)
            except BaseException:  # noqa: S110 - reporting must never break the loop
                pass
        self._job_finished(running, started)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _job_finished(self, running: _Running, started: float) -> None:
        lock = self._running_lock
        with lock:
            if running.state != "timed_out":
                self._running.discard(running)
            if lock._waiters:  # type: ignore[attr-defined]  # nobody waits on the fast path: skip notify
                lock.notify_all()
        took = time.perf_counter() - started
        avg = self._avg_duration
        self._avg_duration = took if avg is None else avg * 0.8 + took * 0.2

    def _run_coroutine(self, coro: Any, timeout: float | None) -> Any:
        """Run a coroutine to completion from synchronous code (a ``failed`` callback)."""
        if self._loop is not None and self._loop_thread == threading.get_ident():
            # on the fast path's own loop thread (a sync job run inline): a private loop elsewhere
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                return ex.submit(asyncio.run, coro).result(timeout)
        return asyncio.run_coroutine_threadsafe(coro, self._event_loop()).result(timeout)

    # -- waiting, housekeeping, stopping ----------------------------------------------------------------

    async def _wait_changed(self, timeout: float) -> None:
        """Wait until a job finishes or ``timeout`` passes (a quit signal is seen within ``_TICK``)."""
        if self._fresh:
            self._reap_fresh()
        loop = self._loop
        assert loop is not None
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        handle = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiter = None

    async def _idle(self, seconds: float) -> None:
        """Sleep ``seconds`` without stalling running tasks; wakes early for signals."""
        if seconds <= 0:
            return
        if self._fresh:
            self._reap_fresh()
        self._flush_acks(force=True)
        self._wake.clear()
        deadline = time.monotonic() + seconds
        while not self.should_quit and not self._wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._active == 0 and left > _TICK and not self._running:
                self._wake.wait(min(left, 0.5))
            else:
                await self._wait_changed(min(left, _TICK))
                self._housekeeping()

    def _housekeeping(self) -> None:
        self._flush_acks()
        self._renew_leases()

    def _periodic_status(self, last_restart: Any, started: float) -> int | None:
        """The stop conditions that cost something, once per batch / ``_CHECK_EVERY`` (Laravel's order)."""
        if self.should_quit:
            return EXIT_SUCCESS
        if self.memory_exceeded(self.options.memory):
            return EXIT_MEMORY_LIMIT
        stamp = self._restart_stamp()
        if stamp is not _UNKNOWN and last_restart is not _UNKNOWN and stamp != last_restart:
            return EXIT_SUCCESS
        if self.options.max_time and time.monotonic() - started >= self.options.max_time:
            return EXIT_SUCCESS
        return None

    async def _fast_stop(self, status: int) -> int:
        """Give the buffer back, let running jobs finish (or settle after a timeout), flush acks."""
        self._give_back_buffer()
        while self._active > 0 or any(r.state != "timed_out" or not r.settled for r in list(self._running)):
            await self._wait_changed(_TICK)
            self._flush_acks()
            if self._kill_pending and not any(r.state != "timed_out" for r in list(self._running)):
                break
        for _ in range(4):
            self._flush_acks(force=True)
            if self._ack_since is None:
                break
            time.sleep(0.5)
        self._report_popped(force=True)
        if self._kill_pending:
            self._kill_now()
        if status == EXIT_MEMORY_LIMIT:
            log.warning("memory limit of %d MB reached: stopping (exit %d)", self.options.memory, status)
        return status

    def _report_popped(self, *, force: bool = False) -> None:
        """Tell the supervisor how many jobs were taken, per batch (not per job)."""
        count = self._unreported
        if not count:
            return
        self._unreported = 0
        if self.on_jobs_popped is not None:
            self.on_jobs_popped(count)
        elif self.on_job_popped is not None:
            for _ in range(count):
                self.on_job_popped()

    # == popping ======================================================================================

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
        except _REDIS_DOWN as exc:
            self._redis_lost(exc)
        except Exception:
            log.exception("could not pop a job from %s", ",".join(self.queues))
            self._reconnect_delay = 1.0
        return None

    def _redis_lost(self, exc: BaseException) -> None:
        now = time.monotonic()
        if self._redis_down_since is None:
            self._redis_down_since = now
        self._reconnect_delay = min(30.0, max(1.0, self._reconnect_delay * 2))
        log.warning("Redis unreachable at %s (%s); retrying in %.0fs",
                    self.queue.redacted_url(), exc, self._reconnect_delay)

    def _redis_up(self) -> None:
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
        return Job(self.queue, reserved, payload, connection_name=self.connection_name, on_fail=self._job_failed,
                   acker=acker)

    def _reject_unreadable(self, reserved: ReservedJob, exc: PayloadError) -> None:
        error = PayloadError(f"laraq cannot read the job payload on queue {reserved.queue}: {exc}")
        try:
            self._log_failed(self.connection_name, reserved.queue, reserved.body, format_exception(error))
            self.queue.delete_reserved(reserved)
            log.error("%s: moved to failed_jobs", error)
        except Exception as log_exc:
            log.error("%s; could not write failed_jobs (%s): released for 60s", error, log_exc)
            self._retrying(lambda: self.queue.release(reserved, 60))

    # == slots, watchdog and async loop =================================================================

    def _start_threads(self) -> None:
        if self._threads_started:
            return
        self._threads_started = True
        for i in range(max(1, self.options.concurrency)):
            threading.Thread(target=self._slot_loop, name=f"laraq-slot-{i}", daemon=True).start()
        self._start_watchdog()

    def _start_watchdog(self) -> None:
        if self._watchdog_started:
            return
        self._watchdog_started = True
        threading.Thread(target=self._watchdog_loop, name="laraq-watchdog", daemon=True).start()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="laraq-asyncio", daemon=True).start()
            self._loop = loop
        return self._loop

    def _timeout_for(self, job: Job) -> int:
        return job.timeout if job.timeout is not None else self.options.timeout

    def _submit(self, job: Job) -> None:
        self._start_threads()
        self._slots.acquire()
        timeout = self._timeout_for(job)
        running = _Running(job, time.monotonic() + timeout if timeout > 0 else None)
        with self._running_lock:
            self._running.add(running)
        self._tasks.put(running)

    def _wait_for_slot(self) -> None:
        self._slots.acquire()
        self._slots.release()

    def _drain(self) -> None:
        """Wait until every job has finished or settled after its timeout; then die if one cannot stop."""
        with self._running_lock:
            while any(r.state != "timed_out" or not r.settled for r in self._running):
                self._running_lock.wait(0.2)
        if self._kill_pending:
            self._kill_now()

    def close(self) -> None:
        """Stop the idle slot threads and the watchdog (for embedding; the CLI just exits)."""
        self._closed = True
        if self._threads_started:
            for _ in range(max(1, self.options.concurrency)):
                self._tasks.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _slot_loop(self) -> None:
        while True:
            running = self._tasks.get()
            if running is None:
                return
            try:
                self.process(running.job, running)
            except BaseException:  # never let a slot die
                log.exception("unexpected error while running %s", running.job.name)
            finally:
                with self._running_lock:
                    if running.state != "timed_out":
                        self._running.discard(running)
                    self._running_lock.notify_all()
                self._slots.release()

    def _claim(self, running: _Running | None, state: str) -> bool:
        """Move ``running`` out of "running"; False if the other side (handler or watchdog) won."""
        if running is None:
            return True
        with self._running_lock:
            if running.state != "running":
                return False
            running.state = state
            return True

    def _watchdog_loop(self) -> None:
        while not self._closed:
            time.sleep(0.05)
            try:
                self._watchdog_tick()
            except Exception:  # the watchdog must survive anything
                log.exception("watchdog error")

    def _watchdog_tick(self) -> None:
        now = time.monotonic()
        with self._running_lock:
            expired = [r for r in self._running
                       if r.state == "running" and r.deadline is not None and now >= r.deadline]
        for running in expired:
            if self._claim(running, "timed_out"):
                self._timed_out(running)
        with self._running_lock:
            for r in list(self._running):
                if r.state != "timed_out" or r.cancelled_at is None or r.task_done is None:
                    continue
                if r.task_done.is_set():  # the cancelled coroutine unwound: its slot is free
                    self._running.discard(r)
                elif now - r.cancelled_at > self.options.cancel_grace and not r.settled:
                    log.error("%s ignored its cancellation", r.job.name)
                    r.settled = True
                    self._kill_pending = True
            self._running_lock.notify_all()
            others_busy = any(r.state != "timed_out" for r in self._running)
        if self._kill_pending and not others_busy:
            self._kill_now()

    def _timed_out(self, running: _Running) -> None:
        """Laravel's SIGALRM handler: timeout bookkeeping, then abandon the job."""
        job = running.job
        job.abandon()
        exc = timeout_exceeded(job.name, self.version)
        log.error("%s (id %s, attempt %d) timed out after %ss",
                  job.name, job.id, job.attempts, self._timeout_for(job))
        try:
            self._fail_if_will_exceed_max_attempts(job, exc, force=True)
            self._fail_if_will_exceed_max_exceptions(job, exc, force=True)
            if job.fail_on_timeout:
                job.fail_internal(exc, from_watchdog=True)
        except Exception:
            log.exception("timeout bookkeeping for %s failed", job.name)
        if not job.has_failed:
            log.warning("%s stays reserved until retry_after expires", job.name)
        with self._running_lock:
            if running.is_async and (running.future is not None or running.cancel is not None):
                running.cancelled_at = time.monotonic()
                if running.cancel is not None:
                    running.cancel()
                else:
                    running.future.cancel()  # type: ignore[union-attr]
            else:
                running.settled = True
                self._kill_pending = True
            self._running_lock.notify_all()

    def _kill_now(self) -> None:
        with contextlib.suppress(Exception):
            self._report_popped(force=True)
        log.error("a job timed out in a thread that cannot be interrupted: killing this worker process")
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        self._kill()

    # == processing one job ============================================================================

    def process(self, job: Job, running: _Running | None = None, handler: Any = _UNKNOWN) -> None:
        """Laravel's ``Worker::process`` for one job (``running`` ties it to the watchdog; ``handler``:
        the caller's ``app.resolve`` of this payload, if it did it already)."""
        if handler is _UNKNOWN:
            handler = self.app.resolve(job.payload)
        if handler is None:
            self._unhandled(job)
            self._claim(running, "finishing")
            return
        job.handler = handler
        self.output.job(job, "starting")
        try:
            self._fail_if_already_exceeds_max_attempts(job)
            if job.is_deleted:
                if self._claim(running, "finishing"):
                    self.output.job(job, "success")
                return
            self._fire(job, handler, running)
            if not self._claim(running, "finishing"):
                return
            self._after_success(job, handler)
            self.output.job(job, "success")
        except (JobAbandoned, concurrent.futures.CancelledError, asyncio.CancelledError):
            if self._claim(running, "finishing"):  # cancelled by someone else than the watchdog
                self._handle_job_exception(job, RuntimeError(f"{job.name} was cancelled"))
        except Exception as exc:
            if not self._claim(running, "finishing"):
                return
            self._report(job, exc)
            self._handle_job_exception(job, exc)
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt or another BaseException raised by a handler: a job
            # exception like any other (PHP's Throwable); swallowing it would strand the job in
            # :reserved until retry_after with its attempt not counted
            if not self._claim(running, "finishing"):
                return
            self._report(job, exc)
            self._handle_job_exception(job, exc)

    def _report(self, job: Job, exc: BaseException) -> None:
        log.error("%s (id %s, attempt %d) raised %s: %s", job.name, job.id, job.attempts,
                  type(exc).__name__, exc, exc_info=(type(exc), exc, exc.__traceback__))

    def _fire(self, job: Job, handler: Handler, running: _Running | None) -> None:
        argument = self._decode(job, handler)
        if not handler.is_async:
            handler.func(argument, job)
            return
        done = threading.Event()

        async def runner() -> Any:
            try:
                return await handler.func(argument, job)  # type: ignore[misc]
            except (SystemExit, KeyboardInterrupt) as exc:
                # asyncio re-raises these out of the loop (killing its thread): hand them over instead
                return _Raised(exc)
            finally:
                done.set()

        future = asyncio.run_coroutine_threadsafe(runner(), self._event_loop())
        if running is not None:
            running.is_async, running.task_done, running.future = True, done, future
        result = future.result()
        if isinstance(result, _Raised):
            raise result.exc

    def _decode(self, job: Job, handler: Handler) -> Any:
        """The handler's first argument: the unserialized (decrypted) command, or ``data``."""
        if handler.kind == "string":
            job.command = job.payload.data
            return job.command
        text = job.payload.command
        if text is None:
            raise PayloadError(f"{job.name} (uuid {job.uuid}) has no data.command to unserialize")
        if job.payload.is_encrypted_command:
            if self.encrypter is None:
                raise RuntimeError(f"Unable to extract job payload: {job.name} is encrypted and APP_KEY is not set")
            try:
                raw = self.encrypter.decrypt(text, unserialize=True)
            except Exception as exc:
                raise RuntimeError(f"Cannot decrypt the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        else:
            raw = text.encode("utf-8")
        try:
            job.command = loads(raw)
        except PHPSerializeError as exc:
            raise PHPSerializeError(f"Cannot unserialize the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        return job.command

    def _after_success(self, job: Job, handler: Handler) -> None:
        """CallQueuedHandler after ``handle()``: release the unique lock, delete unless released."""
        if not job.is_released:
            self._release_unique_lock(job)
        if not job.is_deleted_or_released and not job.has_failed:
            self._retrying(job.delete)

    # == Laravel's attempt bookkeeping ===================================================================

    def _max_tries(self, job: Job) -> int:
        return job.max_tries if job.max_tries is not None else int(self.options.max_tries)

    def _fail_if_already_exceeds_max_attempts(self, job: Job) -> None:
        retry_until = job.retry_until
        if retry_until and time.time() <= retry_until:
            return
        max_tries = self._max_tries(job)
        if not retry_until and (max_tries == 0 or job.attempts <= max_tries):
            return
        exc = max_attempts_exceeded(job.name, self.version)
        job.fail(exc)
        raise exc

    def _fail_if_will_exceed_max_attempts(self, job: Job, exc: BaseException, *, force: bool = False) -> None:
        retry_until = job.retry_until
        if retry_until and retry_until <= time.time():
            job.fail_internal(exc, from_watchdog=force)
        max_tries = self._max_tries(job)
        if not retry_until and max_tries > 0 and job.attempts >= max_tries:
            job.fail_internal(exc, from_watchdog=force)

    def _fail_if_will_exceed_max_exceptions(self, job: Job, exc: BaseException, *, force: bool = False) -> None:
        if self.cache is None or job.uuid is None or job.max_exceptions is None:
            return
        if job.max_exceptions <= self.cache.job_exceptions_increment(job.uuid):
            self.cache.job_exceptions_forget(job.uuid)
            job.fail_internal(exc, from_watchdog=force)

    def _handle_job_exception(self, job: Job, exc: BaseException) -> None:
        try:
            if not job.has_failed:
                self._fail_if_will_exceed_max_attempts(job, exc)
                self._fail_if_will_exceed_max_exceptions(job, exc)
        except Exception:
            log.exception("could not apply tries/maxExceptions to %s", job.name)
        finally:
            if not (job.is_deleted or job.is_released or job.has_failed):
                backoff = job.payload.backoff_seconds(job.attempts, self.options.backoff)
                self._retrying(lambda: job.release(backoff))
                self.output.job(job, "released_after_exception", exc)

    # == failing =======================================================================================

    def _job_failed(self, job: Job, exc: BaseException | None) -> None:
        """The ``JobFailed`` side of ``Job::fail``: callback, unique lock, ``failed_jobs`` row, output."""
        error = exc if exc is not None else ManuallyFailedError("")
        try:
            callback = self.app.failed_callback(job.payload)
            if callback is not None:
                result = callback(job.command, job, error)
                if asyncio.iscoroutine(result):
                    self._run_coroutine(result, self.options.timeout or None)
            self._release_unique_lock(job)
        except Exception:
            log.exception("the failed() callback of %s raised", job.name)
        finally:
            text = format_exception(error, job_name=job.name)
            try:
                self._log_failed(job.connection, job.queue, job.body, text)
            except Exception as log_exc:
                log.error("%s (uuid %s) failed but failed_jobs could not be written (%s): "
                          "putting it back on the queue in 60s", job.name, job.uuid, log_exc)
                self._retrying(lambda: self._put_back(job, 60, require_reservation=False))
            log.warning("%s (uuid %s) failed: %s", job.name, job.uuid, text.splitlines()[0] if text else "")
            self.output.job(job, "failed", error)

    def _log_failed(self, connection: str, queue: str, body: bytes, text: str) -> None:
        if self.failer is None:
            return
        with self._failer_lock:
            self.failer.log(connection, queue, body, text)

    def _release_unique_lock(self, job: Job) -> None:
        """Release a ShouldBeUnique lock when it can be identified (see ``compat-docs/worker.md``)."""
        handler: Handler | None = getattr(job, "handler", None)
        command = job.command
        if self.cache is None or handler is None or handler.unique is False or not isinstance(command, PHPObject):
            return
        if handler.unique is None and "uniqueId" not in command:
            return
        unique_id = command.get("uniqueId")
        owner = command.get("uniqueLockOwner") or None
        try:
            self.cache.unique_lock_release(
                job.payload.command_name or job.name, "" if unique_id is None else str(unique_id),
                job.display_name, owner=owner,
            )
        except Exception as exc:
            log.warning("could not release the unique lock of %s: %s", job.name, exc)

    # == jobs without a Python handler ====================================================================

    def _unhandled(self, job: Job) -> None:
        name = job.payload.command_name or str(job.payload.decoded.get("job") or "") or job.name
        reason = f"No Python handler registered for {name}"
        policy = self.options.unhandled
        delay = max(1, int(self.options.unhandled_delay))
        if policy == "fail":
            job.fail(UnhandledJobError(reason))
            return
        if policy == "release":
            self._retrying(lambda: job.release(delay))
            detail = f"released for {delay}s"
        else:
            self._retrying(lambda: self._put_back(job, delay))
            detail = f"requeued untouched in {delay}s"
        log.warning("%s (id %s on %s): %s", reason, job.id, job.queue, detail)
        self.output.job(job, "unhandled", detail=detail)

    def _put_back(self, job: Job, delay: int, *, require_reservation: bool = True) -> None:
        """Put the original body back on ``:delayed`` (attempts not burned)."""
        keys = self.queue.keys(job.queue)
        if require_reservation:
            self.queue.scripts.requeue(keys.reserved, keys.delayed, job.reserved, self.queue.available_at(delay),
                                       job.body)
        else:
            self.queue.client.zadd(keys.delayed, {job.body: self.queue.available_at(delay)})

    # == signals =========================================================================================

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT/SIGQUIT: finish running jobs, then exit 0 (a second one: stop now).
        SIGUSR2: pause. SIGCONT: resume. Only possible in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_quit_signal)
        signal.signal(signal.SIGUSR2, self._on_pause_signal)
        signal.signal(signal.SIGCONT, self._on_resume_signal)

    def _on_quit_signal(self, signum: int, _frame: Any) -> None:
        if self.should_quit:
            log.warning("second %s: stopping now; running jobs stay reserved until retry_after",
                        signal.Signals(signum).name)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(EXIT_ERROR)
        self.should_quit = True
        self._wake.set()

    def _on_pause_signal(self, _signum: int, _frame: Any) -> None:
        self.paused = True
        self._wake.set()

    def _on_resume_signal(self, _signum: int, _frame: Any) -> None:
        self.paused = False
        self._wake.set()

    # == helpers ===========================================================================================

    def _retrying(self, action: Callable[[], T], attempts: int = 4) -> T | None:
        """Run a Redis write, retrying while Redis is unreachable (the outcome is known; keep it)."""
        delay = 0.5
        for attempt in range(attempts):
            try:
                return action()
            except _REDIS_DOWN as exc:
                if attempt == attempts - 1:
                    log.error("Redis write failed after %d attempts (%s): the job stays reserved "
                              "until retry_after", attempts, exc)
                    return None
                time.sleep(delay)
                delay *= 2
        return None


def _rss_mb() -> float:
    """Resident memory of this process in MB (Laravel compares ``memory_get_usage(true)``)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1048576
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sigkill_self() -> None:
    """``Worker::kill``: die by SIGKILL, leaving reserved jobs for ``retry_after``."""
    os.kill(os.getpid(), signal.SIGKILL)
