"""The worker in-process against real Redis.

With jobs dispatched by real PHP on each live Laravel line: handlers receive what PHP dispatched
(public/protected/private properties, encrypted commands, enums, dates, string-job data), and a job put
back by ``--unhandled requeue`` is still PHP's first attempt. With the fixture app's jobs pushed from Python
(``pyapp.PyApp``): jobs without a Python handler follow the ``--unhandled`` policy; timeouts are enforced
(async handlers cancelled, sync ones through the kill path after Laravel's bookkeeping, with each side of
10.10's change of exception); an unreadable command is failed; concurrency runs each job once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_worker_support as support
from phpapp import PhpApp
from pyapp import ENDS, PyApp

from laraq.cli.work import build_worker, default_params
from laraq.worker.worker import Worker


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))  # the in-process handlers record here
    return app


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.close()


def make_worker(php: PhpApp | PyApp, workers: list[Worker], app: Any = support.app, **overrides: Any) -> Worker:
    params = default_params(laravel=php.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, **overrides)
    worker = build_worker(params, env=php.env, app=app)
    workers.append(worker)
    return worker


def python_runs(php: PhpApp | PyApp) -> list[dict[str, Any]]:
    return [r for r in php.runs() if r["runner"] == "python"]


def failed_rows(php: PhpApp | PyApp) -> list[dict[str, Any]]:
    conn = sqlite3.connect(php.db_path)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM failed_jobs ORDER BY id")]
    conn.close()
    return rows


@pytest.mark.php
def test_handlers_get_what_php_dispatched(php: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    php.tool("dispatch", "python", "--queue=py", "--args=" + json.dumps(
        {"document": "q3.pdf", "options": {"pages": [1, 2], "fmt": "A4"}, "owner": "ünïcode", "token": "s3cr3t"}))
    php.tool("dispatch", "encrypted", "--queue=py", "--args=" + json.dumps({"secret": "top secret ✓"}))
    php.tool("dispatch", "rich", "--queue=py")
    php.tool("dispatch", "string", "--queue=py", "--args=" + json.dumps({"n": 7, "text": "Ünïcode"}))

    assert make_worker(php, workers, queue="py").daemon() == 0

    runs = {r["class"]: r for r in python_runs(php)}
    assert runs["App\\Jobs\\PythonJob"] | {"pid": 0} == runs["App\\Jobs\\PythonJob"] | {
        "document": "q3.pdf", "options": {"pages": [1, 2], "fmt": "A4"}, "owner": "ünïcode",
        "token": "s3cr3t", "attempts": 1, "queue": "py", "pid": 0}
    assert runs["App\\Jobs\\EncryptedJob"]["secret"] == "top secret ✓"
    rich = runs["App\\Jobs\\RichJob"]
    # Status is declared to laraq (app.enum): its cases come with their backing values; Suit is not
    assert rich["status"] == "active"
    assert rich["suit"] == "App\\Enums\\Suit::Spades"
    assert rich["statuses"] == ["active", "archived"]
    assert rich["when"] == "2024-01-02T03:04:05.123456+00:00"
    assert rich["immutable"] == "2024-06-30T23:59:59+02:00"
    assert runs["App\\Handlers\\Foo"]["data"] == {"n": 7, "text": "Ünïcode"}
    assert [r["runner"] for r in php.runs()] == ["python"] * 4  # PHP ran nothing
    assert not redis_client.keys("*queues:py*") and failed_rows(php) == []


@pytest.mark.php
def test_unhandled_requeue_puts_the_original_body_back(php: PhpApp, redis_client: Any,
                                                       workers: list[Worker]) -> None:
    php.tool("dispatch", "plain", "--queue=py")
    body = redis_client.lrange(php.prefix + "queues:py", 0, -1)[0]
    before = int(time.time())
    make_worker(php, workers, queue="py", unhandled="requeue", unhandled_delay=30).daemon()

    delayed = redis_client.zrange(php.prefix + "queues:py:delayed", 0, -1, withscores=True)
    assert [m for m, _ in delayed] == [body]  # byte for byte: attempts not burned
    assert before + 30 <= delayed[0][1] <= int(time.time()) + 30
    assert redis_client.zcard(php.prefix + "queues:py:reserved") == 0
    assert python_runs(php) == [] and failed_rows(php) == []
    # a PHP worker can still run it, as its first attempt
    redis_client.zadd(php.prefix + "queues:py:delayed", {body: 0})
    php.artisan("queue:work", "redis", "--once", "--queue=py", check=True)
    assert [(r["runner"], r["class"], r["attempts"]) for r in php.runs()] == [("php", "App\\Jobs\\PlainJob", 1)]


def test_unhandled_release_and_fail(pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    pyapp.dispatch("plain", "rel")
    make_worker(pyapp, workers, queue="rel", unhandled="release", unhandled_delay=5).daemon()
    (member, _), = redis_client.zrange(pyapp.prefix + "queues:rel:delayed", 0, -1, withscores=True)
    assert json.loads(member)["attempts"] == 1  # released: the attempt counts

    pyapp.dispatch("plain", "bad")
    body = redis_client.lrange(pyapp.prefix + "queues:bad", 0, -1)[0]
    make_worker(pyapp, workers, queue="bad", unhandled="fail").daemon()
    (row,) = failed_rows(pyapp)
    assert (row["connection"], row["queue"], row["payload"].encode()) == ("redis", "bad", body)
    assert row["exception"].startswith("RuntimeException: No Python handler registered for App\\Jobs\\PlainJob")
    assert redis_client.zcard(pyapp.prefix + "queues:bad:reserved") == 0


def test_async_handler_is_cancelled_at_its_timeout(pyapp: PyApp, redis_client: Any,
                                                  workers: list[Worker]) -> None:
    pyapp.dispatch("echo", "t", mode="sleep", seconds=30, settings={"timeout": 1, "tries": 3})
    worker = make_worker(pyapp, workers, app=support.async_app, queue="t", once=True)
    kills: list[int] = []
    worker.executor.kill = lambda: kills.append(1)

    assert worker.daemon() == 0
    assert kills == []  # cancelled cleanly: no need to kill the process
    # like a killed PHP worker: not failed (attempt 1 of 3), left reserved until retry_after
    assert redis_client.zcard(pyapp.prefix + "queues:t:reserved") == 1
    assert failed_rows(pyapp) == []


@pytest.mark.parametrize("pyapp", ENDS, indirect=True)
def test_sync_timeout_fails_last_attempt_then_kills(pyapp: PyApp, redis_client: Any,
                                                   workers: list[Worker]) -> None:
    pyapp.dispatch("echo", "t", mode="sleep", seconds=2, settings={"timeout": 1})
    worker = make_worker(pyapp, workers, queue="t", once=True)
    kills: list[int] = []
    worker.executor.kill = lambda: kills.append(1)

    worker.daemon()
    assert kills  # the handler thread cannot be interrupted: the process would be SIGKILLed
    (row,) = failed_rows(pyapp)
    # the text each line's own worker writes, 10.10+'s TimeoutExceededException or the older one
    # (compared with artisan's in test_worker_interop.py)
    expected = ("Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\EchoJob has been attempted too many "
                "times or run too long. The job may have previously timed out." if pyapp.version in ("8", "9") else
                "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\EchoJob has timed out.")
    assert row["exception"].startswith(expected)
    assert redis_client.zcard(pyapp.prefix + "queues:t:reserved") == 0


def test_unreadable_command_goes_to_failed_jobs(pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    pyapp.dispatch("python", "py")
    key = pyapp.prefix + "queues:py"
    payload = json.loads(redis_client.lpop(key))
    payload["data"]["command"] = 'O:19:"App\\Jobs\\PythonJob":1:{s:3:"bad'
    redis_client.rpush(key, json.dumps(payload))
    make_worker(pyapp, workers, queue="py").daemon()
    (row,) = failed_rows(pyapp)
    assert "Cannot unserialize the command of App\\Jobs\\PythonJob" in row["exception"]
    assert python_runs(pyapp) == []


@pytest.mark.parametrize("app", [support.app, support.async_app], ids=["sync", "async"])
def test_concurrency_runs_every_job_once(pyapp: PyApp, redis_client: Any, workers: list[Worker], app: Any) -> None:
    pyapp.dispatch("echo", "c", count=12, mode="sleep", seconds=0.1)
    pyapp.dispatch("echo", "c", mode="fail", settings={"tries": 1})
    assert make_worker(pyapp, workers, app=app, queue="c", concurrency=4).daemon() == 0
    runs = python_runs(pyapp)
    assert len(runs) == len({r["uuid"] for r in runs}) == 13
    assert len(failed_rows(pyapp)) == 1
    assert not redis_client.exists(pyapp.prefix + "queues:c", pyapp.prefix + "queues:c:reserved")
