"""A batch kept in the app's own ``queue.batching`` table, worked by laraq and by artisan on the same app.

``fixtures/laravel{12,13}-custom`` name ``'batching' => ['database' => 'sqlite', 'table' =>
'acme_job_batches']`` as literals in ``config/queue.php`` (the stock ``job_batches`` table does not even
exist there). The same three-item batch (ok, fail, ok; so a success, a failure with the batch's cancel,
and an item that sees ``cancelled()``) is dispatched by PHP three times: one drained by ``php artisan
queue:work`` alone, one by laraq on a host without the app (``--app-config`` exported file, no PHP: laraq
writes the batch row itself, :mod:`laraq.stores.batches`, and artisan then runs the PHP continuations), one
by laraq with the app on the host (``--env-file``: the app's PHP records it). Each ends with the same row in
``acme_job_batches`` as artisan alone gives.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import require_laravel
from phpapp import PhpApp
from test_app_config_php import CONNECTION, PREFIX, app_redis, clean_env, laraq

pytestmark = pytest.mark.php

TABLE = "acme_job_batches"
MODES = ("ok", "fail", "ok")


@pytest.fixture(params=["12", "13"])
def app(request: pytest.FixtureRequest, redis_server: Any) -> PhpApp:
    require_laravel(request.param)
    redis_server.client(0).flushall()
    return PhpApp(redis_server.port, version=request.param, variant="custom")


def dispatch_batch(app: PhpApp, queue: str) -> str:
    steps = [{"args": {"q": queue, "n": i + 1}, "mode": m, "settings": {"tries": 1}} for i, m in enumerate(MODES)]
    return str(app.tool("batch-callbacks", f"--queue={queue}", f"--connection={CONNECTION}",
                        "--steps=" + json.dumps(steps))["id"])


def artisan_drain(app: PhpApp, queues: str) -> None:
    app.artisan("queue:work", CONNECTION, f"--queue={queues}", "--stop-when-empty", "--sleep=0", check=True)


def row(app: PhpApp, batch_id: str) -> dict[str, Any]:
    """The batch row, with what differs between two batches by design (id, name, times) as presence."""
    conn = sqlite3.connect(app.db_path)
    conn.row_factory = sqlite3.Row
    found = conn.execute(f"SELECT * FROM {TABLE} WHERE id = ?", (batch_id,)).fetchone()
    assert found is not None, f"batch {batch_id} is not in {TABLE}"
    assert "job_batches" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    failed_uuids = {json.loads(p)["uuid"] for (p,) in conn.execute("SELECT payload FROM acme_failed_jobs")}
    conn.close()
    out = dict(found)
    ids = json.loads(out.pop("failed_job_ids"))
    out["failed_job_ids"] = (len(ids), set(ids) <= failed_uuids)
    for key in ("id", "name", "created_at", "options"):  # options hold the closures, tagged per queue
        out.pop(key)
    for key in ("cancelled_at", "finished_at"):
        out[key] = out[key] is not None
    return out


def items(app: PhpApp, queue: str) -> list[tuple[int, Any]]:
    return [(r["args"]["n"], r.get("cancelled")) for r in app.runs()
            if r.get("class") == "App\\Jobs\\BatchEchoJob" and r.get("args", {}).get("q") == queue]


def test_the_apps_batching_table(app: PhpApp, tmp_path: Path) -> None:
    ids = {queue: dispatch_batch(app, queue) for queue in ("pq", "lq", "hq")}
    artisan_drain(app, "pq")
    expected = row(app, ids["pq"])
    assert expected["failed_jobs"] == 1 and expected["cancelled_at"]

    # laraq on a host without the app: only the exported config, no PHP; the batch row is laraq's to write
    exported = tmp_path / "laraq-config.json"
    proc = laraq(app, "--from", str(app.path), "-o", str(exported), command="config")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(subprocess.run(
        [sys.executable, "-c", "from laraq.cli import main; main()", "config", "--json", "--app-config",
         str(exported)], env=clean_env(app), cwd=tmp_path, capture_output=True, text=True, timeout=120).stdout)
    assert {f["setting"]: f["value"] for f in info["settings"]}["batching.table"] == TABLE
    run = subprocess.run(
        [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app", "test_worker_support:app",
         "--app-config", str(exported), "--queue", "lq", "--php-queue", "php", "--sleep", "0",
         "--stop-when-empty"], env=clean_env(app), cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "could not record it in batch" not in run.stderr, run.stderr
    during = row(app, ids["lq"])  # written by laraq before any PHP ran
    assert (during["pending_jobs"], during["failed_jobs"], during["cancelled_at"]) == (1, 1, True)
    artisan_drain(app, "php")  # the continuations: the PHP half (callbacks)

    # laraq with the app on the host (--env-file): the app's own PHP records it
    on_host = laraq(app, "--queue", "hq", "--stop-when-empty")
    assert on_host.returncode == 0, on_host.stderr

    assert row(app, ids["lq"]) == expected
    assert row(app, ids["hq"]) == expected
    assert items(app, "lq") == items(app, "hq") == items(app, "pq")
    assert items(app, "pq")[2] == (3, True)  # item 3 saw the cancel everywhere
    client = app_redis(app)
    for queue in ("pq", "lq", "hq", "php"):
        assert client.llen(f"{PREFIX}queues:{queue}") == 0
