"""``laraq show`` on a real Redis: big jobs are shown shortened (``--full`` for everything), and the
failed-job store is searched too (by its id, the payload uuid or the payload id)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from test_ops_cli import cli, env, run, seed  # noqa: F401  (fixtures and helpers shared with the ops tests)

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue


def stdout(env, *args, code=0):  # noqa: F811
    """Standard output only (notes go to standard error)."""
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.stdout


def test_show_shortens_a_10mb_job_and_full_prints_it_all(env, redis_client):  # noqa: F811
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    d = Dispatcher(q)
    big = d.dispatch_job("App\\Jobs\\Big", {"blob": "x" * 10_000_000, "small": "ok"})
    many = d.dispatch_job("App\\Jobs\\Many", {"rows": [{"id": i, "tags": ["a"]} for i in range(30_000)]})
    text = run(env, "show", big.uuid)
    assert len(text) < 10_000 and "App\\Jobs\\Big" in text and '"small": "ok"' in text
    assert "(+9,999,800 characters)" in text and "--full prints the whole body" in text
    [shown] = json.loads(stdout(env, "show", big.uuid, "--json"))
    assert shown["body_truncated"] and shown["properties"]["small"] == "ok"
    assert len(shown["body"]) == 2000 and shown["body_bytes"] > 10_000_000
    full = run(env, "show", big.uuid, "--full")
    member = redis_client.lindex("old_queues:default", 0).decode()
    assert member in full and full.count("x" * 10_000_000) == 2  # the body, and the property in full
    [whole] = json.loads(stdout(env, "show", big.uuid, "--json", "--full"))
    assert whole["body"] == member and whole["properties"]["blob"] == "x" * 10_000_000

    text = run(env, "show", many.id)
    assert "holds more than 20,000 values" in text and "--full decodes it" in text
    [whole] = json.loads(stdout(env, "show", many.id, "--json", "--full"))
    assert len(whole["properties"]["rows"]) == 30_000
    [short] = json.loads(stdout(env, "show", many.uuid, "--json"))
    assert "@skipped" in short["properties"]


def test_show_finds_failed_jobs_by_id_uuid_and_payload_id(env, redis_client):  # noqa: F811
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import make_failed_store

    seed(redis_client, n=1, delayed=0)
    store = make_failed_store(LaravelSettings.from_env(env, version="12.67"))
    store.ensure_table()
    body = json.dumps({"uuid": "u-failed-1", "id": "pid-77", "displayName": "App\\Jobs\\Broken", "job": "x",
                       "data": {"list": list(range(100))}, "attempts": 3})
    store.log("redis", "mail", body, "RuntimeException: boom\n" + "\n".join(f"#{i} frame" for i in range(40)))
    for ident in ("u-failed-1", "pid-77"):
        [found] = json.loads(stdout(env, "show", ident, "--json"))
        assert (found["state"], found["queue"], found["connection"], found["failed_id"]) == (
            "failed", "mail", "redis", "u-failed-1")
        assert found["attempts"] == 3 and found["exception"].startswith("RuntimeException: boom")
    text = run(env, "show", "u-failed-1")
    assert "RuntimeException: boom" in text and "more lines (--full)" in text and "#39 frame" not in text
    assert "#39 frame" in run(env, "show", "u-failed-1", "--full")
    assert "…" in text and "80 more items" in text  # the data shortened
    run(env, "show", "u-failed-1", "--no-failed", code=1)
    run(env, "show", "u-failed-1", "-q", "default", code=1)
    # a store that cannot be opened is named, and the Redis matches are still shown
    [job] = json.loads(stdout(env, "dispatch", "App\\Jobs\\EchoJob", "--json"))
    broken = {**env, "DB_DATABASE": "/nonexistent/dir/db.sqlite"}
    out = run(broken, "show", job["uuid"])
    assert "failed-job store was not searched" in out and job["uuid"] in out
