"""Issue 32: whole-stack moves (every queue under a prefix, or a list, one report) and the check of
job classes against the destination app before anything moves."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import RedisServer
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

PREFIX = "old_"


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def other_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


def seed(client):
    q = RedisQueue(client, prefix=PREFIX, version="12.67")
    d = Dispatcher(q)
    jobs = []
    for name, n in (("default", 4), ("mail", 3), ("reports", 2)):
        jobs += [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, queue=name) for i in range(n)]
        jobs += [d.prepare_job("App\\Jobs\\Legacy", {"i": i}, queue=name) for i in range(1)]
    jobs.append(d.prepare_job("App\\Jobs\\EchoJob", {"later": 1}, queue="mail", delay=600))
    d.bulk(jobs)
    return q


def test_every_queue_in_one_command_with_one_report(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    out = invoke(env, "move", "--all-queues", "--to-url", other_server.url, "--to-prefix", "new_",
                 "--to-laravel", "13").stdout
    assert out.splitlines()[0] == "moved 13 jobs (12 pending, 1 delayed) from 3 queue(s)"
    dest = other_server.client()
    assert [dest.llen(f"new_queues:{n}") for n in ("default", "mail", "reports")] == [5, 4, 3]
    assert dest.zcard("new_queues:mail:delayed") == 1
    assert [k for k in redis_client.scan_iter(PREFIX + "queues:*")] == []
    assert list(redis_client.scan_iter("*laraq-transfer*")) == [] == list(dest.scan_iter("*laraq-transfer*"))


def test_a_list_with_a_misspelt_queue_moves_nothing(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    out = invoke(env, "move", "default,mial", "--to-url", other_server.url, code=1).output
    assert "no queue 'mial' under prefix 'old_'" in out and "default, mail, reports" in out
    assert other_server.client().dbsize() == 0
    empty = invoke(env, "move", "--all-queues", "--prefix", "olld_", "--to-url", other_server.url, code=1).output
    assert "no queue under prefix 'olld_'" in empty and "'old_'" in empty


def test_unknown_classes_stay_behind_unless_asked(redis_client, other_server, env, tmp_path):  # noqa: F811
    seed(redis_client)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"jobs": {"App\\Jobs\\EchoJob": {"properties": []}}, "enums": {}}))
    report = json.loads(invoke(env, "move", "default,mail", "--to-url", other_server.url, "--to-schema", str(schema),
                               "--json").stdout)
    assert report["unknown_classes"] == {"App\\Jobs\\Legacy": 2} and report["transferred"] == {"pending": 7,
                                                                                                  "delayed": 1}
    left = [json.loads(m)["displayName"] for m in redis_client.lrange(PREFIX + "queues:default", 0, -1)
            + redis_client.lrange(PREFIX + "queues:mail", 0, -1)]
    assert left == ["App\\Jobs\\Legacy", "App\\Jobs\\Legacy"]
    text = invoke(env, "move", "default,mail", "--to-url", other_server.url, "--to-schema", str(schema)).stdout
    assert "left in the source, their class is not in the destination app: App\\Jobs\\Legacy (2)" in text
    taken = json.loads(invoke(env, "move", "default,mail", "--to-url", other_server.url, "--to-schema", str(schema),
                              "--include-unknown", "--json").stdout)
    assert taken["transferred"] == {"pending": 2, "delayed": 0} and taken["unknown_moved"]
    assert redis_client.llen(PREFIX + "queues:default") == 0
