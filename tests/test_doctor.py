"""``laraq doctor`` on a seeded real Redis: every problem it lists is found, with a fix, and only then."""

from __future__ import annotations

import json
import time

import click
import pytest
from click.testing import CliRunner

from laraq.bus.dispatch import Dispatcher
from laraq.cli.ops import COMMANDS
from laraq.config.settings import LaravelSettings
from laraq.ops.doctor import diagnose
from laraq.protocol.queue import RedisQueue

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})
PREFIX = "laravel_database_"


@pytest.fixture
def env(redis_server, redis_client, tmp_path):
    return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
            "LARAQ_LARAVEL_VERSION": "8.83.26", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "db.sqlite"),
            "COLUMNS": "200"}


def findings(env, queue=None, **kwargs):
    settings = LaravelSettings.from_env(env, version=env["LARAQ_LARAVEL_VERSION"])
    queue = queue or RedisQueue(settings_client(env), prefix=env["REDIS_PREFIX"], version=settings.version,
                                retry_after=settings.retry_after)
    return diagnose(settings, queue, **kwargs)


def settings_client(env):
    import redis

    return redis.Redis(port=int(env["REDIS_PORT"]))


def by_title(found, text):
    hits = [f for f in found if text in f.title]
    assert len(hits) == 1, [f.title for f in found]
    assert hits[0].fix or hits[0].level == "ok"
    return hits[0]


def levels(found):
    return {f.level for f in found}


def queue8(client, now=None):
    return RedisQueue(client, prefix=PREFIX, version="8.83.26", clock=(lambda: now) if now else time.time)


def test_a_healthy_setup_has_no_warnings(env, redis_client):
    Dispatcher(queue8(redis_client)).dispatch_job("App\\Jobs\\EchoJob", {"args": [1]})
    found = findings(env)
    # info: where the configuration came from (only .env here) and the values assumed (compat-docs/config.md)
    assert levels(found) == {"ok", "info"}, [(f.level, f.title) for f in found]
    assert [f.title for f in found if f.level == "info"][0].startswith("the app's config/*.php was not read")
    assert by_title(found, "1 queue(s) under prefix").title.endswith(": default")
    by_title(found, "payloads match Laravel 8.83")


def test_non_json_members_are_named_by_what_wrote_them(env, redis_client):
    for member in (b's:3:"abc";', b"\x00\x00\x00\x02\x11", b"\x93\x01\x02\x03", b"\x28\xb5\x2f\xfdxx", b"lz4junk"):
        redis_client.rpush(PREFIX + "queues:default", member)
    redis_client.zadd(PREFIX + "queues:default:delayed", {b'{"job":"no attempts"}': 1})
    found = findings(env)
    bad = [f for f in found if "not JSON job payloads" in f.title]
    assert {f.detail for f in bad} == {
        "phpredis serializer=php", "phpredis serializer=igbinary", "phpredis serializer=msgpack",
        "phpredis compression=zstd", "phpredis compression (lzf/lz4) or a foreign producer",
        "not a job payload (no numeric attempts)"}
    assert all(f.level == "error" and "'serializer'/'compression'" in f.fix for f in bad)


def test_poison_expired_reservations_due_delayed_and_notify_drift(env, redis_client):
    now = time.time()
    past = queue8(redis_client, now=now - 3600)
    d = Dispatcher(past)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(3)]
           + [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, delay=1) for i in range(101)])
    past.pop()
    past.pop()  # two reservations that expired long ago (retry_after 90)
    redis_client.rpush(PREFIX + "queues:default:poison", b"junk")
    redis_client.rpush(PREFIX + "queues:default:notify", *([1] * 1200))
    found = findings(env)
    assert "1 member(s) in laraq's poison list" in by_title(found, "poison list").title
    assert "laraq clear default --poison" in by_title(found, "poison list").fix
    expired = by_title(found, "expired reservation")
    assert expired.title.startswith("queue 'default': 2 expired") and "queue:work" in expired.fix
    assert "101 delayed job(s) already due" in by_title(found, "already due").title
    drift = by_title(found, ":notify drift")
    assert "1201 tokens for 1 jobs" in drift.title and "DEL laravel_database_queues:default:notify" in drift.fix


def test_timeout_at_or_above_retry_after(env, redis_client):
    assert "timeouts (60s) below retry_after (90s)" in [f.title for f in findings(env)]
    f = by_title(findings(env, worker_timeout=90), "retry_after 90s")
    assert f.level == "error" and f.title.startswith("timeout 90s ≥")
    Dispatcher(queue8(redis_client)).dispatch_job("App\\Jobs\\Slow", {}, timeout=120)  # a job's own $timeout
    assert by_title(findings(env), "≥ retry_after").title.startswith("timeout 120s")
    shorter = {**env, "REDIS_QUEUE_RETRY_AFTER": "30"}
    assert by_title(findings(shorter, queue=RedisQueue(redis_client, prefix=PREFIX, version="8", retry_after=30)),
                    "≥ retry_after").level == "error"


