"""``laraq work --max-command-bytes/--max-command-elements``: limits on a job's command are options, off by
default (PHP's ``unserialize()`` has none). A command over a limit given is failed with one clear reason
(into ``failed_jobs``); the same job without the flag runs. Checked through the supervisor (the flag
reaches the worker process) and with ``--no-supervise``.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import redis
from pyapp import PyApp
from test_worker_support import run_laraq

QUEUE = "limits"


@pytest.fixture
def app8(redis_client: Any, redis_server: Any) -> PyApp:
    """The Laravel 8 fixture app, its EchoJob pushed from Python (PHP's bytes: ``pyapp.PyApp``)."""
    return PyApp(redis_server.port, version="8")


def push(app: PyApp, values: int) -> None:
    """The app's EchoJob, its args a list of ``values`` integers."""
    app.dispatch("echo", QUEUE, args={"items": list(range(values))}, mode="ok")


def failed(app: PyApp) -> list[str]:
    with sqlite3.connect(app.db_path) as db:
        return [e.splitlines()[0] for (e,) in db.execute("select exception from failed_jobs order by id")]


@pytest.mark.parametrize("supervise", ["--supervise", "--no-supervise"])
@pytest.mark.parametrize("flag, value, reason", [("--max-command-bytes", "1000", "max_bytes=1000"),
                                                  ("--max-command-elements", "200", "max_elements=200")])
def test_a_limit_given_fails_the_job_and_none_runs_it(app8: PyApp, redis_client: redis.Redis, supervise: str,
                                                       flag: str, value: str, reason: str) -> None:
    push(app8, 300)  # about 3 KB, 600+ values
    proc = run_laraq(app8, "--once", f"--queue={QUEUE}", supervise, flag, value)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = failed(app8)
    assert len(rows) == 1 and reason in rows[0], rows
    assert app8.runs() == []
    push(app8, 300)
    proc = run_laraq(app8, "--once", f"--queue={QUEUE}", supervise)  # no flag, no environment: no limit
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["runner"] for r in app8.runs()] == ["python"] and len(failed(app8)) == 1, (proc.stderr[-3000:], failed(app8))
    assert not redis_client.exists(f"laravel_database_queues:{QUEUE}", f"laravel_database_queues:{QUEUE}:reserved")
