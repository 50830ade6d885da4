"""SerializesModels and backed enums when Python runs the job, against real artisan on Laravel 8, 12, 13.

PHP dispatches the same jobs onto ``pq`` (drained by ``php artisan queue:work``) and ``lq`` (drained by
laraq with handlers that load the models through the app's DB settings); then a post is deleted
before either side runs. Compared: what each handler was given (row columns, enum backing value,
the collection without its missing row), the ``failed_jobs`` rows (``ModelNotFoundException`` text,
failed at once), the silently deleted ``$deleteWhenMissingModels`` job, and an empty Redis.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest
from phpapp import PhpApp
from test_jobmodel_php import app as app  # noqa: F401, PLC0414  (the fixture: PhpApp with LARAQ_LOG)
from test_jobmodel_php import drain_both, pending

from laraq.worker.worker import Worker

pytestmark = pytest.mark.php




def seed(app: PhpApp) -> None:
    conn = sqlite3.connect(app.db_path)
    conn.executemany("INSERT INTO posts (id, title) VALUES (?, ?)", [(1, "first"), (2, "second"), (3, "third")])
    conn.commit()
    conn.close()


def dispatch(app: PhpApp, queue: str, kind: str, **args: Any) -> None:
    app.tool("dispatch", kind, f"--queue={queue}", "--args=" + json.dumps(args))


def side(app: PhpApp, queue: str) -> dict[str, Any]:
    runs = [(r["class"], r["post"], r["title"], r["status"], r["others"]) for r in app.runs()
            if r.get("queue") == queue and "post" in r]
    conn = sqlite3.connect(app.db_path)
    failed = [(json.loads(p)["displayName"], re.sub(r" in \S+:\d+$", "", e.splitlines()[0]))
              for p, e in conn.execute("SELECT payload, exception FROM failed_jobs WHERE queue = ? ORDER BY id",
                                       (queue,))]
    conn.close()
    return {"runs": runs, "failed": failed}


def test_models_are_loaded_and_a_missing_model_fails_or_deletes_as_php(app: PhpApp, redis_client: Any,
                                                                      workers: list[Worker]) -> None:
    seed(app)
    for queue in ("pq", "lq"):
        dispatch(app, queue, "post", id=1, status="archived", others=[3, 2])
        dispatch(app, queue, "post", id=2)
        dispatch(app, queue, "post-delete-missing", id=2)
        dispatch(app, queue, "post-delete-missing", id=3, status="active")
    if app.version == "13":  # 13 writes the class's $deleteWhenMissingModels into the payload
        bodies = [json.loads(b) for b in redis_client.lrange(app.prefix + "queues:lq", 0, -1)]
        assert [b.get("deleteWhenMissingModels") for b in bodies] == [False, False, True, True]
    conn = sqlite3.connect(app.db_path)
    conn.execute("DELETE FROM posts WHERE id = 2")
    conn.commit()
    conn.close()
    drain_both(app, redis_client, workers)
    pq, lq = side(app, "pq"), side(app, "lq")
    assert pq == lq
    assert pq["runs"] == [("App\\Jobs\\PostJob", 1, "first", "archived", ["third"]),
                          ("App\\Jobs\\PostJobDeleteMissing", 3, "third", "active", [])]
    assert pq["failed"] == [("App\\Jobs\\PostJob", "Illuminate\\Database\\Eloquent\\ModelNotFoundException: "
                                                  "No query results for model [App\\Models\\Post].")]
    assert {r["runner"] for r in app.runs() if r.get("queue") == "lq"} == {"python"}
    for queue in ("pq", "lq", "default"):
        assert pending(app, redis_client, queue) == 0, queue


def test_delete_when_missing_models_comes_from_the_exported_schema(app: PhpApp, redis_client: Any,
                                                                  workers: list[Worker], tmp_path: Any) -> None:
    """No declaration on the handler: the class's ``$deleteWhenMissingModels`` comes from ``laraq schema``."""
    import test_worker_support as support

    from laraq.app import App
    from laraq.bus.schema import export_schema
    from laraq.cli.work import build_worker, default_params

    seed(app)
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(export_schema(app.path, ["App\\Jobs\\PostJobDeleteMissing"], env=app.env)))
    py = App("schema-only")
    py.register("App\\Jobs\\PostJobDeleteMissing", support._post)
    py.enums.update(support.app.enums)
    dispatch(app, "lq", "post-delete-missing", id=2)
    conn = sqlite3.connect(app.db_path)
    conn.execute("DELETE FROM posts WHERE id = 2")
    conn.commit()
    conn.close()
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, queue="lq")
    worker = build_worker(params, env={**app.env, "LARAQ_SCHEMA": str(schema_file)}, app=py)
    workers.append(worker)
    assert worker.daemon() == 0
    assert side(app, "lq") == {"runs": [], "failed": []} and pending(app, redis_client, "lq") == 0
