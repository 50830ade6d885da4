"""Logging for ``laraq work``: levels, text or JSON lines, job fields on every record, and the app's own setup.

* **Levels.** ``--log-level`` (default ``info``, so a handler's ``log.info(...)`` is visible); ``-vv``
  means ``debug``. Library loggers (``redis``, ``asyncio``, ``urllib3``) stay at ``warning`` unless
  debug is combined with ``-vvv``: their debug lines are noise for a queue user.
* **Formats.** ``text``: ``time laraq[pid] LEVEL logger: message``, one line: the message's control
  characters (a newline or ``\x1b`` in a job's class name or exception text) are shown as escapes
  (:func:`laraq.logtext.visible`), and so are those of the exception messages in a traceback that
  follows it, so a job cannot forge a record or drive a terminal; ``json``: one JSON object per line
  (``time, level, logger, message, pid``, the ``exception`` traceback when there is one, and ``job_id``,
  ``job_uuid``, ``job``, ``queue``, ``attempt`` while a job runs). With ``json`` the worker's job lines
  are log records too (``job processed/released/failed`` with ``duration_ms``), instead of artisan's
  console lines.
* **The app's own logging wins.** ``--log-config FILE`` (``.json``: ``logging.config.dictConfig``; ``.ini``/
  ``.conf``/``.cfg``: ``fileConfig``) is applied as is. When the handlers module configured logging
  itself at import (the root logger has handlers), laraq adds no handler and changes no level; the job
  fields are still attached to records (as ``record.job_id`` etc.) for the app's formatters.

:class:`JobLogListener` (a :class:`~laraq.worker.events.WorkerListener`) sets the current job for the records a
handler logs and writes the job lines in JSON mode. Secrets never reach a record: laraq logs no payload,
command, key or password.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laraq.logtext import short, visible
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobUnhandled,
    WorkerListener,
)

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["configure_logging", "JobLogListener", "JsonFormatter", "TextFormatter", "JobFieldsFilter", "LEVELS",
           "short", "capped_traceback"]

LEVELS = ("debug", "info", "warning", "error", "critical")
_NOISY = ("redis", "asyncio", "urllib3", "hpack", "httpx")
_TEXT_FORMAT = "%(asctime)s laraq[%(process)d] %(levelname)s %(name)s: %(message)s"

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar("laraq_job", default=None)
_JOB_FIELDS = ("job_id", "job_uuid", "job", "queue", "attempt")


def job_fields(job: Job) -> dict[str, Any]:
    """The fields every job record carries (never the payload or command)."""
    return {"job_id": job.id, "job_uuid": job.uuid, "job": job.name, "queue": job.queue, "attempt": job.attempts}


class JobFieldsFilter(logging.Filter):
    """Adds the running job's fields to every record logged while it runs (handler logs included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current_job.get()
        if job is not None and not hasattr(record, "job_id"):
            for key, value in job_fields(job).items():
                setattr(record, key, value)
        return True


def capped_traceback(exc_info: Any, *, escaped: bool = False) -> str:
    """The traceback text with the exception message(s) cut to :data:`laraq.logtext.MAX_LOGGED_TEXT`;
    ``escaped``: each message (and note) also one line, its control characters shown as escapes (a text log)."""
    te = traceback.TracebackException(*exc_info)
    seen: set[int] = set()
    node: traceback.TracebackException | None = te
    while node is not None and id(node) not in seen:  # the chain: __cause__ / __context__
        seen.add(id(node))
        if isinstance(getattr(node, "_str", None), str):
            node._str = visible(short(node._str)) if escaped else short(node._str)  # type: ignore[attr-defined]
        notes = getattr(node, "__notes__", None)
        if escaped and isinstance(notes, list):
            node.__notes__ = [visible(short(str(n))) for n in notes]
        node = node.__cause__ or node.__context__
    return "".join(te.format()).rstrip()


