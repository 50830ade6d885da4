"""``laraq`` operations commands on a real Redis without PHP: move/copy, export/import, doctor, status."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from laraq.cli.ops import COMMANDS, parse_delay
from laraq.dispatch import Dispatcher
from laraq.queue import RedisQueue

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})


@pytest.fixture
def env(redis_server, redis_client, tmp_path):
    return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": "old_",
            "LARAQ_LARAVEL_VERSION": "12.67", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "db.sqlite"),
            "APP_KEY": "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI=", "CACHE_STORE": "redis"}


def run(env, *args, code=0, input=None):
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def seed(redis_client, n=3, delayed=2):
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(n)]
           + [d.prepare_job("App\\Jobs\\Other", {"i": i}, delay=60) for i in range(delayed)])


def test_move_dry_run_then_move_to_the_13_prefix(env, redis_client):
    seed(redis_client)
    before = redis_client.lrange("old_queues:default", 0, -1)
    plan = json.loads(run(env, "move", "default", "--to-prefix", "new-", "--to-laravel", "13", "--dry-run", "--json"))
    assert plan["transferred"] == {"pending": 3, "delayed": 2}
    assert redis_client.llen("old_queues:default") == 3
    out = run(env, "move", "default", "--to-prefix", "new-", "--to-laravel", "13")
    assert "moved 5 jobs" in out
    assert redis_client.lrange("new-queues:default", 0, -1) == before
    assert redis_client.zcard("new-queues:default:delayed") == 2
    run(env, "move", "default", code=2)  # same queue


def test_copy_with_filter_and_export_import(env, redis_client, tmp_path):
    seed(redis_client)
    out = json.loads(run(env, "copy", "default", "mirror", "--filter", "*Other", "--json"))
    assert out["transferred"] == {"pending": 0, "delayed": 2}
    assert redis_client.zcard("old_queues:mirror:delayed") == 2 and redis_client.zcard("old_queues:default:delayed") == 2
    path = tmp_path / "jobs.jsonl"
    run(env, "export", "default", "-o", str(path))
    assert len(path.read_text().splitlines()) == 5
    out = run(env, "import", str(path), "--queue", "restored")
    assert "3 pending" in out and "2 delayed" in out
    assert redis_client.lrange("old_queues:restored", 0, -1) == redis_client.lrange("old_queues:default", 0, -1)


def test_doctor_findings(env, redis_client):
    seed(redis_client)
    redis_client.rpush("old_queues:default", b"s:3:\"abc\";")
    redis_client.rpush("laravel-database-queues:default", b"{}")
    redis_client.hset("laravel_horizon:masters", "x", 1)
    out = run(env, "doctor", "--json", code=1)
    findings = json.loads(out)
    titles = " | ".join(f["title"] for f in findings)
    assert "not JSON job payloads" in titles and "other prefixes" in titles and "Horizon" in titles
    bad = next(f for f in findings if "not JSON" in f["title"])
    assert "serializer=php" in bad["detail"] and bad["fix"]
    assert "retry_after" in titles
    text = run(env, "doctor", "--timeout", "100", code=1)
    assert "[ERROR] timeout 100s ≥ retry_after 90s" in text


def test_status_and_pause_resume(env, redis_client):
    seed(redis_client)
    table = run(env, "status")
    assert table.splitlines()[0].split() == ["queue", "pending", "delayed", "reserved", "oldest", "due", "expired",
                                             "poison"]
    run(env, "pause", "redis:default")
    key = b"old_laravel-cache-illuminate:queue:paused:redis:default"
    assert redis_server_keys(redis_client) == [key] and cache_db(redis_client).get(key) == b"b:1;"
    run(env, "resume", "default")
    assert not any(k.endswith(b"queue:paused:redis:default") for k in redis_server_keys(redis_client))
    out = run({**env, "LARAQ_LARAVEL_VERSION": "11"}, "pause", "default", code=1)
    assert "12.40" in out


def cache_db(client):
    import redis

    return redis.Redis(port=client.connection_pool.connection_kwargs["port"], db=1)


def redis_server_keys(client):
    return list(cache_db(client).scan_iter("*"))


def test_parse_delay():
    assert parse_delay("90") == 90 and parse_delay("5m") == 300 and parse_delay("1d") == 86400
    assert parse_delay("2030-01-01T00:00:00").year == 2030
    with pytest.raises(click.BadParameter):
        parse_delay("soon")