def test_prefix_and_version_guess(env, redis_client):
    d13 = Dispatcher(RedisQueue(redis_client, prefix="laravel-database-", version="13"))
    d13.dispatch_job("App\\Jobs\\EchoJob", {})
    found = findings(env)  # set up for Laravel 8 and its prefix; the app writes 13's layout
    other = by_title(found, "other prefixes")
    assert other.level == "error" and "'laravel-database-' (2 keys)" in other.detail
    assert "--to-prefix" in other.fix
    by_title(found, "no queue keys under prefix")
    d8 = Dispatcher(queue8(redis_client))
    d8.dispatch_job("App\\Jobs\\EchoJob", {})
    env13 = {**env, "LARAQ_LARAVEL_VERSION": "13"}
    # 8.x payloads where the app is 13 (queued before an upgrade, or moved 8 -> 13): 13 runs them, no --laravel advice
    older = by_title(findings(env13, queue=RedisQueue(redis_client, prefix=PREFIX, version="13")),
                     "payloads dispatched by an older Laravel")
    assert older.level == "ok" and "8.43–12.10" in older.title and "--laravel" not in older.fix
    assert by_title(findings(env), "other prefixes").level == "warn"  # jobs exist under ours too now
    # payloads newer than the version laraq is set to: that is a wrong --laravel
    Dispatcher(RedisQueue(redis_client, prefix=PREFIX, version="13")).dispatch_job("App\\Jobs\\EchoJob", {})
    guess = by_title(findings(env), "payloads look like")
    assert guess.level == "warn" and guess.title.startswith("payloads look like Laravel 13, newer than the 8.83")
    assert "--laravel" in guess.fix


def test_unhandled_classes_with_app(env, redis_client):
    d = Dispatcher(queue8(redis_client))
    d.dispatch_job("App\\Jobs\\EchoJob", {})
    d.dispatch_string("App\\Handlers\\Foo@bar", {"x": 1})
    by_title(findings(env, app_ref="test_worker_support:app"), "every job class seen has a Python handler")
    d.dispatch_job("App\\Jobs\\PhpOnly", {}, queue="php")
    d.dispatch_job("App\\Jobs\\AlsoPhp", {}, queue="php", delay=60)
    missing = by_title(findings(env, app_ref="test_worker_support:app"), "no Python handler")
    assert missing.title.startswith("2 job class(es)") and missing.detail == "App\\Jobs\\AlsoPhp, App\\Jobs\\PhpOnly"
    assert by_title(findings(env, app_ref="no_such_module:app"), "cannot load --app").level == "error"


def test_horizon_keys_and_payloads(env, redis_client):
    assert not [f for f in findings(env) if "Horizon" in f.title]
    redis_client.hset("laravel_horizon:supervisors", "a", 1)
    assert "laravel_horizon:supervisors" in by_title(findings(env), "Horizon").detail
    redis_client.delete("laravel_horizon:supervisors")
    body = {"uuid": "u", "displayName": "App\\Jobs\\X", "job": "x", "data": {}, "id": "u", "attempts": 0,
            "failOnTimeout": False, "pushedAt": "1700000000.1234", "tags": [], "type": "job", "silenced": False}
    redis_client.rpush(PREFIX + "queues:default", json.dumps(body))
    assert "pushedAt" in by_title(findings(env), "Horizon").detail


def test_unreachable_redis_and_cli_exit_codes(env, redis_client):
    from test_worker_support import free_port_url

    port = free_port_url().rsplit(":", 1)[1].split("/")[0]
    result = CliRunner().invoke(cli, ["doctor", "--json"], env={**env, "REDIS_PORT": port})
    assert result.exit_code == 1
    [finding] = json.loads(result.output)
    assert finding["level"] == "error" and "cannot reach Redis" in finding["title"] and "REDIS_HOST" in finding["fix"]
    Dispatcher(queue8(redis_client)).dispatch_job("App\\Jobs\\EchoJob", {})
    ok = CliRunner().invoke(cli, ["doctor", "--app", "test_worker_support:app"], env=env)
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[0].split() == ["level", "finding", "fix"]
    assert any(line.startswith("OK ") and "every job class seen has a Python handler" in line
               for line in ok.output.splitlines())
