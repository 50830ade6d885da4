"""What ``laraq work`` prints: ``queue:work``'s console lines, or one JSON object per event.

Three console styles, chosen by the Laravel version profile like artisan's own output:

* ``two-line`` (9.41+), the default::

      2024-01-01 10:00:00 App\\Jobs\\SendEmail ........................... RUNNING
      2024-01-01 10:00:00 App\\Jobs\\SendEmail ....................... 12.34ms DONE

  ``DONE`` for success, ``FAIL`` (yellow) when released after an exception, ``FAIL`` (red) when failed.
  ``-v`` adds the job id (and, 12.20+, connection and queue) after the name.
* ``inline`` (9.21 – 9.40): the name, then `` .... 12.34ms DONE`` on the same line when the job ends.
* ``legacy`` (8.0 – 9.20): ``[date][id] Processing: Name`` / ``Processed:`` / ``Failed:``.

A job's id and name, and every other text a line takes from a job or from Redis, is shown through
:func:`laraq.logtext.visible`: a class name holding ``\x1b[2J`` or a newline prints as those escapes,
never as a cleared screen or a forged line (the C sink calls the same function on any name that is
not plain printable ASCII).

``--json`` (11.27+ style) prints ``{"level", "id", "uuid", "connection", "queue", "job", "status",
"result", "attempts", "exception", "message", "timestamp", "duration"}`` with empty fields dropped,
encoded like PHP's ``json_encode`` without flags. Colours only on a terminal. The lines reach the stream
through a sink (:mod:`laraq.cli.linesink`): one ``write()`` of whole lines at a time, so lines of concurrent
jobs never interleave. On a real descriptor the C sink also prints each job's first and success line
itself, from templates this module builds (:meth:`Output._templates`), so the wording stays here.

**When a line goes out.** A job's first line is written before its handler runs, as artisan does, so a
worker that dies mid-job (SIGKILL, OOM, a crash in C code) has already shown which job it was running.
Only a *success* line may wait, and only while the worker's loop thread starts a run of jobs
(:meth:`Output.hold` ... :meth:`Output.release`): it then goes out with the next line in the same
``write()``, or when the run ends, whichever comes first. A busy worker thus makes one system call per
job instead of two, and the lines keep their order.
"""

from __future__ import annotations

import shutil
import sys
import time
from datetime import UTC, datetime, tzinfo
from functools import partial
from typing import IO, TYPE_CHECKING, Any, Literal

from laraq.cli.linesink import open_sink
from laraq.logtext import visible
from laraq.protocol.phpjson import php_json_encode
from laraq.stores.failed import php_class_name
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobUnhandled,
    WorkerListener,
    WorkerStarting,
    WorkerStopping,
)

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.protocol.versions import LaravelVersion

__all__ = ["Output", "OutputListener", "Status", "format_run_time"]

Status = Literal["starting", "success", "released_after_exception", "failed", "unhandled"]

_GRAY, _GREEN, _YELLOW, _RED, _BLUE, _RESET, _BOLD = (
    "\x1b[90m", "\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[44;37m", "\x1b[0m", "\x1b[1m",
)


#: legacy (8.0 - 9.20) labels, padded as ``str_pad(..., 11)``, and their colours
_LEGACY_LABELS = {
    "starting": ("Processing:".ljust(11), _YELLOW),
    "success": ("Processed:".ljust(11), _GREEN),
    "failed": ("Failed:".ljust(11), _RED),
}


#: two-line / inline styles: the word and colour of a job's last line, by status (else a red FAIL)
_MODERN_WORDS = {"success": ("DONE", _GREEN), "released_after_exception": ("FAIL", _YELLOW)}
_FAILED_WORD = ("FAIL", _RED)

_clock = time.time

#: jobs remembered between their first and last line; far above any --concurrency
_MAX_STARTED = 65536


def _identity(job: Job) -> tuple[str, str]:
    """A job's id and name as its lines show them (:func:`laraq.logtext.visible`), as str (as the C sink reads them)."""
    return visible(str(job.id or "")), visible(str(job.name))


def format_run_time(seconds: float, *, humanize: bool = True) -> str:
    """``12.34ms`` below one second; from 10.13.1 longer runs read ``1s``, ``2m 3s``, ``1h 2m``."""
    ms = seconds * 1000
    if ms < 999.99:  # the usual case: no thousands separator can show up
        return f"{ms:.2f}ms"
    if ms < 1000 or not humanize:
        return f"{ms:,.2f}ms"
    total = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            parts.append(f"{total // size}{unit}")
            total %= size
    return " ".join(parts) or "1s"