class TextFormatter(logging.Formatter):
    """The text lines, with long messages and exception texts cut (see :func:`short`) and their control
    characters escaped (:func:`laraq.logtext.visible`): a record's own text is one line."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = visible(short(record.message))
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return capped_traceback(ei, escaped=True)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; tracebacks are a field, never extra lines. Non-ASCII text stays raw, but
    control and format characters are JSON escapes (``\u009b``): the same values, safe on a terminal."""

    laraq_json = True

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": short(record.getMessage()),
            "pid": record.process,
        }
        for key in (*_JOB_FIELDS, "duration_ms", "status", "delay", "error", "setup"):
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = capped_traceback(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return visible(json.dumps(out, ensure_ascii=False, default=str), json=True)


def configure_logging(*, level: str | None = None, fmt: str = "text", config_file: str | None = None,
                      verbose: int = 0, quiet: bool = False) -> str:
    """Set up logging for ``laraq work``; returns how (``"config-file"``, ``"app"`` or ``"laraq"``)."""
    if config_file:
        import logging.config as logging_config  # start-up: logging.config pulls in logging.handlers and pickle (~2 MB resident)

        path = Path(config_file)
        if path.suffix == ".json":
            logging_config.dictConfig(json.loads(path.read_text(encoding="utf-8")))
        else:
            logging_config.fileConfig(path, disable_existing_loggers=False)
        _attach_filter()
        return "config-file"
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "laraq", False)]
    if root.handlers and not ours:
        _attach_filter()
        return "app"
    name = level or ("debug" if verbose >= 2 else "info")
    numeric = getattr(logging, name.upper())
    # --quiet silences laraq's own lines (below a warning), never the handlers' logging
    logging.getLogger("laraq").setLevel(logging.WARNING if quiet and not level else logging.NOTSET)
    handler = logging.StreamHandler(sys.stderr)
    handler.laraq = True  # type: ignore[attr-defined]
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        handler.laraq_json = True  # type: ignore[attr-defined]
    else:
        handler.setFormatter(TextFormatter(_TEXT_FORMAT))
    handler.addFilter(JobFieldsFilter())
    for old in ours:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    quiet_libs = not (numeric <= logging.DEBUG and verbose >= 3)
    for lib in _NOISY:
        logging.getLogger(lib).setLevel(max(numeric, logging.WARNING) if quiet_libs else numeric)
    return "laraq"


def _attach_filter() -> None:
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, JobFieldsFilter) for f in handler.filters):
            handler.addFilter(JobFieldsFilter())


def json_logging_active() -> bool:
    return any(getattr(h, "laraq_json", False) for h in logging.getLogger().handlers)


class JobLogListener(WorkerListener):
    """Marks the running job for log records; in JSON mode also logs one record per job outcome."""

    def __init__(self, *, job_lines: bool) -> None:
        self.job_lines = job_lines
        self.log = logging.getLogger("laraq.bus.job")

    def job_processing(self, event: JobProcessing) -> None:
        job = event.job
        _current_job.set(job)
        if self.job_lines:
            self.log.info("job processing", extra={**job_fields(job), "status": "processing"})

    def _done(self, job: Job, status: str, message: str, runtime: float | None, exc: BaseException | None = None,
              **extra: Any) -> None:
        if _current_job.get() is job:
            _current_job.set(None)
        if not self.job_lines:
            return
        fields: dict[str, Any] = {**job_fields(job), "status": status, **extra}
        if runtime is None and job.started_at is not None:
            runtime = time.perf_counter() - job.started_at
        if runtime is not None:
            fields["duration_ms"] = round(runtime * 1000, 2)
        if exc is not None:  # the traceback is on the handler's own error record, logged just before
            fields["error"] = f"{type(exc).__name__}: {short(str(exc), 500)}"
        level = logging.ERROR if status == "failed" else logging.WARNING if status == "released" else logging.INFO
        self.log.log(level, message, extra=fields)

    def job_processed(self, event: JobProcessed) -> None:
        job, runtime = event.job, event.runtime
        self._done(job, "processed", "job processed", runtime)

    def job_released(self, event: JobReleased) -> None:
        job, delay, exc = event.job, event.delay, event.exception
        self._done(job, "released", f"job released for {delay}s", None, exc, delay=delay)

    def job_failed(self, event: JobFailed) -> None:
        job, exc, runtime = event.job, event.exception, event.runtime
        self._done(job, "failed", "job failed", runtime, exc)

    def job_unhandled(self, event: JobUnhandled) -> None:
        job, detail = event.job, event.detail
        self._done(job, "unhandled", f"no Python handler: {detail}", None)
