"""``laraq status`` on a real Redis: pickup rate, wait estimate, failed count, paused state, ``--max``,
``--watch``, and the hint when the queues sit under another prefix or key layout."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_ops_cli import cli, env, seed  # noqa: F401  (the ops tests' settings fixture and seeding)

from laraq.bus.dispatch import Dispatcher
from laraq.ops.inspect import mark_lists, pickups_since
from laraq.protocol.queue import RedisQueue


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def test_pickups_count_jobs_taken_from_the_head_whatever_was_pushed_meanwhile(redis_client):
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(10)])
    [mark] = mark_lists(q, ["default"])
    assert (mark.length, mark.tail) == (10, redis_client.lindex("old_queues:default", -1))
    for _ in range(3):
        q.pop()
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(4)])  # pushes land behind the mark
    [(name, pick)] = pickups_since(q, [mark]).items()
    assert name == "default" and (pick.taken, pick.exact) == (3, True)
    for _ in range(9):
        q.pop()  # the marked member itself is gone: at least 10 were taken
    pick = pickups_since(q, [mark])["default"]
    assert (pick.taken, pick.exact) == (10, False)
    [empty] = mark_lists(q, ["nothing"])
    assert pickups_since(q, [empty]) == {"nothing": None}


def test_status_json_has_failed_paused_rate_and_wait(env, redis_client):  # noqa: F811
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import make_failed_store

    seed(redis_client)
    store = make_failed_store(LaravelSettings.from_env(env, version="12.67"))
    store.ensure_table()
    rows = (("default", "redis"), ("default", "redis"), ("default", "database"), ("gone", "redis"))
    for n, (queue, connection) in enumerate(rows):
        store.log(connection, queue, json.dumps({"uuid": f"u-{n}", "job": "x", "data": {}}), "E")
    invoke(env, "pause", "default")
    doc = json.loads(invoke(env, "status", "--json", "--sample", "0.2").stdout)
    [q, gone] = doc["queues"]  # 'gone' only has a failed job: listed all the same
    assert (gone["queue"], gone["total"], gone["failed"], gone["pickups"]) == ("gone", 0, 1, None)
    assert (q["queue"], q["pending"], q["delayed"], q["failed"], q["paused"]) == ("default", 3, 2, 2, True)
    assert doc["failed_total"] == 4 and doc["notes"] == []
    assert q["pickups"]["taken"] == 0 and q["pickups"]["exact"] and q["wait_seconds"] is None  # nobody works it
    row = invoke(env, "status", "--sample", "0").stdout.splitlines()[2].split()
    assert row[:4] + row[5:] == ["default", "3", "2", "0", "0", "0", "0", "2", "yes", "-", "-"]  # [4]: the age
    # measured over a window, nothing consumed: no rate and no wait, however the list looks
    sampled = invoke(env, "status", "--sample", "0.2").stdout.splitlines()[2].split()
    assert sampled[-2:] == ["-", "∞"]  # no rate; measured: nothing is taking them
    invoke(env, "resume", "default")
    assert json.loads(invoke(env, "status", "--json", "--sample", "0").stdout)["queues"][0]["paused"] is False
    # before 12.40 there is no pause: no value rather than a wrong one
    old = json.loads(invoke({**env, "LARAQ_LARAVEL_VERSION": "11"}, "status", "--json", "--sample", "0").stdout)
    assert old["queues"][0]["paused"] is None


def test_max_alerts_like_queue_monitor_and_exits_1(env, redis_client):  # noqa: F811
    seed(redis_client, n=3, delayed=2)
    Dispatcher(RedisQueue(redis_client, prefix="old_", version="12.67")).dispatch_job("App\\Jobs\\X", {}, queue="low")
    out = invoke(env, "status", "--max", "5", "--sample", "0", code=1).stdout.splitlines()
    assert out[0].split()[-1] == "status"
    assert {line.split()[0]: line.split()[-1] for line in out[2:]} == {"default": "ALERT", "low": "OK"}
    doc = json.loads(invoke(env, "status", "--max", "6", "--json", "--sample", "0").stdout)
    assert [q["alert"] for q in doc["queues"]] == [False, False] and doc["max"] == 6
    invoke(env, "status", "low", "--max", "2", "--sample", "0")


def test_watch_frames(env, redis_client):  # noqa: F811
    seed(redis_client)
    result = invoke(env, "status", "--watch", "--frames", "2", "--interval", "0.1", "--json")
    docs = [json.loads(line) for line in result.stdout.splitlines()]  # JSON Lines
    assert len(docs) == 2 and all(d["queues"][0]["pending"] == 3 for d in docs)
    assert docs[0]["queues"][0]["pickups"] is None and docs[1]["queues"][0]["pickups"]["taken"] == 0  # between frames
    text = invoke(env, "status", "--watch", "--frames", "1").stdout
    assert "Ctrl-C" in text and "default" in text


def test_empty_prefix_names_where_the_queues_are(env, redis_client):  # noqa: F811
    q13 = RedisQueue(redis_client, prefix="laravel-database-", version="13")
    Dispatcher(q13).dispatch_job("App\\Jobs\\X", {}, queue="emails")
    Dispatcher(q13).dispatch_job("App\\Jobs\\X", {})
    result = invoke(env, "status", "--sample", "0")
    assert "no queues under prefix 'old_'" in result.stdout
    assert ("note: queues under prefix 'laravel-database-': default, emails "
            "(pass --prefix laravel-database-, the stock prefix of Laravel 12.67/13)") in result.output
    named = invoke(env, "status", "emails", "--sample", "0", "--json").stdout
    assert "queues under prefix 'laravel-database-': emails (pass --prefix" in named
    tagged = RedisQueue(redis_client, prefix="old_", version="13.26", cluster=True)
    Dispatcher(tagged).dispatch_job("App\\Jobs\\X", {}, queue="reports")
    note = invoke(env, "status", "reports", "--sample", "0").output
    assert "queue '{reports}' holds the keys of 'reports' (the 13.5+ cluster hash-tag layout)" in note


def test_identical_members_do_not_fake_a_rate(env, redis_client):  # noqa: F811
    """An import run twice leaves identical members: the marked tail's first copy is near the head."""
    seed(redis_client, n=4, delayed=0)
    members = redis_client.lrange("old_queues:default", 0, -1)
    redis_client.rpush("old_queues:default", *members)  # the same four again
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    marks = mark_lists(q, ["default"])
    assert pickups_since(q, marks)["default"].taken == 0
    redis_client.lpop("old_queues:default")
    assert pickups_since(q, marks)["default"].taken == 1


def test_piped_tables_keep_every_column(env, redis_client):  # noqa: F811
    """Outside a terminal and without $COLUMNS a table is not cut to 80 columns."""
    name = "a-very-long-queue-name-" + "x" * 70
    Dispatcher(RedisQueue(redis_client, prefix="old_", version="12.67")).dispatch_job("App\\Jobs\\X", {}, queue=name)
    narrow = {k: v for k, v in env.items() if k != "COLUMNS"}
    import os

    saved = os.environ.pop("COLUMNS", None)
    try:
        lines = invoke(narrow, "status", "--sample", "0").stdout.splitlines()
    finally:
        if saved is not None:
            os.environ["COLUMNS"] = saved
    assert lines[0].split()[-1] == "wait" and any(line.startswith(name + " ") for line in lines)