class Output:
    """The worker's event printer (thread-safe).

    Its settings (``version``, ``json_mode``, ``quiet``, ``verbosity``, ``color``, ``width``) are read
    when it is made: make a new one to print differently."""

    def __init__(
        self,
        version: LaravelVersion,
        *,
        stream: IO[str] | None = None,
        json_mode: bool = False,
        quiet: bool = False,
        verbosity: int = 0,
        color: bool | None = None,
        width: int | None = None,
        timezone: tzinfo = UTC,
    ) -> None:
        self.version = version
        #: the dates of the lines are in this zone: the app's, as artisan's (``app.timezone``, or
        #: ``queue.output_timezone`` from 9.49; :meth:`laraq.config.settings.LaravelSettings.line_timezone`)
        self.timezone = timezone
        self.stream = stream if stream is not None else sys.stdout
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbosity = verbosity
        isatty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.color = isatty and not json_mode if color is None else color
        self.width = width or (shutil.get_terminal_size((80, 24)).columns if isatty else 80)
        #: where the lines go, in order and held as the module's docstring says (laraq.cli.linesink)
        self._sink = open_sink(self.stream)
        #: id(job) -> (when it started, its id, its name), from started() to its last line
        self._started: dict[int, tuple[float, str, str]] = {}
        #: ``Y-m-d H:i:s`` of the current second, and the time it stops being current (see _date)
        self._date_text = ""
        self._date_until = 0.0
        #: what a job's lines look like, worked out once: None (--quiet), "json", or the console style
        #: ("legacy", "inline", "two-line"); the settings above are read here and not again
        self._kind: str | None = None if quiet else "json" if json_mode else version.output_style
        #: run times of a second or more read ``1s``, ``2m 3s`` (10.13.1+)
        self._humanize = version.since("10.13.1")
        #: ``-v`` adds connection and queue after the job id (12.20+)
        self._id_and_queue = version.since("12.20")
        #: legacy lines by status: (what goes before the date, the label, what goes after the label),
        #: colours included on a terminal; a line is ``{on}[{date}][{id}] {label}{off} {name}``
        self._legacy = {
            status: (colour, label, _RESET) if self.color else ("", label, "")
            for status, (label, colour) in _LEGACY_LABELS.items()
        }
        self._legacy_starting = self._legacy["starting"]
        self._legacy_success = self._legacy["success"]
        c_sink: Any = self._sink
        if hasattr(c_sink, "configure") and (self._kind == "legacy" or (
                self._kind in ("inline", "two-line") and verbosity <= 0)):
            # the C sink prints the two lines every job has; Python keeps the rarer ones (and -v, --json)
            (start, start_width), (done, done_width) = self._templates()
            c_sink.configure(self._started, _MAX_STARTED, start, start_width, done, done_width,
                             partial(format_run_time, humanize=self._humanize), visible,
                             None if timezone is UTC else self._date_at)
            self.started = c_sink.started  # type: ignore[method-assign]
            self.succeeded = c_sink.succeeded  # type: ignore[method-assign]

    # -- plumbing ----------------------------------------------------------------------------------

    def hold(self) -> None:
        """From now until :meth:`release`, a success line reported on this thread may wait for the next
        line (see the module's docstring). The worker's loop calls this around a run of job starts."""
        if not self.quiet:
            self._sink.hold()

    def release(self) -> None:
        """Stop holding; anything held is written now."""
        self._sink.release()

    def flush(self) -> None:
        """Write anything held now (the hold goes on)."""
        self._sink.flush()

    def _write(self, text: str) -> None:
        """Write now, with any held line before it (as artisan does: a line is out before the job goes on)."""
        if not self.quiet:
            self._sink.write(text)

    def _c(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text

    def _now(self) -> datetime:
        return datetime.now(self.timezone)

    def _date_at(self, second: int) -> str:
        """``Y-m-d H:i:s`` of a unix second in the lines' timezone."""
        return datetime.fromtimestamp(second, self.timezone).strftime("%Y-%m-%d %H:%M:%S")

    def _date(self) -> str:
        """``Y-m-d H:i:s`` of now, formatted once per second rather than once per line."""
        now = _clock()
        if now >= self._date_until:
            second = int(now)
            self._date_until = second + 1.0
            self._date_text = self._date_at(second)
        return self._date_text

    # -- events ------------------------------------------------------------------------------------

    def starting_banner(self, queues: str) -> None:
        """``INFO  Processing jobs from the [default] queue.`` (terminals only, never with --json)."""
        if self.json_mode or self.version.output_style == "legacy" or not self.color:
            return
        self._write(f"\n  {self._c(_BLUE, ' INFO ')} Processing jobs from the [{visible(queues)}] queue.\n\n")

    def job(self, job: Job, status: Status, exc: BaseException | None = None, *, detail: str = "") -> None:
        """Report one job event."""
        if status == "starting":
            self.started(job)
            return
        if status == "success":
            self.succeeded(job)
            return
        kind = self._kind
        if kind is None:  # --quiet: nothing is written, nothing is formatted
            return
        entry = self._started.pop(id(job), None)
        ident, name = _identity(job) if entry is None else entry[1:]
        if kind == "legacy" and status != "unhandled":  # legacy lines carry no run time
            parts = self._legacy.get(status)
            if parts is not None:  # releases print nothing before 9.21
                self._write(self._legacy_line(parts, ident, name))
            return
        elapsed = 0.0 if entry is None else time.monotonic() - entry[0]
        if kind == "json":
            self._json(job, status, exc, elapsed, detail)
        elif status == "unhandled":
            self._write(self._line(job, name, ident, f"SKIPPED ({visible(detail)})" if detail else "SKIPPED", None,
                                   _YELLOW))
        else:
            word, colour = _MODERN_WORDS.get(status, _FAILED_WORD)
            runtime = format_run_time(elapsed, humanize=self._humanize)
            self._write(self._line(job, name, ident, word, runtime, colour))

    # The two events every job has, called once per job each: kept to the few steps their lines need.
    # What a job's later lines print of it (its id and name) is read once, by started().

    def started(self, job: Job) -> None:
        """``job(job, "starting")``: the line written as a job's handler is about to run."""
        kind = self._kind
        if kind is None:
            return
        ident, name = _identity(job)
        started = self._started
        if len(started) >= _MAX_STARTED:  # a job that timed out and was abandoned never ends here
            del started[next(iter(started))]
        started[id(job)] = (time.monotonic(), ident, name)
        if kind == "legacy":
            self._write(self._legacy_line(self._legacy_starting, ident, name))
        elif kind == "two-line":
            self._write(self._line(job, name, ident, "RUNNING", None, _YELLOW))
        elif kind == "json":
            self._json(job, "starting", None, 0.0, "")

    def succeeded(self, job: Job, runtime: float | None = None) -> None:
        """``job(job, "success")``: the handler returned. The line may wait for the next (see :meth:`hold`).

        ``runtime`` is accepted and not used (the C sink's ``succeeded`` takes the same arguments): the
        printed run time counts from :meth:`started`, as artisan's command times it."""
        kind = self._kind
        if kind is None:
            return
        entry = self._started.pop(id(job), None)
        if entry is None:  # never started here: read now, timed as 0
            start = time.monotonic()
            ident, name = _identity(job)
        else:
            start, ident, name = entry
        if kind == "legacy":
            text = self._legacy_line(self._legacy_success, ident, name)
        else:
            elapsed = time.monotonic() - start
            if kind == "json":
                text = self._json_text(job, "success", None, elapsed, "")
            else:
                runtime_text = format_run_time(elapsed, humanize=self._humanize)
                text = self._line(job, name, ident, "DONE", runtime_text, _GREEN)
        self._sink.success(text)

    def message(self, text: str, level: str = "info") -> None:
        """A worker-level line (restart, pause, shutdown)."""
        if self.json_mode:
            record = {"level": level, "message": text, "timestamp": self._stamp()}
            self._write(php_json_encode(record, unescaped_unicode=False) + "\n")
        else:
            self._write(f"  {self._c(_GRAY, self._now().strftime('%Y-%m-%d %H:%M:%S'))} {visible(text)}\n")

    # -- styles ------------------------------------------------------------------------------------

    def _name_part(self, job: Job, name: str, ident: str) -> tuple[str, int]:
        """``-v``: the name, then the job id (and from 12.20 connection and queue); with its printed length."""
        extra = f" {ident}"
        if self._id_and_queue:
            extra += f" {visible(job.connection)} {visible(job.queue)}"
        return name + self._c(_GRAY, extra), len(name) + len(extra)

    def _legacy_line(self, parts: tuple[str, str, str], ident: str, name: str) -> str:
        """A legacy (8.0 - 9.20) line: ``[date][id] Label: Name``, coloured by ``parts`` (see __init__)."""
        on, label, off = parts
        date = self._date_text if _clock() < self._date_until else self._date()
        return f"{on}[{date}][{ident}] {label}{off} {name}\n"

    def _line(self, job: Job, name: str, ident: str, word: str, runtime: str | None, colour: str) -> str:
        date = self._date_text if _clock() < self._date_until else self._date()
        if self.verbosity <= 0:
            label = name
            label_len = len(label)
        else:
            label, label_len = self._name_part(job, name, ident)
        if runtime is None:
            dots = "." * max(self.width - label_len - 33, 0)
            if not self.color:
                return f"  {date} {label} {dots} {word}\n"
            tail = f" {_BOLD}{colour}{word}{_RESET}"
        else:
            dots = "." * max(self.width - label_len - len(runtime) - 31, 0)
            if not self.color:
                return f"  {date} {label} {dots} {runtime} {word}\n"
            tail = f" {_GRAY}{runtime}{_RESET} {_BOLD}{colour}{word}{_RESET}"
        return f"  {_GRAY}{date}{_RESET} {label} {_GRAY}{dots}{_RESET}{tail}\n"

    def _templates(self) -> tuple[tuple[tuple[Any, ...] | None, int], tuple[tuple[Any, ...], int]]:
        """A job's first and success line as the C sink prints them (``laraq/_lines.c``), each with the
        width its dots fill: literal UTF-8 pieces and slots, the same text :meth:`_legacy_line` and
        :meth:`_line` build (``tests/test_output_hold.py`` compares the two, style by style)."""
        date, ident, name, dots, runtime = 0, 1, 2, 3, 4  # the C sink's slots

        def b(text: str) -> bytes:
            return text.encode("utf-8")

        if self._kind == "legacy":
            def legacy(parts: tuple[str, str, str]) -> tuple[Any, ...]:
                on, label, off = parts
                return (b(f"{on}["), date, b"][", ident, b(f"] {label}{off} "), name, b"\n")
            return (legacy(self._legacy_starting), 0), (legacy(self._legacy_success), 0)
        if self.color:
            head: tuple[Any, ...] = (b(f"  {_GRAY}"), date, b(f"{_RESET} "), name, b(f" {_GRAY}"), dots)
            start = (*head, b(f"{_RESET} {_BOLD}{_YELLOW}RUNNING{_RESET}\n"))
            done = (*head, b(f"{_RESET} {_GRAY}"), runtime, b(f"{_RESET} {_BOLD}{_GREEN}DONE{_RESET}\n"))
        else:
            head = (b"  ", date, b" ", name, b" ", dots)
            start = (*head, b" RUNNING\n")
            done = (*head, b" ", runtime, b" DONE\n")
        return (start if self._kind == "two-line" else None, self.width - 33), (done, self.width - 31)

    def _stamp(self) -> str:
        """PHP's ``Y-m-d\\TH:i:s.uP``: microseconds and the offset with a colon (``+01:00``)."""
        now = self._now()
        offset = now.strftime("%z") or "+0000"
        return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + offset[:3] + ":" + offset[3:]

    def _json(self, job: Job, status: Status, exc: BaseException | None, elapsed: float, detail: str) -> None:
        self._write(self._json_text(job, status, exc, elapsed, detail))

    def _json_text(self, job: Job, status: Status, exc: BaseException | None, elapsed: float, detail: str) -> str:
        if job.is_deleted:  # Laravel's order: a failed job was deleted too, so it reads "deleted"
            result = "deleted"
        elif job.is_released:
            result = "released"
        elif job.has_failed:
            result = "failed"
        else:
            result = ""
        fields: dict[str, object] = {
            "level": "info" if status in ("starting", "success") else "warning",
            "id": job.id,
            "uuid": job.uuid,
            "connection": job.connection,
            "queue": job.queue,
            "job": job.name,
            "status": status,
            "result": detail if status == "unhandled" else result,
            "attempts": job.attempts,
            "exception": php_class_name(exc) if exc is not None else "",
            "message": str(exc) if exc is not None else None,
            "timestamp": self._stamp(),
        }
        record = {k: v for k, v in fields.items() if v not in (None, "", 0, False)}
        if status != "starting":
            record["duration"] = round(elapsed, 6)
        return php_json_encode(record, unescaped_unicode=False) + "\n"


class OutputListener(WorkerListener):
    """``queue:work``'s console / ``--json`` lines, driven by the worker's events. While the worker's loop
    runs, a success line may wait for the next line (:meth:`Output.hold`, from ``WorkerStarting`` on the
    loop's thread until ``WorkerStopping``)."""

    def __init__(self, output: Output) -> None:
        self.output = output
        # every job has these two: bound once, one attribute lookup less per line
        self._started = output.started
        self._succeeded = output.succeeded

    def worker_starting(self, event: WorkerStarting) -> None:
        self.output.starting_banner(",".join(event.queues))
        self.output.hold()

    def worker_stopping(self, event: WorkerStopping) -> None:
        self.output.release()

    def flush(self) -> None:
        self.output.flush()

    def job_processing(self, event: JobProcessing) -> None:
        self._started(event.job)

    def job_processed(self, event: JobProcessed) -> None:
        self._succeeded(event.job)

    def job_released(self, event: JobReleased) -> None:
        if event.exception is not None:
            self.output.job(event.job, "released_after_exception", event.exception)

    def job_failed(self, event: JobFailed) -> None:
        self.output.job(event.job, "failed", event.exception)

    def job_unhandled(self, event: JobUnhandled) -> None:
        if event.action != "fail":  # a failed unhandled job prints its failure line
            self.output.job(event.job, "unhandled", detail=event.detail)
