"""A worker runs under exactly the ACL ``compat-docs/protocol.md`` documents, and a denial is named.

The ``ACL SETUSER`` line is read from the doc, so the doc and the test cannot drift. A real
``redis-server`` gets that user and nothing more; the Laravel 12 fixture app's jobs (PHP's bytes, pushed
from Python: ``pyapp.PyApp``) and one laraq dispatched, succeeding, failing, released and delayed, all
finish under it, and ``ACL LOG`` records no
denial. Taking one permission away (a command the queue scripts run, or ``ping``) stops the worker with
exit 4 and one line naming the command and the ``ACL SETUSER`` that grants it - never a traceback, and
never exit 0 under ``--stop-when-empty``.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import ROOT
from pyapp import PyApp
from test_worker_support import laraq_env, run_laraq

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue


def documented_acl() -> list[str]:
    """The permissions of the doc's ``ACL SETUSER laraq-worker`` line (after ``-@all``)."""
    text = (ROOT / "compat-docs" / "protocol.md").read_text()
    (line,) = re.findall(r"^ACL SETUSER laraq-worker .*$", text, re.M)
    return line.split("-@all", 1)[1].split()


def documented_keys(prefix: str, horizon_prefix: str = "laravel_horizon:") -> list[str]:
    """The key patterns of the doc's line (between ``resetkeys`` and ``resetchannels``), filled in."""
    text = (ROOT / "compat-docs" / "protocol.md").read_text()
    (line,) = re.findall(r"^ACL SETUSER laraq-worker .*$", text, re.M)
    patterns = line.split("resetkeys", 1)[1].split("resetchannels", 1)[0].split()
    return [p.replace("HORIZON_PREFIX", horizon_prefix).replace("PREFIX", prefix) for p in patterns]


def make_user(admin: redis.Redis, prefix: str, permissions: list[str]) -> None:
    admin.execute_command("ACL", "SETUSER", "laraq-worker", "reset", "on", ">s3cret", "resetkeys",
                          *documented_keys(prefix), "resetchannels", "-@all", *permissions)
    admin.execute_command("ACL", "LOG", "RESET")


@pytest.fixture
def app12(redis_client: Any, redis_server: Any) -> PyApp:
    return PyApp(redis_server.port, version="12")


def run_worker(app: PyApp, *args: str) -> tuple[int, str]:
    env = laraq_env(app, REDIS_USERNAME="laraq-worker", REDIS_PASSWORD="s3cret", LARAQ_LOG=str(app.log_path))
    proc = run_laraq(app, "--queue=acl", "--stop-when-empty", *args, env=env, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr


def test_documented_acl_is_enough_for_a_worker(app12: PyApp, redis_client: redis.Redis) -> None:
    permissions = documented_acl()
    assert "+evalsha" in permissions and "+zremrangebyrank" in permissions and "+@all" not in permissions
    make_user(redis_client, app12.prefix, permissions)
    for mode in ("ok", "fail", "release"):
        app12.dispatch("echo", "acl", mode=mode)
    app12.dispatch("echo", "acl", delay=1, mode="ok")
    delayed = app12.prefix + "queues:acl:delayed"
    due = int(redis_client.zrange(delayed, 0, -1, withscores=True)[0][1])
    while int(redis_client.time()[0]) <= due:  # Redis's clock: the delayed job is due before the worker starts
        time.sleep(0.1)
    queue = RedisQueue(redis_client, prefix=app12.prefix, version=app12.release)
    Dispatcher(queue).dispatch_job("App\\Jobs\\EchoJob", {"args": ["laraq"], "mode": "ok", "seconds": 0,
                                                                      "note": "n", "hidden": "h"},
                                   queue="acl")

    for args in (["--tries=2"], ["--tries=2", "--batch=1"]):  # batch reserves, then Laravel's pop
        code, out = run_worker(app12, *args)
        assert code == 0, out[-3000:]
    assert redis_client.execute_command("ACL", "LOG") == [], "a command the doc does not list was needed"
    runs = [r for r in app12.runs() if r["runner"] == "python"]
    assert {r["mode"] for r in runs} == {"ok", "fail", "release"} and len([r for r in runs if r["mode"] == "ok"]) == 3
    conn = sqlite3.connect(app12.db_path)
    failed = conn.execute("select count(*) from failed_jobs").fetchone()[0]
    conn.close()
    assert failed == 2  # the failing job, and the released one past --tries
    assert not redis_client.exists(*(app12.prefix + "queues:acl" + s for s in ("", ":delayed", ":reserved")))


@pytest.mark.parametrize("batch", ["100", "1"])
def test_a_command_denied_inside_a_script_is_named(app12: PyApp, redis_client: redis.Redis, batch: str) -> None:
    make_user(redis_client, app12.prefix, [p for p in documented_acl() if p != "+lpop"])
    app12.dispatch("echo", "acl")
    code, out = run_worker(app12, f"--batch={batch}")
    assert code == 4, out[-3000:]  # not 0: a denial is not an empty queue
    assert "denied the command 'lpop' to this ACL user inside a queue script" in out, out[-3000:]
    assert "ACL SETUSER laraq-worker +lpop" in out and "Traceback" not in out and "s3cret" not in out
    assert redis_client.llen(app12.prefix + "queues:acl") == 1  # the job is still there
    assert app12.runs() == []


def test_a_denied_ping_is_one_line(app12: PyApp, redis_client: redis.Redis, tmp_path: Path) -> None:
    make_user(redis_client, app12.prefix, [p for p in documented_acl() if p != "+ping"])
    code, out = run_worker(app12)
    assert code == 4, out[-3000:]
    assert "denied the command 'ping' to this ACL user" in out and "ACL SETUSER laraq-worker +ping" in out
    assert "Traceback" not in out
