"""Python exceptions as PHP prints them, for the ``exception`` column of ``failed_jobs`` and Horizon.

:func:`format_exception` renders an exception (and its chain) in the shape of PHP's
``Throwable::__toString()``: ``Class: message in file:line``, ``Stack trace:``, ``#N {main}``, previous
exceptions after ``Next``. :func:`php_class_name` is the class name shown. The exceptions Laravel's
worker itself fails a job with (``Illuminate\\Queue\\MaxAttemptsExceededException``,
``TimeoutExceededException``) are :class:`MaxAttemptsExceededError` / :class:`TimeoutExceededError`,
with each version's text (:func:`max_attempts_exceeded`, :func:`timeout_exceeded`).
"""

from __future__ import annotations

import sys
import traceback
import types
from collections.abc import Sequence

from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
    "MaxAttemptsExceededError",
    "TimeoutExceededError",
    "format_exception",
    "max_attempts_exceeded",
    "php_class_name",
    "php_exception_text",
    "timeout_exceeded",
]


def php_class_name(exc: BaseException | type[BaseException]) -> str:
    """The class name shown in the text: ``php_class`` if the exception defines one, the bare name for
    built-in exceptions (``ValueError``, like PHP's global ``RuntimeException``), else the dotted
    ``module.QualName`` of the class."""
    cls = exc if isinstance(exc, type) else type(exc)
    php = getattr(cls, "php_class", None)
    if isinstance(php, str) and php:
        return php
    if cls.__module__ in ("builtins", "__builtin__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _frame_function(frame: types.FrameType) -> str:
    code = frame.f_code
    qual = getattr(code, "co_qualname", code.co_name)
    module = frame.f_globals.get("__name__", "")
    qual = qual.replace("<locals>.", "").replace("<lambda>", "{closure}")
    if qual == "<module>":
        return f"{module}()" if module and module != "__main__" else "{main}()"
    first = code.co_varnames[0] if code.co_argcount else None
    owner, _, name = qual.rpartition(".")
    prefix = f"{module}." if module and module != "__main__" else ""
    if owner and first == "self":
        return f"{prefix}{owner}->{name}()"
    if owner and first == "cls":
        return f"{prefix}{owner}::{name}()"
    return f"{prefix}{qual}()"


def _stack_of(exc: BaseException, fallback: types.FrameType | None = None,
              known_lines: dict[int, int] | None = None) -> list[tuple[str, int, str]]:
    """(file, line, function) frames outermost first: the live stack above the handler + the traceback.

    An exception that was never raised has no traceback; like PHP (which records where an exception
    was *created*), the stack of ``fallback`` (the caller of :func:`format_exception`) is used.
    """
    frames: list[tuple[types.FrameType, int]] = []
    tb = exc.__traceback__
    if tb is None and fallback is not None:
        live: list[tuple[types.FrameType, int]] = []
        f: types.FrameType | None = fallback
        while f is not None:
            live.append((f, f.f_lineno))
            f = f.f_back
        frames.extend(reversed(live))
    if tb is not None:
        outer: list[tuple[types.FrameType, int]] = []
        f = tb.tb_frame.f_back
        while f is not None:
            # a live frame's current line moved on; the chain's other tracebacks know where it was
            outer.append((f, (known_lines or {}).get(id(f), f.f_lineno)))
            f = f.f_back
        frames.extend(reversed(outer))
        frames.extend(traceback.walk_tb(tb))
    return [(fr.f_code.co_filename, lineno or 0, _frame_function(fr)) for fr, lineno in frames]


def php_exception_text(class_name: str, message: str, file: str, line: int,
                       trace: Sequence[tuple[str, int, str]] = ()) -> str:
    """One exception in ``Throwable::__toString()`` form; ``trace`` is ``(file, line, call)`` from #0."""
    head = f"{class_name}: {message}" if message else class_name
    lines = [f"{head} in {file}:{line}", "Stack trace:"]
    for i, (f, ln, call) in enumerate(trace):
        lines.append(f"#{i} {f}({ln}): {call}")
    lines.append(f"#{len(trace)} {{main}}")
    return "\n".join(lines)


def _single(exc: BaseException, fallback: types.FrameType | None = None,
            known_lines: dict[int, int] | None = None) -> str:
    stack = _stack_of(exc, fallback, known_lines)
    if stack:
        file, line, _ = stack[-1]
    else:
        file, line = getattr(exc, "php_file", None) or "[internal]", int(getattr(exc, "php_line", 0) or 0)
    # PHP frame #k = the k-th caller: the function called at the location of the frame below it
    trace: list[tuple[str, int, str]] = []
    for i in range(len(stack) - 1, 0, -1):
        call_file, call_line, _ = stack[i - 1]
        trace.append((call_file, call_line, stack[i][2]))
    message = str(exc)
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        message = repr(exc.args[0])
    return php_exception_text(php_class_name(exc), message, file, line, trace)


def format_exception(exc: BaseException, *, job_name: str | None = None) -> str:
    """Render ``exc`` like PHP's ``(string) $exception`` for the ``exception`` column.

    ``Class: message in /file.py:LINE``, ``Stack trace:``, frames ``#0 /file.py(LINE): module.Class->method()``
    down to ``#N {main}``. A chain (``raise ... from`` / implicit context) is rendered like PHP's previous
    exceptions: innermost first, each next one after ``\\n\\nNext ``. ``job_name`` is only used when
    ``exc`` carries no message at all (``"<job_name> failed."``).
    """
    chain: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        chain.append(cur)
        cur = cur.__cause__ if cur.__cause__ is not None else (
            None if cur.__suppress_context__ else cur.__context__)
    caller = sys._getframe(1)
    known: dict[int, int] = {}
    for e in reversed(chain):
        for frame, lineno in traceback.walk_tb(e.__traceback__):
            known[id(frame)] = lineno
    parts = [_single(e, caller, known) for e in reversed(chain)]
    text = "\n\nNext ".join(parts)
    if job_name and not str(exc) and len(chain) == 1:
        text = text.replace(php_class_name(exc) + " in ", f"{php_class_name(exc)}: {job_name} failed. in ", 1)
    return text


# -- the worker's own failure exceptions ----------------------------------------------------------


class MaxAttemptsExceededError(RuntimeError):
    """Laravel's ``Illuminate\\Queue\\MaxAttemptsExceededException`` (same class name in the text)."""

    php_class = "Illuminate\\Queue\\MaxAttemptsExceededException"


class TimeoutExceededError(MaxAttemptsExceededError):
    """Laravel 10.10+'s ``Illuminate\\Queue\\TimeoutExceededException`` (a MaxAttemptsExceeded subclass)."""

    php_class = "Illuminate\\Queue\\TimeoutExceededException"


def max_attempts_exceeded(job_name: str, version: LaravelVersion | str = DEFAULT_VERSION) -> MaxAttemptsExceededError:
    """The exception the worker fails a job with when it was attempted too many times.

    ≤10.9: ``"<Name> has been attempted too many times or run too long. The job may have previously timed
    out."``; 10.10+: ``"<Name> has been attempted too many times."``.
    """
    v = LaravelVersion.parse(version)
    if v.timeout_exception_style == "timeout-exceeded":
        return MaxAttemptsExceededError(f"{job_name} has been attempted too many times.")
    return MaxAttemptsExceededError(
        f"{job_name} has been attempted too many times or run too long. The job may have previously timed out."
    )


def timeout_exceeded(job_name: str, version: LaravelVersion | str = DEFAULT_VERSION) -> MaxAttemptsExceededError:
    """The exception a timed-out job is failed with: ``TimeoutExceededException("<Name> has timed out.")``
    on 10.10+, the max-attempts exception (with "or run too long") before."""
    v = LaravelVersion.parse(version)
    if v.timeout_exception_style == "timeout-exceeded":
        return TimeoutExceededError(f"{job_name} has timed out.")
    return max_attempts_exceeded(job_name, v)
