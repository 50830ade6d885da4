"""What ``laraq work`` prints: ``queue:work``'s console lines, or one JSON object per event.

Three console styles, chosen by the Laravel version profile like artisan's own output:

* ``two-line`` (9.41+), the default::

      2024-01-01 10:00:00 App\\Jobs\\SendEmail ........................... RUNNING
      2024-01-01 10:00:00 App\\Jobs\\SendEmail ....................... 12.34ms DONE

  ``DONE`` for success, ``FAIL`` (yellow) when released after an exception, ``FAIL`` (red) when failed.
  ``-v`` adds the job id (and, 12.20+, connection and queue) after the name.
* ``inline`` (9.21 – 9.40): the name, then `` .... 12.34ms DONE`` on the same line when the job ends.
* ``legacy`` (8.0 – 9.20): ``[date][id] Processing: Name`` / ``Processed:`` / ``Failed:``.

``--json`` (11.27+ style) prints ``{"level", "id", "uuid", "connection", "queue", "job", "status",
"result", "attempts", "exception", "message", "timestamp", "duration"}`` with empty fields dropped,
encoded like PHP's ``json_encode`` without flags. Colours only on a terminal. Every write is one
``write()`` of whole lines under a lock, so lines of concurrent jobs never interleave.

**When a line goes out.** A job's first line is written before its handler runs, as artisan does, so a
worker that dies mid-job (SIGKILL, OOM, a crash in C code) has always shown which job it was running.
Only a *success* line may wait, and only while the worker's loop thread starts a run of jobs
(:meth:`Output.hold` ... :meth:`Output.release`): it then goes out with the next line in the same
``write()``, or when the run ends, whichever comes first. A busy worker thus makes one system call per
job instead of two, and the lines keep their order.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import threading
import time
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Literal, NamedTuple

from laraq.failed import php_class_name
from laraq.phpjson import php_json_encode

if TYPE_CHECKING:
    from laraq.job import Job
    from laraq.versions import LaravelVersion

__all__ = ["Output", "Status", "format_run_time"]

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


class _Style(NamedTuple):
    """How one Laravel version's ``queue:work`` prints a job (see :meth:`Output._style`)."""

    version: LaravelVersion | None
    #: ``legacy``, ``inline`` or ``two-line``
    kind: str
    #: run times of a second or more read ``1s``, ``2m 3s`` (10.13.1+)
    humanize: bool
    #: ``-v`` adds connection and queue after the job id (12.20+)
    id_and_queue: bool


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


def _raw_fd(stream: IO[str]) -> int | None:
    """The descriptor behind ``stream`` if it is a plain file, pipe or terminal stream; else None (a
    ``StringIO``, a test capture, anything whose ``write`` does more than write)."""
    if not isinstance(stream, io.TextIOWrapper):
        return None
    try:
        return stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


