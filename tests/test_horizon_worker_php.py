"""The proof: the same jobs run by ``php artisan horizon`` and by ``laraq work --horizon`` look the same in
Horizon (live Laravel 9 to 13 with real Horizon 5.29.1, Laravel 13 with Horizon 5.48.1).

PHP dispatches, into a Horizon app, a success, a job that fails once and succeeds after its backoff, a
failure, a tagged job with a monitored tag and a silenced job. They are run once by real Horizon and,
from an identical start, once by ``laraq work``. Horizon's own repositories (``getRecent``,
``getCompleted``, ``getSilenced``, ``getFailed``, ``throughput``, ``runtimeForQueue``, ``measuredQueues``,
``measuredJobs``, tags, ``SupervisorRepository::all``) and ``horizon:status`` must give equivalent
answers: same statuses, same counts, timestamps in order, a runtime, tags, the supervisor's options
(all but its name and parent pid) and, on 5.48, each job's ``delay``. ``horizon:pause-supervisor``
leaves both masters running. ``horizon:terminate`` stops both. A mixed run (Horizon's workers and laraq on one queue) shows every job exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app, popen_horizon_laraq
from phpapp import PhpApp
from test_worker_support import popen_laraq, wait_for

pytestmark = pytest.mark.php

JOBS = [
    ("echo", {"args": {"n": "ok"}}),
    ("echo", {"args": {"n": "retry"}, "mode": "fail-until", "seconds": 2, "settings": {"tries": 3, "backoff": 1}}),
    ("tagged", {"args": {"n": "fail"}, "mode": "fail", "settings": {"tries": 1}, "tags": ["team:a"]}),
    ("tagged", {"args": {"n": "tagged"}, "tags": ["watched", "team:a"]}),
    ("silenced", {"args": {"n": "quiet"}}),
]


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port, HORIZON_BALANCE="false", HORIZON_TRIES="1")


def _dispatch_all(hz: PhpApp, redis_client: Any) -> dict[str, str]:
    redis_client.sadd(HORIZON_PREFIX + "monitoring", "watched")
    names: dict[str, str] = {}
    for kind, args in JOBS:
        [uuid] = hz.tool("dispatch", kind, "--args=" + json.dumps(args))["ids"]
        names[uuid] = args["args"]["n"]
    return names


def _failed_payload_kept(hz: PhpApp, redis_client: Any, names: dict[str, str], pushed: dict[str, bytes]) -> None:
    """``failed_jobs.payload`` is the Horizon-format body exactly as it was pushed."""
    [fail_id] = [i for i, n in names.items() if n == "fail"]
    with sqlite3.connect(hz.db_path) as db:
        [(payload,)] = db.execute("select payload from failed_jobs where uuid = ?", (fail_id,)).fetchall()
    body = payload.encode() if isinstance(payload, str) else payload
    assert body == pushed[fail_id]
    assert json.loads(body)["pushedAt"] and json.loads(body)["id"] == fail_id


def _pushed(redis_client: Any, hz: PhpApp) -> dict[str, bytes]:
    return {json.loads(m)["uuid"]: m for m in redis_client.lrange(hz.prefix + "queues:default", 0, -1)}


def _done(hz: PhpApp) -> dict[str, Any] | None:
    """The dump once every job has ended, its record written whole: a completion's writes are a pipeline
    (Horizon's and laraq's alike), so a read between them sees the count before the job's hash."""
    dump = hz.tool("horizon-dump", "--tags=team:a,watched")
    c = dump["counts"]
    if (c["completed"], c["silenced"], c["failed"]) != (3, 1, 1):
        return None
    return dump if all(job["completed_at"] or job["failed_at"] for job in dump["recent"]) else None


