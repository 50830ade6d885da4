"""``laraq`` operations commands on a real Redis without PHP: move/copy, export/import, doctor, status."""

from __future__ import annotations

import io
import json
import re

import click
import pytest
from click.testing import CliRunner

from laraq.bus.dispatch import Dispatcher
from laraq.cli.ops import COMMANDS, parse_delay
from laraq.protocol.queue import RedisQueue

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})
STATUS_HEADER = ["queue", "pending", "delayed", "reserved", "oldest", "due", "expired", "poison", "failed", "paused",
                 "rate", "wait"]


@pytest.fixture
def env(redis_server, redis_client, tmp_path):
    return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": "old_",
            "LARAQ_LARAVEL_VERSION": "12.67", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "db.sqlite"),
            "APP_KEY": "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI=", "CACHE_STORE": "redis",
            "COLUMNS": "200"}


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
    # the same jobs are on this server already (in 'default'): a second copy here is asked for explicitly
    assert "5 skipped" in run(env, "import", str(path), "--queue", "restored")
    out = run(env, "import", str(path), "--queue", "restored", "--allow-duplicates")
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
    [row] = [line for line in text.splitlines() if "timeout 100s" in line]
    assert row.split()[:5] == ["ERROR", "timeout", "100s", "≥", "retry_after"] and "set retry_after" in row


def test_status_and_pause_resume(env, redis_client):
    seed(redis_client)
    table = run(env, "status")
    assert table.splitlines()[0].split() == STATUS_HEADER
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


# -- human output: rich tables, progress bars on a terminal only ------------------------------------------

class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_human_tables_are_clean_rich_tables(env, redis_client):
    seed(redis_client)
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    weird = Dispatcher(q).dispatch_job("App\\Jobs\\EchoJob", {"args": ["[bold]x[/bold]"]}, queue="[weird]")
    status = run(env, "status", "--sample", "0")
    lines = [line for line in status.splitlines() if not line.startswith("note: ")]
    assert lines[0].split() == STATUS_HEADER
    assert set(lines[1]) == {"─"}  # rich's rule under the header, no outer frame
    assert [line.split()[:4] for line in lines[2:]] == [["[weird]", "1", "0", "0"], ["default", "3", "2", "0"]]
    assert "\x1b" not in status and all(line == line.rstrip() for line in lines)  # no colours, no padding

    peek = run(env, "peek", "[weird]").splitlines()
    assert peek[0].split() == ["#", "state", "job", "attempts", "uuid", "at", "(UTC)", "properties"]
    assert peek[2].split()[:5] == ["0", "pending", "App\\Jobs\\EchoJob", "0", weird.uuid]
    assert '{"args":["[bold]x[/bold]"],"queue":"[weird]"}' in peek[2]  # literal text, never rich markup

    shown = run(env, "show", weird.uuid).splitlines()
    pairs = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in shown if line.strip() and line[0] == " "
             and len(line.split(None, 1)) == 2}
    assert (pairs["queue"], pairs["state"], pairs["uuid"], pairs["name"]) == ("[weird]", "pending", weird.uuid,
                                                                              "App\\Jobs\\EchoJob")

    narrow = run({**env, "COLUMNS": "60"}, "peek", "default")
    assert max(len(line) for line in narrow.splitlines()) <= 60  # the width is rich's ($COLUMNS here)


def test_failed_and_doctor_tables(env, redis_client):
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import make_failed_store

    store = make_failed_store(LaravelSettings.from_env(env, version="12.67"))
    store.ensure_table()
    body = json.dumps({"uuid": "u-1", "displayName": "App\\Jobs\\Broken", "job": "x", "data": {}, "attempts": 1})
    store.log("redis", "mail", body, "RuntimeException: boom\n#0 trace")
    lines = run(env, "failed", "--exceptions").splitlines()
    assert lines[0].split() == ["id", "connection", "queue", "class", "failed", "at", "exception"]
    assert lines[2].split()[:4] == ["u-1", "redis", "mail", "App\\Jobs\\Broken"]
    assert lines[2].endswith("RuntimeException: boom") and len(lines) == 3
    redis_client.rpush("old_queues:default", b"\x92\x01\x02")
    doctor = run(env, "doctor", code=1).splitlines()
    assert doctor[0].split() == ["level", "finding", "fix"] and set(doctor[1]) == {"─"}
    [row] = [i for i, line in enumerate(doctor) if "member(s) that are not" in line]
    assert doctor[row].startswith("ERROR ") and "remove the 'serializer'" in doctor[row]
    assert "JSON job payloads" in doctor[row + 1]  # the title wraps (100 columns)
    assert "phpredis serializer=msgpack" in doctor[row + 2]  # the detail under the title


