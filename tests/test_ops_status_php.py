"""``laraq status``, ``move`` and ``copy`` against real Laravel 8: the failed count is what ``queue:failed``
lists, ``--max`` alerts where ``queue:monitor --max`` does, and what a copy or a cross-db move reports is
what ``queue:work`` then runs at the destination, once."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner
from phpapp import PhpApp
from test_ops_cli import cli

pytestmark = pytest.mark.php


@pytest.fixture
def app(php, redis_client, redis_server, tmp_path):
    return PhpApp(redis_server.port, workdir=tmp_path / "app")


def laraq(app: PhpApp, *args: str, code: int = 0) -> str:
    env = {**app.env, "LARAQ_LARAVEL_VERSION": "8.83.26", "COLUMNS": "200"}
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.stdout


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a Symfony console table."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return rows[1:]


def test_failed_count_matches_queue_failed(app):
    for queue, n in (("default", 2), ("other", 1)):
        for _ in range(n):
            app.tool("dispatch", "failing", f"--queue={queue}")
    app.artisan("queue:work", "redis", "--queue=default,other", "--stop-when-empty", "--sleep=0", check=True)
    app.tool("dispatch", "echo", "--queue=other")  # so that `other` has a key in Redis
    app.tool("dispatch", "echo")
    php = Counter(row[2] for row in table_rows(app.artisan("queue:failed", check=True).stdout))
    doc = json.loads(laraq(app, "status", "--json", "--sample", "0"))
    assert {q["queue"]: q["failed"] for q in doc["queues"]} == dict(php) == {"default": 2, "other": 1}
    assert doc["failed_total"] == 3


def test_max_alerts_where_queue_monitor_does(app):
    app.tool("dispatch", "echo", "--count=3")
    app.tool("dispatch", "echo", "--delay=600")
    app.tool("dispatch", "echo", "--queue=other", "--count=3")
    app.pop("other")  # one reserved: size counts it, like Laravel's size()
    for limit in (3, 4, 5):
        out = app.artisan("queue:monitor", "redis:default,redis:other", f"--max={limit}", check=True).stdout
        php = {row[1]: (int(row[2]), "ALERT" in row[3]) for row in table_rows(out)}
        result = CliRunner().invoke(cli, ["status", "default", "other", "--max", str(limit), "--json", "--sample", "0"],
                                    env={**app.env, "LARAQ_LARAVEL_VERSION": "8.83.26"})
        ours = {q["queue"]: (q["total"], q["alert"]) for q in json.loads(result.stdout)["queues"]}
        assert ours == php, limit
        assert result.exit_code == (1 if any(alert for _, alert in php.values()) else 0)
    assert re.search(r"\| redis\s+\| default", out)


def test_copy_and_cross_db_move_report_what_artisan_then_runs(php, redis_server, redis_client, tmp_path):
    old = PhpApp(redis_server.port, workdir=tmp_path / "old")
    new = PhpApp(redis_server.port, workdir=tmp_path / "new", extra_env={"REDIS_DB": "2"})
    db2 = redis_server.client(2)
    db2.flushdb()
    old.tool("dispatch", "echo", "--count=4", "--args=" + json.dumps({"args": ["copied"]}))
    old.tool("dispatch", "echo", "--queue=moving", "--count=3", "--args=" + json.dumps({"args": ["moved"]}))
    old.pop("moving")  # one reserved job the move leaves behind, and says so
    url = f"redis://127.0.0.1:{redis_server.port}/2"
    first = json.loads(laraq(old, "copy", "default", "--to-url", url, "--json"))
    again = json.loads(laraq(old, "copy", "default", "--to-url", url, "--json"))
    assert first["transferred"] == first["verified_at_destination"] == {"pending": 4, "delayed": 0}
    assert again["transferred"] == {"pending": 0, "delayed": 0}
    assert again["already_at_destination"] == {"pending": 4, "delayed": 0}
    text = laraq(old, "move", "moving", "default", "--to-url", url)
    assert text.startswith("moved 2 jobs (2 pending)") and "1 reserved jobs left in the source" in text
    new.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", check=True)
    runs = Counter((r["uuid"], tuple(r["args"])) for r in new.runs())
    assert sorted(Counter(args for _, args in runs).items()) == [(("copied",), 4), (("moved",), 2)]
    assert set(runs.values()) == {1}  # each job ran once
    assert old.tool("size")["size"] == 4 and old.tool("size", "--queue=moving")["size"] == 1  # copy kept, move took