def _summary(dump: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """What Horizon's dashboard shows, with job ids replaced by the test's names."""
    def jobs(kind: str) -> list[Any]:
        return sorted((names[j["id"]], j["status"], j["name"], j["queue"], j["connection"]) for j in dump[kind])

    for job in dump["recent"]:
        assert job["reserved_at"], job
        ends = [float(job[k]) for k in ("completed_at", "failed_at") if job[k]]
        assert ends and all(float(job["reserved_at"]) <= t for t in ends), job
        if job["status"] == "failed":
            assert "echo job failed on purpose" in job["exception"]
    return {
        "recent": [(names[j["id"]], j["status"], j.get("delay")) for j in dump["recent"]],
        "completed": jobs("completed"), "silenced": jobs("silenced"), "failed": jobs("failed"),
        "pending": jobs("pending"), "counts": dump["counts"], "throughput": dump["throughput"],
        "queues": [(q["name"], q["throughput"], q["runtime"] > 0) for q in dump["queues"]],
        "jobs": sorted((j["name"], j["throughput"], j["runtime"] > 0) for j in dump["jobs"]),
        "tagged": {t: sorted(names[i] for i in ids) for t, ids in dump["tagged"].items()},
        "failed_tags": {t: sorted(names[i] for i in ids) for t, ids in dump["failed_tags"].items()},
    }


def _stop(hz: PhpApp, proc: subprocess.Popen[str]) -> tuple[int, str]:
    out = hz.artisan("horizon:terminate").stdout
    try:
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return code, out


def _supervisor_pause(hz: PhpApp) -> dict[str, Any]:
    """``horizon:pause-supervisor`` on the one supervisor: what Horizon then says, and back again."""
    [sup] = hz.tool("horizon-dump")["supervisors"]
    hz.artisan("horizon:pause-supervisor", sup["name"], check=True)
    wait_for(lambda: [s["status"] for s in hz.tool("horizon-dump")["supervisors"]] == ["paused"], timeout=60)
    dump = hz.tool("horizon-dump")
    seen = {"status": hz.artisan("horizon:status").returncode, "masters": [m["status"] for m in dump["masters"]],
            "supervisors": [s["status"] for s in dump["supervisors"]]}
    hz.artisan("horizon:continue-supervisor", sup["name"], check=True)
    wait_for(lambda: [s["status"] for s in hz.tool("horizon-dump")["supervisors"]] == ["running"], timeout=60)
    return seen


def _run_horizon(hz: PhpApp) -> tuple[dict[str, Any], dict[str, Any]]:
    proc = hz.popen_artisan("horizon")
    try:
        dump = wait_for(lambda: _done(hz), timeout=120, interval=0.5)
        live = hz.tool("horizon-dump")
        status = hz.artisan("horizon:status").returncode
        paused = _supervisor_pause(hz)
    finally:
        _stop(hz, proc)
    return dump, {"status": status, "supervisors": live["supervisors"], "masters": live["masters"],
                  "supervisor_paused": paused}


def _run_laraq(hz: PhpApp) -> tuple[dict[str, Any], dict[str, Any]]:
    # --sleep=3: Horizon's default, so the supervisors' options can be compared whole
    proc = popen_horizon_laraq(hz, "--queue=default", "--sleep=3")
    try:
        dump = wait_for(lambda: _done(hz), timeout=120, interval=0.5)
        live = hz.tool("horizon-dump")
        status = hz.artisan("horizon:status").returncode
        paused = _supervisor_pause(hz)
    finally:
        code, out = _stop(hz, proc)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert "Sending TERM signal" in out
    # the pid Horizon signalled is laraq's long-lived supervisor process, not its restartable worker
    assert [m["pid"] for m in live["masters"]] == [str(proc.pid)]
    return dump, {"status": status, "supervisors": live["supervisors"], "masters": live["masters"],
                  "supervisor_paused": paused}


def _options(live: dict[str, Any]) -> list[dict[str, Any]]:
    """Each supervisor's ``SupervisorOptions::toArray`` without what names this run (name, parent pid)."""
    return [{k: v for k, v in s["options"].items() if k not in ("name", "parentId")} for s in live["supervisors"]]


def _round(hz: PhpApp, redis_client: Any, run: Any, runner: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """From an empty Redis: dispatch the jobs, run them with ``run``, summarise what Horizon shows."""
    redis_client.flushall()
    hz.log_path.write_text("")
    names = _dispatch_all(hz, redis_client)
    pushed = _pushed(redis_client, hz)
    dump, live = run(hz)
    _failed_payload_kept(hz, redis_client, names, pushed)
    assert [r["runner"] for r in hz.runs()] == [runner] * 6
    return _summary(dump, names), live


def test_horizon_and_laraq_give_the_same_answers(hz: PhpApp, redis_client: Any) -> None:
    php, php_live = _round(hz, redis_client, _run_horizon, "php")
    laraq, laraq_live = _round(hz, redis_client, _run_laraq, "python")

    assert laraq == php
    assert php["counts"]["failed"] == 1 and php["throughput"] == 4
    assert php["tagged"] == {"watched": ["tagged"]} and php["failed_tags"]["team:a"] == ["fail"]
    # both were alive in Horizon while working, and gone after horizon:terminate
    assert php_live["status"] == laraq_live["status"] == 0
    assert _options(laraq_live) == _options(php_live)
    # a supervisor-level pause: the supervisor paused, the master (and horizon:status) still running
    assert laraq_live["supervisor_paused"] == php_live["supervisor_paused"] == {
        "status": 0, "masters": ["running"], "supervisors": ["paused"]}
    for live in (php_live, laraq_live):
        assert [s["status"] for s in live["supervisors"]] == ["running"]
        assert [s["processes"] for s in live["supervisors"]] == [{"redis:default": 1}]
        assert [m["status"] for m in live["masters"]] == ["running"]
    assert hz.artisan("horizon:status").returncode == 2


def test_mixed_fleet_shows_every_job_once(hz: PhpApp, redis_client: Any) -> None:
    count = 40
    horizon = hz.popen_artisan("horizon")
    laraq = None
    try:
        wait_for(lambda: hz.tool("horizon-dump")["supervisors"], timeout=60, interval=0.3)
        laraq = popen_laraq(hz, "--horizon", "--queue=default", "--concurrency=2", app_spec="horizon_support:app")
        wait_for(lambda: len(hz.tool("horizon-dump")["masters"]) == 2, timeout=60, interval=0.3)
        ids = hz.tool("dispatch", "echo", f"--count={count}",
                      "--args=" + json.dumps({"seconds": 0.25, "mode": "sleep"}))["ids"]
        wait_for(lambda: hz.tool("horizon-dump")["counts"]["completed"] == count, timeout=120, interval=0.5)
        dump = hz.tool("horizon-dump")
    finally:
        _stop(hz, horizon)
        if laraq is not None:
            laraq.wait(timeout=60)
    runs = hz.runs()
    assert sorted(r["uuid"] for r in runs) == sorted(ids)
    assert {r["runner"] for r in runs} == {"php", "python"}, "both workers should have taken jobs"
    assert sorted(j["id"] for j in dump["recent"]) == sorted(ids)
    assert [j["status"] for j in dump["recent"]] == ["completed"] * count
    assert sorted(j["id"] for j in dump["completed"]) == sorted(ids)
    assert dump["throughput"] == count and dump["counts"]["pending"] == 0
    assert sorted(len(s["processes"]) for s in dump["supervisors"]) == [1, 1]


def test_horizon_pause_and_continue_reach_laraq_work(hz: PhpApp, redis_client: Any) -> None:
    proc = popen_laraq(hz, "--horizon", "--queue=default", app_spec="horizon_support:app")
    try:
        wait_for(lambda: hz.artisan("horizon:status").returncode == 0, timeout=60, interval=0.3)
        assert "Sending USR2 signal" in hz.artisan("horizon:pause", check=True).stdout
        wait_for(lambda: hz.artisan("horizon:status").returncode == 1, timeout=60, interval=0.3)
        hz.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"n": "after-pause"}}))
        time.sleep(1.5)  # a running laraq (--sleep 0) would have taken it by now
        assert hz.runs() == [] and redis_client.llen(hz.prefix + "queues:default") == 1
        hz.artisan("horizon:continue", check=True)
        wait_for(lambda: hz.runs(), timeout=60, interval=0.3)
        wait_for(lambda: hz.artisan("horizon:status").returncode == 0, timeout=60, interval=0.3)
    finally:
        code, _ = _stop(hz, proc)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert [r["args"] for r in hz.runs()] == [{"n": "after-pause"}]


