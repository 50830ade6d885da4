"""Each message fits the fault it names, and the same fault exits with the same code on either side.

* a destination Redis that needs a password, given none: exit 4 (as the source's), naming ``--to-url`` and
  ``LARAQ_TO_PASSWORD``, never Redis' raw ``HELLO must be called`` text;
* a destination Redis down: exit 3, as the source down;
* ``move-failed``: the destination database down from the start and dying part-way both exit 5 and name
  the destination (never the source's ``--env-file``), the second saying how many rows it had moved; the
  summary names both databases; its dry-run JSON says ``"dry_run": true``;
* ``move --dry-run`` with reserved jobs whose reservations have all expired does not advise waiting for
  ``retry_after``;
* a move whose destination fails part-way says how many jobs it had delivered.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import redis
from click.testing import CliRunner
from conftest import RedisServer
from test_migrate_failed import fill, invoke, store_for, write_env
from test_migrate_held import PREFIX, SRC, other_server, seed  # noqa: F401  (fixtures)
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.cli import main
from laraq.ops.migrate import Transfer
from laraq.ops.transfers import DestinationError
from laraq.protocol.queue import RedisQueue


def test_no_password_for_the_destination_says_where_to_put_it(redis_client, other_server, env):  # noqa: F811
    seed(redis_client)
    other_server.client().config_set("requirepass", "pw")
    out = invoke(env, "move", "default", "--to-url", other_server.url, code=4).output
    assert "needs a password and none was sent" in out and "LARAQ_TO_PASSWORD" in out and "--to-url" in out
    assert "HELLO" not in out and "nothing was taken" in out
    assert redis_client.llen(SRC) == 5
    # the password from the environment is used when the URL has none
    moved = invoke({**env, "LARAQ_TO_PASSWORD": "pw"}, "move", "default", "--to-url", other_server.url).output
    assert moved.startswith("moved 7 jobs")


def test_same_fault_same_exit_code_on_either_side(redis_client, tmp_path, env):  # noqa: F811
    seed(redis_client)
    server = RedisServer(tmp_path)
    port = server.port
    server.stop()
    dest_down = invoke(env, "move", "default", "--to-url", f"redis://127.0.0.1:{port}/0", code=3).output
    assert "cannot reach the destination" in dest_down and "--to-url" in dest_down
    # the same fault at the source, through laraq's own command group (which turns faults into exit codes)
    source_down = CliRunner().invoke(main, ["status", "--sample", "0"], env={**env, "REDIS_PORT": str(port)})
    assert source_down.exit_code == 3 and "cannot reach Redis" in source_down.output
    dest_down = CliRunner().invoke(main, ["move", "default", "--to-url", f"redis://127.0.0.1:{port}/0"], env=env)
    assert dest_down.exit_code == 3


def test_move_failed_destination_down_or_dying_exits_5_naming_it(env, tmp_path):  # noqa: F811
    src = store_for(env)
    fill(src, n=4)
    down = write_env(tmp_path / "down.env", {"DB_CONNECTION": "mysql", "DB_HOST": "127.0.0.1", "DB_PORT": "1",
                                             "DB_DATABASE": "gone", "LARAQ_LARAVEL_VERSION": "13"})
    out = invoke(env, "move-failed", "--to-env-file", down, code=5).output
    assert "the destination failed-job store" in out and "--to-env-file" in out and "127.0.0.1:1" in out
    assert len(src.all()) == 4
    # a destination that dies after its first row
    db = tmp_path / "new.sqlite"
    dest_env = write_env(tmp_path / ".env", {"DB_CONNECTION": "sqlite", "DB_DATABASE": str(db),
                                             "LARAQ_LARAVEL_VERSION": "13"})
    store_for({"DB_CONNECTION": "sqlite", "DB_DATABASE": str(db)})
    conn = sqlite3.connect(db)
    conn.execute("create trigger dying before insert on failed_jobs when (select count(*) from failed_jobs) >= 1 "
                 "begin select raise(abort, 'disk I/O error'); end")
    conn.commit()
    plan = json.loads(invoke(env, "move-failed", "--to-env-file", dest_env, "--dry-run", "--json").output)
    assert plan["dry_run"] is True and plan["moved"] == 4
    assert str(db) in plan["destination"] and env["DB_DATABASE"] in plan["source"]  # both databases named
    out = invoke(env, "move-failed", "--to-env-file", dest_env, code=5).output
    assert f"the destination database-uuids table 'failed_jobs' in sqlite:{db}" in out
    assert "after 1 failed job(s) had been moved there" in out and "disk I/O error" in out
    assert "REDIS" not in out and "fix DB_HOST" not in out
    assert len(src.all()) == 3  # the one moved is forgotten at the source, the others stay
    conn.execute("drop trigger dying")
    conn.commit()
    again = invoke(env, "move-failed", "--to-env-file", dest_env).output
    assert again.startswith("moved 3 failed job(s)")
    assert conn.execute("select count(*) from failed_jobs").fetchone()[0] == 4


def test_dry_run_with_expired_reservations_does_not_advise_waiting(redis_client, other_server, env):  # noqa: F811
    q = seed(redis_client, pending=3, delayed=0)
    q.pop()
    # the reservation expired long ago: no source worker is there to bring it back
    [(member, _)] = redis_client.zrange(SRC + ":reserved", 0, -1, withscores=True)
    redis_client.zadd(SRC + ":reserved", {member: 1000})
    out = invoke(env, "move", "default", "--to-url", other_server.url, "--dry-run").output
    assert "reservations have all expired" in out and "re-run after retry_after" not in out
    plan = json.loads(invoke(env, "move", "default", "--to-url", other_server.url, "--dry-run", "--json").output)
    assert plan["dry_run"] is True and plan["left_reserved"] == 1 and plan["left_reserved_expired"] == 1
    # a reservation still running gets the retry_after advice
    running = member.replace(b'"attempts":1', b'"attempts":1,"x":1')
    redis_client.zadd(SRC + ":reserved", {running: redis_client.time()[0] + 90})
    out = invoke(env, "move", "default", "--to-url", other_server.url, "--dry-run").output
    assert "re-run after retry_after" in out and "1 of them have expired reservations" in out


def test_a_move_failing_part_way_says_how_many_it_delivered(redis_client, other_server):  # noqa: F811
    seed(redis_client, pending=6, delayed=0)
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    dest_client = other_server.client()
    t = Transfer(src, "default", RedisQueue(dest_client, prefix=PREFIX, version="12.67"))
    delivered = []

    def progress(n: int) -> None:
        delivered.append(n)
        if len(delivered) == 4:
            dest_client.config_set("requirepass", "now-locked")
            dest_client.connection_pool.disconnect()

    with pytest.raises(DestinationError) as caught:
        t.run(progress=progress)
    message = str(caught.value)
    assert "this run had moved 4 job(s) there before it failed" in message
    assert caught.value.exit_code == 4
    assert redis.Redis(port=other_server.port, password="now-locked").llen(SRC) == 4


def test_a_move_to_another_app_says_once_that_its_classes_were_not_checked(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, pending=2, delayed=0)
    out = invoke(env, "move", "default", "--to-url", other_server.url, "--dry-run").output
    assert out.count("job classes were not checked") == 1 and "--to-app" in out
    plan = json.loads(invoke(env, "move", "default", "--to-url", other_server.url, "--dry-run", "--json").output)
    assert plan["classes_checked"] is False
    stack = json.loads(invoke(env, "move", "--all-queues", "--to-url", other_server.url, "--dry-run", "--json").output)
    assert stack["classes_checked"] is False and stack["dry_run"] is True
    assert "job classes were not checked" not in invoke(env, "move", "default", "elsewhere").output  # the same app


def test_import_and_remove_exported_have_a_dry_run(redis_client, other_server, env, tmp_path):  # noqa: F811
    seed(redis_client, pending=3, delayed=1)
    path = tmp_path / "jobs.jsonl"
    invoke(env, "export", "default", "-o", str(path))
    dest_env = {**env, "REDIS_PORT": str(other_server.port)}
    plan = json.loads(invoke(dest_env, "import", str(path), "--dry-run", "--json").output)
    assert plan == {"dry_run": True, "prefix": PREFIX, "imported": {"pending": 3, "delayed": 1, "reserved": 0,
                                                                    "skipped": 0}, "already_here": 0}
    assert other_server.client().dbsize() == 0
    assert invoke(dest_env, "import", str(path), "--dry-run").output.startswith("would import 3 pending, 1 delayed")
    invoke(dest_env, "import", str(path))
    again = json.loads(invoke(dest_env, "import", str(path), "--dry-run", "--json").output)
    assert again["already_here"] == 4 and again["imported"]["pending"] == 0
    removal = json.loads(invoke(env, "remove-exported", str(path), "--dry-run", "--json").output)
    assert removal == {"dry_run": True, "prefix": PREFIX, "removed": 4, "gone": 0}
    assert redis_client.llen(SRC) == 3  # nothing removed, and no confirmation asked
    assert invoke(env, "remove-exported", str(path), "--dry-run").output.startswith("would remove 4 exported job(s)")
    done = json.loads(invoke(env, "remove-exported", str(path), "--force", "--json").output)
    assert done["dry_run"] is False and done["removed"] == 4 and redis_client.llen(SRC) == 0


def test_to_env_file_names_the_destination_and_checks_its_classes(redis_client, other_server, env, tmp_path):  # noqa: F811
    seed(redis_client, pending=2, delayed=0)
    bare = tmp_path / "bare.env"  # a .env with no app next to it: the report says the classes were not checked
    bare.write_text(f"REDIS_HOST=127.0.0.1\nREDIS_PORT={other_server.port}\nREDIS_PREFIX=new_\n"
                    "LARAQ_LARAVEL_VERSION=13\n")
    report = json.loads(invoke(env, "move", "default", "--to-env-file", str(bare), "--json").output)
    assert report["transferred"] == {"pending": 2, "delayed": 0} and report["classes_checked"] is False
    assert other_server.client().llen("new_queues:default") == 2


@pytest.mark.php
def test_to_env_file_of_an_app_checks_its_classes_by_default(redis_client, other_server, env, tmp_path):  # noqa: F811
    from conftest import require_laravel
    from phpapp import PhpApp

    from laraq.bus.dispatch import Dispatcher

    require_laravel("13")
    app = PhpApp(other_server.port, version="13", variant="custom", workdir=tmp_path / "dst")
    q = seed(redis_client, pending=2, delayed=0)
    Dispatcher(q).dispatch_job("App\\Jobs\\NoSuchJobThere", {})
    report = json.loads(invoke(env, "move", "default", "--to-env-file", str(app.path / ".env"), "--json").output)
    # the app next to the .env was read (the fixture's own job classes live outside app/Jobs, so its
    # exporter knows few of them: what it does not know stays, named)
    assert report["classes_checked"] is True and report["unknown_classes"]["App\\Jobs\\NoSuchJobThere"] == 1
    left = sum(report["unknown_classes"].values())
    assert sum(report["transferred"].values()) == 3 - left and redis_client.llen(SRC) == left


@pytest.mark.php
def test_move_failed_to_an_apps_env_file_checks_its_classes(env, redis_client, other_server, tmp_path):  # noqa: F811
    from conftest import require_laravel
    from phpapp import PhpApp
    from test_migrate_failed import payload

    require_laravel("13")
    app = PhpApp(other_server.port, version="13", variant="custom", workdir=tmp_path / "dst")
    src = store_for(env)
    src.log("redis", "default", payload(1, cls="App\\Jobs\\AttributeJob"), "RuntimeException: boom")
    src.log("redis", "default", payload(2, cls="App\\Jobs\\NoSuchJobThere"), "RuntimeException: boom")
    report = json.loads(invoke(env, "move-failed", "--to-env-file", str(app.path / ".env"), "--dry-run",
                               "--json").output)
    assert report["classes_checked"] is True and report["dry_run"] is True
    assert any("NoSuchJobThere" in r and "has no job class" in r for r in report["refused"])
    unchecked = json.loads(invoke(env, "move-failed", "--to-env-file", str(app.path / ".env"), "--dry-run",
                                  "--include-unknown", "--json").output)
    assert unchecked["classes_checked"] is False and unchecked["refused"] == [] and unchecked["moved"] == 2
