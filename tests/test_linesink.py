"""The two line sinks (:mod:`laraq.cli.linesink`): the C one prints exactly what the pure-Python one prints.

On a real descriptor the C sink (``laraq/_lines.c``) writes each job's first and success line itself,
from the templates :class:`laraq.cli.output.Output` builds. Each case here prints the same jobs through
both sinks and compares the text, for every console style, with and without colour, at several
widths, and with names and ids that are long, non-ASCII or not valid UTF-8, and ids that are missing
or not strings. The
rest checks what the sink promises whichever is used: lines of many threads never interleave, a closed
pipe never breaks the worker, and bad templates are refused with a clear message.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import require

from laraq.cli import linesink
from laraq.cli.output import Output
from laraq.protocol.versions import LaravelVersion

STAMPS = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\d+\.\d\dms")


class _Job:
    """What Output reads of a job."""

    def __init__(self, ident: Any, name: Any) -> None:
        self.id = ident
        self.uuid = "uuid"
        self.name = name
        self.connection = "redis"
        self.queue = "default"
        self.attempts = 1
        self.is_deleted = self.is_released = self.has_failed = False


NAMES = [
    ("a8f1c2d3e4f5", "App\\Jobs\\SendEmail"),
    (None, "App\\Jobs\\NoId"),
    ("", "App\\Jobs\\EmptyId"),
    (42, "App\\Jobs\\IntId"),
    ("ünï-✓", "App\\Jobs\\Ünïcödé ✓ 日本"),
    ("long", "App\\Jobs\\" + "VeryLong" * 20),  # wider than the line: no dots
    ("sur\udcff", "App\\Jobs\\Bad\udcffName"),  # not valid UTF-8: a lone surrogate, shown as its escape
    ("id\x1b", "App\\Jobs\\Evil\x1b[2J\n\u202e\x9b"),  # control characters: shown as escapes (laraq.logtext)
]


def _print(path: Path, version: str, *, pure: bool, color: bool, width: int, verbosity: int = 0) -> tuple[str, Output]:
    """Every job of NAMES through one Output: started and succeeded (held, then not), a started job that
    fails, one that never started here, and two that ran long; the text with dates and short run times
    blanked out."""
    env = os.environ.get("LARAQ_PURE_PYTHON")
    os.environ["LARAQ_PURE_PYTHON"] = "1" if pure else "0"
    try:
        with open(path, "w", encoding="utf-8") as fh:
            out = Output(LaravelVersion.parse(version), stream=fh, color=color, width=width, verbosity=verbosity)
            jobs = [_Job(ident, name) for ident, name in NAMES]
            out.hold()
            for job in jobs:
                out.job(job, "starting")
                out.job(job, "success")
            out.release()
            for job in jobs[:3]:
                out.job(job, "starting")
                out.succeeded(job, runtime=0.5)
            failing = _Job("f1", "App\\Jobs\\Fails")
            out.job(failing, "starting")
            out.job(failing, "failed", RuntimeError("boom"))
            out.job(_Job("x1", "App\\Jobs\\NeverStarted"), "success")
            for seconds in (75.0, 3725.0):
                slow = _Job("slow", "App\\Jobs\\Slow")
                out.job(slow, "starting")
                out._started[id(slow)] = (time.monotonic() - seconds, "slow", "App\\Jobs\\Slow")
                out.job(slow, "success")
            assert out._started == {}
    finally:
        if env is None:
            del os.environ["LARAQ_PURE_PYTHON"]
        else:
            os.environ["LARAQ_PURE_PYTHON"] = env
    return STAMPS.sub("T", path.read_text(encoding="utf-8", errors="strict")), out


@pytest.fixture
def c_sink() -> None:
    require(linesink.c_sinks_enabled(), "laraq._speedups is not built (no C compiler at install time)")


@pytest.mark.parametrize("version", ["8.83.27", "9.30.0", "10.0.0", "11.0.0", "12.20.0"])
@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("width", [80, 40, 200])
def test_the_c_sink_prints_what_python_prints(c_sink: None, tmp_path: Path, version: str, color: bool,
                                              width: int) -> None:
    c_text, c_out = _print(tmp_path / "c.log", version, pure=False, color=color, width=width)
    py_text, py_out = _print(tmp_path / "py.log", version, pure=True, color=color, width=width)
    assert type(c_out._sink).__module__ == "laraq._speedups" and isinstance(py_out._sink, linesink.LineSink)
    assert c_out.started == c_out._sink.started  # the C sink prints these two itself
    assert c_text == py_text
    c_text = re.sub(r"\x1b\[[\d;]*m", "", c_text)  # colours off, for the checks below
    assert "Bad\\udcffName" in c_text and "Ünïcödé ✓ 日本" in c_text and "App\\Jobs\\Fails" in c_text
    assert "App\\Jobs\\Evil\\x1b[2J\\n\\u202e\\x9b" in c_text
    assert ("[id\\x1b]" in c_text) == (version == "8.83.27")  # only legacy lines show the id
    if LaravelVersion.parse(version).since("10.13.1"):  # long runs humanized
        assert "1m 15s DONE" in c_text and "1h 2m 5s DONE" in c_text
    elif version != "8.83.27":
        assert " 75,T DONE" in c_text and " 3,725,T DONE" in c_text


@pytest.mark.parametrize("version, verbosity", [("11.0.0", 1), ("12.20.0", 2)])
def test_verbose_lines_stay_in_python_and_match(c_sink: None, tmp_path: Path, version: str, verbosity: int) -> None:
    c_text, c_out = _print(tmp_path / "c.log", version, pure=False, color=False, width=80, verbosity=verbosity)
    py_text, _ = _print(tmp_path / "py.log", version, pure=True, color=False, width=80, verbosity=verbosity)
    assert c_out.started.__func__ is Output.started  # type: ignore[attr-defined]
    assert c_text == py_text and " a8f1c2d3e4f5" in c_text


@pytest.fixture(params=["c", "python"])
def pure(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param == "c":
        require(linesink.c_sinks_enabled(), "laraq._speedups is not built (no C compiler at install time)")
        monkeypatch.setenv("LARAQ_PURE_PYTHON", "0")
    else:
        monkeypatch.setenv("LARAQ_PURE_PYTHON", "1")
    return bool(request.param == "python")


def test_lines_of_many_threads_never_interleave(pure: bool, tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    with open(path, "w", encoding="utf-8") as fh:
        out = Output(LaravelVersion.parse("8.83.27"), stream=fh)

        def run(t: int) -> None:
            for n in range(300):
                job = _Job(f"{t}-{n}", f"App\\Jobs\\T{t}" + "x" * (n % 50))
                out.job(job, "starting")
                out.job(job, "success")

        threads = [threading.Thread(target=run, args=(t,)) for t in range(6)]
        for thread in threads:
            thread.start()
        out.hold()  # the main thread holds: the others' lines must still go out at once
        for thread in threads:
            thread.join()
        out.release()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 * 300 * 2
    line = re.compile(r"^\[[\d: -]{19}\]\[(\d)-(\d+)\] (Processing: |Processed:  )App\\Jobs\\T(\d)x*$")
    for text in lines:
        m = line.match(text)
        assert m is not None and m.group(1) == m.group(4), text


def test_a_closed_pipe_never_breaks_the_worker(pure: bool) -> None:
    read, write = os.pipe()
    os.close(read)  # nobody reads: every write fails with EPIPE (Python ignores SIGPIPE)
    with open(write, "w", encoding="utf-8") as fh:
        out = Output(LaravelVersion.parse("11.0.0"), stream=fh)
        job = _Job("a", "App\\Jobs\\A")
        out.hold()
        out.job(job, "starting")
        out.job(job, "success")
        out.job(job, "failed", RuntimeError("x"))
        out.message("stopping")
        out.release()
        assert out._started == {}


def test_text_printed_before_the_first_line_comes_first(pure: bool, tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("printed by someone else\n")  # still in the stream's buffer
        out = Output(LaravelVersion.parse("8.83.27"), stream=fh)
        out.job(_Job("a", "App\\Jobs\\A"), "starting")
    assert path.read_text(encoding="utf-8").splitlines()[0] == "printed by someone else"


def test_the_c_sink_refuses_what_it_cannot_print(c_sink: None) -> None:
    from laraq import _speedups

    read, write = os.pipe()
    try:
        sink = _speedups.LineSink(write)
        with pytest.raises(RuntimeError, match="configure"):
            sink.started(_Job("a", "b"))
        with pytest.raises(TypeError, match="str"):
            sink.write(b"bytes")
        with pytest.raises(ValueError, match="unknown slot 9"):
            sink.configure({}, 10, None, 0, (b"x", 9), 0, str)
        with pytest.raises(TypeError, match="bytes and int slots"):
            sink.configure({}, 10, None, 0, ("text",), 0, str)
        with pytest.raises(ValueError, match="at least 1"):
            sink.configure({}, 0, None, 0, (b"x",), 0, str)
        with pytest.raises(ValueError, match="descriptor"):
            _speedups.LineSink(-1)
        sink.configure({}, 10, None, 0, (2, b"\n"), 0, str)
        with pytest.raises(TypeError, match="succeeded"):
            sink.succeeded(_Job("a", "b"), 0.1, 0.2)
        with pytest.raises(TypeError, match="succeeded"):
            sink.succeeded(_Job("a", "b"), elapsed=0.1)
        sink.succeeded(_Job("a", "App\\Jobs\\Done"), runtime=0.1)
        assert os.read(read, 100) == b"App\\Jobs\\Done\n" and sink.writes == 1
    finally:
        os.close(read)
        os.close(write)


def test_laraq_config_says_which_sink_prints(pure: bool) -> None:
    from laraq.cli.startup import console_lines_path

    assert console_lines_path() == ("pure Python (LARAQ_PURE_PYTHON is set)" if pure else "C (laraq._speedups)")