def test_no_horizon_signals_records_an_unreachable_pid(hz: PhpApp, redis_client: Any) -> None:
    from laraq.horizon.supervisors import NO_SIGNAL_PID

    proc = popen_laraq(hz, "--horizon", "--no-horizon-signals", app_spec="horizon_support:app")
    try:
        [master] = wait_for(lambda: hz.tool("horizon-dump")["masters"], timeout=60, interval=0.3)
        assert master["pid"] == str(NO_SIGNAL_PID)
        out = hz.artisan("horizon:pause").stdout
        assert f"Failed to kill process: {NO_SIGNAL_PID}" in out
        assert hz.artisan("horizon:status").returncode == 0
        # Horizon's command list still reaches it
        redis_client.rpush(HORIZON_PREFIX + "commands:master:" + master["name"], json.dumps(
            {"command": "Laravel\\Horizon\\SupervisorCommands\\Terminate", "options": {"status": 0}}))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert hz.tool("horizon-dump")["masters"] == []


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def test_a_restarted_worker_stays_one_master(hz: PhpApp, redis_client: Any) -> None:
    proc = popen_laraq(hz, "--horizon", app_spec="horizon_support:app")
    try:
        [first] = wait_for(lambda: hz.tool("horizon-dump")["masters"], timeout=60, interval=0.3)
        [child] = _children(proc.pid)
        os.kill(child, signal.SIGKILL)  # what laraq's own timeout kill does to a worker

        def restarted() -> Any:
            workers = [c for c in _children(proc.pid) if c != child]
            sups = hz.tool("horizon-dump")["supervisors"]
            # the new worker's relay holds the supervisor's pid
            return workers and sups and all(int(s["pid"]) in _children(workers[0]) for s in sups)

        wait_for(restarted, timeout=60, interval=0.3)
        dump = hz.tool("horizon-dump")
        # the same master (its name comes from the laraq work process), still signalling that process
        assert [(m["name"], m["pid"]) for m in dump["masters"]] == [(first["name"], str(proc.pid))]
        assert len(dump["supervisors"]) == 1
    finally:
        code, out = _stop(hz, proc)
    assert out.count("Process: ") == 1 and code == 0
