"""What ``move``/``copy`` report is what arrived: per state, read back at the destination.

Regression cases from issue #8: a cross-server move of a queue holding identical members (left by an
earlier duplicating copy) reported more than arrived; reserved jobs were left behind silently; a second
``copy`` duplicated every job.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner
from conftest import RedisServer
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.ops.migrate import Transfer
from laraq.protocol.queue import RedisQueue

PREFIX = "old_"


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.stdout


@pytest.fixture
def other_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


def seed(client, pending=6, delayed=3, reserved=2):
    q = RedisQueue(client, prefix=PREFIX, version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(pending + reserved)]
           + [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, delay=600) for i in range(delayed)])
    for _ in range(reserved):
        q.pop()
    return q


def test_cross_server_move_of_identical_members_delivers_every_one(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, pending=4, delayed=2, reserved=0)
    members = redis_client.lrange(PREFIX + "queues:default", 0, -1)
    redis_client.rpush(PREFIX + "queues:default", *members[:3])  # three exact duplicates, as a double copy left
    redis_client.zadd(PREFIX + "queues:default:delayed", {b'{"attempts":0,"id":"same"}': 5})
    before = Counter(redis_client.lrange(PREFIX + "queues:default", 0, -1))
    report = json.loads(invoke(env, "move", "default", "--to-url", other_server.url, "--json"))
    dest = other_server.client()
    after = Counter(dest.lrange(PREFIX + "queues:default", 0, -1))
    assert after == before and sum(after.values()) == 7
    assert report["transferred"] == {"pending": 7, "delayed": 3}
    assert report["verified_at_destination"] == {"pending": 7, "delayed": 3}
    assert dest.zcard(PREFIX + "queues:default:delayed") == 3 and dest.llen(PREFIX + "queues:default:notify") == 7
    assert redis_client.llen(PREFIX + "queues:default") == 0
    assert list(redis_client.scan_iter("*laraq-transfer*")) == [] == list(dest.scan_iter("*laraq-transfer*"))


def test_move_names_the_reserved_jobs_it_left_and_can_take_them(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    text = invoke(env, "move", "default", "--to-url", other_server.url)
    lines = text.splitlines()
    assert lines[0].startswith("moved 9 jobs (6 pending, 3 delayed) from ")
    assert "verified at the destination: 6 pending, 3 delayed" in text
    [hint] = [line for line in lines if "reserved jobs left" in line]
    assert hint.strip().startswith("2 reserved jobs left in the source") and "--include-reserved" in hint
    reserved = [json.loads(m)["uuid"] for m in redis_client.zrange(PREFIX + "queues:default:reserved", 0, -1)]
    assert all(f"App\\Jobs\\EchoJob {uuid}" in hint for uuid in reserved)  # named
    assert "retry_after (90 s)" in hint
    report = json.loads(invoke(env, "move", "default", "--to-url", other_server.url, "--include-reserved",
                               "--json"))
    assert report["transferred"] == {"pending": 0, "delayed": 0, "reserved": 2} and report["left_reserved"] == 0
    dest = other_server.client()
    assert dest.zcard(PREFIX + "queues:default:reserved") == 2 and redis_client.zcard(
        PREFIX + "queues:default:reserved") == 0


def test_copy_twice_never_duplicates_unless_asked(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, reserved=0)
    first = json.loads(invoke(env, "copy", "default", "--to-url", other_server.url, "--json"))
    assert first["transferred"] == {"pending": 6, "delayed": 3} == first["verified_at_destination"]
    dest = other_server.client()
    snapshot = (dest.lrange(PREFIX + "queues:default", 0, -1), dest.zrange(PREFIX + "queues:default:delayed", 0, -1))
    again = invoke(env, "copy", "default", "--to-url", other_server.url)
    assert again.startswith("copied 0 jobs (nothing)")
    assert "9 were skipped: a job with the same uuid/id is already at the destination" in again
    assert (dest.lrange(PREFIX + "queues:default", 0, -1), dest.zrange(PREFIX + "queues:default:delayed", 0, -1)) \
        == snapshot
    # a dry run says the same; a worker at the destination took one ready job: only that one is copied again
    plan = json.loads(invoke(env, "copy", "default", "--to-url", other_server.url, "--dry-run", "--json"))
    assert plan["transferred"] == {"pending": 0, "delayed": 0}
    dest.lpop(PREFIX + "queues:default")
    third = json.loads(invoke(env, "copy", "default", "--to-url", other_server.url, "--json"))
    assert third["transferred"] == {"pending": 1, "delayed": 0}
    forced = json.loads(invoke(env, "copy", "default", "--to-url", other_server.url, "--allow-duplicates", "--json"))
    assert forced["transferred"] == {"pending": 6, "delayed": 3} and dest.llen(PREFIX + "queues:default") == 12
    # same connection, another queue: the same rule
    assert json.loads(invoke(env, "copy", "default", "mirror", "--json"))["transferred"] == {"pending": 6,
                                                                                          "delayed": 3}
    assert json.loads(invoke(env, "copy", "default", "mirror", "--json"))["already_at_destination"] == {
        "pending": 6, "delayed": 3}


def test_verification_counts_what_is_really_there(redis_client, other_server):
    src = seed(redis_client, reserved=0)
    dst = RedisQueue(other_server.client(), prefix=PREFIX, version="12.67")
    t = Transfer(src, "default", dst)
    summary = t.run()
    assert summary.verified == summary.transferred == {"pending": 6, "delayed": 3}
    other_server.client().lpop(PREFIX + "queues:default", 2)  # workers there took two meanwhile
    assert t.verify() == {"pending": 4, "delayed": 3}
    summary.verified = t.verify()
    assert "7 of them are in the destination's queue keys now" in summary.describe()
    assert "or lost" not in summary.describe()


def test_import_is_all_or_nothing_and_names_the_bad_line(redis_client, env, tmp_path):  # noqa: F811
    seed(redis_client, reserved=1)
    path = tmp_path / "jobs.jsonl"
    invoke(env, "export", "default", "-o", str(path))
    good = path.read_text().splitlines()
    assert len(good) == 10
    cases = {
        "{broken": "not JSON",
        '{"queue":"q","state":"pending"}': 'no "body"',
        '{"queue":"q","state":"sideways","body":"{}"}': "unknown state 'sideways'",
        '{"queue":"q","state":"delayed","body":"{}"}': "a delayed job needs a numeric score, got None",
        '{"queue":"q","state":"pending","body_b64":"***"}': "body_b64 is not base64",
    }
    for bad, cause in cases.items():
        path.write_text("\n".join([*good[:7], bad, *good[7:]]) + "\n")
        result = CliRunner().invoke(cli, ["import", str(path), "--queue", "restored"], env=env)
        assert result.exit_code == 1, result.output
        assert f"line 8: {cause}" in result.output and "nothing was imported" in result.output
        assert list(redis_client.scan_iter(PREFIX + "queues:restored*")) == []
    path.write_text("\n".join([*good[:3], '{"state":"pending","body":"{}"}']) + "\n")
    result = CliRunner().invoke(cli, ["import", str(path)], env=env)
    assert result.exit_code == 1 and 'line 4: no "queue"' in result.output
    assert redis_client.llen(PREFIX + "queues:default") == 6
    path.write_bytes(b"\n".join([line.encode() for line in good[:2]] + [b'{"body":"\xff"}']) + b"\n")
    result = CliRunner().invoke(cli, ["import", str(path), "--queue", "restored"], env=env)
    assert result.exit_code == 1 and "line 3: not JSON" in result.output
    assert list(redis_client.scan_iter(PREFIX + "queues:restored*")) == []
    # while the exported jobs are still on this server (in 'default'), importing them to another queue
    # here would put each id twice on one server: every line is skipped
    path.write_text("\n".join(good) + "\n")
    out = invoke(env, "import", str(path), "--queue", "restored")
    assert out.startswith("imported 0 pending") and "10 skipped" in out
    redis_client.delete(*(PREFIX + "queues:default" + s for s in ("", ":delayed", ":reserved", ":notify")))
    # the good file goes in whole, in one transaction
    redis_client.config_resetstat()
    out = invoke(env, "import", str(path), "--queue", "restored")
    assert out.startswith("imported 7 pending, 3 delayed")  # the reserved one runs again soon, as pending
    stats = redis_client.info("commandstats")
    assert stats["cmdstat_multi"]["calls"] == 1 and stats["cmdstat_exec"]["calls"] == 1
    assert redis_client.llen(PREFIX + "queues:restored") == 7 == redis_client.llen(PREFIX + "queues:restored:notify")
