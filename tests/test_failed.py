"""Failed-job stores (SQLite always; MariaDB/PostgreSQL against real throw-away servers), the file store,
and the PHP-shaped exception texts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_dir
from dbservers import MariaDBServer, PostgresServer

from laraq.config.settings import LaravelSettings
from laraq.stores.failed import (
    DatabaseFailedJobStore,
    DatabaseUuidFailedJobStore,
    FileFailedJobStore,
    MaxAttemptsExceededError,
    NullFailedJobStore,
    TimeoutExceededError,
    format_exception,
    make_failed_store,
    max_attempts_exceeded,
    timeout_exceeded,
)

CORPUS = corpus_dir()


def payload(uuid: str, name: str = "App\\Jobs\\Thing") -> str:
    return json.dumps({"uuid": uuid, "displayName": name, "job": "Illuminate\\Queue\\CallQueuedHandler@call",
                       "data": {"commandName": name, "command": "O:1:\"X\":0:{}", "note": "é ✓ /"},
                       "id": "abc", "attempts": 0}, ensure_ascii=False, separators=(",", ":"))


# -- database servers ---------------------------------------------------------------------------


# ``mariadb`` / ``postgres`` (session servers) are fixtures of conftest.py


def _drop(conn: Any, dialect: str) -> None:
    cur = conn.cursor()
    for table in ("failed_jobs", "failed_jobs_legacy"):
        quote = "`" if dialect == "mysql" else '"'
        cur.execute(f"drop table if exists {quote}{table}{quote}")
    conn.commit()


@pytest.fixture(params=["sqlite", "mysql", "pgsql"])
def db_conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    if request.param == "sqlite":
        conn = sqlite3.connect(tmp_path / "db.sqlite")
    elif request.param == "mysql":
        conn = request.getfixturevalue("mariadb").connect()
    else:
        conn = request.getfixturevalue("postgres").connect()
    _drop(conn, request.param)
    yield conn, request.param
    conn.rollback()
    _drop(conn, request.param)
    conn.close()


def test_uuid_store_roundtrip(db_conn: tuple[Any, str]) -> None:
    conn, dialect = db_conn
    store = DatabaseUuidFailedJobStore(conn)
    store.ensure_table()
    store.ensure_table()  # idempotent
    t0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = payload("u-1")
    assert store.log("redis", "default", body.encode(), "RuntimeException: x in /a.py:1", failed_at=t0) == "u-1"
    assert store.log("redis", "emails", payload("u-2"), "E2", failed_at=t0 + timedelta(hours=1)) == "u-2"
    assert store.log("redis", "default", payload("u-3"), "E3\udcff", failed_at=t0 + timedelta(hours=2)) == "u-3"
    jobs = store.all()
    assert [j.id for j in jobs] == ["u-3", "u-2", "u-1"]
    first = store.find("u-1")
    assert first is not None
    assert (first.connection, first.queue, first.payload, first.failed_at) == (
        "redis", "default", body, "2026-01-02 03:04:05")
    assert first.display_name == "App\\Jobs\\Thing" and first.row_id == jobs[-1].row_id
    assert store.find(first.row_id).id == "u-1"  # type: ignore[union-attr, arg-type]
    assert store.find("nope") is None
    assert store.find("u-3").exception == "E3?"  # type: ignore[union-attr]
    assert store.ids() == ["u-3", "u-2", "u-1"] and store.ids("emails") == ["u-2"]
    assert store.count() == 3 and store.count("redis", "default") == 2
    assert store.forget("u-2") and not store.forget("u-2")
    assert store.prune(t0 + timedelta(hours=1)) == 1
    assert store.ids() == ["u-3"]
    store.log("redis", "default", payload("u-4"), "E4")  # now
    store.flush(hours=1)
    assert store.ids() == ["u-4"]
    store.flush()
    assert store.all() == []
    with pytest.raises(ValueError):
        store.log("redis", "default", "{}", "no uuid")


def test_legacy_database_store(db_conn: tuple[Any, str]) -> None:
    conn, _ = db_conn
    store = DatabaseFailedJobStore(conn, "failed_jobs_legacy")
    store.ensure_table()
    a = store.log("redis", "default", payload("u-1"), "E1")
    b = store.log("redis", "default", payload("u-2"), "E2")
    assert isinstance(a, int) and isinstance(b, int) and b > a
    assert store.ids() == [b, a]
    job = store.find(a)
    assert job is not None and job.id == a and job.uuid is None
    assert store.forget(str(b)) and store.ids() == [a]


def test_sqlite_layout_matches_laravel_row(tmp_path: Path) -> None:
    """ensure_table() creates the columns of the corpus' 8.83 failed_jobs row; values have the same shape."""
    row_file = CORPUS / "8.83.26" / "failed-job.failed_jobs-row.json"
    if not row_file.exists():
        pytest.skip(f"corpus row missing: {row_file}")
    ref = json.loads(row_file.read_text())
    conn = sqlite3.connect(tmp_path / "x.sqlite")
    store = DatabaseUuidFailedJobStore(conn)
    store.ensure_table()
    cols = conn.execute("pragma table_info(failed_jobs)").fetchall()
    assert [(c[1], c[2], bool(c[3]), c[4]) for c in cols] == [
        (c["name"], c["type"], c["notnull"], c["default"]) for c in ref["columns"]]
    exc_text = (CORPUS / "8.83.26" / "failed-job.failed_jobs.exception.txt").read_text()
    store.log(ref["row"]["connection"], ref["row"]["queue"], ref["row"]["payload"], exc_text)
    mine = dict(zip([c[1] for c in cols], conn.execute("select * from failed_jobs").fetchone(), strict=True))
    assert mine["uuid"] == ref["row"]["uuid"] and mine["payload"] == ref["row"]["payload"]
    assert mine["exception"] == ref["row"]["exception"]
    assert len(mine["failed_at"]) == len(ref["row"]["failed_at"]) == 19


