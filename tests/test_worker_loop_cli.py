"""``laraq work --loop`` and ``LARAQ_LOOP``: the event loop asked for is the one the worker runs, the banner
and the first log line name it, and a choice that cannot be had stops the command with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, RedisServer, require_modules

from laraq.exitcodes import EXIT_SUCCESS


def _work(server: RedisServer, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``laraq work`` on an empty queue until it is empty (one reserve step), its stderr kept."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app", "examples.handlers:app",
         "--laravel", "8", "--redis-url", server.url, "--sleep", "0", "--stop-when-empty", "--no-supervise", *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120)


def _started_on(stderr: str) -> str:
    """The loop the worker's first log line names (its last field)."""
    line = next(line for line in stderr.splitlines() if "processing [default]" in line)
    return line.rsplit(", ", 1)[1].rstrip(")")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    yield srv
    srv.stop()


def test_each_loop_asked_for_is_the_one_the_worker_runs(server: RedisServer) -> None:
    require_modules("uvloop")
    asked = _work(server, "--loop", "asyncio")
    assert asked.returncode == EXIT_SUCCESS, asked.stderr[-2000:]
    assert _started_on(asked.stderr) == "asyncio"
    assert "event loop       asyncio (--loop asyncio)" in asked.stderr
    auto = _work(server, env={"LARAQ_LOOP": ""})
    assert auto.returncode == EXIT_SUCCESS, auto.stderr[-2000:]
    assert _started_on(auto.stderr) == "uvloop"
    assert "event loop       uvloop " in auto.stderr
    from_env = _work(server, env={"LARAQ_LOOP": "asyncio"})
    assert from_env.returncode == EXIT_SUCCESS, from_env.stderr[-2000:]
    assert _started_on(from_env.stderr) == "asyncio"
    assert "asyncio (LARAQ_LOOP=asyncio)" in from_env.stderr


def test_a_loop_that_cannot_be_had_stops_the_command_naming_why(server: RedisServer, tmp_path: Path) -> None:
    bad = _work(server, env={"LARAQ_LOOP": "tokio"})
    assert bad.returncode == 2
    assert "LARAQ_LOOP='tokio' is not an event loop laraq knows: use auto, asyncio or uvloop" in bad.stderr
    assert "Traceback" not in bad.stderr
    # a machine where uvloop does not import (no build for it): auto takes asyncio's loop, an explicit
    # --loop uvloop is refused before anything is reserved
    shadow = tmp_path / "shadow"
    (shadow / "uvloop").mkdir(parents=True)
    (shadow / "uvloop" / "__init__.py").write_text('raise ImportError("no uvloop build for this platform")\n')
    env = {"PYTHONPATH": os.pathsep.join([str(shadow), str(ROOT)]), "LARAQ_LOOP": ""}
    refused = _work(server, "--loop", "uvloop", env=env)
    assert refused.returncode == 2
    assert "uvloop asked for (--loop or LARAQ_LOOP) but it cannot be imported (no uvloop build for this " \
           "platform): pip install uvloop, or use --loop asyncio" in refused.stderr
    assert "processing [default]" not in refused.stderr
    fallback = _work(server, env=env)
    assert fallback.returncode == EXIT_SUCCESS, fallback.stderr[-2000:]
    assert _started_on(fallback.stderr) == "asyncio"
    assert "event loop       asyncio (uvloop is not installed: pip install uvloop" in fallback.stderr
