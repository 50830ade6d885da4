"""The dashboard's writes to what PHP reads, against real Laravel: a batch cancelled from the batches page
is the batch ``Batch::cancel()`` leaves (same row), and artisan's ``queue:work`` then runs its items as
items of a cancelled batch."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from phpapp import PhpApp

from laraq.cli.common import Ops
from laraq.dashboard import actions

pytestmark = pytest.mark.php

pytest.importorskip("starlette")


def _row(app: PhpApp, batch_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(app.db_path)
    conn.row_factory = sqlite3.Row
    found = dict(conn.execute("SELECT * FROM job_batches WHERE id = ?", (batch_id,)).fetchone())
    conn.close()
    return found


def test_a_batch_cancelled_from_the_dashboard_is_the_one_batch_cancel_leaves(
        laravel: str, redis_server: Any, tmp_path: Path) -> None:
    app = PhpApp(redis_server.port, version=laravel)
    ids = {}
    for queue, php_cancels in (("pq", True), ("dq", False)):
        steps = [{"args": {"q": queue, "n": i + 1}, "mode": "ok"} for i in range(2)]
        ids[queue] = str(app.tool("batch-callbacks", f"--queue={queue}", "--steps=" + json.dumps(steps),
                                  *(["--cancel"] if php_cancels else []))["id"])
    env = tmp_path / ".env"
    env.write_text("".join(f"{k}={app.env[k]}\n" for k in ("REDIS_HOST", "REDIS_PORT", "REDIS_PREFIX",
                                                           "DB_CONNECTION", "DB_DATABASE")))
    ops = Ops.load(str(env), app.release, None)
    assert _row(app, ids["dq"])["cancelled_at"] is None
    message = actions.cancel(ops, ids["dq"], actions.Journal(tmp_path), client="127.0.0.1")
    assert ids["dq"] in message
    php, ours = _row(app, ids["pq"]), _row(app, ids["dq"])
    for row in (php, ours):
        assert row["cancelled_at"] is not None and row["cancelled_at"] == row["finished_at"]
    differs = ("id", "name", "options", "created_at", "cancelled_at", "finished_at")
    assert {k: v for k, v in php.items() if k not in differs} == {k: v for k, v in ours.items() if k not in differs}
    app.artisan("queue:work", "redis", "--queue=pq,dq", "--stop-when-empty", "--sleep=0", check=True)
    seen = {q: [r.get("cancelled") for r in app.runs() if r.get("class") == "App\\Jobs\\BatchEchoJob"
                and r["args"]["q"] == q] for q in ("pq", "dq")}
    assert seen["pq"] == seen["dq"] == [True, True]  # each item asked batch()->cancelled(): yes, on both
