"""Issue 32: no job held where the operator cannot see it.

* a destination with a wrong password takes no job at all, and the error names ``--to-url``;
* a journal left by a move killed between its two steps is found by its source queue, whatever the
  spelling of the destination URL on the re-run (``localhost`` vs ``127.0.0.1``, a trailing ``/0``);
* ``status`` lists an unfinished transfer (age, job count, the commands that finish or undo it) and
  ``move --recover`` finishes it (on to the destination) or undoes it (back to the source);
* a misspelt source queue or prefix exits non-zero and lists what exists;
* reserved jobs whose attempts are spent are named before they move.
"""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner
from conftest import RedisServer
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.ops.doctor import diagnose
from laraq.ops.migrate import Transfer
from laraq.ops.transfers import find_held
from laraq.protocol.queue import RedisQueue

PREFIX = "old_"
SRC = PREFIX + "queues:default"


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def other_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


def seed(client, pending=5, delayed=2, **kw):
    q = RedisQueue(client, prefix=PREFIX, version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, **kw) for i in range(pending)]
           + [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, delay=600) for i in range(delayed)])
    return q


def hold_one(src: RedisQueue, dst: RedisQueue) -> bytes:
    """What a move killed after its source step leaves: one job in the journal, none at the destination."""
    t = Transfer(src, "default", dst)
    member = src.client.lindex(SRC, 0)
    token = t._take(keys=[SRC, SRC + ":notify", t.journal_key],
                    args=["list", member, "h", b"pending\n0\n" + member, t.meta])
    assert token and member not in src.client.lrange(SRC, 0, -1)
    return member