def test_colours_only_on_a_terminal(env, redis_client, monkeypatch):
    from laraq.cli import render

    seed(redis_client)
    assert "\x1b[" not in run(env, "status")
    tty = FakeTTY()
    monkeypatch.setattr(render, "stdout_stream", lambda: tty)
    run(env, "status")
    assert "\x1b[1m" in tty.getvalue() and "default" in tty.getvalue()  # bold header on a terminal


def test_progress_bars_only_on_a_terminal(env, redis_client, tmp_path, monkeypatch):
    from laraq.cli import render

    seed(redis_client)
    out = run(env, "move", "default", "quiet")
    assert "moving" not in out and out.startswith("moved 5 jobs")
    tty = FakeTTY()
    monkeypatch.setattr(render, "stderr_stream", lambda: tty)
    assert run(env, "copy", "quiet", "shown").startswith("copied 5 jobs")
    assert "copying" in tty.getvalue() and "5/5" in tty.getvalue()
    path = tmp_path / "x.jsonl"
    run(env, "export", "shown", "-o", str(path))
    tty.seek(0)
    tty.truncate()
    assert "imported 3 pending, 2 delayed" in run(env, "import", str(path), "--queue", "again", "--allow-duplicates")
    assert "importing" in tty.getvalue() and "5/5" in tty.getvalue()
    monkeypatch.undo()
    assert "importing" not in run(env, "import", str(path), "--queue", "again2", "--allow-duplicates")


def test_read_commands_scan_and_never_use_keys(env, redis_client):
    seed(redis_client)
    redis_client.config_resetstat()
    run(env, "status")
    run(env, "show", "nothing", code=1)
    run(env, "doctor", "--json")
    run(env, "export", "-o", "-")
    stats = redis_client.info("commandstats")
    assert "cmdstat_keys" not in stats and stats["cmdstat_scan"]["calls"] >= 4


def test_export_import_round_trip_across_prefixes_and_dbs(env, redis_server, redis_client, tmp_path):
    seed(redis_client)
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    q.pop()  # one reserved job (score = its expiry)
    redis_client.rpush("old_queues:default", b"\xff\xfe binary")
    redis_client.zadd("old_queues:default:delayed", {b'{"attempts":0,"id":"f"}': 1900000000.5})
    before = {k: redis_client.lrange(k, 0, -1) if redis_client.type(k) == b"list"
              else redis_client.zrange(k, 0, -1, withscores=True)
              for k in ("old_queues:default", "old_queues:default:delayed", "old_queues:default:reserved")}
    path = tmp_path / "backup.jsonl"
    run(env, "export", "-o", str(path))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted({(line["state"], line["queue"]) for line in lines}) == [
        ("delayed", "default"), ("pending", "default"), ("reserved", "default")]
    assert any("body_b64" in line for line in lines) and any(line["score"] == 1900000000.5 for line in lines)

    other = redis_server.client(2)
    other.flushdb()
    out = run({**env, "REDIS_DB": "2"}, "import", str(path), "--prefix", "new-", "--reserved-as", "reserved")
    assert "imported 3 pending, 3 delayed, 1 reserved" in out
    assert other.lrange("new-queues:default", 0, -1) == before["old_queues:default"]
    assert other.zrange("new-queues:default:delayed", 0, -1, withscores=True) == before["old_queues:default:delayed"]
    assert other.zrange("new-queues:default:reserved", 0, -1, withscores=True) == before["old_queues:default:reserved"]
    assert other.llen("new-queues:default:notify") == 3
    run({**env, "REDIS_DB": "2"}, "import", "-", input="{broken\n", code=1)


def test_pause_for_and_all_and_what_workers_read(env, redis_client):
    from laraq.config.settings import LaravelSettings
    from laraq.stores.cache import make_cache

    run(env, "pause", "emails", "--for", "120")
    key = b"old_laravel-cache-illuminate:queue:paused:redis:emails"
    assert cache_db(redis_client).get(key) == b"b:1;" and 0 < cache_db(redis_client).ttl(key) <= 120
    cache = make_cache(LaravelSettings.from_env(env, version="12.67"))
    assert cache.is_paused("redis", "emails") and not cache.is_paused("redis", "default")
    assert "13.25" in run(env, "pause", "--all", code=1)
    env13 = {**env, "LARAQ_LARAVEL_VERSION": "13.26"}
    run(env13, "pause", "--all")
    cache13 = make_cache(LaravelSettings.from_env(env13, version="13.26"))
    assert cache13.is_paused("redis", "anything")
    run(env13, "resume", "--all")
    run(env, "resume", "redis:emails")
    assert not cache13.is_paused("redis", "anything") and not cache.is_paused("redis", "emails")
    run(env, "pause", code=2)


