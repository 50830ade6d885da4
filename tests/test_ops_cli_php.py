"""``laraq`` operations commands against the real Laravel 8 fixture app: retry, failed, restart, inspect."""

from __future__ import annotations

import json
import sqlite3

import click
import pytest
from click.testing import CliRunner
from phpapp import PhpApp

from laraq.cli.ops import COMMANDS
from laraq.dispatch import Dispatcher
from laraq.queue import RedisQueue

pytestmark = pytest.mark.php

PREFIX = "laravel_database_"
cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})


@pytest.fixture
def app(php, redis_client, redis_server, tmp_path):
    return PhpApp(redis_server.port, workdir=tmp_path)


def laraq(app: PhpApp, *args: str, code: int = 0, input: str | None = None) -> str:
    env = {**app.env, "LARAQ_LARAVEL_VERSION": "8.83.26"}
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def failed_rows(app: PhpApp) -> list[tuple]:
    with sqlite3.connect(app.db_path) as db:
        return db.execute("select id, uuid, connection, queue, payload from failed_jobs order by id").fetchall()


def fail_on_php(app: PhpApp, kind: str = "failing", queue: str = "default", **args: object) -> None:
    app.tool("dispatch", kind, f"--queue={queue}", "--args=" + json.dumps(args or {}))
    app.artisan("queue:work", "redis", f"--queue={queue}", "--stop-when-empty", "--sleep=0", check=True)


def test_laraq_retry_pushes_the_same_bytes_as_php_queue_retry(app, redis_client):
    fail_on_php(app, reason="échec ✗ / retry")
    fail_on_php(app, kind="echo", queue="other", mode="fail", args={"empty": [], "u": "ü"})
    rows = failed_rows(app)
    assert len(rows) == 2
    # laraq's bytes, without forgetting the rows (the store is shared with PHP)
    from laraq.config import LaravelSettings
    from laraq.dispatch import retry_failed
    from laraq.failed import make_failed_store

    settings = LaravelSettings.from_env({**app.env}, version="8.83.26")
    store = make_failed_store(settings)
    queue = RedisQueue(redis_client, prefix=PREFIX, version="8.83.26")
    outcomes = retry_failed(store, queue, [r[1] for r in rows], forget=False)
    assert [o.status for o in outcomes] == ["pushed", "pushed"]
    ours = [redis_client.lpop(PREFIX + "queues:default"), redis_client.lpop(PREFIX + "queues:other")]
    redis_client.delete(PREFIX + "queues:default:notify", PREFIX + "queues:other:notify")
    # PHP's bytes for the very same rows
    app.artisan("queue:retry", "all", check=True)
    theirs = [redis_client.lpop(PREFIX + "queues:default"), redis_client.lpop(PREFIX + "queues:other")]
    assert ours == theirs
    assert b"\\u00e9chec \\u2717" in ours[0]  # unicode escaped like PHP's json_encode without flags
    assert [json.loads(b)["attempts"] for b in ours] == [0, 0]


def test_cli_retry_all_runs_on_php_and_forgets(app, redis_client):
    fail_on_php(app, kind="echo", mode="fail", args=["first"])
    [(row_id, uuid, connection, queue, _)] = failed_rows(app)
    listing = json.loads(laraq(app, "failed", "--json"))
    assert [(f["id"], f["queue"], f["class"]) for f in listing] == [(uuid, "default", "App\\Jobs\\EchoJob")]
    assert "App\\Jobs\\EchoJob" in laraq(app, "failed")
    out = laraq(app, "retry", "all")
    assert f"The failed job [{uuid}] has been pushed back onto the queue!" in out
    assert failed_rows(app) == []
    app.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", check=True)
    runs = [r for r in app.runs() if r["uuid"] == uuid]
    assert [r["attempts"] for r in runs] == [1, 1]  # the original run and the retried one
    assert len(failed_rows(app)) == 1  # it failed again (mode=fail) and PHP logged it again
    assert "Unable to find failed job with ID [nope]." in laraq(app, "retry", "nope", code=1)


def test_cli_forget_flush_prune(app):
    fail_on_php(app)
    fail_on_php(app)
    first, second = failed_rows(app)
    assert "Failed job deleted successfully!" in laraq(app, "forget", first[1])
    laraq(app, "forget", "missing-id", code=1)
    assert "0 entries deleted!" in laraq(app, "prune-failed", "--hours=1")
    assert len(failed_rows(app)) == 1
    laraq(app, "flush", "--force")
    assert failed_rows(app) == []


def test_cli_restart_is_seen_by_php(app):
    out = laraq(app, "restart")
    stamp = int(out.split("(")[1].split(")")[0])
    assert int(app.tool("cache-get", "illuminate:queue:restart")["value"]) == stamp


def test_cli_dispatch_status_peek_show(app, redis_client):
    out = json.loads(laraq(app, "dispatch", "App\\Jobs\\EchoJob", "-p", 'args={"n":1}', "--protected", "note=hi",
                           "--private", "hidden=pv", "--tries", "3", "--json"))
    uuid = out[0]["uuid"]
    laraq(app, "dispatch", "App\\Jobs\\PythonJob", "-q", "emails", "--delay", "1h", "--count", "2")
    laraq(app, "dispatch", "App\\Handlers\\Foo@bar", "--data", '{"x": 1}', "-q", "strings")
    status = json.loads(laraq(app, "status", "--json"))
    by_name = {q["queue"]: q for q in status["queues"]}
    assert set(by_name) == {"default", "emails", "strings"}
    assert (by_name["default"]["pending"], by_name["emails"]["delayed"], by_name["strings"]["pending"]) == (1, 2, 1)
    text = laraq(app, "status")
    assert "queue" in text.splitlines()[0] and "emails" in text
    [peeked] = json.loads(laraq(app, "peek", "--json"))
    assert peeked["uuid"] == uuid and peeked["max_tries"] == 3
    assert peeked["properties"]["args"] == {"n": 1} and peeked["properties"]["note"] == "hi"
    assert peeked["properties"]["hidden"] == "pv"
    delayed = json.loads(laraq(app, "list", "emails", "--state", "delayed", "--json"))
    assert len(delayed) == 2 and all(d["available_at"] for d in delayed)
    shown = json.loads(laraq(app, "show", uuid, "--json"))
    assert shown[0]["queue"] == "default" and shown[0]["state"] == "pending"
    assert "App\\Jobs\\EchoJob" in laraq(app, "show", shown[0]["id"])
    laraq(app, "show", "nothing-like-this", code=1)
    app.artisan("queue:work", "redis", "--queue=default,strings", "--stop-when-empty", "--sleep=0", check=True)
    assert {r["class"] for r in app.runs()} == {"App\\Jobs\\EchoJob", "App\\Handlers\\Foo@bar"}


def test_cli_clear(app, redis_client):
    queue = RedisQueue(redis_client, prefix=PREFIX, version="8.83.26")
    d = Dispatcher(queue)
    d.dispatch_job("App\\Jobs\\EchoJob", {})
    d.dispatch_job("App\\Jobs\\EchoJob", {}, delay=60)
    assert "Cleared 2 jobs from the [default] queue" in laraq(app, "clear", "--force")
    assert app.tool("size")["size"] == 0