# -- file store -----------------------------------------------------------------------------------------


def test_file_store_format_and_order(tmp_path: Path) -> None:
    path = tmp_path / "storage/framework/cache/failed-jobs.json"
    store = FileFailedJobStore(path, limit=3)
    t0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    for i in range(4):
        store.log("redis", "default" if i % 2 else "mail", payload(f"u-{i}"), f"E{i} /é",
                  failed_at=t0 + timedelta(minutes=i))
    data = json.loads(path.read_text())
    assert [d["id"] for d in data] == ["u-3", "u-2", "u-1"]  # newest first, trimmed to the limit
    assert list(data[0]) == ["id", "connection", "queue", "payload", "exception", "failed_at",
                             "failed_at_timestamp"]
    assert data[0]["failed_at"] == "2026-03-01 12:03:00"
    assert data[0]["failed_at_timestamp"] == int((t0 + timedelta(minutes=3)).timestamp())
    text = path.read_text()
    # PHP's JSON_PRETTY_PRINT: 4 spaces, escaped slashes and unicode
    assert text.startswith('[\n    {\n        "id": "u-3",\n        "connection": "redis",')
    assert '"exception": "E3 \\/\\u00e9"' in text and text.endswith("\n    }\n]")
    assert store.ids() == ["u-3", "u-2", "u-1"] and store.ids("mail") == ["u-2"]
    assert store.find("u-2").queue == "mail"  # type: ignore[union-attr]
    assert store.count(queue="default") == 2
    assert store.forget("u-2") and not store.forget("u-2")
    assert store.prune(t0 + timedelta(minutes=1)) == 1
    assert store.ids() == ["u-3"]
    store.flush()
    assert store.all() == [] and path.read_text() == "[]"


def test_file_store_reads_php_written_file(tmp_path: Path) -> None:
    path = tmp_path / "failed-jobs.json"
    path.write_text(json.dumps([{"id": "p-1", "connection": "redis", "queue": "default", "payload": payload("p-1"),
                                 "exception": "X", "failed_at": "2026-01-01 00:00:00",
                                 "failed_at_timestamp": 1767225600}], indent=4))
    store = FileFailedJobStore(path)
    assert store.find("p-1").failed_at_timestamp == 1767225600  # type: ignore[union-attr]
    store.log("redis", "default", payload("n-1"), "Y")
    assert store.ids() == ["n-1", "p-1"]


