"""The worker's event seam: what happened to the worker and to each job, told to listeners.

Laravel's worker fires ``WorkerStarting``, ``Looping``, ``JobPopped``, ``JobProcessing``,
``JobProcessed``, ``JobReleasedAfterException``, ``JobFailed``, ``JobTimedOut`` and ``WorkerStopping``
through its event dispatcher; console output, Horizon and any app listener hang off them. laraq's
equivalent is :class:`WorkerListener`: subclass it, override the methods you care about, and pass it
as ``Worker(..., listeners=[...])`` or :meth:`laraq.worker.worker.Worker.add_listener`. The console / JSON
:class:`~laraq.worker.output.Output` is one such listener (:class:`OutputListener`), so there is one place
where job outcomes are announced. Heartbeats, metrics and structured logs are listeners too.

Order per job: ``job_reserved`` → ``job_processing`` → exactly one outcome: ``job_processed`` (the
handler returned; a job that released itself also gets ``job_released(delay, None)`` just before),
``job_released`` (after an exception, with its backoff), ``job_failed``, ``job_timed_out`` (the
watchdog took it; ``job_failed`` follows if the timeout failed it), or, instead of ``job_processing``
and an outcome, ``job_unhandled`` (no Python handler: requeued, released or failed back to PHP;
``job_failed`` follows the ``fail`` action).
A job failed before it runs (max attempts already exceeded) gets ``job_failed`` after
``job_processing``, as Laravel's ``JobProcessing`` precedes its ``JobFailed``.

:class:`Listeners` fans an event out. A listener that raises is logged once per kind of event (then
silently skipped for that kind) and never changes what happens to the job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.worker.output import Output

__all__ = ["EVENT_KINDS", "Listeners", "OutputListener", "WorkerListener"]

log = logging.getLogger("laraq.worker.events")


class WorkerListener:
    """Base class of worker listeners: every method is a no-op; override the ones you need.

    Job events are called on the thread that did the work (a slot thread, the asyncio loop's thread
    or the watchdog), so a listener must be thread-safe and quick.
    """

    def worker_starting(self, worker: Any) -> None:
        """Settings are resolved; the first pop comes next."""

    def worker_looping(self, worker: Any) -> None:
        """The loop is alive (at most about once a second while running)."""

    def job_reserved(self, job: Job) -> None:
        """Popped/reserved, before any check."""

    def job_processing(self, job: Job) -> None:
        """The handler is about to run."""

    def job_processed(self, job: Job, runtime: float) -> None:
        """The handler returned; ``runtime`` in seconds."""

    def job_released(self, job: Job, delay: int, exc: BaseException | None) -> None:
        """Put back on the queue after ``delay`` seconds; ``exc`` is ``None`` for a handler's own release."""

    def job_failed(self, job: Job, exc: BaseException | None, runtime: float | None) -> None:
        """Failed for good (``failed_jobs`` written); ``runtime`` counts from ``job_processing``
        (``None`` if the job never got there: no Python handler)."""

    def job_timed_out(self, job: Job) -> None:
        """The watchdog took the job over at its timeout."""

    def job_unhandled(self, job: Job, action: str, detail: str) -> None:
        """No Python handler: ``action`` is ``requeue``, ``release`` or ``fail`` (back to PHP)."""

    def worker_stopping(self, worker: Any, status: int) -> None:
        """The worker is about to return ``status``."""


EVENT_KINDS = tuple(name for name in vars(WorkerListener) if not name.startswith("_"))


class Listeners:
    """The fan-out: calls every listener that overrides an event; errors are logged once per kind."""

    def __init__(self, listeners: list[WorkerListener] | None = None) -> None:
        self._all: list[WorkerListener] = []
        self._by_kind: dict[str, list[tuple[WorkerListener, Any]]] = {kind: [] for kind in EVENT_KINDS}
        self._broken: set[tuple[int, str]] = set()
        for listener in listeners or ():
            self.add(listener)

    def add(self, listener: WorkerListener) -> None:
        self._all.append(listener)
        for kind in EVENT_KINDS:
            # only the methods a listener overrides are called: a no-op costs nothing per job
            if getattr(type(listener), kind, None) is not getattr(WorkerListener, kind):
                self._by_kind[kind].append((listener, getattr(listener, kind)))

    def __iter__(self) -> Any:
        return iter(self._all)

    def emit(self, kind: str, *args: Any) -> None:
        """Call ``kind`` on every listener; a raising listener never breaks the caller."""
        for listener, method in self._by_kind[kind]:
            try:
                method(*args)
            except Exception as exc:
                key = (id(listener), kind)
                if key not in self._broken:
                    self._broken.add(key)
                    log.error("worker listener %s raised in %s (logged once): %s: %s",
                              type(listener).__name__, kind, type(exc).__name__, exc,
                              exc_info=(type(exc), exc, exc.__traceback__))


class OutputListener(WorkerListener):
    """``queue:work``'s console / ``--json`` lines, driven by the events (see :mod:`laraq.worker.output`)."""

    def __init__(self, output: Output) -> None:
        self.output = output
        # Every job has these two events: the printer's own methods take them, one Python call less
        # per line (Listeners.add picks the instance's attribute; the methods below say the same).
        self.job_processing = output.started  # type: ignore[method-assign]
        self.job_processed = output.succeeded  # type: ignore[method-assign]

    def worker_starting(self, worker: Any) -> None:
        self.output.starting_banner(",".join(worker.queues))

    def job_processing(self, job: Job) -> None:
        self.output.started(job)

    def job_processed(self, job: Job, runtime: float) -> None:
        self.output.succeeded(job)

    def job_released(self, job: Job, delay: int, exc: BaseException | None) -> None:
        if exc is not None:
            self.output.job(job, "released_after_exception", exc)

    def job_failed(self, job: Job, exc: BaseException | None, runtime: float | None) -> None:
        self.output.job(job, "failed", exc)

    def job_unhandled(self, job: Job, action: str, detail: str) -> None:
        if action != "fail":  # a failed unhandled job prints its failure line
            self.output.job(job, "unhandled", detail=detail)
