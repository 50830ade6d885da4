"""artisan and laraq side by side: the same job with the same flags gives the same outcome.

Each test dispatches the same ``EchoJob`` (real PHP: the Laravel 8, 12 and 13 fixture apps) to two queues, runs
``php artisan queue:work`` on one and ``laraq work`` (a real process, handlers mirroring EchoJob's modes)
on the other, then compares Redis and ``failed_jobs``: release with backoff (the ``:delayed`` score
offset and attempts), tries exhausted, ``retryUntil``, ``maxExceptions`` counted across both languages,
timeouts (failed, or left in ``:reserved`` for ``retry_after``), ``failOnTimeout``, and a failed job
retried with ``php artisan queue:retry`` then run by laraq.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import laraq_env, run_laraq

from laraq.config.settings import LaravelSettings
from laraq.stores.cache import LaravelCache

pytestmark = pytest.mark.php


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel)


def qkey(php: PhpApp, queue: str) -> str:
    return php.prefix + "queues:" + queue


def dispatch_echo(php: PhpApp, queue: str, mode: str, seconds: float = 0, **settings: Any) -> None:
    php.tool("dispatch", "echo", f"--queue={queue}",
             "--args=" + json.dumps({"args": {"q": queue}, "mode": mode, "seconds": seconds, "settings": settings}))


def failed_rows(php: PhpApp) -> dict[str, dict[str, Any]]:
    conn = sqlite3.connect(php.db_path)
    conn.row_factory = sqlite3.Row
    rows = {r["queue"]: dict(r) for r in conn.execute("SELECT * FROM failed_jobs")}
    conn.close()
    return rows


def delayed(php: PhpApp, redis_client: Any, queue: str) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(m), s) for m, s in redis_client.zrange(qkey(php, queue) + ":delayed", 0, -1, withscores=True)]


def both_once(php: PhpApp, *flags: str) -> dict[str, tuple[float, float]]:
    """Run artisan on queue ``pq`` and laraq on ``lq`` with the same flags; returns when each ran (start, end)."""
    ran = {}
    started = time.time()
    php.artisan("queue:work", "redis", "--once", "--queue=pq", *flags, check=True)
    ran["pq"] = (started, time.time())
    started = time.time()
    proc = run_laraq(php, "--once", "--queue=lq", *flags)
    assert proc.returncode == 0, proc.stderr
    ran["lq"] = (started, time.time())
    return ran


def max_attempts(php: PhpApp) -> str:
    """The first line of the MaxAttemptsExceededException a worker of this line fails a job with."""
    tail = "." if php.profile.since("10.10") else " or run too long. The job may have previously timed out."
    return f"Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\EchoJob has been attempted too many times{tail}"


def timed_out(php: PhpApp) -> str:
    """The first line of the exception a job failed by its timeout gets (10.10+: TimeoutExceededException)."""
    if not php.profile.since("10.10"):
        return max_attempts(php)
    return "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\EchoJob has timed out."


def first_line(exception: str) -> str:
    """``Class: message`` without the file/line part (which names a PHP or a Python file)."""
    return re.sub(r" in \S+:\d+$", "", exception.splitlines()[0])


@pytest.mark.parametrize(("settings", "flags", "expected_delay"), [
    ({"tries": 3, "backoff": [7, 20]}, (), 7),      # the job's own backoff
    ({"tries": 3}, ("--backoff=4,9",), 4),           # the --backoff list
    ({}, ("--tries=2", "--backoff=5"), 5),           # --tries from the command line
])
def test_release_with_backoff(php: PhpApp, redis_client: Any, settings: dict[str, Any],
                              flags: tuple[str, ...], expected_delay: int) -> None:
    for queue in ("pq", "lq"):
        dispatch_echo(php, queue, "fail", **settings)
    ran = both_once(php, *flags)
    for queue in ("pq", "lq"):
        ((member, score),) = delayed(php, redis_client, queue)
        assert member["attempts"] == 1, queue
        assert redis_client.zcard(qkey(php, queue) + ":reserved") == 0
        # released at some second while the worker ran, with the expected delay (availableAt is whole seconds)
        start, end = ran[queue]
        assert int(start) + expected_delay <= score <= int(end) + expected_delay, (queue, score - start)
    assert failed_rows(php) == {}
    assert [(r["runner"], r["attempts"]) for r in php.runs()] == [("php", 1), ("python", 1)]


def test_tries_exhausted_gives_the_same_failed_jobs_row(php: PhpApp, redis_client: Any) -> None:
    bodies = {}
    for queue in ("pq", "lq"):
        dispatch_echo(php, queue, "fail", tries=2)
        bodies[queue] = redis_client.lrange(qkey(php, queue), 0, -1)[0]
        # a previous attempt already happened: this run is attempt 2 of 2
        payload = json.loads(bodies[queue])
        payload["attempts"] = 1
        redis_client.delete(qkey(php, queue))
        bodies[queue] = json.dumps(payload).encode()
        redis_client.rpush(qkey(php, queue), bodies[queue])
    both_once(php)
    rows = failed_rows(php)
    for queue in ("pq", "lq"):
        row = rows[queue]
        assert row["connection"] == "redis"
        assert row["payload"].encode() == bodies[queue]  # the original body, not the reserved one
        assert row["uuid"] == json.loads(bodies[queue])["uuid"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row["failed_at"])
        assert "\nStack trace:\n#0 " in row["exception"]
        assert not redis_client.exists(qkey(php, queue) + ":reserved", qkey(php, queue) + ":delayed")
    assert first_line(rows["pq"]["exception"]) == "RuntimeException: echo job failed on purpose"
    assert first_line(rows["lq"]["exception"]) == "RuntimeError: echo job failed on purpose"


@pytest.mark.parametrize(("retry_until_offset", "ran"), [(-30, False), (3600, True)])
def test_retry_until_wins_over_tries(php: PhpApp, redis_client: Any, retry_until_offset: int, ran: bool) -> None:
    for queue in ("pq", "lq"):
        dispatch_echo(php, queue, "ok", tries=1)
        payload = json.loads(redis_client.lpop(qkey(php, queue)))
        payload["attempts"] = 5  # far beyond tries: only retryUntil decides
        payload["retryUntil"] = int(time.time()) + retry_until_offset
        redis_client.rpush(qkey(php, queue), json.dumps(payload))
    both_once(php)
    rows = failed_rows(php)
    assert [r["runner"] for r in php.runs()] == (["php", "python"] if ran else [])
    if ran:
        assert rows == {}
    else:
        assert first_line(rows["pq"]["exception"]) == first_line(rows["lq"]["exception"]) == max_attempts(php)
    for queue in ("pq", "lq"):
        assert redis_client.zcard(qkey(php, queue) + ":reserved") == 0


def test_max_exceptions_are_counted_across_php_and_python(php: PhpApp, redis_client: Any,
                                                          redis_server: Any) -> None:
    dispatch_echo(php, "mx", "fail", tries=10, maxExceptions=2)
    uuid = json.loads(redis_client.lrange(qkey(php, "mx"), 0, -1)[0])["uuid"]
    settings = LaravelSettings.from_env(php.env, version=php.release)
    counter = LaravelCache.from_settings(settings).key(f"job-exceptions:{uuid}")
    cache = redis_server.client(db=1)

    php.artisan("queue:work", "redis", "--once", "--queue=mx", check=True)  # exception 1: released
    assert cache.get(counter) == b"1"
    assert 0 < cache.ttl(counter) <= 86400
    proc = run_laraq(php, "--once", "--queue=mx")  # exception 2: maxExceptions reached
    assert proc.returncode == 0, proc.stderr

    assert [(r["runner"], r["attempts"]) for r in php.runs()] == [("php", 1), ("python", 2)]
    row = failed_rows(php)["mx"]
    assert first_line(row["exception"]) == "RuntimeError: echo job failed on purpose"
    assert cache.get(counter) is None
    assert not redis_client.exists(qkey(php, "mx:delayed"), qkey(php, "mx:reserved"), qkey(php, "mx"))


@pytest.mark.parametrize(("settings", "outcome"), [
    ({"tries": 1}, "failed"),
    ({"tries": 3}, "reserved"),
    ({"tries": 3, "failOnTimeout": True}, "failed"),
])
def test_timeout_like_php(php: PhpApp, redis_client: Any, settings: dict[str, Any], outcome: str) -> None:
    for queue in ("pq", "lq"):
        dispatch_echo(php, queue, "sleep", 20, timeout=1, **settings)
    # artisan enforces timeouts in daemon mode only: its worker SIGKILLs itself
    proc = php.artisan("queue:work", "redis", "--stop-when-empty", "--queue=pq", "--sleep=0", timeout=60)
    assert proc.returncode == -9
    # laraq's worker process kills itself the same way; its supervisor starts a new one, which stops
    # because the queue is empty
    laraq = run_laraq(php, "--stop-when-empty", "--queue=lq")
    assert laraq.returncode == 0, laraq.stderr
    assert "died by SIGKILL" in laraq.stderr

    rows = failed_rows(php)
    for queue in ("pq", "lq"):
        reserved = redis_client.zrange(qkey(php, queue) + ":reserved", 0, -1)
        if outcome == "failed":
            assert reserved == []
            assert first_line(rows[queue]["exception"]) == timed_out(php)
        else:
            assert queue not in rows
            assert [json.loads(m)["attempts"] for m in reserved] == [1]  # back after retry_after
    assert sorted(r["runner"] for r in php.runs()) == ["php", "python"]


def test_failed_job_retried_by_artisan_is_run_by_laraq(php: PhpApp, redis_client: Any) -> None:
    php.tool("dispatch", "python", "--queue=py", '--args={"document": "retry.pdf"}')
    failing = run_laraq(php, "--once", "--queue=py", env=laraq_env(php, LARAQ_TEST_FAIL_PYTHON="1"))
    assert failing.returncode == 0, failing.stderr
    row = failed_rows(php)["py"]
    assert first_line(row["exception"]) == "RuntimeError: python job failed on purpose: retry.pdf"

    php.artisan("queue:retry", row["uuid"], check=True)
    assert failed_rows(php) == {}
    proc = run_laraq(php, "--once", "--queue=py")
    assert proc.returncode == 0, proc.stderr

    runs = [(r["runner"], r["uuid"], r["attempts"], r["document"]) for r in php.runs()]
    assert runs == [("python", row["uuid"], 1, "retry.pdf")] * 2
    assert failed_rows(php) == {}
    assert not redis_client.exists(qkey(php, "py"), qkey(php, "py:reserved"), qkey(php, "py:delayed"))