class Output:
    """The worker's event printer (thread-safe)."""

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
    ) -> None:
        self.version = version
        self.stream = stream if stream is not None else sys.stdout
        self.json_mode = json_mode
        self.quiet = quiet
        self.verbosity = verbosity
        isatty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.color = isatty and not json_mode if color is None else color
        self.width = width or (shutil.get_terminal_size((80, 24)).columns if isatty else 80)
        self._lock = threading.Lock()
        #: the stream's file descriptor, when lines can go to it with one ``write`` each (see _write)
        self._fd = _raw_fd(self.stream)
        #: text written to the stream by others may still sit in its buffer: flushed before the first line
        self._pending_stream = self._fd is not None
        self._started: dict[int, float] = {}
        #: success lines held back while the loop thread starts a run of jobs (see hold)
        self._held: list[str] = []
        self._holder: int | None = None
        self._date_cache: tuple[int, str] = (-1, "")
        self._style_of = _Style(None, "", False, False)

    # -- plumbing ----------------------------------------------------------------------------------

    def hold(self) -> None:
        """From now until :meth:`release`, a success line reported on this thread may wait for the next
        line (see the module's docstring). The worker's loop calls this around a run of job starts."""
        if not self.quiet:
            self._holder = threading.get_ident()

    def release(self) -> None:
        """Stop holding; anything held is written now."""
        self._holder = None
        self.flush()

    def flush(self) -> None:
        """Write anything held now (the hold goes on)."""
        if self._held:
            self._write("")

    def _write_line(self, text: str, status: Status) -> None:
        """A job's line: a success line on the holding thread is held, any other is written now."""
        if status == "success" and self._holder is not None and self._holder == threading.get_ident():
            with self._lock:
                self._held.append(text)
        else:
            self._write(text)

    def _write(self, text: str) -> None:
        """Write now, with any held line before it (as artisan does: a line is out before the job goes
        on), in one ``write`` to the stream's descriptor when it has a real one: Python's text and buffer
        layers and their separate flush cost more than the system call (what the stream itself still
        buffers is flushed first, once, so lines never come out of order)."""
        if self.quiet:
            return
        with self._lock:
            held = self._held
            if held:
                held.append(text)
                text = "".join(held)
                held.clear()
            if not text:
                return
            try:
                fd = self._fd
                if fd is None:
                    self.stream.write(text)
                    self.stream.flush()
                    return
                if self._pending_stream:
                    self.stream.flush()
                    self._pending_stream = False
                data = text.encode("utf-8", "replace")
                while data:
                    data = data[os.write(fd, data):]
            except (OSError, ValueError):  # a closed pipe must never break the worker
                pass

    def _c(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text

    @staticmethod
    def _now() -> datetime:
        return datetime.now(UTC)

    def _date(self) -> str:
        """``Y-m-d H:i:s`` (UTC) of now, formatted once per second rather than once per line."""
        second = int(time.time())
        cached = self._date_cache
        if cached[0] != second:
            cached = self._date_cache = (
                second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%d %H:%M:%S"))
        return cached[1]

    # -- events ------------------------------------------------------------------------------------

    def starting_banner(self, queues: str) -> None:
        """``INFO  Processing jobs from the [default] queue.`` (terminals only, never with --json)."""
        if self.json_mode or self.version.output_style == "legacy" or not self.color:
            return
        self._write(f"\n  {self._c(_BLUE, ' INFO ')} Processing jobs from the [{queues}] queue.\n\n")

    def _style(self) -> _Style:
        """What the console lines look like for ``self.version`` (worked out once per version)."""
        version = self.version
        style = self._style_of
        if style.version is not version:
            style = self._style_of = _Style(version, version.output_style, version.since("10.13.1"),
                                            version.since("12.20"))
        return style

    def job(self, job: Job, status: Status, exc: BaseException | None = None, *, detail: str = "") -> None:
        """Report one job event."""
        if self.quiet:  # nothing is written: skip the formatting (and the start-time bookkeeping)
            return
        json_mode = self.json_mode
        if not json_mode and status != "unhandled":
            style = self._style_of
            if style.version is not self.version:
                style = self._style()
            if style.kind == "legacy":  # its lines carry no run time: no start-time bookkeeping either
                self._legacy(job, status)
                return
        key = id(job)
        now = time.monotonic()
        if status == "starting":
            self._started[key] = now
            elapsed = 0.0
        else:
            elapsed = now - self._started.pop(key, now)
        if json_mode:
            self._json(job, status, exc, elapsed, detail)
        elif status == "unhandled":
            self._write(self._line(job, f"SKIPPED ({detail})" if detail else "SKIPPED", None, _YELLOW))
        else:
            self._modern(job, status, elapsed, style)

    def message(self, text: str, level: str = "info") -> None:
        """A worker-level line (restart, pause, shutdown)."""
        if self.json_mode:
            record = {"level": level, "message": text, "timestamp": self._stamp()}
            self._write(php_json_encode(record, unescaped_unicode=False) + "\n")
        else:
            self._write(f"  {self._c(_GRAY, self._now().strftime('%Y-%m-%d %H:%M:%S'))} {text}\n")

    # -- styles ------------------------------------------------------------------------------------

    def _name_part(self, job: Job) -> tuple[str, int]:
        """``-v``: the name, then the job id (and from 12.20 connection and queue); with its printed length."""
        name = job.name
        extra = f" {job.id or ''}"
        if self._style().id_and_queue:
            extra += f" {job.connection} {job.queue}"
        return name + self._c(_GRAY, extra), len(name) + len(extra)

    def _line(self, job: Job, word: str, runtime: str | None, colour: str) -> str:
        date = self._date()
        if self.verbosity <= 0:
            label = job.name
            label_len = len(label)
        else:
            label, label_len = self._name_part(job)
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

    def _modern(self, job: Job, status: Status, elapsed: float, style: _Style) -> None:
        if status == "starting":
            if style.kind != "inline":
                self._write(self._line(job, "RUNNING", None, _YELLOW))
            return
        word, colour = _MODERN_WORDS.get(status, _FAILED_WORD)
        self._write_line(self._line(job, word, format_run_time(elapsed, humanize=style.humanize), colour), status)

    def _legacy(self, job: Job, status: Status) -> None:
        entry = _LEGACY_LABELS.get(status)
        if entry is None:  # releases print nothing before 9.21
            return
        label, colour = entry
        if self.color:
            self._write_line(f"{colour}[{self._date()}][{job.id or ''}] {label}{_RESET} {job.name}\n", status)
        else:
            self._write_line(f"[{self._date()}][{job.id or ''}] {label} {job.name}\n", status)

    def _stamp(self) -> str:
        return self._now().strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")

    def _json(self, job: Job, status: Status, exc: BaseException | None, elapsed: float, detail: str) -> None:
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
        self._write_line(php_json_encode(record, unescaped_unicode=False) + "\n", status)
