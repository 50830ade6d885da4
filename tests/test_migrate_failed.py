"""Issue 32: failed jobs move too (``laraq move-failed``), between any two failed-job stores, staying
failed or retried into the destination queue, each job once.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.config.settings import LaravelSettings
from laraq.ops.failed_move import move_failed
from laraq.protocol.queue import RedisQueue
from laraq.stores.failed import make_failed_store


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def payload(n: int, queue: str = "default", cls: str = "App\\Jobs\\EchoJob") -> str:
    return json.dumps({"uuid": f"uuid-{n}", "displayName": cls, "job": "Illuminate\\Queue\\CallQueuedHandler@call",
                       "maxTries": None, "attempts": 1, "data": {"commandName": cls, "command": "O:1:x"},
                       "id": f"id-{n}"}, separators=(",", ":"))


def store_for(env_vars: dict[str, str], **extra: str):
    store = make_failed_store(LaravelSettings.from_env({**env_vars, **extra}, version="12.67"))
    store.ensure_table()
    return store


def fill(store, n=5, queue="default"):
    for i in range(n):
        store.log("redis", queue if i % 2 == 0 else "mail", payload(i), f"RuntimeException: boom {i}")


def write_env(path, values: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return str(path)


def test_sqlite_to_sqlite_any_table_stays_failed_once(env, tmp_path):  # noqa: F811
    src = store_for(env)
    fill(src)
    dest_vars = {"DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "new.sqlite"),
                 "LARAQ_FAILED_TABLE": "dead_jobs", "LARAQ_LARAVEL_VERSION": "13"}
    (tmp_path / "new.sqlite").touch()
    dest_env = write_env(tmp_path / ".env", dest_vars)
    out = invoke(env, "move-failed", "--to-env-file", dest_env).stdout
    assert out.startswith("moved 5 failed job(s) as failed jobs") and "(3 default, 2 mail)" in out
    conn = sqlite3.connect(tmp_path / "new.sqlite")
    rows = conn.execute("select uuid, connection, queue, payload, exception, failed_at from dead_jobs").fetchall()
    assert sorted(r[0] for r in rows) == [f"uuid-{i}" for i in range(5)]
    original = {f"uuid-{i}": payload(i) for i in range(5)}
    assert all(r[3] == original[r[0]] and r[1] == "redis" and r[4].startswith("RuntimeException") for r in rows)
    assert src.all() == []
    # killed after the destination wrote but before the source forgot: the re-run forgets, writes nothing
    fill(src, n=2)
    again = invoke(env, "move-failed", "--to-env-file", dest_env, "--json").stdout
    assert json.loads(again)["already_at_destination"] == 2 and json.loads(again)["moved"] == 0
    assert conn.execute("select count(*) from dead_jobs").fetchone()[0] == 5 and src.all() == []


def test_legacy_source_and_copy_and_queue_filter(env, tmp_path):  # noqa: F811
    legacy = store_for(env, QUEUE_FAILED_DRIVER="database", LARAQ_FAILED_TABLE="old_failed")
    fill(legacy, n=4)
    dest = store_for({"DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "d.sqlite")})
    summary = move_failed(legacy, dest_store=dest, dest_version="13", queues=("mail",), copy=True)
    assert summary.moved == 2 and summary.skipped_by_filter == 2 and len(legacy.all()) == 4
    assert sorted(r.uuid for r in dest.all()) == ["uuid-1", "uuid-3"]
    assert move_failed(legacy, dest_store=dest, dest_version="13", copy=True).moved == 2  # the other two only
    assert len(dest.all()) == 4


def test_retry_into_the_destination_queue_once(env, redis_client, tmp_path):  # noqa: F811
    src = store_for(env)
    fill(src, n=3)
    url = f"redis://127.0.0.1:{redis_client.connection_pool.connection_kwargs['port']}/0"
    out = invoke(env, "move-failed", "--retry", "--to-url", url, "--to-prefix", "new_", "--to-laravel", "13").stdout
    assert out.startswith("moved 3 failed job(s) retried into the queue")
    pushed = [json.loads(m) for m in redis_client.lrange("new_queues:default", 0, -1)]
    assert [p["uuid"] for p in pushed] == ["uuid-0", "uuid-2"] and all(p["attempts"] == 0 for p in pushed)
    assert redis_client.llen("new_queues:default:notify") == 2 and redis_client.llen("new_queues:mail") == 1
    # a worker ran them; the same rows come back (a copy restored): nothing is pushed twice
    redis_client.delete("new_queues:default", "new_queues:mail")
    fill(src, n=3)
    again = json.loads(invoke(env, "move-failed", "--retry", "--to-url", url, "--to-prefix", "new_", "--json").stdout)
    assert again["moved"] == 0 and again["already_at_destination"] == 3
    assert redis_client.llen("new_queues:default") == 0 and src.all() == []


@pytest.mark.parametrize("direction", ["mariadb-to-postgres", "postgres-to-mariadb"])
def test_between_database_servers(request, direction):
    mariadb = request.getfixturevalue("mariadb")
    postgres = request.getfixturevalue("postgres")
    a, b = (mariadb, postgres) if direction.startswith("mariadb") else (postgres, mariadb)
    src = store_for(a.env, LARAQ_FAILED_TABLE="failed_" + direction.replace("-", "_"))
    dest = store_for(b.env, LARAQ_FAILED_TABLE="moved_" + direction.replace("-", "_"))
    fill(src, n=4)
    assert move_failed(src, dest_store=dest, dest_version="13").moved == 4
    assert move_failed(src, dest_store=dest, dest_version="13").moved == 0
    assert sorted(r.uuid for r in dest.all()) == [f"uuid-{i}" for i in range(4)] and src.all() == []
    assert {r.uuid: r.payload for r in dest.all()} == {f"uuid-{i}": payload(i) for i in range(4)}


def test_debounced_jobs_stay_behind_for_an_older_destination(env, redis_client):  # noqa: F811
    src = store_for(env)
    body = json.loads(payload(9))
    body["data"]["command"] = 'O:8:"App\\\\Job":1:{s:13:"debounceOwner";s:3:"abc";}'
    src.log("redis", "default", json.dumps(body), "E")
    dest = RedisQueue(redis_client, prefix="p_", version="12.67")
    summary = move_failed(src, dest_queue=dest, dest_version="12.67")
    assert summary.moved == 0 and len(summary.refused) == 1 and "DebounceFor" in summary.refused[0]
    assert len(src.all()) == 1 and redis_client.dbsize() == 0
