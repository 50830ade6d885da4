"""Horizon's process commands on a real ``laraq work --horizon`` with ``--processes 1`` and ``2`` (live
Laravel 12 and 13 with Horizon 5.29.1, Laravel 13 with Horizon 5.48.1), and the second SIGTERM.

* One ``laraq work`` is one master whatever its ``--processes``: its pid is the ``laraq work`` process,
  each worker process is a supervisor whose pid is a process of that worker (its relay child), so
  ``horizon:terminate`` signals laraq once. ``horizon:terminate``, ``horizon:pause``/``continue`` and
  ``horizon:pause-supervisor``/``continue-supervisor``, sent while jobs run, let every running job finish;
  nothing is failed or left reserved, and the records are gone at the end.
* The dashboard's masters endpoint (Horizon's own ``MasterSupervisorController@index``, called through
  the fixture app's container) shows laraq's supervisors under laraq's master and no other, with PHP's
  Horizon running beside it.
* A second SIGTERM is what it is to artisan (``Worker::listenForSignals`` sets ``shouldQuit`` again):
  the running job finishes, exit 0, for ``php artisan queue:work`` and ``laraq work`` alike; SIGINT
  twice is laraq's deliberate stop-now (exit 1, the job stays reserved).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PARAM_LINES, ROOT, require
from horizon_support import HORIZON_LINES, horizon_app
from phpapp import PhpApp, live_missing
from test_worker_support import laraq_env, popen_laraq, wait_for

pytestmark = pytest.mark.php

LINES = [v for v in ("12", "13", "13-h548") if v in HORIZON_LINES]


@pytest.fixture(params=LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port, HORIZON_BALANCE="false", HORIZON_TRIES="1")


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


def _failed(hz: PhpApp) -> int:
    with sqlite3.connect(hz.db_path) as db:
        return int(db.execute("select count(*) from failed_jobs").fetchone()[0])


def _dispatch(hz: PhpApp, count: int, seconds: float) -> list[str]:
    return list(hz.tool("dispatch", "echo", f"--count={count}",
                        "--args=" + json.dumps({"seconds": seconds, "mode": "sleep"}))["ids"])


def _laraq(hz: PhpApp, processes: int) -> subprocess.Popen[str]:
    # --batch 1: each worker process takes one job at a time, so N jobs run in N processes
    return popen_laraq(hz, "--horizon", "--queue=default", f"--processes={processes}", "--batch=1",
                       app_spec="horizon_support:app")


def _records(hz: PhpApp, proc: subprocess.Popen[str], processes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The master and its supervisors once every worker process wrote its own, checked against the process
    tree: the master's pid is the started ``laraq work``, each supervisor's pid a child of one of its
    worker processes (one supervisor per worker)."""
    def ready() -> Any:
        dump = hz.tool("horizon-dump")
        workers = _children(proc.pid)
        sups = dump["supervisors"]
        if len(dump["masters"]) != 1 or len(sups) != processes or len(workers) != processes:
            return None
        owners = sorted(w for s in sups for w in workers if int(s["pid"]) in _children(w))
        return (dump["masters"][0], sups) if owners == sorted(workers) else None

    master, sups = wait_for(ready, timeout=60, interval=0.3)
    assert master["pid"] == str(proc.pid)
    assert sorted(master["supervisors"]) == sorted(s["name"] for s in sups)
    assert {s["master"] for s in sups} == {master["name"]}
    return master, sups


