"""The job model when the app is NOT on laraq's host: what is only data is done at artisan's moment by
laraq itself (batch counts, ``failed_job_ids``, cancel, :mod:`laraq.stores.batches`, under the batch row's
lock), and only PHP's closures and methods go to PHP as continuations on a queue laraq does not work.

Differential against ``php artisan queue:work`` on live Laravel 8, 12 and 13: the same batch dispatched
twice, one drained by artisan alone, the other by laraq (item by item, with no PHP worker running while
it does) and then artisan on the PHP queue. Item 3 of a batch whose item 2 failed must see
``cancelled()`` on both sides. Also: a hand-off laraq would take itself is refused at start, and a
continuation's Horizon name is stable per kind.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
import test_worker_support as support
from conftest import queue_count
from phpapp import PhpApp

from laraq.app import App
from laraq.cli.work import build_worker, default_params
from laraq.protocol.payload import Payload
from laraq.worker.worker import Worker

pytestmark = pytest.mark.php

handlers = App("jobmodel-data")
handlers.register("App\\Jobs\\BatchEchoJob", support.batch_echo)
handlers.register("App\\Jobs\\EchoJob", support.echo)


@pytest.fixture
def app(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def artisan_drain(app: PhpApp, queues: str) -> None:
    app.artisan("queue:work", "redis", f"--queue={queues}", "--stop-when-empty", "--sleep=0", check=True)


def laraq_drain(app: PhpApp, workers: list[Worker], queue: str) -> Worker:
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue=queue, php_queue="php")
    worker = build_worker(params, env=app.env, app=handlers)
    workers.append(worker)
    assert worker.callqueued.steps.php is None  # no --php-app, no --env-file: the app is not on this host
    assert worker.daemon() == 0
    return worker


def batch_state(app: PhpApp, queue: str, batch_id: str) -> dict[str, Any]:
    runs = app.runs()
    items = [(r["args"]["n"], r.get("cancelled")) for r in runs
             if r.get("class") == "App\\Jobs\\BatchEchoJob" and r.get("args", {}).get("q") == queue]
    callbacks = [r["what"] for r in runs if r.get("class") == "batch-callback" and r.get("tag") == queue]
    conn = sqlite3.connect(app.db_path)
    total, pending_jobs, failed, failed_ids, cancelled, finished = conn.execute(
        "SELECT total_jobs, pending_jobs, failed_jobs, failed_job_ids, cancelled_at, finished_at "
        "FROM job_batches WHERE id = ?", (batch_id,)).fetchone()
    failed_uuids = {json.loads(p)["uuid"] for (p,) in conn.execute("SELECT payload FROM failed_jobs WHERE queue = ?",
                                                                   (queue,))}
    conn.close()
    ids = json.loads(failed_ids)
    return {"items": items, "callbacks": callbacks, "total": total, "pending": pending_jobs, "failed": failed,
            "failed_ids": len(ids), "ids_are_failed_rows": set(ids) == failed_uuids,
            "cancelled": cancelled is not None, "finished": finished is not None}


@pytest.mark.parametrize("allow_failures", [False, True], ids=["cancels", "allows-failures"])
@pytest.mark.parametrize("modes", [("ok", "ok", "ok"), ("ok", "fail", "ok")], ids=["success", "item2-fails"])
def test_batch_data_at_artisans_moment(app: PhpApp, redis_client: Any, workers: list[Worker],
                                       modes: tuple[str, ...], allow_failures: bool) -> None:
    ids = {}
    for queue in ("pq", "lq"):
        steps = [{"args": {"q": queue, "n": i + 1}, "mode": m, "settings": {"tries": 1}} for i, m in enumerate(modes)]
        ids[queue] = app.tool("batch-callbacks", f"--queue={queue}", "--steps=" + json.dumps(steps),
                              *(["--allow-failures"] if allow_failures else []))["id"]
    artisan_drain(app, "pq")
    laraq_drain(app, workers, "lq")  # the three items, one after the other, no PHP worker running
    during = batch_state(app, "lq", ids["lq"])
    # the data is already there before any PHP ran: counts, failed ids, cancel
    assert during["pending"] == 3 - modes.count("ok") and during["failed"] == modes.count("fail")
    assert during["cancelled"] is ("fail" in modes and not allow_failures)
    assert during["callbacks"] == []
    continuations = [Payload.parse(b).display_name for b in redis_client.lrange(app.prefix + "queues:php", 0, -1)]
    assert set(continuations) <= {"laraq continuation: batch", "laraq continuation: failed"}
    artisan_drain(app, "php")
    pq, lq = batch_state(app, "pq", ids["pq"]), batch_state(app, "lq", ids["lq"])
    assert pq == lq
    if "fail" in modes:
        assert pq["items"][2] == (3, not allow_failures)  # item 3 saw the cancel, on both sides
        assert pq["failed"] == pq["failed_ids"] == 1 and pq["ids_are_failed_rows"]
    else:
        assert pq["callbacks"] == ["then", "finally"] and pq["finished"] and pq["pending"] == 0
    for queue in ("lq", "php"):
        assert redis_client.llen(app.prefix + "queues:" + queue) == 0


def test_a_hand_off_laraq_would_take_itself_is_refused_at_start(app: PhpApp) -> None:
    env = {**app.env, "PYTHONPATH": ":".join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "laraq", "work", "--app", "test_worker_support:app", "--queue=lq,php",
                           "--php-queue=php", "--no-supervise", "--stop-when-empty", "--laravel", app.release, "--quiet"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("laraq work:")]
    assert len(lines) == 1 and "--php-queue" in lines[0] and "'php'" in lines[0]
    # the shared-queue topology (continuations on the default queue, which PHP workers also serve): one warning
    proc = subprocess.run([sys.executable, "-m", "laraq", "work", "--app", "test_worker_support:app", "--queue=default",
                           "--no-supervise", "--stop-when-empty", "--laravel", app.release, "--quiet"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sum("keep a PHP worker on it" in line for line in proc.stderr.splitlines()) == 1


def test_a_job_only_php_can_run_goes_to_the_php_queue_once(app: PhpApp, redis_client: Any, workers: list[Worker],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Middleware laraq does not know, on a queue only laraq works: moved untouched to ``--php-queue``
    once (attempts not burned, one log line), and PHP runs it there; it never comes back."""
    app.tool("dispatch", "echo", "--queue=lq", "--rate-limited=backups", "--args=" + json.dumps({"args": {"q": "lq"}}))
    (body,) = redis_client.lrange(app.prefix + "queues:lq", 0, -1)
    laraq_drain(app, workers, "lq")
    assert redis_client.lrange(app.prefix + "queues:php", 0, -1) == [body]  # byte for byte
    assert pending_all(app, redis_client, "lq") == 0
    moved = [r for r in caplog.records if "moved untouched to queue php" in r.getMessage()]
    assert len(moved) == 1 and "RateLimited" in moved[0].getMessage()
    artisan_drain(app, "php")
    laraq_drain(app, workers, "lq")  # nothing comes back to laraq
    assert [(r["runner"], r["queue"]) for r in app.runs() if r.get("class") == "App\\Jobs\\EchoJob"] == [("php", "php")]
    assert pending_all(app, redis_client, "php") == pending_all(app, redis_client, "lq") == 0


def pending_all(app: PhpApp, redis_client: Any, queue: str) -> int:
    return queue_count(redis_client, app.prefix + "queues:" + queue)