def test_dispatch_cli_datetime_delay_string_job_and_bad_input(env, redis_client):
    [res] = json.loads(run(env, "dispatch", "App\\Jobs\\EchoJob", "-p", "args=[1]", "--delay", "2031-01-02T03:04:05Z",
                           "-q", "later", "--json"))
    assert res["available_at"] == 1925089445
    assert redis_client.zrange("old_queues:later:delayed", 0, -1, withscores=True)[0][1] == 1925089445
    many = json.loads(run(env, "dispatch", "App\\Handlers\\Foo@bar", "--data", '{"x":1}', "--count", "3", "--json"))
    assert len({m["uuid"] for m in many}) == 3 and redis_client.llen("old_queues:default:notify") == 3
    bodies = [json.loads(m) for m in redis_client.lrange("old_queues:default", 0, -1)]
    assert all(b["attempts"] == 0 and b["id"] and b["data"] == {"x": 1} for b in bodies)
    run(env, "dispatch", "App\\Handlers\\Foo@bar", "-p", "a=1", code=2)


def test_doctor_lines_fit_100_columns_piped_and_at_a_terminal(env, redis_client, monkeypatch):
    """Long findings and fixes wrap: no line of ``laraq doctor`` is wider than 100 columns, piped (no
    ``$COLUMNS``, or a wide one) or at a wide terminal; the level column stays."""
    from laraq.cli import render

    seed(redis_client)
    redis_client.rpush("old_queues:default", b"\x92\x01\x02")  # an error finding with a long fix
    redis_client.rpush("laravel-database-queues:default", b"{}")  # another prefix: a long detail
    piped = {k: v for k, v in env.items() if k != "COLUMNS"}
    for environment in (piped, {**env, "COLUMNS": "300"}):
        lines = run(environment, "doctor", "--app", "test_worker_support:app", code=1).splitlines()
        assert max(len(line) for line in lines) <= 100, "\n".join(line for line in lines if len(line) > 100)
        assert lines[0].split() == ["level", "finding", "fix"]
        assert any(line.startswith("ERROR ") for line in lines) and any(line.startswith("OK ") for line in lines)
    tty = FakeTTY()
    monkeypatch.setattr(render, "stdout_stream", lambda: tty)
    monkeypatch.setenv("COLUMNS", "300")
    run({**env, "COLUMNS": "300"}, "doctor", code=1)
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in tty.getvalue().splitlines()]
    assert len(shown) > 5 and max(len(line) for line in shown) <= 100


def test_doctor_on_empty_queues_says_no_job_class_was_checked(env, redis_client):
    findings = json.loads(run(env, "doctor", "--json", "--app", "test_worker_support:app"))
    titles = [f["title"] for f in findings]
    assert "no job on the queues: no job class was checked against the handlers" in titles
    assert not [t for t in titles if "every job class seen" in t]
    seed(redis_client, n=1, delayed=0)
    handled = json.loads(run(env, "doctor", "--json", "--app", "test_worker_support:app"))
    assert [f["title"] for f in handled if "job class" in f["title"]] == [
        "every job class seen has a Python handler (1 class(es) on the queues)"]


def test_doctor_names_a_list_too_long_for_the_deep_look_to_reach_its_middle(env, redis_client):
    from laraq.protocol.lua_laraq import DEEP_REACH

    members = [b'{"job":"App\\\\Php@fire","data":{},"attempts":0,"n":%d}' % n for n in range(2 * DEEP_REACH + 1)]
    with redis_client.pipeline(transaction=False) as pipe:
        for first in range(0, len(members), 1000):
            pipe.rpush("old_queues:default", *members[first:first + 1000])
        pipe.execute()
    findings = json.loads(run(env, "doctor", "--json"))
    [long] = [f for f in findings if "from both of its ends" in f["title"]]
    assert long["level"] == "info" and f"{2 * DEEP_REACH + 1} jobs in the list" in long["title"]
    redis_client.ltrim("old_queues:default", 0, 2 * DEEP_REACH - 1)
    assert not [f for f in json.loads(run(env, "doctor", "--json")) if "from both of its ends" in f["title"]]
