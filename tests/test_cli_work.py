"""``laraq work`` as a process: flags, output, exit codes, signals and the restart key.

``pyapp artisan queue:restart`` of each live Laravel line stops a running ``laraq work`` (on the Redis and on
the database cache store). laraq's own behaviour, with the fixture app's jobs pushed from Python
(``pyapp.PyApp``): usage errors, ``--json`` and console output, ``--max-jobs``/``--memory``; SIGTERM during a
job lets it finish, then the worker exits 0; SIGUSR2/SIGCONT pause and resume; an unreachable Redis at start
is one line and exit 3.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from typing import Any

import pytest
from phpapp import PhpApp
from pyapp import PyApp
from test_worker_support import LARAQ, ROOT, free_port_url, laraq_env, popen_laraq, run_laraq, wait_for


def qkey(pyapp: PyApp, queue: str) -> str:
    return pyapp.prefix + "queues:" + queue


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_help_lists_artisans_flags() -> None:
    out = subprocess.run([*LARAQ, "--help"], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    for flag in ("--queue", "--once", "--stop-when-empty", "--max-jobs", "--max-time", "--memory", "--sleep",
                 "--rest", "--timeout", "--tries", "--backoff", "--force", "--name", "--json", "--quiet",
                 "--app", "--env-file", "--laravel", "--concurrency", "--unhandled", "--redis-url", "--prefix",
                 "--retry-after", "--block-for"):
        assert flag in out
    # the environment switches the worker reads are listed too
    for name in ("LARAQ_OTEL=1", "LARAQ_REPORT=log", "LARAQ_SCHEMA"):
        assert name in out, out


def test_usage_errors_exit_2(pyapp: PyApp) -> None:
    proc = run_laraq(pyapp, "--once", app_spec="no_such_module:app")
    assert proc.returncode == 2
    assert "cannot load --app no_such_module:app" in proc.stderr
    bad_flag = run_laraq(pyapp, "--tries=many")
    assert bad_flag.returncode == 2


def test_json_output(pyapp: PyApp) -> None:
    pyapp.dispatch("python", "py")
    proc = run_laraq(pyapp, "--once", "--queue=py", "--json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["status"] for e in events] == ["starting", "success"]
    done = events[1]
    assert done["job"] == "App\\Jobs\\PythonJob" and done["queue"] == "py" and done["connection"] == "redis"
    assert done["result"] == "deleted" and done["attempts"] == 1 and done["level"] == "info"
    assert "duration" in done and "duration" not in events[0]
    assert "\\/" not in proc.stdout or "/" not in proc.stdout.replace("\\/", "")  # PHP-style escaping


def test_console_output_like_artisan(pyapp: PyApp) -> None:
    pyapp.dispatch("python", "py")
    pyapp.dispatch("echo", "py", mode="fail", settings={"tries": 2})
    proc = run_laraq(pyapp, "--stop-when-empty", "--queue=py", "--laravel", "11")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    stamp = r"  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
    assert re.fullmatch(stamp + r"App\\Jobs\\PythonJob \.+ RUNNING", lines[0])
    assert re.fullmatch(stamp + r"App\\Jobs\\PythonJob \.+ [\d.,]+ms DONE", lines[1])
    assert re.fullmatch(stamp + r"App\\Jobs\\EchoJob \.+ RUNNING", lines[2])
    assert re.fullmatch(stamp + r"App\\Jobs\\EchoJob \.+ [\d.,]+ms FAIL", lines[3])  # released
    assert len(lines[0]) == len(lines[1]) == 78  # artisan fills 80 columns minus 2 when not on a terminal


def test_max_jobs_and_memory_exit_codes(pyapp: PyApp, redis_client: Any) -> None:
    pyapp.dispatch("python", "py", count=3)
    proc = run_laraq(pyapp, "--queue=py", "--max-jobs=2")
    assert proc.returncode == 0, proc.stderr
    assert len(pyapp.runs()) == 2 and redis_client.llen(qkey(pyapp, "py")) == 1
    memory = run_laraq(pyapp, "--queue=empty", "--memory=1")
    assert memory.returncode == 12
    assert "memory limit of 1 MB" in memory.stderr


@pytest.mark.php
@pytest.mark.parametrize("store", ["redis", "database"])
def test_queue_restart_stops_a_running_worker(laravel: str, redis_server: Any, store: str) -> None:
    php = PhpApp(redis_server.port, version=laravel, cache_store=store)
    worker = popen_laraq(php, "--queue=py", "--sleep=0.2")
    try:
        php.tool("dispatch", "python", "--queue=py")
        wait_for(php.runs)  # the worker is up and working
        php.artisan("queue:restart", check=True)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()


def test_sigterm_finishes_the_running_job_then_exits_0(pyapp: PyApp, redis_client: Any) -> None:
    pyapp.dispatch("echo", "py", mode="sleep", seconds=2)
    worker = popen_laraq(pyapp, "--queue=py", "--sleep=0.2")
    wait_for(pyapp.runs)  # the job is running
    assert stop(worker) == 0
    assert len(pyapp.runs()) == 1
    assert not redis_client.exists(qkey(pyapp, "py"), qkey(pyapp, "py:reserved"), qkey(pyapp, "py:delayed"))


def test_sigint_after_a_quit_signal_stops_at_once_leaving_the_job_reserved(pyapp: PyApp, redis_client: Any) -> None:
    pyapp.dispatch("echo", "py", mode="sleep", seconds=30)
    worker = popen_laraq(pyapp, "--queue=py", "--sleep=0.2")
    wait_for(pyapp.runs)
    worker.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):  # the first signal waits for the job...
        worker.wait(0.5)
    worker.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):  # ...so does a second SIGTERM, as artisan's...
        worker.wait(0.5)
    worker.send_signal(signal.SIGINT)
    assert worker.wait(30) == 1  # ...SIGINT after them does not
    assert redis_client.zcard(qkey(pyapp, "py:reserved")) == 1  # retry_after brings it back


def test_sigusr2_pauses_and_sigcont_resumes(pyapp: PyApp) -> None:
    worker = popen_laraq(pyapp, "--queue=py", "--sleep=0.2", "-v")
    lines: list[str] = []

    def read_log() -> None:
        for line in worker.stderr or ():
            lines.append(line)

    threading.Thread(target=read_log, daemon=True).start()
    try:
        pyapp.dispatch("python", "py")
        wait_for(lambda: len(pyapp.runs()) == 1)
        worker.send_signal(signal.SIGUSR2)
        # the signal goes through `laraq work`'s supervisor: a job pushed before the worker has it runs
        wait_for(lambda: any("paused (SIGUSR2" in line for line in lines))
        pyapp.dispatch("python", "py")
        with pytest.raises(AssertionError):
            wait_for(lambda: len(pyapp.runs()) == 2, timeout=1.5)
        worker.send_signal(signal.SIGCONT)
        wait_for(lambda: len(pyapp.runs()) == 2)
        assert any("resumed (it was paused" in line for line in lines)
    finally:
        assert stop(worker) == 0


def test_unreachable_redis_at_start_is_one_line_and_exit_3(pyapp: PyApp) -> None:
    # at start a wrong port is a configuration fault: one line naming it and the fix, no retry loop
    # (Redis lost while running is retried: test_worker_failure_paths)
    url = free_port_url()
    worker = popen_laraq(pyapp, "--queue=py", "--redis-url", url, "-v")
    assert worker.wait(60) == 3
    err = worker.stderr.read()
    assert "cannot reach Redis at " + url in err and "REDIS_HOST/REDIS_PORT" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_env_file_and_unhandled_flag(pyapp: PyApp, redis_client: Any, tmp_path: Any) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in pyapp.env.items()
                                if k.startswith(("REDIS_", "DB_", "APP_", "CACHE_"))))
    env = {k: v for k, v in laraq_env(pyapp).items() if not k.startswith(("REDIS_", "DB_", "APP_", "CACHE_"))}
    pyapp.dispatch("plain", "py")
    proc = run_laraq(pyapp, "--once", "--queue=py", "--env-file", str(env_file), "--unhandled=release", env=env)
    assert proc.returncode == 0, proc.stderr
    assert redis_client.zcard(qkey(pyapp, "py:delayed")) == 1


def test_a_quit_signal_during_shutdown_does_not_turn_exit_0_into_a_signal_death() -> None:
    """Python resets its handlers to "terminate" while it shuts down; laraq's processes exit deaf to a
    late SIGTERM (a forwarded Horizon terminate arriving just after the worker stopped by itself)."""
    import os
    import sys
    import time

    code = ("import signal, sys\n"
            "from laraq.cli.work import _exit_ignoring_quit_signals\n"
            "signal.signal(signal.SIGTERM, lambda *a: None)  # the worker's own handler\n"
            "garbage = [[i] * 3 for i in range(2_000_000)]  # freed at shutdown: a long window\n"
            "print('exiting', flush=True)\n"
            "_exit_ignoring_quit_signals(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout is not None and proc.stdout.readline() == "exiting\n"
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.001)
    assert proc.wait(60) == 0