def test_make_failed_store(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"DB_CONNECTION=sqlite\nDB_DATABASE={tmp_path / 'app.sqlite'}\n")
    s = LaravelSettings.from_env({}, env_file=env_file, version="8")
    store = make_failed_store(s)
    assert isinstance(store, DatabaseUuidFailedJobStore) and store.dialect == "sqlite"
    assert isinstance(make_failed_store(LaravelSettings.from_env({"QUEUE_FAILED_DRIVER": "null"})),
                      NullFailedJobStore)
    s = LaravelSettings.from_env({"QUEUE_FAILED_DRIVER": "file"}, env_file=env_file, version="11")
    store = make_failed_store(s)
    assert isinstance(store, FileFailedJobStore)
    assert store.path == tmp_path.resolve() / "storage/framework/cache/failed-jobs.json"
    # before 10.10 Laravel has no file driver: any other driver with a table is the `database` provider
    s = LaravelSettings.from_env({"QUEUE_FAILED_DRIVER": "file"}, env_file=env_file, version="10.9")
    assert isinstance(make_failed_store(s), DatabaseFailedJobStore)
    s = LaravelSettings.from_env({"QUEUE_FAILED_DRIVER": "database"}, env_file=env_file, version="8")
    assert isinstance(make_failed_store(s), DatabaseFailedJobStore)


def test_make_failed_store_real_servers(mariadb: MariaDBServer, postgres: PostgresServer) -> None:
    for server, dialect in ((mariadb, "mysql"), (postgres, "pgsql")):
        s = LaravelSettings.from_env(server.env, version="11")
        store = make_failed_store(s)
        assert isinstance(store, DatabaseUuidFailedJobStore) and store.dialect == dialect
        store.ensure_table()
        store.flush()
        store.log("redis", "default", payload("srv-1"), "E")
        assert store.ids() == ["srv-1"]
        store.flush()
        store.conn.close()  # type: ignore[attr-defined]


# -- exception text ---------------------------------------------------------------------------------------


class JobError(Exception):
    pass


class Handler:
    def handle(self) -> None:
        helper()


def helper() -> None:
    raise JobError("kaboom/é")


def test_format_exception_shape() -> None:
    try:
        Handler().handle()
    except JobError as exc:
        text = format_exception(exc)
    lines = text.split("\n")
    assert lines[0].startswith("test_failed.JobError: kaboom/é in ") and lines[0].endswith(
        f"test_failed.py:{helper.__code__.co_firstlineno + 1}")
    assert lines[1] == "Stack trace:"
    assert lines[2].startswith("#0 ") and lines[2].endswith(": test_failed.helper()")
    assert lines[3].startswith("#1 ") and lines[3].endswith(": test_failed.Handler->handle()")
    assert "test_failed.py(" in lines[2]
    assert lines[-1].endswith(" {main}") and lines[-1].startswith(f"#{len(lines) - 3} ")


def test_format_exception_chain_like_php_previous() -> None:
    try:
        try:
            {}["missing"]
        except KeyError as inner:
            raise RuntimeError("outer failure") from inner
    except RuntimeError as exc:
        text = format_exception(exc)
    first, second = text.split("\n\nNext ")
    assert first.startswith("KeyError: 'missing' in ")
    assert second.startswith("RuntimeError: outer failure in ")
    assert first.split("\n")[1] == "Stack trace:" and "{main}" in first


def test_format_exception_without_message_or_traceback() -> None:
    text = format_exception(ValueError())
    assert text.startswith("ValueError in ") and "\nStack trace:\n#0 " in text


def test_worker_failure_texts_per_version() -> None:
    old = max_attempts_exceeded("App\\Jobs\\X", "10.9")
    assert str(old) == ("App\\Jobs\\X has been attempted too many times or run too long. "
                        "The job may have previously timed out.")
    assert format_exception(old).startswith(
        "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\X has been attempted too many times or run")
    new = max_attempts_exceeded("App\\Jobs\\X", "10.10")
    assert str(new) == "App\\Jobs\\X has been attempted too many times."
    t_old = timeout_exceeded("App\\Jobs\\X", "8")
    assert type(t_old) is MaxAttemptsExceededError and "or run too long" in str(t_old)
    t_new = timeout_exceeded("App\\Jobs\\X", "13")
    assert isinstance(t_new, TimeoutExceededError) and str(t_new) == "App\\Jobs\\X has timed out."
    assert format_exception(t_new).startswith(
        "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\X has timed out. in ")
