"""What the worker's objects share: the settings every one of them reads, the stop signals, the pace.

The worker (:mod:`laraq.worker.worker`) is built from a few objects that call each other through small
declared interfaces: the loop, the reserver, the executor, ``Worker::process`` and the settle step. What
all of them read is one :class:`WorkerContext` with public fields (the queue connection, ``queue:work``'s
options, the version profile, the listeners, the stores...), built once by
:class:`~laraq.worker.worker.Worker` and passed to each constructor. Two small mutable records are
shared on purpose and say so: :class:`Signals` (quit, pause, the wake-up of a sleep: set by signal
handlers and by the reserver's refused-credentials stop, read by the loop and the executor) and
:class:`Pace` (the measured job duration the executor records and the reserver's prefetch budget reads).
:class:`WorkerOptions` (``queue:work``'s options) is defined here too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from laraq.bus.callqueued import CallQueuedHandler
    from laraq.bus.handlers import HandlerRegistry
    from laraq.protocol.queue import RedisQueue
    from laraq.protocol.versions import LaravelVersion
    from laraq.stores.failed import FailedJobStore
    from laraq.worker.eager import LoopKind
    from laraq.worker.events import Listeners

__all__ = ["CacheLike", "Pace", "Signals", "UnhandledPolicy", "WorkerContext", "WorkerOptions"]

#: ``--unhandled``: what happens to a job without a Python handler. ``leave``: it is never taken (the
#: reserve takes only jobs with a handler and leaves the others where they are, for PHP workers).
UnhandledPolicy = Literal["leave", "fail", "release", "requeue"]

log = logging.getLogger("laraq.worker.worker")


class CacheLike(Protocol):
    """The cache-store signals the worker reads and writes (:class:`laraq.stores.cache.CacheStore`)."""

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
    #: ``--loop``: the event loop jobs' tasks run on (uvloop where installed, else asyncio's own)
    loop: LoopKind = "auto"
    unhandled: UnhandledPolicy = "leave"
    unhandled_delay: int = 10
    #: Seconds a cancelled async handler gets to unwind before the hard-kill path.
    cancel_grace: float = 2.0
    #: The most jobs one reserve call takes (32 keeps the call under 1 ms of Redis time, and throughput is no
    #: lower than at 100: bench/drain.py). 1 = each reserve step is Laravel's own pop, one job at a time,
    #: round trip for round trip what ``queue:work`` sends (migrate, migrate, pop, ZREM, restart GET).
    batch: int = 32
    #: Reserve more jobs than free slots (at most about ``prefetch_seconds`` of measured work,
    #: leases renewed while they wait). False: reserve only what free slots start at once.
    prefetch: bool = True
    prefetch_seconds: float = 1.0
    #: The queue PHP workers serve, where laraq hands over what only PHP can finish (the next job of a
    #: chain, batch bookkeeping, ``uniqueId()`` locks, PHP ``failed()``); None: the connection's default.
    php_queue: str | None = None
    #: How many list heads one reserve looks at for jobs with a Python handler (``unhandled`` ``leave``).
    scan_window: int = 200
    #: ``at-once``: each finished job's ``ZREM`` is written the moment it is done, and buffered jobs are
    #: recorded as unstarted (a SIGKILL re-runs only the jobs that were running, and strands none).
    #: ``batched``: acks ride on the next reserve call or go within 50 ms, and nothing is recorded
    #: (fewer system calls per job; a SIGKILL may re-run the jobs finished in those 50 ms and leaves
    #: the buffered ones in ``:reserved`` until ``retry_after``).
    acks: str = "at-once"
    #: Seconds a buffered job's unstarted record lasts while its worker is alive to renew it: how soon the
    #: buffer of a killed worker goes back to the queue, attempts not spent (at most a third of ``retry_after``).
    unstarted_lease: float = 15.0
    #: ``--fair``: the queues of a ``--queue`` pattern (or, without one, of the whole list) take turns
    #: instead of going in order (:mod:`laraq.worker.selection`).
    fair: bool = False
    #: ``--weights``: (name or pattern, jobs per turn) pairs for ``--fair``; first match wins, default 1.
    weights: tuple[tuple[str, int], ...] = ()
    #: ``--max-per-queue``: the most jobs of one queue reserved or running at once across every laraq
    #: worker on the connection (0: no limit), held by slot leases of ``slot_lease`` seconds.
    max_per_queue: int = 0
    slot_lease: float = 30.0
    #: ``--discover-every``: seconds between the ``SCAN`` steps that find the queues of a pattern.
    discover_every: float = 2.0


@dataclass(eq=False)
class Signals:
    """Quit, pause and the wake-up of a sleep: written by signal handlers (and by the reserver
    when Redis keeps refusing the credentials), read by the loop and the executor."""

    should_quit: bool = False
    #: the exit code a quit stops with (0; 4 when Redis keeps refusing the credentials)
    quit_status: int = 0
    paused: bool = False
    wake: threading.Event = field(default_factory=threading.Event)
    #: why the worker was told to quit (said in the stop's log line)
    reason: str = ""
    #: a quit signal arrived (a later SIGINT/SIGQUIT stops at once)
    signalled: bool = False

    def quit(self, status: int = 0, reason: str = "") -> None:
        """Stop after the running jobs, with ``status``."""
        self.quit_status = status
        self.reason = reason or self.reason
        self.should_quit = True
        self.wake.set()

    def install_handlers(self) -> None:
        """``queue:work``'s signals: SIGTERM/SIGINT/SIGQUIT finish the running jobs, then exit 0; SIGUSR2
        pauses; SIGCONT resumes. Only possible in the main thread.

        A SIGTERM after a quit signal changes nothing, as in ``Worker::listenForSignals`` (it sets
        ``shouldQuit`` again): process managers and ``horizon:terminate`` may send it more than once. A
        SIGINT or SIGQUIT after one is the deliberate way to stop at once (Ctrl-C twice): exit 1, the
        running jobs stay reserved until ``retry_after``."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_quit)
        signal.signal(signal.SIGUSR2, self._on_pause)
        signal.signal(signal.SIGCONT, self._on_resume)

    def _on_quit(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signalled and signum == signal.SIGTERM:
            log.info("%s again: still finishing the running jobs (SIGINT or SIGQUIT stops at once)", name)
            return
        if self.signalled:
            log.warning("%s after a quit signal: stopping now; running jobs stay reserved until retry_after", name)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(1)
        self.signalled = True
        self.quit(self.quit_status, f"{name} received")

    def _on_pause(self, _signum: int, _frame: Any) -> None:
        self.paused = True
        self.wake.set()

    def _on_resume(self, _signum: int, _frame: Any) -> None:
        self.paused = False
        self.wake.set()


@dataclass(eq=False, slots=True)
class Pace:
    """The measured average job duration (seconds, a moving average): recorded by the executor as jobs
    finish, read by the reserver's prefetch budget. ``None`` until a job has finished."""

    average: float | None = None


@dataclass(eq=False)
class WorkerContext:
    """What every object of the worker reads: built once, passed to each constructor."""

    app: HandlerRegistry
    queue: RedisQueue
    #: the ``--queue`` list, in priority order
    queues: list[str]
    options: WorkerOptions
    version: LaravelVersion
    connection_name: str
    events: Listeners
    #: ``CallQueuedHandler``: the command, middleware, chain, batch, unique lock and PHP failed() steps
    callqueued: CallQueuedHandler
    cache: CacheLike | None = None
    failer: FailedJobStore | None = None
    signals: Signals = field(default_factory=Signals)
    pace: Pace = field(default_factory=Pace)
