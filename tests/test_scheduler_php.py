"""Scheduled Laravel jobs, run by real PHP (the Laravel 8, 12 and 13 fixture apps, ``php artisan queue:work``).

* the payload a claim pushes is the payload PHP's own ``dispatch()`` of the same job writes (only the
  random ``uuid``/``id`` differ);
* three real ``laraq schedule work`` processes on the Redis server's clock, one SIGKILLed and all of
  them down for a while, fire a one-second entry exactly once per second; artisan then runs every
  fired job exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from phpapp import PhpApp

from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.schedule.scheduler import Scheduler
from laraq.schedule.store import ScheduleStore

pytestmark = pytest.mark.php

PREFIX = "laravel_database_"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@pytest.fixture
def php_app(php, redis_client, redis_server, tmp_path):
    return PhpApp(redis_server.port, workdir=tmp_path)


def test_a_fired_job_is_byte_for_byte_what_php_dispatch_writes_and_artisan_runs_it(laravel, redis_client,
                                                                                   redis_server, tmp_path):
    php_app = PhpApp(redis_server.port, version=laravel, workdir=tmp_path)
    prefix = php_app.prefix
    php_app.tool("dispatch", "echo", "--queue=cmp", "--args=" + json.dumps({"args": {"k": "vé"}, "mode": "ok"}))
    php_payload = json.loads(redis_client.lpop(prefix + "queues:cmp"))
    redis_client.delete(prefix + "queues:cmp:notify")
    ordered = {"args": {"k": "vé"}, "mode": "ok", "seconds": 0, "tries": None, "backoff": None, "timeout": None,
               "maxExceptions": None, "failOnTimeout": False, "\0*\0note": "protected note",
               "\0App\\Jobs\\EchoJob\0hidden": "private value"}
    app = App()
    app.schedule_job("App\\Jobs\\EchoJob", ordered, cron="* * * * *", queue="cmp", connection="redis", name="echo")
    now = [1_800_000_000.0]
    queue = RedisQueue(redis_client, prefix=prefix, version=php_app.release)
    scheduler = Scheduler(app, queue, clock=lambda: now[0], instance="diff")
    scheduler.sync()
    now[0] += 60
    [result] = scheduler.tick()
    assert result.status == "fired"
    [raw] = redis_client.lrange(prefix + "queues:cmp", 0, -1)
    fired = json.loads(raw)
    assert fired["data"]["command"] == php_payload["data"]["command"]
    assert fired["uuid"] == result.uuids[0]
    for key in ("uuid", "id"):
        fired[key] = php_payload[key]
    for key in ("createdAt", "pushedAt"):        # timestamps of the two pushes (12.11+ / Horizon)
        if key in php_payload:
            fired[key] = php_payload[key]
    assert fired == php_payload and list(fired) == list(php_payload)
    proc = php_app.artisan("queue:work", "redis", "--queue=cmp", "--stop-when-empty", "--sleep=0")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    [run] = php_app.runs()
    assert (run["uuid"], run["args"], run["note"], run["hidden"]) == (result.uuids[0], {"k": "vé"},
                                                                      "protected note", "private value")


def _start(port: int, name: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), REDIS_HOST="127.0.0.1",
               REDIS_PORT=str(port), REDIS_PREFIX=PREFIX, REDIS_QUEUE="default", CACHE_DRIVER="redis")
    code = "from laraq.cli import main; main()"
    return subprocess.Popen([sys.executable, "-c", code, "schedule", "work", "--app", "sched_instance:realtime_app",
                             "--laravel", "8.83.26", "--poll", "0.2", "--instance", name],
                            env=env, cwd=str(HERE), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _run_for(seconds: float, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)


def test_three_real_processes_fire_each_second_exactly_once_and_artisan_runs_each_job(php_app, redis_client,
                                                                                       redis_server):
    port = redis_server.port
    procs = {f"r{i}": _start(port, f"r{i}") for i in range(3)}
    try:
        _run_for(6, procs)
        procs["r1"].send_signal(signal.SIGKILL)            # one instance dies mid-flight
        procs["r1"].wait(10)
        procs.pop("r1")
        _run_for(5, procs)
        for proc in procs.values():                          # total downtime: nobody is running
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        time.sleep(6.5)                                       # > two periods of the 3 s entry
        procs = {f"r{i}b": _start(port, f"r{i}b") for i in range(3)}
        _run_for(6, procs)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(15)
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]  # SIGTERM: a clean stop

    store = ScheduleStore(redis_client, PREFIX)
    history = store.history()
    every = sorted(h["due"] for h in history if h["name"] == "echo-every-second")
    assert len(every) >= 15
    # one firing per second, none missing (catch-up "all" covers the downtime), none twice
    assert every == list(range(every[0], every[-1] + 1))
    assert store.score("echo-every-second") == every[-1] + 1
    assert len({h["by"] for h in history}) >= 3
    three = [h["due"] for h in history if h["name"] == "echo-every-3s"]
    assert len(three) == len(set(three)) and all(t % 3 == 0 for t in three)
    row = {r["name"]: r for r in store.status()}["echo-every-3s"]
    first_due = min(three)
    assert row["fires"] + row["skipped"] == (store.score("echo-every-3s") - first_due) // 3
    assert row["skipped"] >= 1                      # the downtime collapsed into one firing ("once")

    counts = Counter()
    for queue in ("default", "three"):
        proc = php_app.artisan("queue:work", "redis", f"--queue={queue}", "--stop-when-empty", "--sleep=0",
                               timeout=300)
        assert proc.returncode == 0, proc.stderr + proc.stdout
    runs = php_app.runs()
    counts.update(r["uuid"] for r in runs)
    fired_uuids = [h["uuid"] for h in history]
    assert sorted(counts) == sorted(fired_uuids) and set(counts.values()) == {1}
    assert Counter(r["args"]["from"] for r in runs) == Counter(
        {"schedule": len(every), "cron": len(three)})
