"""A payload PHP's worker fails is failed by laraq, with PHP's reason; a payload PHP runs is run.

Real artisan (``queue:work``) and laraq on the same Redis bytes. A valid EchoJob dispatched by PHP is
taken apart: without ``job`` (or ``data``), ``Illuminate\\Queue\\Jobs\\Job::fire`` reads the missing key,
Laravel's error handler turns the warning into ``ErrorException: Undefined array key "job"`` and the job
fails without its handler running. (artisan then writes no ``failed_jobs`` row at all: its own
``JobFailed`` listener calls ``resolveName()``, which reads the key again and throws. laraq keeps the job
in ``failed_jobs`` with the same exception class and message, so nothing is lost.)
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
import test_worker_support as support
from phpapp import PhpApp

from laraq.cli.work import build_worker, default_params

pytestmark = pytest.mark.php


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def _dispatch_without(php: PhpApp, redis_client: Any, queue: str, key: str) -> dict[str, Any]:
    php.tool("dispatch", "echo", f"--queue={queue}")
    list_key = php.prefix + f"queues:{queue}"
    payload = json.loads(redis_client.lpop(list_key))
    del payload[key]
    redis_client.rpush(list_key, json.dumps(payload))
    return payload


def _rows(php: PhpApp) -> list[dict[str, Any]]:
    conn = sqlite3.connect(php.db_path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM failed_jobs ORDER BY id")]
    finally:
        conn.close()


@pytest.mark.parametrize("key", ["job", "data"])
def test_a_payload_without_job_or_data_fails_as_in_php(php: PhpApp, redis_client: Any, key: str) -> None:
    # PHP: the handler never runs, the job leaves the queue, the reason is logged
    _dispatch_without(php, redis_client, "p", key)
    run = php.artisan("queue:work", "--queue=p", "--stop-when-empty", "--tries=3")
    assert run.returncode == 0, run.stderr
    assert php.runs() == []
    assert not redis_client.exists(*(php.prefix + "queues:p" + s for s in ("", ":delayed", ":reserved")))
    logged = "\n".join(p.read_text() for p in (php.storage / "logs").glob("*.log"))
    assert f'ErrorException(code: 0): Undefined array key \\"{key}\\"' in logged

    # laraq: the same reason, the handler never runs, the job is kept in failed_jobs
    body = json.dumps(_dispatch_without(php, redis_client, "l", key)).encode()
    # memory: the test process (not this worker) may be past the 128 MB default after other tests
    worker = build_worker(default_params(laravel=php.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                                         queue="l", tries=3), env=php.env, app=support.app)
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert php.runs() == []
    (row,) = [r for r in _rows(php) if r["queue"] == "l"]
    assert row["payload"].encode() == body
    assert row["exception"].startswith(f'ErrorException: Undefined array key "{key}" in ')
    assert not redis_client.exists(*(php.prefix + "queues:l" + s for s in ("", ":delayed", ":reserved")))


def test_a_complete_payload_still_runs(php: PhpApp, redis_client: Any) -> None:
    php.tool("dispatch", "echo", "--queue=ok")
    # memory: the test process (not this worker) may be past the 128 MB default after other tests
    worker = build_worker(default_params(laravel=php.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                                         queue="ok"), env=php.env, app=support.app)
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert [r["runner"] for r in php.runs()] == ["python"] and _rows(php) == []
