"""``laraq work --processes N``: one small supervisor (``laraq.production.prefork``), N worker processes.

Correctness only, nothing timed: the jobs are shared by all workers and each runs once; a worker that
dies by SIGKILL is replaced and its job is run again after ``retry_after`` (as artisan under
supervisord); SIGTERM drains every worker; ``queue:restart`` stops them all and the supervisor exits 0;
the supervisor itself is the small interpreter (``-S``, no laraq imported). A SIGKILL mid-batch re-runs
only the job that was running when the acks are older than their 50 ms deferral (the at-least-once window
is bounded by time). laraq's own processes: the fixture app's jobs are pushed from Python (``pyapp.PyApp``)
and the restart stamp is laraq's (artisan's stops laraq too: ``test_worker_signals.py``).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_worker_fastpath import _drain, _left, _push, _queue_restart
from test_worker_fastpath import _pyapp as _app
from test_worker_support import LARAQ, laraq_env, popen_laraq, wait_for

from laraq.exitcodes import EXIT_USAGE
from laraq.worker.worker import Worker

KEY = "laravel_database_queues:fast"  # the queue of test_worker_fastpath's helpers


def _supervisor_execd(pid: int) -> bool:
    """The process runs the supervisor: ``python -S`` (no site, no laraq), no longer ``laraq work``."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return b"-S" in fh.read().split(b"\0")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _uuids(redis_client: Any) -> set[str]:
    return {json.loads(m)["uuid"] for m in redis_client.lrange(KEY, 0, -1)}