def test_wrong_destination_password_takes_nothing_and_names_to_url(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    other_server.client().config_set("requirepass", "right")
    before = redis_client.lrange(SRC, 0, -1)
    result = invoke(env, "move", "default", "--to-url", f"redis://:wrong@127.0.0.1:{other_server.port}/0", code=4)
    assert "--to-url" in result.output and "nothing was taken" in result.output
    assert "REDIS_PASSWORD" not in result.output and "--redis-url" not in result.output
    assert "wrong" not in result.output  # the password never shows
    assert redis_client.lrange(SRC, 0, -1) == before and redis_client.zcard(SRC + ":delayed") == 2
    assert list(redis_client.scan_iter("*laraq-transfer*")) == []
    # the right password moves everything
    out = invoke(env, "move", "default", "--to-url", f"redis://:right@127.0.0.1:{other_server.port}/0").output
    assert out.startswith("moved 7 jobs")
    assert redis.Redis(port=other_server.port, password="right").lrange(SRC, 0, -1) == before


def test_destination_down_before_the_move_takes_nothing(redis_client, tmp_path, env):  # noqa: F811
    seed(redis_client)
    server = RedisServer(tmp_path)
    port = server.port
    server.stop()
    result = invoke(env, "move", "default", "--to-url", f"redis://127.0.0.1:{port}/0", code=3)
    assert "--to-url" in result.output and "nothing was taken" in result.output
    assert redis_client.llen(SRC) == 5 and list(redis_client.scan_iter("*laraq-transfer*")) == []


def test_a_journal_is_found_whatever_the_spelling_of_the_destination_url(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    spelled = RedisQueue(other_server.client(), prefix=PREFIX, version="12.67")  # host 'localhost', no /0
    member = hold_one(src, spelled)
    # the operator's re-run spells it another way
    report = json.loads(invoke(env, "move", "default", "--to-url", f"redis://127.0.0.1:{other_server.port}/0",
                               "--json").output)
    dest = other_server.client()
    assert report["transferred"] == {"pending": 5, "delayed": 2} and report["recovered"] == 1
    assert member in dest.lrange(SRC, 0, -1) and dest.llen(SRC) == 5
    assert list(redis_client.scan_iter("*laraq-transfer*")) == [] == list(dest.scan_iter("*laraq-transfer*"))


def test_status_doctor_and_recover_on_to_the_destination(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    dst = RedisQueue(other_server.client(), prefix="new_", version="13")
    member = hold_one(src, dst)
    status = json.loads(invoke(env, "status", "--sample", "0", "--json", code=1).output)
    [held] = status["transfers"]
    assert held["jobs"] == 1 and held["queue"] == "default" and held["age_seconds"] is not None
    assert "--recover" in held["finish"] and "--to-prefix new_" in held["finish"] and "--to-source" in held["undo"]
    text = invoke(env, "status", "--sample", "0", code=1).output
    assert "1 job(s) of queue 'default' held by an unfinished move" in text
    uuid = json.loads(member)["uuid"]
    [shown] = json.loads(invoke(env, "show", uuid, "--json", "--no-failed").stdout)
    assert shown["state"] == "held" and shown["taken_from"] == "pending" and "--recover" in shown["finish"]
    assert "held_in" in invoke(env, "show", uuid, "--no-failed").stdout
    findings = diagnose(src_settings(env), src)
    assert any("unfinished move" in f.title for f in findings)
    # another destination cannot start while the job is held for this one
    blocked = invoke(env, "move", "default", "--to-prefix", "elsewhere_", code=1).output
    assert "an unfinished move holds jobs of this queue; nothing was taken" in blocked
    assert redis_client.llen(SRC) == 4
    # a --recover to a destination other than the journal's is refused
    wrong = invoke(env, "move", "--recover", "--to-prefix", "elsewhere_", code=1).output
    assert "nothing was recovered" in wrong
    out = invoke(env, "move", "--recover", "--to-url", f"redis://127.0.0.1:{other_server.port}/0",
                 "--to-prefix", "new_", "--to-laravel", "13").output
    assert "recovered 1 of 1 held job(s) of 'default' on to" in out
    assert other_server.client().lrange("new_queues:default", 0, -1) == [member]
    assert find_held(redis_client, PREFIX) == [] and list(other_server.client().scan_iter("*laraq-transfer*")) == []
    assert "transfers" not in json.loads(invoke(env, "status", "--sample", "0", "--json").output) or \
        json.loads(invoke(env, "status", "--sample", "0", "--json").output)["transfers"] == []


def src_settings(env):  # noqa: F811
    from laraq.config.settings import LaravelSettings

    return LaravelSettings.from_env(env, version="12.67")


def test_recover_back_to_the_source(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, delayed=0)
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    before = redis_client.lrange(SRC, 0, -1)
    hold_one(src, RedisQueue(other_server.client(), prefix=PREFIX, version="12.67"))
    out = invoke(env, "move", "--recover", "default", "--to-source").output
    assert "recovered 1 of 1 held job(s) of 'default' back to" in out
    assert redis_client.lrange(SRC, 0, -1) == before  # at the head again, where it was taken
    assert redis_client.llen(SRC + ":notify") == 5
    assert find_held(redis_client, PREFIX) == [] and other_server.client().dbsize() == 0
    assert "no unfinished transfer" in invoke(env, "move", "--recover", "--to-source").output


def test_a_misspelt_queue_or_prefix_exits_non_zero_listing_what_exists(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    out = invoke(env, "move", "defualt", "--to-url", other_server.url, code=1).output
    assert "no queue 'defualt' under prefix 'old_'" in out and "queues under that prefix: default" in out
    out = invoke(env, "move", "default", "--prefix", "olld_", "--to-url", other_server.url, code=1).output
    assert "other prefixes holding queues: 'old_'" in out
    assert other_server.client().dbsize() == 0
    # a queue already moved (its name exists at the destination) is a quiet no-op, not a typo
    invoke(env, "move", "default", "--to-url", other_server.url)
    assert invoke(env, "move", "default", "--to-url", other_server.url).output.startswith("moved 0 jobs")


def test_spent_reserved_jobs_are_named_before_they_move(redis_client, other_server, env):  # noqa: F811
    q = seed(redis_client, pending=2, delayed=0, tries=1)
    q.pop()
    result = CliRunner().invoke(cli, ["move", "default", "--to-url", other_server.url, "--include-reserved",
                                      "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "1 reserved job(s) have spent their attempts" in result.stderr and "(1/1)" in result.stderr
    assert json.loads(result.stdout)["warnings"]


def test_killed_after_the_destination_wrote_is_not_delivered_twice(redis_client, other_server, env):  # noqa: F811
    """Each step of a cross-server move, interrupted: after take (held), after give (written, still held)."""
    seed(redis_client, delayed=0)
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    dst = RedisQueue(other_server.client(), prefix=PREFIX, version="12.67")
    t = Transfer(src, "default", dst)
    member = redis_client.lindex(SRC, 0)
    token = t._take(keys=[SRC, SRC + ":notify", t.journal_key], args=["list", member, "h", b"pending\n0\n" + member,
                                                                      t.meta]).decode()
    assert t._deliver("pending", member, 0, token) == 1  # the destination wrote it; the kill came before the HDEL
    # a move of another state set to the same destination adopts that journal, and does not write it again
    other = Transfer(src, "default", dst, states=("pending", "delayed", "reserved"))
    assert other.id != t.id
    summary = other.run()
    assert summary.recovered == 1
    dest = other_server.client()
    assert dest.lrange(SRC, 0, -1).count(member) == 1 and dest.llen(SRC) == 5
    assert list(redis_client.scan_iter("*laraq-transfer*")) == [] == list(dest.scan_iter("*laraq-transfer*"))
