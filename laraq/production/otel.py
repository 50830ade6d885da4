"""OpenTelemetry for laraq (the optional extra ``laraq[otel]``): a consumer span per job, linked to the
span that dispatched it.

:class:`OtelListener` is a :class:`~laraq.worker.events.WorkerListener`. For each job a Python handler
runs it starts a ``CONSUMER`` span named ``process <queue>`` at ``job_processing`` and ends it at the
job's outcome, with the messaging semantic conventions:

* ``messaging.system`` ``redis``; ``messaging.destination.name`` the queue (without the key prefix);
  ``messaging.message.id`` the payload's ``uuid`` (else ``id``); ``messaging.operation.type`` and
  ``messaging.operation.name`` ``process``; ``messaging.message.body.size`` the payload's bytes;
* ``laraq.job.class``, ``laraq.job.attempt``, and ``laraq.job.outcome``: ``processed``, ``released``,
  ``failed`` or ``timed_out`` (a failure or a release after an exception records the exception and
  sets the span's status to error).

The producer's context travels in the payload as the W3C ``traceparent`` (and ``tracestate``) keys. Python
dispatch writes them while a span is current (:func:`instrument_dispatch`, a
``Dispatcher.create_payload_using`` hook); PHP writes them with one payload hook (Laravel merges the
keys into every payload, and ignores them when it reads one)::

    Queue::createPayloadUsing(function () { $carrier = []; TraceContextPropagator::getInstance()->inject($carrier); return $carrier; });

The consumer span gets a *link* to that context, as the conventions ask for a batch-free consumer.

Nothing here is imported unless ``laraq work`` is asked for it (``LARAQ_OTEL=1``, see
:mod:`laraq.production.listeners`); the tracer provider is the application's (``opentelemetry.trace``'s
global one unless one is given).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from laraq.bus.dispatch import Dispatcher
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobTimedOut,
    WorkerListener,
)

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["OtelListener", "SYSTEM", "instrument_dispatch", "job_span", "trace_context"]

SYSTEM = "redis"
_PROPAGATOR = TraceContextTextMapPropagator()
_KEYS = ("traceparent", "tracestate")
#: id(job) -> its running span, for :func:`job_span` (every listener of the process shares it)
_SPANS: dict[int, Any] = {}
_LOCK = threading.Lock()


def trace_context(payload: dict[str, Any]) -> Any:
    """The producer's span context a payload carries (``traceparent``), or None."""
    carrier = {k: payload[k] for k in _KEYS if isinstance(payload.get(k), str)}
    if "traceparent" not in carrier:
        return None
    ctx = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return ctx if ctx.is_valid else None


def _inject(connection: str, queue: str, payload: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return {k: carrier[k] for k in _KEYS if k in carrier}


def instrument_dispatch() -> None:
    """Make Python dispatches carry the current span's context (once per process)."""
    if _inject not in Dispatcher.payload_hooks:
        Dispatcher.create_payload_using(_inject)


class OtelListener(WorkerListener):
    """A consumer span per job (see the module docstring)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer = trace.get_tracer("laraq", tracer_provider=tracer_provider)

    def job_processing(self, event: JobProcessing) -> None:
        job = event.job
        decoded = job.payload.decoded
        producer = trace_context(decoded)
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.queue,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.body.size": len(job.payload.raw),
            "laraq.job.class": job.name,
            "laraq.job.attempt": job.attempts,
        }
        message_id = job.uuid or job.id
        if message_id:
            attributes["messaging.message.id"] = message_id
        span = self.tracer.start_span(f"process {job.queue}", kind=SpanKind.CONSUMER, attributes=attributes,
                                      links=[Link(producer)] if producer is not None else None)
        with _LOCK:
            _SPANS[id(job)] = span

    def _end(self, job: Job, outcome: str, exc: BaseException | None = None) -> None:
        with _LOCK:
            span = _SPANS.pop(id(job), None)
        if span is None:
            return
        span.set_attribute("laraq.job.outcome", outcome)
        if exc is not None:
            span.record_exception(exc)
        if outcome in ("failed", "timed_out") or exc is not None:
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:200] if exc else outcome))
        span.end()

    def job_processed(self, event: JobProcessed) -> None:
        job = event.job
        self._end(job, "processed")

    def job_released(self, event: JobReleased) -> None:
        job, exc = event.job, event.exception
        self._end(job, "released", exc)

    def job_failed(self, event: JobFailed) -> None:
        job, exc = event.job, event.exception
        self._end(job, "failed", exc)

    def job_timed_out(self, event: JobTimedOut) -> None:
        job = event.job
        self._end(job, "timed_out")



def job_span(job: Job) -> Any:
    """A context manager making the job's span current, so that a handler's own spans nest in it::

        @app.handler("App\\Jobs\\Report")
        def report(command, job):
            with job_span(job):
                ...
    """
    with _LOCK:
        span = _SPANS.get(id(job)) or trace.INVALID_SPAN
    return trace.use_span(span, end_on_exit=False)
