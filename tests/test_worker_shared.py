"""A queue shared with ``php artisan queue:work``, on real Laravel 8, 12 and 13.

* laraq takes only the jobs it has a handler for and leaves the others in the list, in their order,
  untouched: no bounce through ``:delayed``, and artisan then runs them as if laraq had never looked.
* With artisan and laraq working the same queue at once, every job runs exactly once, each PHP-only job
  by PHP, each Python job by Python.
* The PHP side of a Python job (``examples/php/RunsInPython.php``): a PHP worker that picks one up hands
  it to the Python queue byte for byte instead of "completing" it, and laraq then runs it.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import popen_laraq, record, run_laraq, wait_for

from laraq.app import App
from laraq.bus.job import Job

pytestmark = pytest.mark.php

#: Python handles these two classes; EchoJob stays PHP's.
app = App("shared")


@app.handler("App\\Jobs\\PythonJob")
def python_job(command: Any, job: Job) -> None:
    record(job)


@app.handler("App\\Jobs\\HandedToPythonJob")
def handed_job(command: Any, job: Job) -> None:
    record(job, n=command.n)


APP = "test_worker_shared:app"


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel)


def key(php: PhpApp, queue: str) -> str:
    return php.prefix + "queues:" + queue


def dispatch(php: PhpApp, kind: str, queue: str, **args: Any) -> None:
    php.tool("dispatch", kind, f"--queue={queue}", "--args=" + json.dumps(args))


def uuid_of(member: bytes) -> str:
    return str(json.loads(member)["uuid"])


def test_laraq_leaves_php_jobs_in_place_and_artisan_runs_them(php: PhpApp, redis_client: Any) -> None:
    for n in range(12):
        dispatch(php, "echo", "shared", args={"n": n})
        dispatch(php, "python", "shared", document=f"d{n}")
    before = redis_client.lrange(key(php, "shared"), 0, -1)
    php_only = [m for m in before if b"EchoJob" in m]
    proc = run_laraq(php, "--queue=shared", "--stop-when-empty", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    # laraq ran every Python job and left the PHP-only ones exactly where they were, in order, untouched
    assert redis_client.lrange(key(php, "shared"), 0, -1) == php_only
    assert redis_client.zcard(key(php, "shared") + ":delayed") == 0
    assert redis_client.zcard(key(php, "shared") + ":reserved") == 0
    assert "unhandled" not in proc.stdout + proc.stderr
    ran = php.runs()
    assert sorted(r["uuid"] for r in ran) == sorted(uuid_of(m) for m in before if b"PythonJob" in m)
    assert {r["runner"] for r in ran} == {"python"}
    # artisan then runs the PHP-only jobs as if laraq had never looked at the queue
    php.artisan("queue:work", "redis", "--queue=shared", "--stop-when-empty", check=True)
    by_php = [r for r in php.runs() if r["runner"] == "php"]
    assert [r["uuid"] for r in by_php] == [uuid_of(m) for m in php_only]
    assert all(r["attempts"] == 1 for r in by_php)


def test_artisan_and_laraq_on_one_queue_run_each_job_once_where_it_belongs(php: PhpApp, redis_client: Any) -> None:
    artisan = php.popen_artisan("queue:work", "redis", "--queue=shared", "--sleep=0")
    laraq = popen_laraq(php, "--queue=shared,python", app_spec=APP)
    try:
        for n in range(25):
            dispatch(php, "echo", "shared", args={"n": n})
            dispatch(php, "handed", "shared", n=n)
        wait_for(lambda: len(php.runs()) >= 50, timeout=180)
        wait_for(lambda: all(redis_client.llen(key(php, q)) == 0 and redis_client.zcard(key(php, q) + ":reserved") == 0
                             for q in ("shared", "python")), timeout=60)
    finally:
        for proc in (artisan, laraq):
            proc.terminate()
        for proc in (artisan, laraq):
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    runs = php.runs()
    echo = [r for r in runs if r["class"].endswith("EchoJob")]
    handed = [r for r in runs if r["class"].endswith("HandedToPythonJob")]
    assert len(runs) == 50
    assert len(echo) == 25 and {r["runner"] for r in echo} == {"php"}
    assert len({r["uuid"] for r in echo}) == 25
    # every Python job ran once, in Python: the ones artisan picked up were handed over, not "completed"
    assert len(handed) == 25 and {r["runner"] for r in handed} == {"python"}
    assert sorted(r["n"] for r in handed) == list(range(25))
    # no job was bounced through :delayed, and none was left behind
    for q in ("shared", "python"):
        assert redis_client.zcard(key(php, q) + ":delayed") == 0


def test_a_php_worker_hands_a_python_job_over_untouched(php: PhpApp, redis_client: Any) -> None:
    dispatch(php, "handed", "shared", n=7)
    (body,) = redis_client.lrange(key(php, "shared"), 0, -1)
    php.artisan("queue:work", "redis", "--queue=shared", "--once", check=True)
    # PHP ran nothing, reserved nothing, failed nothing: the job is on the Python queue, byte for byte
    assert php.runs() == []
    assert redis_client.llen(key(php, "shared")) == 0
    assert redis_client.zcard(key(php, "shared") + ":reserved") == 0
    assert redis_client.lrange(key(php, "python"), 0, -1) == [body]
    proc = run_laraq(php, "--queue=python", "--stop-when-empty", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    (ran,) = php.runs()
    assert ran["runner"] == "python" and ran["n"] == 7 and ran["attempts"] == 1
    assert redis_client.llen(key(php, "python")) == 0
    assert redis_client.zcard(key(php, "python") + ":reserved") == 0


def test_python_jobs_behind_ten_thousand_php_jobs_run_with_no_php_worker(php: PhpApp, redis_client: Any) -> None:
    """No PHP worker (paused or absent), 10,000 PHP-only jobs ahead of 10 Python jobs: laraq's deep look
    past ``--scan-window`` finds the Python jobs, takes each exactly as Laravel's pop takes it, and leaves
    the PHP jobs in their order with their ``:notify`` tokens; no laraq call holds Redis 10 ms (Redis's
    own SLOWLOG). SLOWLOG times a call by the wall clock, which a loaded host stretches when it takes the
    CPU from Redis in the middle of a call: every call is logged, and one in a hundred (at least one) may
    pass 10 ms while the median stays under 2 ms; a look that read the whole list on every call fails both."""
    php.tool("dispatch", "echo", "--queue=shared", "--count=10000")
    for n in range(10):
        dispatch(php, "python", "shared", document=f"d{n}")
    before = redis_client.lrange(key(php, "shared"), 0, -1)
    php_only = [m for m in before if b"EchoJob" in m]
    assert len(php_only) == 10_000 and len(before) == 10_010
    slow_before = redis_client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    len_before = redis_client.config_get("slowlog-max-len")["slowlog-max-len"]
    redis_client.config_set("slowlog-max-len", 1_000_000)
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.slowlog_reset()
    laraq = popen_laraq(php, "--queue=shared", app_spec=APP)
    try:
        wait_for(lambda: len(php.runs()) >= 10, timeout=120)
        logged = redis_client.slowlog_get(1_000_000)
    finally:
        redis_client.config_set("slowlog-log-slower-than", slow_before)
        redis_client.config_set("slowlog-max-len", len_before)
        laraq.terminate()
        out, err = laraq.communicate(timeout=60)
    ran = php.runs()
    assert sorted(r["uuid"] for r in ran) == sorted(uuid_of(m) for m in before if b"PythonJob" in m)
    assert {r["runner"] for r in ran} == {"python"} and all(r["attempts"] == 1 for r in ran)
    # the PHP jobs are where they were, in order, each with its wake-up token
    assert redis_client.lrange(key(php, "shared"), 0, -1) == php_only
    assert redis_client.llen(key(php, "shared") + ":notify") == 10_000
    assert redis_client.zcard(key(php, "shared") + ":reserved") == 0
    calls = [e for e in logged if e["command"].upper().startswith((b"EVALSHA", b"EVAL "))]
    assert calls, "no script call was logged"
    durations = sorted(e["duration"] for e in calls)
    slow = [(e["duration"], e["command"][-120:]) for e in calls if e["duration"] > 10_000]
    assert durations[len(durations) // 2] < 2_000, durations
    assert len(slow) <= max(1, len(calls) // 100), slow
    assert "Traceback" not in err, err