def test_two_processes_share_the_queue_and_stop_when_empty(redis_client: Any, redis_server: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(redis_server, monkeypatch)
    _push(app, 40, 0.05)
    uuids = _uuids(redis_client)
    proc = popen_laraq(app, "--queue=fast", "--processes=2", "--stop-when-empty", "--quiet", "--batch=2",
                       "--no-prefetch")
    try:
        # the workers are forked before laraq work execs the supervisor: wait for the exec too
        supervisor_rss = wait_for(lambda: len(_children(proc.pid)) == 2 and _supervisor_execd(proc.pid)
                                  and _rss_kb(proc.pid), timeout=30)
        assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        _stop(proc)
    runs = app.runs()
    assert sorted(r["uuid"] for r in runs) == sorted(uuids)  # each job once
    assert len({r["pid"] for r in runs}) == 2  # both worker processes took jobs
    assert supervisor_rss < 20 * 1024
    assert _left(redis_client) == 0


def test_a_killed_worker_process_is_replaced_and_sigterm_drains_all(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app(redis_server, monkeypatch, retry_after=2)
    _push(app, 30, 0.1)
    uuids = _uuids(redis_client)
    proc = popen_laraq(app, "--queue=fast", "--processes=2", "--quiet", "--retry-after=2", "--tries=0", "--batch=1")
    try:
        first = wait_for(lambda: len(_children(proc.pid)) == 2 and _children(proc.pid), timeout=30)
        wait_for(lambda: len({r["pid"] for r in app.runs()}) == 2, timeout=60)
        victim = first[0]
        os.kill(victim, signal.SIGKILL)
        replaced = wait_for(lambda: (set(_children(proc.pid)) - set(first)) and len(_children(proc.pid)) == 2,
                            timeout=30)
        assert replaced
        wait_for(lambda: {r["uuid"] for r in app.runs()} >= uuids and _left(redis_client) == 0, timeout=120,
                 interval=0.2)
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert all(not os.path.exists(f"/proc/{pid}") or _zombie(pid) for pid in workers)
    finally:
        _stop(proc)
    err = proc.stderr.read() if proc.stderr else ""
    assert "worker process died by SIGKILL" in err
    assert len({r["pid"] for r in app.runs()}) == 3  # the replacement worked too
    assert app.failed_rows() == []


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_queue_restart_stops_every_worker_and_the_supervisor(redis_client: Any, redis_server: Any,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             workers: list[Worker]) -> None:
    app = _app(redis_server, monkeypatch)
    _push(app, 200, 0.02)
    proc = popen_laraq(app, "--queue=fast", "--processes=2", "--quiet")
    try:
        wait_for(lambda: len({r["pid"] for r in app.runs()}) == 2, timeout=60)
        _queue_restart(app)
        assert proc.wait(60) == 0
    finally:
        _stop(proc)
    assert redis_client.zcard(KEY + ":reserved") == 0  # buffered jobs were handed back
    _drain(app, workers)
    assert len({r["uuid"] for r in app.runs()}) == 200


@pytest.mark.parametrize("app_spec", ["test_worker_support:async_app", "test_worker_support:app"])
def test_sigkill_mid_batch_reruns_only_the_running_job(redis_client: Any, redis_server: Any,
                                                       monkeypatch: pytest.MonkeyPatch, app_spec: str) -> None:
    # Short jobs first (the worker measures them and prefetches the rest in one reserve call), then
    # long ones: the first long job starts from the buffer while the last short jobs' acks are still
    # deferred. An async handler leaves the loop free to send them; a sync one runs inline on the loop
    # thread, and the watchdog sends them meanwhile. Either way only the running job runs again.
    app = _app(redis_server, monkeypatch, retry_after=3)
    _push(app, 10, 0.01)
    _push(app, 3, 2.5)
    bodies = redis_client.lrange(KEY, 0, -1)
    uuids = [json.loads(b)["uuid"] for b in bodies]
    first_long = uuids[10]
    proc = popen_laraq(app, "--queue=fast", "--quiet", "--no-supervise", "--tries=0", "--retry-after=3",
                       app_spec=app_spec)
    try:
        wait_for(lambda: first_long in {r["uuid"] for r in app.runs()}, timeout=60)
        time.sleep(1.0)  # well past the 50 ms ack deferral; the long job is still running
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        _stop(proc)
    before = [r["uuid"] for r in app.runs()]
    assert before[-1] == first_long and len(before) == 11
    restarted = popen_laraq(app, "--queue=fast", "--quiet", "--no-supervise", "--tries=0", "--retry-after=3",
                            app_spec=app_spec)
    try:
        wait_for(lambda: {r["uuid"] for r in app.runs()} >= set(uuids) and _left(redis_client) == 0, timeout=120,
                 interval=0.2)
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(60) == 0
    finally:
        _stop(restarted)
    counts = collections.Counter(r["uuid"] for r in app.runs())
    assert {u for u, n in counts.items() if n > 1} == {first_long}  # only the job that was running
    assert counts[first_long] == 2


def _popen_in(app: Any, cwd: Path, *args: str, app_spec: str = "test_worker_support:app") -> subprocess.Popen[str]:
    """``laraq work`` started as its console script starts it (``-P``: the current directory is not on the
    import path) from ``cwd``."""
    argv = [sys.executable, "-P", *LARAQ[1:], "--app", app_spec, "--laravel", app.release, "--sleep", "0", *args]
    return subprocess.Popen(argv, env=laraq_env(app), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _until_it_runs_jobs(app: Any, redis_client: Any, pids: set[int]) -> None:
    """Keep a few jobs on the queue until each of ``pids`` has run one (a worker just started may find its
    sibling took every job pushed once)."""
    def ran() -> bool:
        if _left(redis_client) == 0:
            _push(app, 4, 0.2)
        return pids <= {r["pid"] for r in app.runs()}

    wait_for(ran, timeout=120, interval=0.2)


def _foreign_laraq(directory: Path) -> Path:
    """A directory holding an unrelated package named ``laraq`` (a broken checkout, say): importing it fails."""
    (directory / "laraq").mkdir()
    (directory / "laraq" / "__init__.py").write_text('raise ImportError("the laraq folder of the current '
                                                     'directory was imported")\n')
    return directory


def test_a_replacement_runs_the_supervisors_laraq_whatever_the_directory_holds(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Run from a directory with a ``laraq/`` folder: a worker killed with SIGKILL is replaced by one that
    imports the supervisor's laraq (not the folder's) and runs jobs."""
    app = _app(redis_server, monkeypatch, retry_after=2)
    _push(app, 30, 0.1)
    uuids = _uuids(redis_client)
    proc = _popen_in(app, _foreign_laraq(tmp_path), "--queue=fast", "--processes=2", "--quiet", "--retry-after=2",
                     "--tries=0", "--batch=1")
    try:
        first = wait_for(lambda: len(_children(proc.pid)) == 2 and _children(proc.pid), timeout=30)
        wait_for(lambda: len({r["pid"] for r in app.runs()}) == 2, timeout=60)
        os.kill(first[0], signal.SIGKILL)
        replacement = wait_for(lambda: len(_children(proc.pid)) == 2 and set(_children(proc.pid)) - set(first),
                               timeout=60)
        _until_it_runs_jobs(app, redis_client, replacement)
        wait_for(lambda: {r["uuid"] for r in app.runs()} >= uuids and _left(redis_client) == 0, timeout=120,
                 interval=0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        _stop(proc)
    err = proc.stderr.read() if proc.stderr else ""
    assert "worker process died by SIGKILL" in err and "Traceback" not in err, err
    assert len(replacement) == 1 and replacement <= {r["pid"] for r in app.runs()}  # the replacement ran jobs


def test_a_worker_killed_by_its_timeout_is_replaced_from_a_directory_with_a_laraq_folder(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A job outlives ``--timeout``: its worker kills itself, and the supervisor's replacement (started from a
    directory with a ``laraq/`` folder) runs the jobs after it."""
    app = _app(redis_server, monkeypatch, retry_after=30)
    _push(app, 1, 20)
    _push(app, 5, 0.01)
    long_uuid = json.loads(redis_client.lindex(KEY, 0))["uuid"]
    proc = _popen_in(app, _foreign_laraq(tmp_path), "--queue=fast", "--processes=1", "--quiet", "--timeout=1",
                     "--tries=1", "--batch=1", "--retry-after=30")
    try:
        wait_for(lambda: len(app.runs()) >= 6, timeout=120, interval=0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        _stop(proc)
    err = proc.stderr.read() if proc.stderr else ""
    runs = app.runs()
    assert runs[0]["uuid"] == long_uuid
    assert {r["pid"] for r in runs[1:]} and runs[0]["pid"] not in {r["pid"] for r in runs[1:]}
    assert "worker process died by SIGKILL" in err and "Traceback" not in err, err


def test_a_replacement_that_cannot_start_is_said_and_tried_again(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The app's module breaks while the workers run, then a worker dies: its replacement exits before it
    is ready; the supervisor says so (exit code, workers running) and tries again with a growing pause,
    and once the module is fixed the replacement runs jobs. Never one worker short without a word."""
    app = _app(redis_server, monkeypatch, retry_after=2)
    module = tmp_path / "changing_app.py"
    module.write_text("from test_worker_support import app  # noqa: F401\n")
    _push(app, 10, 0.05)
    proc = _popen_in(app, tmp_path, "--queue=fast", "--processes=2", "--quiet", "--retry-after=2", "--tries=0",
                     "--batch=1", app_spec="changing_app:app")
    try:
        first = wait_for(lambda: len(_children(proc.pid)) == 2 and _children(proc.pid), timeout=30)
        wait_for(lambda: _left(redis_client) == 0, timeout=60, interval=0.2)
        module.write_text("raise RuntimeError('the app module is broken for now')\n")
        os.kill(first[0], signal.SIGKILL)
        lines: list[str] = []
        assert proc.stderr is not None
        while sum("before it started" in line for line in lines) < 2:  # two failed starts, each said
            lines.append(proc.stderr.readline())
        module.write_text("from test_worker_support import app  # noqa: F401\n")
        fixed = wait_for(lambda: len(_children(proc.pid)) == 2 and set(_children(proc.pid)) - set(first), timeout=60)
        _until_it_runs_jobs(app, redis_client, fixed)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        _stop(proc)
    said = [line for line in lines if "before it started" in line]
    assert all(f"worker process 1 exited with code {EXIT_USAGE} before it started" in line for line in said), said
    assert all("ERROR" in line and "1 of 2 worker process(es) running" in line for line in said), said
    pauses = [float(line.rsplit("again in ", 1)[1].rstrip("s\n")) for line in said]
    assert pauses[1] == 2 * pauses[0], said  # the pause grows
    assert "RuntimeError: the app module is broken for now" in "".join(lines)


def test_workers_that_never_start_are_the_deployments_error(
        redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No worker was ever ready (the app's module fails to import): the supervisor does not retry, it exits
    with the workers' code, as a single ``laraq work`` does."""
    app = _app(redis_server, monkeypatch)
    (tmp_path / "broken_app.py").write_text("raise RuntimeError('broken from the start')\n")
    proc = _popen_in(app, tmp_path, "--queue=fast", "--processes=2", "--quiet", app_spec="broken_app:app")
    try:
        assert proc.wait(60) == EXIT_USAGE
    finally:
        _stop(proc)
    err = proc.stderr.read() if proc.stderr else ""
    assert "broken from the start" in err and "starting it again" not in err, err
