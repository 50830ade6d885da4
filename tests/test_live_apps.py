"""The fixture apps of every live Laravel line boot and work: PHP dispatches, artisan and laraq both run.

These are the smoke tests of the multi-version driver (``tests/phpapp.py``): the same job kinds on
Laravel 8 (Debian), 9.52, 10.50, 11.56, 12.67 and 13.26 (the live trees), each app on its skeleton's stock
prefixes, and what later lines add to the payload (``createdAt``, ``batchId``, enum queue names); each
expectation is the version profile's (:class:`laraq.protocol.versions.LaravelVersion`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import run_laraq

from laraq.protocol.versions import LaravelVersion

pytestmark = pytest.mark.php


@pytest.fixture
def app(laravel: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel)


def work(app: PhpApp, *extra: str) -> str:
    proc = app.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def test_artisan_version_is_the_line_under_test(app: PhpApp) -> None:
    out = app.artisan("--version", check=True).stdout
    assert f"Laravel Framework {app.release}" in out
    assert app.tool("config", "database.redis.options.prefix", "cache.prefix") == {
        "database.redis.options.prefix": app.prefix, "cache.prefix": app.cache_prefix}


def test_php_dispatch_runs_once_under_artisan(app: PhpApp, redis_client: Any) -> None:
    [uuid] = app.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"n": 1}}))["ids"]
    payload = json.loads(redis_client.lindex(app.prefix + "queues:default", 0))
    assert ("createdAt" in payload) == LaravelVersion.parse(app.release).payload_has_created_at_and_delay
    out = work(app)
    assert "App\\Jobs\\EchoJob" in out
    assert [(r["class"], r["args"], r["attempts"]) for r in app.runs()] == [("App\\Jobs\\EchoJob", {"n": 1}, 1)]
    assert redis_client.llen(app.prefix + "queues:default") == 0
    assert redis_client.zcard(app.prefix + "queues:default:reserved") == 0
    assert uuid is not None


def test_laraq_runs_what_php_dispatched(app: PhpApp, redis_client: Any) -> None:
    app.tool("dispatch", "echo", "--queue=lq", "--args=" + json.dumps({"args": {"from": "php"}}))
    proc = run_laraq(app, "--once", "--queue=lq")
    assert proc.returncode == 0, proc.stderr
    [run] = app.runs()
    assert (run["runner"], run["args"], run["attempts"], run["queue"]) == ("python", {"from": "php"}, 1, "lq")
    assert not redis_client.exists(app.prefix + "queues:lq", app.prefix + "queues:lq:reserved")


def test_batch_members_carry_the_batch_id(app: PhpApp, redis_client: Any) -> None:
    if not LaravelVersion.parse(app.release).payload_has_batch_id:
        pytest.skip(f"Laravel {app.release} keeps batchId inside the serialized command only (data.batchId: 12.51+)")
    batch = app.tool("batch", "--count=2", "--queue=batch")
    members = [json.loads(m) for m in redis_client.lrange(app.prefix + "queues:batch", 0, -1)]
    assert [m["data"]["batchId"] for m in members] == [batch["batch_id"]] * 2
    work(app, "--queue=batch")
    assert [r["batch"] for r in app.runs()] == [batch["batch_id"]] * 2
    assert app.tool("batch-status", batch["batch_id"])["finished"] is True


def test_enum_queue_names(app: PhpApp, redis_client: Any) -> None:
    if int(app.version) < 11:
        pytest.skip(f"Laravel {app.release}'s onQueue() takes strings only (enums: 11+)")
    app.tool("dispatch", "echo", "--queue-enum=Emails")
    assert redis_client.llen(app.prefix + "queues:emails") == 1
    work(app, "--queue=emails")
    assert [r["queue"] for r in app.runs()] == ["emails"]


def test_horizon_runs_jobs_with_the_fixture_work_command(laravel: str, redis_client: Any, redis_server: Any) -> None:
    if laravel == "8":
        pytest.skip("Horizon is not part of Debian's Laravel 8")
    from test_worker_support import wait_for

    app = PhpApp(redis_server.port, version=laravel, horizon=True)
    app.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"via": "horizon"}}))
    proc = app.popen_artisan("horizon")
    try:
        wait_for(lambda: app.runs(), timeout=60)
        status = app.artisan("horizon:status").stdout
        assert "running" in status.lower()
    finally:
        app.artisan("horizon:terminate")
        try:
            out, err = proc.communicate(timeout=60)
        except Exception:
            proc.kill()
            out, err = proc.communicate()
    assert "stop-when-empty-for" not in out + err
    assert [(r["args"], r["attempts"]) for r in app.runs()] == [({"via": "horizon"}, 1)]
