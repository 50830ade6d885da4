"""A failed job's handler runs once per real attempt, even while ``failed_jobs`` cannot be written.

Real Redis, the fixture app's jobs pushed from Python (``pyapp.PyApp``), laraq workers in this process. When the
failed store refuses the row (SQLite table gone; MariaDB/PostgreSQL stopped under a running worker),
the job is parked in ``<prefix>queues:<name>:failed-parked`` with its failure, not run again; the row is
written with the original ``failed_at`` when the store is back (by the running worker's timer, or at the
next start), and the store reconnects by itself after the database restarted.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import click
import pytest
import test_worker_support as support
from click.testing import CliRunner
from pyapp import PyApp
from test_worker_support import wait_for

from laraq.cli.ops import COMMANDS
from laraq.cli.work import build_worker, default_params
from laraq.stores.failed import DatabaseUuidFailedJobStore
from laraq.stores.parked import parked_summary
from laraq.worker.worker import Worker

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.close()


def make_worker(app: PyApp, workers: list[Worker], env: dict[str, str] | None = None, **overrides: Any) -> Worker:
    params = default_params(**{"laravel": app.release, "sleep": 0, "stop_when_empty": True, "quiet": True,
                                "memory": 1 << 20, **overrides})
    worker = build_worker(params, env=env or app.env, app=support.app)
    workers.append(worker)
    return worker


def parked(redis_client: Any, app: PyApp, queue: str) -> dict[bytes, dict[str, Any]]:
    raw = redis_client.hgetall(app.prefix + f"queues:{queue}:failed-parked")
    return {k: json.loads(v) for k, v in raw.items()}


def dispatch_failing(app: PyApp, queue: str) -> str:
    """The fixture app's EchoJob whose handler raises; returns its job id."""
    (job_id,) = app.dispatch("echo", queue, mode="fail")
    return job_id


def python_runs(app: PyApp) -> list[str]:
    """The uuids of the jobs the Python handlers ran, one per run."""
    return [r["uuid"] for r in app.runs() if r["runner"] == "python"]


def join_flush(worker: Worker) -> None:
    thread = worker.settle.parked._thread
    if thread is not None:
        thread.join(60)


def test_sqlite_unwritable_parks_the_failure_and_the_next_start_writes_it(
        pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    dispatch_failing(pyapp, "f")
    (body,) = redis_client.lrange(pyapp.prefix + "queues:f", 0, -1)
    uuid = json.loads(body)["uuid"]
    conn = sqlite3.connect(pyapp.db_path)
    conn.execute("ALTER TABLE failed_jobs RENAME TO failed_jobs_gone")  # the DB is there, the table is not
    conn.commit()
    before = time.time()
    assert make_worker(pyapp, workers, queue="f").daemon() == 0

    (record,) = parked(redis_client, pyapp, "f").values()
    assert record["payload"].encode() == body and record["uuid"] == uuid and record["queue"] == "f"
    assert record["exception"].startswith("RuntimeError: echo job failed on purpose")
    assert before <= record["failed_at"] <= time.time()
    # kept, not on the queue: nothing runs it again
    for key in ("f", "f:delayed", "f:reserved"):
        assert not redis_client.exists(pyapp.prefix + "queues:" + key), key
    summary = parked_summary(workers[0].queue, ["f", "other"])
    assert list(summary) == ["f"] and summary["f"]["count"] == 1
    assert summary["f"]["newest_exception"].startswith("RuntimeError: echo job failed on purpose")
    assert python_runs(pyapp) == [uuid]
    # status and doctor say so
    status = CliRunner().invoke(cli, ["status", "--json", "--sample", "0", "f"], env={**pyapp.env, "LARAQ_LARAVEL_VERSION": pyapp.release}, catch_exceptions=False)
    assert json.loads(status.stdout)["parked_failures"]["f"]["count"] == 1, status.output
    doctor = CliRunner().invoke(cli, ["doctor", "--json"], env={**pyapp.env, "LARAQ_LARAVEL_VERSION": pyapp.release}, catch_exceptions=False)
    assert "1 failed job(s) parked" in doctor.output

    conn.execute("ALTER TABLE failed_jobs_gone RENAME TO failed_jobs")
    conn.commit()
    worker = make_worker(pyapp, workers, queue="f")
    assert worker.daemon() == 0
    join_flush(worker)
    conn.row_factory = sqlite3.Row
    (row,) = [dict(r) for r in conn.execute("SELECT * FROM failed_jobs")]
    conn.close()
    assert row["payload"].encode() == body and row["uuid"] == uuid and row["queue"] == "f"
    assert row["exception"] == record["exception"]
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record["failed_at"])) == row["failed_at"]
    assert parked(redis_client, pyapp, "f") == {}
    assert python_runs(pyapp) == [uuid]  # the handler ran once, for its one real attempt


