"""Error reporting: a handler's exception reaches Sentry, or any logging-based reporter, with the job's
class, id, queue and attempt attached (Laravel's ``ExceptionHandler::report`` of a job exception, which
Sentry's Laravel SDK tags with the job).

:class:`ErrorReporter` is a :class:`~laraq.worker.events.WorkerListener`. Each exception a job ends an
attempt with (released after it, or failed by it, including timeouts and max attempts) is reported once:

* to the ``laraq.report`` logger at ``ERROR``, with ``exc_info`` and ``extra``: ``job_class``, ``job_id``,
  ``job_uuid``, ``queue``, ``connection``, ``attempt``, ``outcome`` (``released``/``failed``). Any
  handler on that logger (a JSON formatter, a log shipper, Rollbar's or Bugsnag's logging handler) sees
  them as record attributes;
* to Sentry when ``sentry_sdk`` is installed and initialized (the extra ``laraq[sentry]``): one event per
  exception, captured in a new scope with the tags ``job.class``, ``job.queue``, ``job.attempt``,
  ``job.outcome`` and a ``job`` context (``id``, ``uuid``, ``connection``). Sentry's logging integration is
  told to ignore ``laraq.report`` and the worker's own error line, so an exception is one event, not three.
  An event processor on that scope (:func:`scrub_event`) takes the local variables out of laraq's own
  frames (they hold the decoded command, protected properties included) and drops the event's ``extra``
  and ``request`` (the SDK puts ``sys.argv`` there, which may carry ``--redis-url`` with its password).
  The handler's own frames are the app's code: the app's ``sentry_sdk.init(include_local_variables=...)``
  decides whether its locals (``command`` among them) are sent.

``laraq work`` attaches it when Sentry is initialized (by the handlers module, as Sentry asks) or when
``LARAQ_REPORT`` is set (``log``: the logger only; see :mod:`laraq.production.listeners`). No payload,
command or secret is put into a report by laraq.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from laraq.worker.events import (
    JobFailed,
    JobReleased,
    WorkerListener,
)

if TYPE_CHECKING:
    from sentry_sdk._types import Event

    from laraq.bus.job import Job

__all__ = ["ErrorReporter", "report_fields", "scrub_event", "sentry_active"]

log = logging.getLogger("laraq.report")
#: the worker's own line for a handler exception (the worker's modules log as laraq.worker.worker): as
#: Sentry events they would repeat the tagged one
_WORKER_LOGGERS = ("laraq.report", "laraq.worker.worker")


def report_fields(job: Job, outcome: str) -> dict[str, Any]:
    """The job's fields a report carries (never the payload or command)."""
    return {"job_class": job.name, "job_id": job.id, "job_uuid": job.uuid, "queue": job.queue,
            "connection": getattr(job, "connection_name", None) or "redis", "attempt": job.attempts,
            "outcome": outcome}


def _laraq_module(module: Any) -> bool:
    return isinstance(module, str) and (module == "laraq" or module.startswith("laraq."))


def scrub_event(event: Event, hint: dict[str, Any] | None = None) -> Event:
    """A Sentry event of a job exception as laraq sends it: no locals in laraq's frames, no ``extra`` or
    ``request`` (a Sentry event processor: returns the event it changed)."""
    event.pop("extra", None)
    event.pop("request", None)
    values = (event.get("exception") or {}).get("values") or []
    stacks = [v.get("stacktrace") for v in values if isinstance(v, dict)]
    stacks += [t.get("stacktrace") for t in (event.get("threads") or {}).get("values") or [] if isinstance(t, dict)]
    for stack in stacks:
        for frame in (stack or {}).get("frames") or []:
            if isinstance(frame, dict) and _laraq_module(frame.get("module")):
                frame.pop("vars", None)
    return event


def sentry_active() -> bool:
    """``sentry_sdk`` is imported and initialized (it is never imported here)."""
    sdk = sys.modules.get("sentry_sdk")
    return bool(sdk is not None and getattr(sdk, "is_initialized", lambda: False)())


class ErrorReporter(WorkerListener):
    """Reports job exceptions (see the module docstring); ``sentry``: None decides by :func:`sentry_active`."""

    def __init__(self, *, sentry: bool | None = None) -> None:
        self.sentry = sentry_active() if sentry is None else sentry
        if self.sentry:
            # optional dependency: sentry_sdk is only imported when the app initialized it
            from sentry_sdk.integrations.logging import ignore_logger

            for name in _WORKER_LOGGERS:
                ignore_logger(name)

    def _report(self, job: Job, exc: BaseException | None, outcome: str) -> None:
        if exc is None:
            return
        fields = report_fields(job, outcome)
        log.error("%s (id %s, attempt %d) %s: %s: %s", job.name, job.id, job.attempts, outcome,
                  type(exc).__name__, str(exc)[:500], exc_info=(type(exc), exc, exc.__traceback__), extra=fields)
        if self.sentry:
            self._to_sentry(exc, fields)

    @staticmethod
    def _to_sentry(exc: BaseException, fields: dict[str, Any]) -> None:
        import sentry_sdk  # optional dependency: present, since Sentry was initialized

        with sentry_sdk.new_scope() as scope:
            scope.add_event_processor(scrub_event)
            scope.set_tag("job.class", fields["job_class"])
            scope.set_tag("job.queue", fields["queue"])
            scope.set_tag("job.attempt", str(fields["attempt"]))
            scope.set_tag("job.outcome", fields["outcome"])
            scope.set_context("job", {k: fields[k] for k in ("job_class", "job_id", "job_uuid", "queue",
                                                             "connection", "attempt")})
            scope.capture_exception(exc)

    def job_released(self, event: JobReleased) -> None:
        job, exc = event.job, event.exception
        self._report(job, exc, "released")

    def job_failed(self, event: JobFailed) -> None:
        job, exc = event.job, event.exception
        self._report(job, exc, "failed")
