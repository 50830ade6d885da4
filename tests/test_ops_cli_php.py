"""``laraq`` operations commands against the real Laravel 8, 12 and 13 fixture apps: retry, failed, restart,
inspect, clear, export/import."""

from __future__ import annotations

import json
import re
import sqlite3

import click
import pytest
from click.testing import CliRunner
from phpapp import PhpApp

from laraq.bus.dispatch import Dispatcher
from laraq.cli.ops import COMMANDS
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})


@pytest.fixture
def app(laravel, redis_client, redis_server, tmp_path):
    return PhpApp(redis_server.port, version=laravel, workdir=tmp_path)


def laraq(app: PhpApp, *args: str, code: int = 0, input: str | None = None) -> str:
    env = {**app.env, "LARAQ_LARAVEL_VERSION": app.release, "COLUMNS": "200"}
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
    from laraq.bus.dispatch import retry_failed
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import make_failed_store

    settings = LaravelSettings.from_env({**app.env}, version=app.release)
    store = make_failed_store(settings)
    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)
    outcomes = retry_failed(store, queue, [r[1] for r in rows], forget=False)
    assert [o.status for o in outcomes] == ["pushed", "pushed"]
    ours = [redis_client.lpop(app.prefix + "queues:default"), redis_client.lpop(app.prefix + "queues:other")]
    redis_client.delete(app.prefix + "queues:default:notify", app.prefix + "queues:other:notify")
    # PHP's bytes for the very same rows
    app.artisan("queue:retry", "all", check=True)
    theirs = [redis_client.lpop(app.prefix + "queues:default"), redis_client.lpop(app.prefix + "queues:other")]
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
    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)
    d = Dispatcher(queue)
    d.dispatch_job("App\\Jobs\\EchoJob", {})
    d.dispatch_job("App\\Jobs\\EchoJob", {}, delay=60)
    assert "Cleared 2 jobs from the [default] queue" in laraq(app, "clear", "--force")
    assert app.tool("size")["size"] == 0


# -- each repair command against PHP's own view ------------------------------------------------------------

def php_failed_ids(app: PhpApp) -> list[str]:
    """The ids ``php artisan queue:failed`` prints (uuids with the database-uuids driver)."""
    out = app.artisan("queue:failed", check=True).stdout
    if app.version == "8":  # a table: | ID | Connection | Queue | Class | Failed At |
        return [line.split("|")[1].strip() for line in out.splitlines()
                if line.startswith("|") and "-" in line.split("|")[1] and line.split("|")[1].strip() != "ID"]
    # 11+: one line per job, "  <failed at> <id>  <connection>@<queue> <class>"
    return re.findall(r"^\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (\S+)\s+\S+@", out, flags=re.M)


def restore(client, state: dict) -> None:
    client.flushdb()
    for name, (kind, value) in state.items():
        key = name.split(":", 1)[1]
        if kind == "list":
            client.rpush(key, *value)
        elif kind == "zset":
            client.zadd(key, dict(value))
        elif kind == "string":
            client.set(key, value)


def test_laraq_clear_leaves_the_same_state_as_artisan_queue_clear(app, redis_client):
    from conftest import dump_redis

    for args in (["echo"], ["echo", "--delay=60"], ["python"], ["echo", "--queue=other"]):
        app.tool("dispatch", *args)
    app.pop()  # one reserved job
    redis_client.rpush(app.prefix + "queues:default:notify", 1, 1)  # stale wake-up tokens
    seeded = dump_redis(redis_client)
    php = app.artisan("queue:clear", "redis", "--queue=default", check=True).stdout
    after_php = dump_redis(redis_client)
    restore(redis_client, seeded)
    assert dump_redis(redis_client) == seeded
    ours = laraq(app, "clear", "default", "--force")
    assert dump_redis(redis_client) == after_php
    assert [k.split(":", 1)[1] for k in after_php] == [app.prefix + "queues:other", app.prefix + "queues:other:notify"]
    assert "Cleared 3 jobs from the [default] queue" in php and "Cleared 3 jobs from the [default] queue" in ours