@pytest.mark.parametrize("kind", ["mariadb", "postgres"])
def test_database_restarted_under_a_running_worker(
        pyapp: PyApp, redis_client: Any, workers: list[Worker], kind: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(kind)
    conn = server.connect()
    store = DatabaseUuidFailedJobStore(conn)
    store.ensure_table()
    with conn.cursor() as cur:
        cur.execute("delete from failed_jobs")
    conn.commit()
    conn.close()

    env = {**pyapp.env, **server.env}
    worker = make_worker(pyapp, workers, env=env, queue="db", stop_when_empty=False)
    worker.settle.parked.every = 0.5  # the timer that writes parked rows (15 s by default)
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(worker.daemon()), daemon=True)
    thread.start()

    def rows() -> list[str]:
        """The job ids in failed_jobs, in row order."""
        try:
            c = server.connect()
        except Exception:
            return []
        try:
            with c.cursor() as cur:
                cur.execute("select payload from failed_jobs order by id")
                return [json.loads(r[0])["id"] for r in cur.fetchall()]
        finally:
            c.close()

    try:
        first = dispatch_failing(pyapp, "db")
        wait_for(lambda: rows() == [first], timeout=60)

        server.pause()  # the database restarts: stopped now, the worker keeps its old connection
        second = dispatch_failing(pyapp, "db")
        wait_for(lambda: len(parked(redis_client, pyapp, "db")) == 1, timeout=60)
        time.sleep(2)  # several flush passes fail while the database is down: nothing runs again
        assert len(python_runs(pyapp)) == 2
        assert not redis_client.exists(*(pyapp.prefix + "queues:db" + s for s in ("", ":delayed", ":reserved")))

        server.resume()
        wait_for(lambda: rows() == [first, second], timeout=60)
        assert parked(redis_client, pyapp, "db") == {}
        third = dispatch_failing(pyapp, "db")  # the store's own connection is back
        wait_for(lambda: rows() == [first, second, third], timeout=60)
    finally:
        worker.signals.quit()
        worker.signals.wake.set()
        thread.join(60)
    assert status == [0]
    runs = python_runs(pyapp)
    assert len(runs) == len(set(runs)) == 3  # one run per job: none ran again while its row waited


def test_a_row_written_before_a_lost_hdel_is_not_written_twice(redis_client: Any, tmp_path: Any) -> None:
    # the flush writes the row, then removes the record; if the removal was lost, the next flush finds the
    # uuid in failed_jobs and only removes the record
    from laraq.protocol.queue import RedisQueue
    from laraq.stores.parked import ParkedFailures

    conn = sqlite3.connect(tmp_path / "db.sqlite", check_same_thread=False)
    store = DatabaseUuidFailedJobStore(conn, dialect="sqlite")
    store.ensure_table()
    queue = RedisQueue(redis_client, prefix="p_", version="12.0")
    parked = ParkedFailures(queue, store)
    body = json.dumps({"uuid": "u-1", "job": "X@y", "data": {}, "attempts": 1}).encode()
    parked.park("redis", "default", body, "RuntimeError: boom", uuid="u-1", failed_at=1_700_000_000)
    store.log("redis", "default", body, "RuntimeError: boom")  # the row, as if the HDEL after it was lost
    assert parked.write_rows(["default"]) == (1, 0)
    assert store.count() == 1 and redis_client.hlen("p_queues:default:failed-parked") == 0
    parked.park("redis", "default", body.replace(b"u-1", b"u-2"), "E", uuid="u-2", failed_at=1_700_000_000)
    assert parked.write_rows(["default"]) == (1, 0)
    (row,) = [j for j in store.all() if j.uuid == "u-2"]
    assert row.failed_at == "2023-11-14 22:13:20"  # the time it failed, not the time it was written
