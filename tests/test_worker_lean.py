"""What a supervised ``laraq work`` worker process loads, and how it is started.

A worker whose jobs need no SQLite, no cron schedule and no table drawing must not import ``sqlite3``,
``cronsim`` or ``rich`` (each is loaded by the code that uses it: ``laraq.stores.database``,
``laraq.schedule.entries``, ``laraq.cli.render``). ``zoneinfo`` is not in the list: ``orjson``, the JSON
codec of every payload, imports it itself. The first worker is forked by ``laraq work`` before it
execs the supervisor (one interpreter start, not three): its command line is still ``laraq work``'s
and its parent is the ``python -S`` supervisor. Read from the running worker through ``sys.modules``
and ``/proc``; nothing here is timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from conftest import ROOT

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

LAZY = ("sqlite3", "_sqlite3", "cronsim", "rich")
PREFIX = "lean_"


def _env(redis_server: Any, probe: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REDIS_", "LARAQ_", "CACHE_", "DB_", "QUEUE_", "APP_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    env.update({"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
                "QUEUE_FAILED_DRIVER": "null", "CACHE_DRIVER": "array", "LARAQ_PROBE": str(probe)})
    return env


def _run_once(redis_server: Any, tmp_path: Path, *extra: str, parent: bool = False) -> dict[str, Any]:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    queue = RedisQueue(client, prefix=PREFIX, version="8")
    Dispatcher(queue).bulk([Dispatcher(queue).prepare_job("App\\Jobs\\Probe", {}, queue="default",
                                                          connection="redis")])
    probe = tmp_path / "probe.json"
    cmd = [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app", "leanapp:app",
           "--laravel", "8", "--once", "--quiet", *extra]
    env = _env(redis_server, probe)
    if parent:
        env["LARAQ_PROBE_PARENT"] = "1"
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert probe.exists(), f"the job did not run: {done.stderr}"
    assert client.llen(f"{PREFIX}queues:default") == 0
    return json.loads(probe.read_text())


def test_a_worker_loads_no_sqlite_cron_or_table_code_it_does_not_use(redis_server: Any, tmp_path: Path) -> None:
    seen = _run_once(redis_server, tmp_path)
    assert "laraq.worker.worker" in seen["modules"]  # the probe did read the worker's own modules
    assert [m for m in seen["modules"] if m.split(".")[0] in LAZY] == []


def test_the_same_holds_without_the_supervisor(redis_server: Any, tmp_path: Path) -> None:
    seen = _run_once(redis_server, tmp_path, "--no-supervise")
    assert [m for m in seen["modules"] if m.split(".")[0] in LAZY] == []


def test_the_first_worker_is_forked_by_laraq_work_not_a_third_interpreter(redis_server: Any,
                                                                          tmp_path: Path) -> None:
    seen = _run_once(redis_server, tmp_path, parent=True)
    # forked from `laraq work` before its exec: the worker keeps that command line ...
    assert seen["cmdline"][-6:] == ["--app", "leanapp:app", "--laravel", "8", "--once", "--quiet"]
    assert "from laraq.cli.work import child_main; child_main()" not in seen["cmdline"]
    # ... and its parent is the supervisor that laraq work became (`python -S`), which adopted it
    assert "-S" in seen["parent_cmdline"], seen["parent_cmdline"]
