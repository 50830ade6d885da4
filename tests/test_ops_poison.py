"""``laraq poison list|requeue|drop`` on a real Redis, and a requeued job run by real ``php artisan queue:work``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

POISON = "old_queues:default:poison"


def invoke(env, *args, code=0, input=None):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def park(redis_client, prefix="old_", version="12.67"):
    """Members laraq's pop parks, then one valid job (as after a fix), all in ``:poison``."""
    q = RedisQueue(redis_client, prefix=prefix, version=version)
    redis_client.rpush(prefix + "queues:default", b'a:1:{i:0;s:1:"x";}', b'{"uuid":"u-bad","attempts":"zz"}',
                       b'{"uuid":"u-inf","attempts":1e400}')
    assert q.pop() is None and q.poison_size("default") == 3
    job = Dispatcher(q).prepare_job("App\\Jobs\\EchoJob", {"args": ["fixed"]})
    redis_client.rpush(prefix + "queues:default:poison", job.payload)
    return q, job


def test_list_requeue_drop(env, redis_client):  # noqa: F811
    q, job = park(redis_client)
    listing = json.loads(invoke(env, "poison", "list", "--json").stdout)
    assert [(d["queue"], d["index"], d["readable"]) for d in listing] == [
        ("default", 0, False), ("default", 1, False), ("default", 2, False), ("default", 3, True)]
    assert listing[0]["reason"].startswith("not JSON (phpredis serializer")
    assert listing[1]["reason"] == "attempts is not a number ('zz')"
    assert listing[2]["reason"].startswith("attempts is not finite")
    assert listing[3]["body"].encode() == job.payload
    table = invoke(env, "poison", "list").stdout.splitlines()
    assert table[0].split() == ["queue", "#", "bytes", "reason", "member"] and len(table) == 6

    refused = invoke(env, "poison", "requeue", "default", "1", "3", code=1)
    assert "requeued 1 poison member(s)" in refused.stdout
    assert "#1 left in the poison list: attempts is not a number" in refused.output
    assert redis_client.lrange("old_queues:default", 0, -1) == [job.payload]
    assert redis_client.llen("old_queues:default:notify") == 1 and redis_client.llen(POISON) == 3
    popped = q.pop()
    assert popped is not None and popped.body == job.payload  # workers take it again

    invoke(env, "poison", "requeue", "default", code=2)  # neither numbers nor --all
    invoke(env, "poison", "requeue", "default", "7", code=2)  # no such member
    invoke(env, "poison", "drop", "default", "0", input="n\n", code=1)  # asks first
    assert invoke(env, "poison", "drop", "default", "0", "--force").stdout.startswith("dropped 1 poison member(s)")
    assert redis_client.lrange(POISON, 0, -1) == [b'{"uuid":"u-bad","attempts":"zz"}',
                                                  b'{"uuid":"u-inf","attempts":1e400}']
    forced = invoke(env, "poison", "requeue", "default", "--all", "--force")
    assert "requeued 2" in forced.stdout and redis_client.llen(POISON) == 0
    assert q.pop() is None and redis_client.llen(POISON) == 2  # still unreadable: parked again, never lost
    invoke(env, "poison", "drop", "default", "--all", "--force")
    assert not redis_client.exists(POISON)
    assert "no poison members" in invoke(env, "poison", "list").stdout


@pytest.mark.php
def test_a_requeued_member_is_run_by_php(php, redis_server, redis_client, tmp_path):
    from phpapp import PhpApp

    app = PhpApp(redis_server.port, workdir=tmp_path)
    q = RedisQueue(redis_client, prefix="laravel_database_", version="8.83.26")
    redis_client.rpush("laravel_database_queues:default", b"garbage")
    assert q.pop() is None
    job = Dispatcher(q).prepare_job("App\\Jobs\\EchoJob", {"args": ["back"]})
    redis_client.rpush("laravel_database_queues:default:poison", job.payload)
    php_env = {**app.env, "LARAQ_LARAVEL_VERSION": "8.83.26", "COLUMNS": "200"}
    assert "requeued 1" in invoke(php_env, "poison", "requeue", "default", "1").stdout
    app.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", check=True)
    assert [r["args"] for r in app.runs()] == [["back"]]
    assert redis_client.lrange("laravel_database_queues:default:poison", 0, -1) == [b"garbage"]
