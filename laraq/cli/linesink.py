"""Where the worker's console lines go: whole lines, in order, in as few ``write`` calls as artisan's.

:mod:`laraq.cli.output` decides what a line says; a sink decides when it reaches the stream. The contract:

* Every write is one ``write()`` of whole lines to the stream's descriptor, under the sink's lock, so the
  lines of concurrent jobs never interleave. Python's text and buffer layers are bypassed: they and their
  separate flush cost more than the system call. What the stream itself still buffers (text printed
  before the first line) is flushed once, first, so lines never come out of order.
* Only a *success* line may wait, and only on the thread that called :meth:`LineSink.hold` (the worker's
  loop, while it starts a run of jobs): it goes out in the same ``write()`` as the next line, or at
  :meth:`~LineSink.flush` / :meth:`~LineSink.release`. Any other line is written at once, after what is
  held, so the order never changes.
* A failing write (a closed pipe, a full non-blocking pipe) drops its text and never breaks the worker.

:func:`open_sink` picks the implementation. A stream with a real descriptor gets the C sink from
``laraq._speedups`` (``laraq/_lines.c``) when it is built and ``LARAQ_PURE_PYTHON`` is unset. The C sink
also prints the two lines every job has (``started`` / ``succeeded``) from templates that
:class:`laraq.cli.output.Output` hands it (``configure``). Anything else (a ``StringIO``, a test capture, a
build without a compiler) gets :class:`LineSink`, which behaves the same.
"""

from __future__ import annotations

import importlib
import io
import os
import threading
from types import ModuleType
from typing import IO, Protocol

__all__ = ["LineSink", "Sink", "c_sinks_enabled", "open_sink"]

_speedups: ModuleType | None
try:  # the C build (setup.py, optional); imported by name, as it has no type stub
    _speedups = importlib.import_module("laraq._speedups")
except ImportError:  # pragma: no cover - no compiler when installed
    _speedups = None


class Sink(Protocol):
    """What :class:`laraq.cli.output.Output` needs of a sink."""

    writes: int

    def write(self, text: str) -> None: ...
    def success(self, text: str) -> None: ...
    def hold(self) -> None: ...
    def release(self) -> None: ...
    def flush(self) -> None: ...


def c_sinks_enabled() -> bool:
    """Whether :func:`open_sink` may use the C sink (built, and ``LARAQ_PURE_PYTHON`` unset or ``0``)."""
    return _speedups is not None and hasattr(_speedups, "LineSink") and \
        os.environ.get("LARAQ_PURE_PYTHON", "") in ("", "0")


def _raw_fd(stream: IO[str]) -> int | None:
    """The descriptor behind ``stream`` if it is a plain file, pipe or terminal stream; else None (a
    ``StringIO``, a test capture, anything whose ``write`` does more than write)."""
    if not isinstance(stream, io.TextIOWrapper):
        return None
    try:
        return stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


def open_sink(stream: IO[str]) -> Sink:
    """The sink for ``stream``: C on a real descriptor when it can be, else :class:`LineSink`."""
    fd = _raw_fd(stream)
    if fd is not None and _speedups is not None and c_sinks_enabled():
        return _speedups.LineSink(fd, stream)
    return LineSink(stream, fd)


class LineSink:
    """The pure-Python sink (see the module's docstring); thread-safe."""

    def __init__(self, stream: IO[str], fd: int | None = None) -> None:
        self.stream = stream
        #: the descriptor lines go to with one ``write`` each; None: through ``stream.write``
        self.fd = fd
        #: text others printed may still sit in the stream's buffer: flushed before the first line
        self._pending_stream = fd is not None
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._holder: int | None = None
        #: ``write`` calls made (lines that reached the stream in one go)
        self.writes = 0

    def hold(self) -> None:
        """From now until :meth:`release`, a success line reported on this thread may wait."""
        self._holder = threading.get_ident()

    def release(self) -> None:
        """Stop holding; anything held is written now."""
        self._holder = None
        self.flush()

    def flush(self) -> None:
        """Write anything held now (the hold goes on)."""
        if self._held:
            self.write("")

    def success(self, text: str) -> None:
        """A success line: held on the holding thread, else written now."""
        if self._holder is not None and self._holder == threading.get_ident():
            lock = self._lock
            lock.acquire()  # (not ``with``: two Python-level calls fewer on every job)
            try:
                self._held.append(text)
            finally:
                lock.release()
        else:
            self.write(text)

    def write(self, text: str) -> None:
        """Write ``text`` now, after anything held."""
        lock = self._lock
        lock.acquire()
        try:
            held = self._held
            if held:
                held.append(text)
                text = "".join(held)
                held.clear()
            if not text:
                return
            self.writes += 1
            fd = self.fd
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
        finally:
            lock.release()