def test_failed_lists_what_php_wrote_and_forget_flush_prune_match_php_view(app):
    for queue in ("default", "other", "other"):
        fail_on_php(app, queue=queue)
    rows = failed_rows(app)
    uuids = [r[1] for r in rows]
    assert sorted(php_failed_ids(app)) == sorted(uuids)
    table = laraq(app, "failed").splitlines()
    assert table[0].split() == ["id", "connection", "queue", "class", "failed", "at"]
    assert sorted((line.split()[0], line.split()[2], line.split()[3]) for line in table[2:]) == sorted(
        (u, q, "App\\Jobs\\FailingJob") for _, u, _, q, _ in rows)
    # newest first, like Laravel's failer all()
    assert [f["id"] for f in json.loads(laraq(app, "failed", "--queue", "other", "--json"))] == uuids[:0:-1]

    laraq(app, "forget", uuids[0])
    assert sorted(php_failed_ids(app)) == sorted(uuids[1:])
    with sqlite3.connect(app.db_path) as db:  # one row failed three hours ago
        db.execute("update failed_jobs set failed_at = datetime('now', '-3 hours') where uuid = ?", (uuids[1],))
    assert "0 entries deleted!" in laraq(app, "prune-failed", "--hours", "4")
    assert "1 entries deleted!" in laraq(app, "prune-failed", "--hours", "2")
    assert php_failed_ids(app) == [uuids[2]]
    fail_on_php(app)
    with sqlite3.connect(app.db_path) as db:
        db.execute("update failed_jobs set failed_at = datetime('now', '-2 hours') where uuid = ?", (uuids[2],))
    laraq(app, "flush", "--hours", "1", "--force")
    [remaining] = php_failed_ids(app)
    assert remaining not in uuids  # only the new failure is left
    laraq(app, "flush", input="n\n", code=1)  # asks first
    assert php_failed_ids(app) == [remaining]
    laraq(app, "flush", "--force")
    assert php_failed_ids(app) == [] and "No failed jobs" in app.artisan("queue:failed").stdout


def test_retry_by_queue_and_range_then_php_runs_them(app, redis_client):
    fail_on_php(app, kind="echo", mode="fail-until", seconds=2, args=["a"])
    fail_on_php(app, kind="echo", queue="other", mode="fail-until", seconds=2, args=["b"])
    fail_on_php(app, kind="echo", queue="other", mode="fail-until", seconds=2, args=["c"])
    rows = failed_rows(app)
    out = json.loads(laraq(app, "retry", "--queue", "other", "--json"))
    assert [(o["id"], o["status"], o["queue"]) for o in out] == [(r[1], "pushed", "other") for r in rows[:0:-1]]
    assert [r[1] for r in failed_rows(app)] == [rows[0][1]]
    assert f"The failed job [{rows[0][0]}]" in laraq(app, "retry", "--range", f"{rows[0][0]}-{rows[0][0]}")
    assert failed_rows(app) == [] and php_failed_ids(app) == []
    bodies = [json.loads(m) for m in redis_client.lrange(app.prefix + "queues:other", 0, -1)]
    assert [b["attempts"] for b in bodies] == [0, 0] and [b["uuid"] for b in bodies] == [r[1] for r in rows[:0:-1]]
    app.artisan("queue:work", "redis", "--queue=default,other", "--stop-when-empty", "--sleep=0", "--tries=2",
                check=True)
    # per job: the original failed run, then (attempts reset to 0 by the retry) a failing and a passing attempt
    for name in "abc":
        assert [r["attempts"] for r in app.runs() if r["args"] == [name]] == [1, 1, 2]
    assert failed_rows(app) == []


def test_export_import_moves_php_jobs_to_another_prefix_and_db_where_php_runs_them(laravel, redis_server,
                                                                                  redis_client, tmp_path):
    old = PhpApp(redis_server.port, version=laravel, prefix="legacy_", workdir=tmp_path / "old")
    new = PhpApp(redis_server.port, version=laravel, workdir=tmp_path / "new", extra_env={"REDIS_DB": "2"})
    db2 = redis_server.client(2)
    db2.flushdb()
    old.tool("dispatch", "echo", "--count=3", "--args=" + json.dumps({"args": ["ü"], "mode": "ok"}))
    old.tool("dispatch", "encrypted", "--delay=600")
    c0 = redis_server.client(0)
    pending = c0.lrange("legacy_queues:default", 0, -1)
    delayed = c0.zrange("legacy_queues:default:delayed", 0, -1, withscores=True)
    path = tmp_path / "jobs.jsonl"
    laraq(old, "export", "-o", str(path))
    assert [json.loads(line)["state"] for line in path.read_text().splitlines()] == ["pending"] * 3 + ["delayed"]
    laraq(new, "import", str(path))
    assert db2.lrange(new.prefix + "queues:default", 0, -1) == pending  # byte for byte, order kept
    assert db2.zrange(new.prefix + "queues:default:delayed", 0, -1, withscores=True) == delayed  # scores kept
    new.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", check=True)
    assert [(r["uuid"], r["args"]) for r in new.runs()] == [(json.loads(m)["uuid"], ["ü"]) for m in pending]
    assert old.runs() == [] and c0.llen("legacy_queues:default") == 3  # export is read-only
    assert new.tool("size")["size"] == 1  # the delayed (encrypted) job waits in the new place
