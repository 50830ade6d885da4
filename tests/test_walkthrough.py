"""The README walkthrough, end to end: PHP dispatches ``App\\Jobs\\GenerateReport`` (the class as the README
writes it, in ``fixtures/laravel8``), ``laraq work --app examples.handlers:app`` runs it, with PHP's empty
``[]`` and with ``['pages' => 12]``; plus the logging the worker promises (handler ``log.info`` visible by
default, no library debug noise, ``--log-format json`` with job fields and tracebacks).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import run_laraq

pytestmark = pytest.mark.php

APP = "examples.handlers:app"


@pytest.fixture
def app8(php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port)


def failed_count(app: PhpApp) -> int:
    with sqlite3.connect(app.db_path) as db:
        return int(db.execute("select count(*) from failed_jobs").fetchone()[0])


def test_walkthrough_job_runs_with_an_empty_array_and_a_map(app8: PhpApp, redis_client: Any) -> None:
    app8.tool("dispatch", "report", "--queue=python", '--args={"options": {"pages": 12}}')
    app8.tool("dispatch", "report", "--queue=python")  # options = [] (PHP's empty array)
    proc = run_laraq(app8, "--stop-when-empty", "--queue=python", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    # the handler's log.info lines show at the default level; redis-py/asyncio debug lines do not
    assert "rendering q3.pdf: 12 page(s) for ops" in proc.stderr
    assert "rendering q3.pdf: 1 page(s) for ops" in proc.stderr
    assert " DEBUG " not in proc.stderr
    assert proc.stdout.count("Processed:  App\\Jobs\\GenerateReport") == 2, proc.stdout  # artisan 8's lines
    assert not redis_client.exists("laravel_database_queues:python", "laravel_database_queues:python:reserved",
                                   "laravel_database_queues:python:delayed")
    assert failed_count(app8) == 0 and app8.runs() == []  # PHP never ran it


def test_quiet_silences_laraqs_lines_not_the_handlers(app8: PhpApp) -> None:
    """``-q``: no job lines and no laraq info lines; the handler's own ``log.info`` still shows."""
    app8.tool("dispatch", "report", "--queue=python", '--args={"options": {"pages": 5}}')
    loud = run_laraq(app8, "--stop-when-empty", "--queue=python", app_spec=APP)
    app8.tool("dispatch", "report", "--queue=python", '--args={"options": {"pages": 5}}')
    proc = run_laraq(app8, "--stop-when-empty", "--queue=python", "-q", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    assert "rendering q3.pdf: 5 page(s) for ops" in proc.stderr, proc.stderr
    assert proc.stdout == ""
    laraq_lines = [line for line in loud.stderr.splitlines() if " laraq." in line and " INFO " in line]
    assert laraq_lines, loud.stderr  # laraq does say things at info without -q
    assert not [line for line in proc.stderr.splitlines() if " laraq." in line and " INFO " in line], proc.stderr


def test_json_logs_carry_job_fields_and_tracebacks(app8: PhpApp) -> None:
    app8.tool("dispatch", "report", "--queue=python", '--args={"options": {"pages": 3}}')
    app8.tool("dispatch", "python", "--queue=python", '--args={"options": {"fail": true}}')
    proc = run_laraq(app8, "--stop-when-empty", "--queue=python", "--log-format", "json", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]  # every line is JSON
    assert proc.stdout == ""  # job lines are log records in this mode
    setup = [r for r in records if r.get("setup")]
    assert len(setup) == 1 and setup[0]["setup"]["laravel"] == "8.83.26"
    handler_line = next(r for r in records if r["message"] == "rendering q3.pdf: 3 page(s) for ops")
    assert handler_line["job"] == "App\\Jobs\\GenerateReport" and handler_line["queue"] == "python"
    assert handler_line["attempt"] == 1 and handler_line["job_id"]
    done = [r for r in records if r.get("status") == "processed"]
    assert len(done) == 1 and done[0]["duration_ms"] >= 0 and done[0]["job"] == "App\\Jobs\\GenerateReport"
    failed = [r for r in records if r.get("status") == "failed"]
    assert len(failed) == 1 and failed[0]["job"] == "App\\Jobs\\PythonJob" and "duration_ms" in failed[0]
    assert "could not render" in failed[0]["error"]
    tracebacks = [r for r in records if "exception" in r]
    assert any("Traceback" in r["exception"] and "RuntimeError: could not render" in r["exception"]
               and r["job"] == "App\\Jobs\\PythonJob" for r in tracebacks)
    assert failed_count(app8) == 1


def test_app_logging_configuration_is_kept(app8: PhpApp, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # a handlers module that configures logging itself: laraq adds no handler of its own
    (tmp_path / "own_logging.py").write_text(
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO, format='APP-FORMAT %(levelname)s %(message)s')\n"
        "from examples.handlers import app\n")
    app8.tool("dispatch", "report", "--queue=python")
    from test_worker_support import laraq_env

    env = laraq_env(app8)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    proc = run_laraq(app8, "--stop-when-empty", "--queue=python", app_spec="own_logging:app", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "APP-FORMAT INFO rendering q3.pdf: 1 page(s) for ops" in proc.stderr
    assert "laraq[" not in proc.stderr  # laraq's own format was not added on top


def test_log_config_file(app8: PhpApp, tmp_path: Any) -> None:
    config = tmp_path / "logging.json"
    config.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"f": {"format": "CFG %(name)s %(message)s"}},
        "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f", "stream": "ext://sys.stderr"}},
        "root": {"level": "INFO", "handlers": ["h"]},
    }))
    app8.tool("dispatch", "report", "--queue=python")
    proc = run_laraq(app8, "--stop-when-empty", "--queue=python", "--log-config", str(config), app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    assert "CFG examples.handlers rendering q3.pdf: 1 page(s) for ops" in proc.stderr