def _finish(hz: PhpApp, proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out = hz.artisan("horizon:terminate", check=True).stdout
    try:
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return code, out, proc.stderr.read() if proc.stderr else ""


def _nothing_left(hz: PhpApp, redis_client: Any) -> None:
    assert redis_client.zcard(hz.prefix + "queues:default:reserved") == 0
    assert _failed(hz) == 0
    dump = hz.tool("horizon-dump")
    assert dump["masters"] == [] and dump["supervisors"] == []
    assert hz.artisan("horizon:status").returncode == 2


@pytest.mark.parametrize("processes", [1, 2])
def test_terminate_lets_every_running_job_finish(hz: PhpApp, redis_client: Any, processes: int) -> None:
    proc = _laraq(hz, processes)
    try:
        _records(hz, proc, processes)
        ids = _dispatch(hz, processes + 1, 3)
        wait_for(lambda: len(hz.runs()) == processes, timeout=60, interval=0.1)  # one running per process
        code, out, err = _finish(hz, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert out.count("Process: ") == 1 and f"Process: {proc.pid}" in out  # signalled once, laraq work itself
    assert "stopping now" not in err
    started = [r["uuid"] for r in hz.runs()]
    dump = hz.tool("horizon-dump")
    assert sorted(j["id"] for j in dump["completed"]) == sorted(started)  # every running job finished
    # the job no process had started waits in the queue, its attempts unspent
    [waiting] = [i for i in ids if i not in started]
    assert [json.loads(m)["uuid"] for m in redis_client.lrange(hz.prefix + "queues:default", 0, -1)] == [waiting]
    _nothing_left(hz, redis_client)


def _completed(hz: PhpApp, count: int) -> None:
    wait_for(lambda: hz.tool("horizon-dump")["counts"]["completed"] == count, timeout=60, interval=0.3)


@pytest.mark.parametrize("processes", [1, 2])
def test_pause_continue_and_the_supervisor_commands(hz: PhpApp, redis_client: Any, processes: int) -> None:
    proc = _laraq(hz, processes)
    try:
        master, sups = _records(hz, proc, processes)
        sups = sorted(sups, key=lambda s: s["name"])
        first = sups[0]

        # horizon:pause while jobs run: they finish, nothing new is taken until horizon:continue
        _dispatch(hz, processes, 2)
        wait_for(lambda: len(hz.runs()) == processes, timeout=60, interval=0.1)
        out = hz.artisan("horizon:pause", check=True).stdout
        assert out.count("Process: ") == 1
        wait_for(lambda: hz.artisan("horizon:status").returncode == 1, timeout=30, interval=0.3)
        _completed(hz, processes)
        _dispatch(hz, 1, 0)
        time.sleep(1.5)  # a running laraq (--sleep 0) would have taken it by now
        assert len(hz.runs()) == processes
        hz.artisan("horizon:continue", check=True)
        done = processes + 1
        _completed(hz, done)
        wait_for(lambda: hz.artisan("horizon:status").returncode == 0, timeout=30, interval=0.3)

        # horizon:pause-supervisor while its worker process runs a job: the job finishes, that process
        # takes nothing more, another one (if any) takes the jobs; Horizon still says running
        before = len(hz.runs())
        _dispatch(hz, processes, 2)
        wait_for(lambda: len(hz.runs()) == before + processes, timeout=60, interval=0.1)
        out = hz.artisan("horizon:pause-supervisor", first["name"], check=True).stdout
        assert first["pid"] in out
        wait_for(lambda: {s["name"]: s["status"] for s in hz.tool("horizon-dump")["supervisors"]}
                 == {s["name"]: "paused" if s is first else "running" for s in sups}, timeout=30, interval=0.3)
        assert [m["status"] for m in hz.tool("horizon-dump")["masters"]] == ["running"]
        assert hz.artisan("horizon:status").returncode == 0
        done += processes
        _completed(hz, done)
        paused_worker = [w for w in _children(proc.pid) if int(first["pid"]) in _children(w)][0]
        before = len(hz.runs())
        _dispatch(hz, 3, 0)
        if processes == 1:
            time.sleep(1.5)
            assert len(hz.runs()) == before  # its only worker process is paused
        else:
            wait_for(lambda: len(hz.runs()) == before + 3, timeout=60, interval=0.3)
            assert paused_worker not in {r["pid"] for r in hz.runs()[before:]}
        hz.artisan("horizon:continue-supervisor", first["name"], check=True)
        wait_for(lambda: {s["status"] for s in hz.tool("horizon-dump")["supervisors"]} == {"running"},
                 timeout=30, interval=0.3)
        done += 3
        _completed(hz, done)

        # the same processes still hold each record
        assert _records(hz, proc, processes)[0]["name"] == master["name"]
        code, out, err = _finish(hz, proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert out.count("Process: ") == 1 and "stopping now" not in err
    _nothing_left(hz, redis_client)


@pytest.mark.parametrize("line", [v for v in ("13", "13-h548") if v in LINES])
def test_no_phantom_supervisor_under_laraqs_master(line: str, php: str, redis_client: Any,
                                                   redis_server: Any) -> None:
    hz = horizon_app(line, redis_server.port, HORIZON_BALANCE="false", HORIZON_TRIES="1")
    horizon = hz.popen_artisan("horizon")
    laraq = None
    try:
        wait_for(lambda: hz.tool("horizon-dump")["supervisors"], timeout=60, interval=0.3)
        laraq = _laraq(hz, 2)
        wait_for(lambda: len(hz.tool("horizon-dump")["supervisors"]) == 3, timeout=60, interval=0.3)
        masters = {m["pid"]: m for m in hz.tool("horizon-masters")}
        ours = masters.pop(str(laraq.pid))
        [php_master] = masters.values()
        # PHP's master: its configured supervisor-1, running
        assert [(s["name"].split(":")[-1], s["status"]) for s in php_master["supervisors"]] == [
            ("supervisor-1", "running")]
        # laraq's: its two worker processes, nothing the app's plan configures
        assert sorted((s["name"].split(":")[-1], s["status"]) for s in ours["supervisors"]) == [
            ("laraq-default-1", "running"), ("laraq-default-2", "running")]
        assert all(s["processes"] == {"redis:default": 1} for s in ours["supervisors"])
    finally:
        hz.artisan("horizon:terminate")
        for proc in (horizon, laraq):
            if proc is not None:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert laraq is not None and laraq.returncode == 0
    assert hz.tool("horizon-masters") == []


# -- the second SIGTERM ---------------------------------------------------------------------------------


@pytest.fixture(params=[v for v in ("12", "13") if v in PARAM_LINES])
def app(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    reason = live_missing(request.param)
    require(reason is None, reason or "")
    return PhpApp(redis_server.port, version=request.param)


def _twice(proc: subprocess.Popen[str], signum: int) -> int:
    proc.send_signal(signum)
    time.sleep(0.3)  # two deliveries, not one pending signal
    proc.send_signal(signum)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _one_running_job(app: PhpApp) -> str:
    [uuid] = _dispatch(app, 1, 2)
    wait_for(lambda: app.runs(), timeout=60, interval=0.05)
    return uuid


def test_a_second_sigterm_is_what_it_is_to_artisan(app: PhpApp, redis_client: Any) -> None:
    reserved = app.prefix + "queues:default:reserved"
    artisan = app.popen_artisan("queue:work", "--sleep=0")
    _one_running_job(app)
    assert _twice(artisan, signal.SIGTERM) == 0
    assert redis_client.zcard(reserved) == 0 and _failed(app) == 0  # it finished

    app.log_path.write_text("")
    laraq = popen_laraq(app, "--queue=default")
    _one_running_job(app)
    assert _twice(laraq, signal.SIGTERM) == 0, laraq.stderr.read() if laraq.stderr else ""
    assert redis_client.zcard(reserved) == 0 and _failed(app) == 0
    assert redis_client.llen(app.prefix + "queues:default") == 0

    # laraq's deliberate stop-now: Ctrl-C twice leaves the running job reserved until retry_after
    app.log_path.write_text("")
    laraq = popen_laraq(app, "--queue=default")
    _one_running_job(app)
    assert _twice(laraq, signal.SIGINT) == 1
    assert redis_client.zcard(reserved) == 1 and _failed(app) == 0


# -- horizon:status and jobs only PHP can run ---------------------------------------------------------------


def _laraq_cli(hz: PhpApp, *args: str) -> Any:
    out = subprocess.run([sys.executable, "-c", "from laraq.cli import main; main()", *args, "--laravel", hz.release,
                          "--json"], env=laraq_env(hz), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _doctor_waiting(hz: PhpApp) -> list[str]:
    findings = _laraq_cli(hz, "doctor", "--app", "horizon_support:app", "--queue", "default")
    return [f["title"] for f in findings if "only PHP can run" in f["title"]]


@pytest.mark.parametrize("line", [v for v in ("13", "13-h548") if v in LINES])
def test_jobs_only_php_can_run_are_named_while_horizon_status_says_running(
        line: str, php: str, redis_client: Any, redis_server: Any) -> None:
    hz = horizon_app(line, redis_server.port, HORIZON_BALANCE="false", HORIZON_TRIES="1")
    for _ in range(2):  # App\Handlers\Foo@bar: no Python handler in horizon_support:app
        hz.tool("dispatch", "string")
    laraq = _laraq(hz, 1)
    horizon = None
    try:
        _records(hz, laraq, 1)
        # Horizon's own answer counts laraq's master: "running", with no PHP worker alive
        assert hz.artisan("horizon:status").returncode == 0
        # laraq says what horizon:status cannot
        status = wait_for(lambda: (s := _laraq_cli(hz, "status", "--sample", "0"))["php_only_waiting"] and s,
                          timeout=60, interval=0.5)
        assert {q: w["jobs"] for q, w in status["php_only_waiting"].items()} == {"default": 2}
        assert any("only PHP can run" in note for note in status["notes"])
        assert _doctor_waiting(hz) == ["queue 'default': 2 job(s) only PHP can run wait and no PHP worker works it"]
        # with PHP's Horizon working the queue, nothing is said (and PHP runs them)
        horizon = hz.popen_artisan("horizon")
        wait_for(lambda: len(hz.tool("horizon-dump")["masters"]) == 2, timeout=60, interval=0.3)
        # its supervisor's record follows the master's: once it is there, doctor says nothing
        wait_for(lambda: _doctor_waiting(hz) == [], timeout=60, interval=0.5)
        wait_for(lambda: redis_client.llen(hz.prefix + "queues:default") == 0, timeout=60, interval=0.3)
    finally:
        hz.artisan("horizon:terminate")
        for proc in (laraq, horizon):
            if proc is not None:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    err = laraq.stderr.read() if laraq.stderr else ""
    assert "have no Python handler and no PHP worker works that queue" in err
