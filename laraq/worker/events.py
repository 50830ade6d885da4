"""The worker's events, as small typed objects, and the listeners they are told to.

Laravel's worker fires ``WorkerStarting``, ``Looping``, ``JobPopped``, ``JobProcessing``, ``JobProcessed``,
``JobReleasedAfterException``, ``JobFailed``, ``JobTimedOut`` and ``WorkerStopping`` (``Illuminate\\Queue\\Events``)
through its dispatcher; console output, Horizon and app listeners hang off them. laraq's are the classes
below, told to a :class:`WorkerListener`: subclass it, override the methods you care about (each takes
one event), and pass it as ``Worker(..., listeners=[...])`` or :meth:`laraq.worker.worker.Worker.add_listener`.
Console output, Horizon's records, heartbeats, metrics and structured logs are all such listeners.

Order per job: :class:`JobReserved` → :class:`JobProcessing` → exactly one outcome: :class:`JobProcessed`
(the handler returned; a job that released itself also gets :class:`JobReleased` with no exception just
before), :class:`JobReleased` (after an exception, with its backoff), :class:`JobFailed`, or
:class:`JobTimedOut` (the watchdog took it; :class:`JobFailed` follows if the timeout failed it). A job that
goes back to PHP gets :class:`JobUnhandled` instead of :class:`JobProcessing` and an outcome
(:class:`JobFailed` follows its ``fail`` action). A job failed before it runs (max attempts already
exceeded) gets :class:`JobFailed` after :class:`JobProcessing`, as Laravel's ``JobProcessing`` precedes its
``JobFailed``.

:class:`Listeners` fans an event out. A listener that raises is logged once per kind of event (then
silently skipped for that kind) and never changes what happens to the job. Job events are told on the
thread that did the work (the loop, a pool thread, the watchdog): a listener must be thread-safe and quick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.protocol.versions import LaravelVersion
    from laraq.worker.context import WorkerOptions

__all__ = [
    "Held", "JobFailed", "JobProcessed", "JobProcessing", "JobReleased", "JobReserved", "JobTimedOut", "JobUnhandled",
    "Listeners", "Looping", "WorkerListener", "WorkerStarting", "WorkerStopping",
]

log = logging.getLogger("laraq.worker.events")


@dataclass(slots=True)
class WorkerStarting:
    """Settings are resolved; the first reserve comes next (Laravel's ``WorkerStarting``)."""

    connection: str
    queues: list[str]
    options: WorkerOptions
    version: LaravelVersion


@dataclass(slots=True)
class Looping:
    """The loop is alive, at most about once a second (Laravel's ``Looping``); ``paused``: by SIGUSR2."""

    connection: str
    queues: list[str]
    paused: bool


@dataclass(slots=True)
class WorkerStopping:
    """The worker is about to exit with ``status``, for ``reason`` (Laravel's ``WorkerStopping``)."""

    status: int
    reason: str
    options: WorkerOptions


@dataclass(frozen=True, slots=True)
class Held:
    """The reservations a worker holds at one moment (:meth:`laraq.worker.worker.Worker.held`): each job's
    payload id with when it was reserved (unix seconds), buffered or running, and how many are running."""

    jobs: dict[str, float]
    running: int


@dataclass(slots=True)
class JobReserved:
    """Taken from the queue, before any check (Laravel's ``JobPopped``)."""

    job: Job


@dataclass(slots=True)
class JobProcessing:
    """The handler is about to run."""

    job: Job


@dataclass(slots=True)
class JobProcessed:
    """The handler returned; ``runtime`` in seconds."""

    job: Job
    runtime: float


@dataclass(slots=True)
class JobReleased:
    """Back on the queue after ``delay`` seconds; ``exception`` is None for a handler's own release."""

    job: Job
    delay: int
    exception: BaseException | None


@dataclass(slots=True)
class JobFailed:
    """Failed for good (``failed_jobs`` written); ``runtime`` from :class:`JobProcessing` (None: it never got
    there)."""

    job: Job
    exception: BaseException | None
    runtime: float | None


@dataclass(slots=True)
class JobTimedOut:
    """The watchdog took the job over at its timeout."""

    job: Job


@dataclass(slots=True)
class JobUnhandled:
    """Not run here: back to PHP. ``action`` is ``requeue``, ``release`` or ``fail``."""

    job: Job
    action: str
    detail: str


@dataclass(slots=True)
class JobsOutOfReach:
    """laraq's own: a whole look through a queue shared with PHP workers (``--unhandled leave``) ended, and
    ``count`` Python jobs in it sat too far inside the list (``depth`` jobs) to be taken: they wait until the
    jobs for PHP ahead of them are taken. Told when the count changes (0: none any more)."""

    queue: str
    count: int
    depth: int


Event = (WorkerStarting | Looping | WorkerStopping | JobReserved | JobProcessing | JobProcessed | JobReleased
         | JobFailed | JobTimedOut | JobUnhandled | JobsOutOfReach)

#: each event's listener method
_METHODS: dict[type[Any], str] = {
    WorkerStarting: "worker_starting", Looping: "worker_looping", WorkerStopping: "worker_stopping",
    JobReserved: "job_reserved", JobProcessing: "job_processing", JobProcessed: "job_processed",
    JobReleased: "job_released", JobFailed: "job_failed", JobTimedOut: "job_timed_out",
    JobUnhandled: "job_unhandled", JobsOutOfReach: "jobs_out_of_reach",
}


class WorkerListener:
    """Base class of worker listeners: every method is a no-op; override the ones you need."""

    def worker_starting(self, event: WorkerStarting) -> None: ...
    def worker_looping(self, event: Looping) -> None: ...
    def worker_stopping(self, event: WorkerStopping) -> None: ...
    def job_reserved(self, event: JobReserved) -> None: ...
    def job_processing(self, event: JobProcessing) -> None: ...
    def job_processed(self, event: JobProcessed) -> None: ...
    def job_released(self, event: JobReleased) -> None: ...
    def job_failed(self, event: JobFailed) -> None: ...
    def job_timed_out(self, event: JobTimedOut) -> None: ...
    def job_unhandled(self, event: JobUnhandled) -> None: ...
    def jobs_out_of_reach(self, event: JobsOutOfReach) -> None: ...

    def flush(self) -> None:
        """The worker is about to wait: write out anything held back (console lines, say)."""


class Listeners:
    """The fan-out: calls every listener that overrides an event; errors are logged once per kind."""

    def __init__(self, listeners: list[WorkerListener] | None = None) -> None:
        self._all: list[WorkerListener] = []
        self._by_type: dict[type[Any], list[tuple[WorkerListener, Any]]] = {kind: [] for kind in _METHODS}
        self._flushing: list[WorkerListener] = []
        self._broken: set[tuple[int, str]] = set()
        for listener in listeners or ():
            self.add(listener)

    def add(self, listener: WorkerListener | Any) -> None:
        """Add a listener: a :class:`WorkerListener`, or any object with some of its methods."""
        self._all.append(listener)
        for kind, name in _METHODS.items():
            # only the methods a listener overrides are called: a no-op costs nothing per job
            method = getattr(type(listener), name, None)
            if method is not None and method is not getattr(WorkerListener, name):
                self._by_type[kind].append((listener, getattr(listener, name)))
        if getattr(type(listener), "flush", WorkerListener.flush) is not WorkerListener.flush:
            self._flushing.append(listener)

    def __iter__(self) -> Any:
        return iter(self._all)

    def wants(self, kind: type[Any]) -> bool:
        """Does any listener take events of ``kind``? (an event nobody takes need not be made)"""
        return bool(self._by_type[kind])

    def emit(self, event: Event) -> None:
        """Tell every listener of ``event``'s kind; a raising listener never breaks the caller."""
        for listener, method in self._by_type[type(event)]:
            try:
                method(event)
            except Exception as exc:
                key = (id(listener), _METHODS[type(event)])
                if key not in self._broken:
                    self._broken.add(key)
                    log.error("worker listener %s raised in %s (logged once): %s: %s", type(listener).__name__,
                              key[1], type(exc).__name__, exc, exc_info=(type(exc), exc, exc.__traceback__))

    def flush(self) -> None:
        """The worker is about to wait: each listener writes out what it holds."""
        for listener in self._flushing:
            listener.flush()
