"""Failed-job stores that ``php artisan queue:failed`` / ``queue:retry`` / ``queue:flush`` understand.

When a job fails, ``queue:work`` logs it through the configured failer (``queue.failed.driver``). laraq
writes the very same rows/entries, so failures of Python-handled jobs appear in ``queue:failed``, can be
retried with ``queue:retry`` and pruned with ``queue:prune-failed``, and PHP failures can be read here:

* :class:`DatabaseUuidFailedJobStore` (``database-uuids``, the skeleton default): ``uuid`` = the payload's
  ``uuid``, ``connection`` = the queue connection *name*, ``queue`` = the queue name, ``payload`` = the
  original body unchanged, ``exception`` = the exception text, ``failed_at`` = ``Y-m-d H:i:s`` in the
  app timezone (UTC). SQLite (``sqlite3``), MySQL/MariaDB (``pymysql``) and PostgreSQL (``psycopg`` 3).
* :class:`DatabaseFailedJobStore` (the older ``database`` driver: same table without ``uuid``).
* :class:`FileFailedJobStore` (10.10+ ``file`` driver): a ``JSON_PRETTY_PRINT`` array at
  ``storage/framework/cache/failed-jobs.json``, newest first, at most 100 entries.
* :class:`NullFailedJobStore` (``null``).

:func:`make_failed_store` picks one from :class:`~laraq.config.settings.LaravelSettings` the way Laravel's
``QueueServiceProvider`` does. The exception text (:func:`format_exception`, PHP's
``Throwable::__toString()``) and the worker's own failure exceptions live in :mod:`laraq.stores.php_exceptions`,
the database connections in :mod:`laraq.stores.database`; both are importable from here too. See
``compat-docs/failed-jobs.md``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from laraq.protocol.phpjson import json_loads, php_json_encode
from laraq.stores.database import connect_database, connection_lost, dialect_of, locked_cursor, revive
from laraq.stores.php_exceptions import (
    MaxAttemptsExceededError,
    TimeoutExceededError,
    format_exception,
    max_attempts_exceeded,
    php_class_name,
    php_exception_text,
    timeout_exceeded,
)

if TYPE_CHECKING:
    from laraq.config.settings import LaravelSettings

__all__ = [
    "FailedJob",
    "FailedJobStore",
    "DatabaseUuidFailedJobStore",
    "DatabaseFailedJobStore",
    "FileFailedJobStore",
    "NullFailedJobStore",
    "make_failed_store",
    "connect_database",
    "locked_cursor",
    "format_exception",
    "php_exception_text",
    "php_class_name",
    "MaxAttemptsExceededError",
    "TimeoutExceededError",
    "max_attempts_exceeded",
    "timeout_exceeded",
]

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


# -- records -------------------------------------------------------------------------------------


@dataclass
class FailedJob:
    """One failed job as Laravel's providers return it.

    ``id`` is what ``queue:failed`` shows and ``queue:retry`` takes: the uuid for the ``database-uuids``
    and ``file`` stores, the integer row id for ``database``. ``row_id`` is the table's auto-increment id.
    """

    id: str | int
    connection: str
    queue: str
    payload: str
    exception: str
    failed_at: str
    uuid: str | None = None
    row_id: int | None = None
    failed_at_timestamp: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def payload_data(self) -> Any:
        return json_loads(self.payload)

    @property
    def display_name(self) -> str | None:
        try:
            data = self.payload_data
        except ValueError:
            return None
        return data.get("displayName") if isinstance(data, dict) else None

    def failed_at_datetime(self, tz: tzinfo = UTC) -> datetime:
        return datetime.strptime(self.failed_at, DATE_FORMAT).replace(tzinfo=tz)


@runtime_checkable
class FailedJobStore(Protocol):
    """What every failed-job store offers (Laravel's ``FailedJobProviderInterface`` + prune/ids)."""

    def log(self, connection: str, queue: str, payload: bytes | str, exception: str, *,
            failed_at: datetime | None = None) -> str | int | None: ...

    def all(self) -> list[FailedJob]: ...

    def find(self, id_or_uuid: str | int) -> FailedJob | None: ...

    def forget(self, id_or_uuid: str | int) -> bool: ...

    def flush(self, hours: int | None = None) -> None: ...

    def prune(self, before: datetime) -> int: ...

    def ids(self, queue: str | None = None) -> list[Any]: ...


def _payload_text(payload: bytes | str) -> str:
    if isinstance(payload, bytes):
        return payload.decode("utf-8")
    return payload


def _exception_text(exception: str | BaseException) -> str:
    text = exception if isinstance(exception, str) else format_exception(exception)
    # mb_convert_encoding($e, 'UTF-8'): anything that is not valid UTF-8 becomes '?'
    return text.encode("utf-8", "replace").decode("utf-8")


_LEADING_UUID = re.compile(r'\{"uuid":"([0-9A-Za-z-]{1,64})"[,}]')


def _payload_uuid(payload: str) -> str:
    # Laravel writes ``uuid`` as the first key: read it without decoding a (possibly huge) body again
    m = _LEADING_UUID.match(payload, 0, 80) if payload.startswith('{"uuid":"') else None
    if m is not None:
        return m.group(1)
    try:
        uuid = json_loads(payload)["uuid"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError("the payload has no uuid (Laravel's failer requires one)") from exc
    return str(uuid)


def _now(tz: tzinfo) -> datetime:
    return datetime.now(tz)


def _fmt(moment: datetime, tz: tzinfo) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(tz).strftime(DATE_FORMAT)


# -- database stores ------------------------------------------------------------------------------


class _DatabaseStore:
    """Shared SQL for the ``database`` and ``database-uuids`` providers."""

    uses_uuid: bool = True

    def __init__(self, conn: Any, table: str = "failed_jobs", *, dialect: str | None = None,
                 timezone: tzinfo = UTC, reconnect: Callable[[], Any] | None = None) -> None:
        self.conn = conn
        #: opens a new connection when the server went away (restarted, connection killed)
        self.reconnect = reconnect
        self.table = table
        self.dialect = dialect or dialect_of(conn)
        if self.dialect == "mariadb":
            self.dialect = "mysql"
        self.tz = timezone
        self._ph = "?" if self.dialect == "sqlite" else "%s"
        #: one statement at a time: DB-API connections are not safe for concurrent use by threads
        self._lock = threading.RLock()

    # -- SQL helpers ---------------------------------------------------------------------------------

    def q(self, name: str) -> str:
        if self.dialect == "mysql":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    @property
    def t(self) -> str:
        return self.q(self.table)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._ph) if self._ph != "?" else sql

    def _cursor(self, write: bool = False) -> contextlib.AbstractContextManager[Any]:
        with self._lock:
            self.conn = revive(self.conn, self.reconnect)
        return locked_cursor(self.conn, self._lock)

    def _reopen_after(self, exc: BaseException) -> bool:
        """After a failed unit of work: reopen the connection if ``exc`` says it was lost; True if reopened."""
        if self.reconnect is None or not connection_lost(exc, self.conn):
            return False
        with self._lock:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = self.reconnect()
        return True

    def _columns(self) -> str:
        cols = ["id", "connection", "queue", "payload", "exception", "failed_at"]
        if self.uses_uuid:
            cols.insert(1, "uuid")
        return ", ".join(self.q(c) for c in cols)

    def _row(self, row: Sequence[Any]) -> FailedJob:
        values = list(row)
        row_id = int(values.pop(0))
        uuid = str(values.pop(0)) if self.uses_uuid else None
        connection, queue, payload, exception, failed_at = values
        if isinstance(payload, (bytes, bytearray, memoryview)):
            payload = bytes(payload).decode("utf-8")
        if isinstance(exception, (bytes, bytearray, memoryview)):
            exception = bytes(exception).decode("utf-8", "replace")
        if isinstance(failed_at, datetime):
            failed_at_text = failed_at.strftime(DATE_FORMAT)
        else:
            failed_at_text = str(failed_at)[:19]
        return FailedJob(
            id=uuid if self.uses_uuid and uuid is not None else row_id,
            connection=str(connection), queue=str(queue), payload=str(payload), exception=str(exception),
            failed_at=failed_at_text, uuid=uuid, row_id=row_id,
        )

    def _key_clause(self, id_or_uuid: str | int) -> tuple[str, Any]:
        if not self.uses_uuid or isinstance(id_or_uuid, int) or str(id_or_uuid).isdigit():
            try:
                return f"{self.q('id')} = ?", int(id_or_uuid)
            except ValueError:
                return "1 = 0 AND ? IS NULL", None
        return f"{self.q('uuid')} = ?", str(id_or_uuid)

    # -- schema ------------------------------------------------------------------------------------

    def ensure_table(self) -> None:
        """Create the table as Laravel's ``failed_jobs`` migration does, if it does not exist."""
        uuid = self.uses_uuid
        if self.dialect == "sqlite":
            ddl = [
                f'create table if not exists {self.t} ("id" integer not null primary key autoincrement, '
                + ('"uuid" varchar not null, ' if uuid else "")
                + '"connection" text not null, "queue" text not null, "payload" text not null, '
                '"exception" text not null, "failed_at" datetime not null default CURRENT_TIMESTAMP)',
            ]
            if uuid:
                ddl.append(f'create unique index if not exists {self.q(self.table + "_uuid_unique")} '
                           f'on {self.t} ("uuid")')
        elif self.dialect == "mysql":
            ddl = [
                f"create table if not exists {self.t} (`id` bigint unsigned not null auto_increment primary key, "
                + ("`uuid` varchar(255) not null, " if uuid else "")
                + "`connection` text not null, `queue` text not null, `payload` longtext not null, "
                "`exception` longtext not null, `failed_at` timestamp not null default CURRENT_TIMESTAMP"
                + (f", unique key {self.q(self.table + '_uuid_unique')} (`uuid`)" if uuid else "")
                + ") default character set utf8mb4 collate utf8mb4_unicode_ci",
            ]
        else:
            ddl = [
                f'create table if not exists {self.t} ("id" bigserial primary key not null, '
                + ('"uuid" varchar(255) not null, ' if uuid else "")
                + '"connection" text not null, "queue" text not null, "payload" text not null, '
                '"exception" text not null, '
                '"failed_at" timestamp(0) without time zone not null default CURRENT_TIMESTAMP'
                + (f', constraint {self.q(self.table + "_uuid_unique")} unique ("uuid")' if uuid else "")
                + ")",
            ]
        with self._cursor(write=True) as cur:
            for statement in ddl:
                cur.execute(statement)

    # -- FailedJobProviderInterface -----------------------------------------------------------------

    def _insert(self, values: dict[str, Any]) -> int | None:
        # a database restarted under the worker: the first statement finds the connection dead; one more
        # try on a new connection (a duplicate is refused by the unique uuid index of database-uuids)
        try:
            return self._insert_once(values)
        except Exception as exc:
            if not self._reopen_after(exc):
                raise
        return self._insert_once(values)

    def _insert_once(self, values: dict[str, Any]) -> int | None:
        cols = ", ".join(self.q(c) for c in values)
        marks = ", ".join("?" for _ in values)
        sql = f"insert into {self.t} ({cols}) values ({marks})"
        if self.dialect == "pgsql":
            sql += f" returning {self.q('id')}"
        with self._cursor(write=True) as cur:
            cur.execute(self._sql(sql), tuple(values.values()))
            if self.dialect == "pgsql":
                row = cur.fetchone()
                return int(row[0]) if row else None
            return int(cur.lastrowid) if cur.lastrowid is not None else None

    def all(self) -> list[FailedJob]:
        """Every failed job, newest first (``orderBy('id', 'desc')``)."""
        with self._cursor() as cur:
            cur.execute(f"select {self._columns()} from {self.t} order by {self.q('id')} desc")
            rows = cur.fetchall()
        return [self._row(r) for r in rows]

    def find(self, id_or_uuid: str | int) -> FailedJob | None:
        clause, value = self._key_clause(id_or_uuid)
        with self._cursor() as cur:
            cur.execute(self._sql(f"select {self._columns()} from {self.t} where {clause}"), (value,))
            row = cur.fetchone()
        return self._row(row) if row else None

    def forget(self, id_or_uuid: str | int) -> bool:
        clause, value = self._key_clause(id_or_uuid)
        with self._cursor(write=True) as cur:
            cur.execute(self._sql(f"delete from {self.t} where {clause}"), (value,))
            return bool(cur.rowcount and cur.rowcount > 0)

    def flush(self, hours: int | None = None) -> None:
        """``queue:flush [--hours=N]``: delete all rows, or those that failed at least N hours ago."""
        with self._cursor(write=True) as cur:
            if hours:
                limit = _fmt(_now(self.tz) - timedelta(hours=hours), self.tz)
                cur.execute(self._sql(f"delete from {self.t} where {self.q('failed_at')} <= ?"), (limit,))
            else:
                cur.execute(f"delete from {self.t}")

    def prune(self, before: datetime) -> int:
        """``queue:prune-failed``: delete rows that failed before ``before`` (in batches of 1000)."""
        limit = _fmt(before, self.tz)
        fa, ident = self.q("failed_at"), self.q("id")
        if self.dialect == "mysql":
            sql = f"delete from {self.t} where {fa} < ? limit 1000"
        else:
            sql = (f"delete from {self.t} where {ident} in "
                   f"(select {ident} from {self.t} where {fa} < ? limit 1000)")
        total = 0
        while True:
            with self._cursor(write=True) as cur:
                cur.execute(self._sql(sql), (limit,))
                deleted = max(cur.rowcount or 0, 0)
            total += deleted
            if deleted == 0:
                return total

    def ids(self, queue: str | None = None) -> list[Any]:
        """The ids ``queue:retry all`` / ``--queue`` would retry, newest first."""
        col = self.q("uuid") if self.uses_uuid else self.q("id")
        sql = f"select {col} from {self.t}"
        params: tuple[Any, ...] = ()
        if queue is not None:
            sql += f" where {self.q('queue')} = ?"
            params = (queue,)
        sql += f" order by {self.q('id')} desc"
        with self._cursor() as cur:
            cur.execute(self._sql(sql), params)
            return [r[0] if self.uses_uuid else int(r[0]) for r in cur.fetchall()]

    def count(self, connection: str | None = None, queue: str | None = None) -> int:
        where, params = [], []
        if connection is not None:
            where.append(f"{self.q('connection')} = ?")
            params.append(connection)
        if queue is not None:
            where.append(f"{self.q('queue')} = ?")
            params.append(queue)
        sql = f"select count(*) from {self.t}" + (" where " + " and ".join(where) if where else "")
        with self._cursor() as cur:
            cur.execute(self._sql(sql), tuple(params))
            return int(cur.fetchone()[0])


class DatabaseUuidFailedJobStore(_DatabaseStore):
    """The ``database-uuids`` failer over a DB-API connection (sqlite3, pymysql, psycopg 3)."""

    uses_uuid = True

    def log(self, connection: str, queue: str, payload: bytes | str, exception: str | BaseException, *,
            failed_at: datetime | None = None) -> str:
        """Insert a row like ``DatabaseUuidFailedJobProvider::log`` and return the payload's uuid."""
        body = _payload_text(payload)
        uuid = _payload_uuid(body)
        self._insert({
            "uuid": uuid,
            "connection": connection,
            "queue": queue,
            "payload": body,
            "exception": _exception_text(exception),
            "failed_at": _fmt(failed_at or _now(self.tz), self.tz),
        })
        return uuid


class DatabaseFailedJobStore(_DatabaseStore):
    """The legacy ``database`` failer (no ``uuid`` column; ids are the auto-increment ids)."""

    uses_uuid = False

    def log(self, connection: str, queue: str, payload: bytes | str, exception: str | BaseException, *,
            failed_at: datetime | None = None) -> int | None:
        return self._insert({
            "connection": connection,
            "queue": queue,
            "payload": _payload_text(payload),
            "exception": _exception_text(exception),
            "failed_at": _fmt(failed_at or _now(self.tz), self.tz),
        })


# -- file store ----------------------------------------------------------------------------------


def _php_pretty_json(value: Any, indent: int = 0) -> str:
    """``json_encode($value, JSON_PRETTY_PRINT)``: 4-space indent, ``\\/`` and ``\\uXXXX`` escapes."""
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad}{php_json_encode(str(k), unescaped_unicode=False)}: {_php_pretty_json(v, indent + 4)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        items = [pad + _php_pretty_json(v, indent + 4) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return php_json_encode(value, unescaped_unicode=False)


class FileFailedJobStore:
    """The ``file`` failer (Laravel 10.10+): ``storage/framework/cache/failed-jobs.json``.

    Entries are ``{id, connection, queue, payload, exception, failed_at, failed_at_timestamp}``, newest
    first, trimmed to ``limit``. Python writers serialise on an ``flock`` of ``<path>.lock``; PHP's own
    lock is a file-cache lock that laraq does not take (see compat-docs/failed-jobs.md).
    """

    def __init__(self, path: str | Path, limit: int = 100, *, timezone: tzinfo = UTC) -> None:
        self.path = Path(path)
        self.limit = limit
        self.tz = timezone

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(str(self.path) + ".lock", "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _read(self) -> list[dict[str, Any]]:
        try:
            content = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        if not content.strip():
            return []
        try:
            data = json.loads(content)
        except ValueError:
            return []
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def _write(self, jobs: list[dict[str, Any]]) -> None:
        text = _php_pretty_json(jobs)
        fd, tmp = tempfile.mkstemp(prefix=".failed-jobs.", dir=str(self.path.parent))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            with contextlib.suppress(OSError):
                os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @staticmethod
    def _job(entry: dict[str, Any]) -> FailedJob:
        known = {"id", "connection", "queue", "payload", "exception", "failed_at", "failed_at_timestamp"}
        ts = entry.get("failed_at_timestamp")
        return FailedJob(
            id=entry.get("id"),  # type: ignore[arg-type]
            connection=str(entry.get("connection", "")), queue=str(entry.get("queue", "")),
            payload=str(entry.get("payload", "")), exception=str(entry.get("exception", "")),
            failed_at=str(entry.get("failed_at", "")), uuid=entry.get("id"),
            failed_at_timestamp=int(ts) if isinstance(ts, (int, float)) else None,
            extra={k: v for k, v in entry.items() if k not in known},
        )

    def log(self, connection: str, queue: str, payload: bytes | str, exception: str | BaseException, *,
            failed_at: datetime | None = None) -> str:
        body = _payload_text(payload)
        uuid = _payload_uuid(body)
        moment = failed_at or _now(self.tz)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        with self._lock():
            jobs = self._read()
            jobs.insert(0, {
                "id": uuid,
                "connection": connection,
                "queue": queue,
                "payload": body,
                "exception": _exception_text(exception),
                "failed_at": _fmt(moment, self.tz),
                "failed_at_timestamp": int(moment.timestamp()),
            })
            self._write(jobs[: self.limit])
        return uuid

    def all(self) -> list[FailedJob]:
        return [self._job(e) for e in self._read()]

    def find(self, id_or_uuid: str | int) -> FailedJob | None:
        for entry in self._read():
            if entry.get("id") == id_or_uuid:
                return self._job(entry)
        return None

    def forget(self, id_or_uuid: str | int) -> bool:
        with self._lock():
            jobs = self._read()
            kept = [e for e in jobs if e.get("id") != id_or_uuid]
            self._write(kept)
            return len(kept) != len(jobs)

    def flush(self, hours: int | None = None) -> None:
        self.prune(_now(self.tz) - timedelta(hours=hours or 0))

    def prune(self, before: datetime) -> int:
        if before.tzinfo is None:
            before = before.replace(tzinfo=UTC)
        cutoff = int(before.timestamp())
        with self._lock():
            jobs = self._read()
            kept = [e for e in jobs if not (int(e.get("failed_at_timestamp") or 0) <= cutoff)]
            self._write(kept)
            return len(jobs) - len(kept)

    def ids(self, queue: str | None = None) -> list[Any]:
        return [e.get("id") for e in self._read() if queue is None or e.get("queue") == queue]

    def count(self, connection: str | None = None, queue: str | None = None) -> int:
        return sum(1 for e in self._read()
                   if (connection is None or e.get("connection") == connection)
                   and (queue is None or e.get("queue") == queue))


class NullFailedJobStore:
    """The ``null`` failer: failures are not recorded."""

    def log(self, connection: str, queue: str, payload: bytes | str, exception: str | BaseException, *,
            failed_at: datetime | None = None) -> None:
        return None

    def all(self) -> list[FailedJob]:
        return []

    def find(self, id_or_uuid: str | int) -> FailedJob | None:
        return None

    def forget(self, id_or_uuid: str | int) -> bool:
        return True

    def flush(self, hours: int | None = None) -> None:
        return None

    def prune(self, before: datetime) -> int:
        return 0

    def ids(self, queue: str | None = None) -> list[Any]:
        return []

    def count(self, connection: str | None = None, queue: str | None = None) -> int:
        return 0


# -- choosing a store ------------------------------------------------------------------------------


class LazyFailedJobStore:
    """A store opened on first use, for a database that is unreachable when the worker starts.

    ``php artisan queue:work`` starts without touching ``failed_jobs`` and only needs the database
    when a job fails; this keeps laraq the same. Each use retries opening the real store until it
    succeeds; a failure to open it surfaces at that use (the worker then puts the job back).
    """

    def __init__(self, factory: Callable[[], FailedJobStore]) -> None:
        self._factory = factory
        self._store: FailedJobStore | None = None
        self._lock = threading.Lock()

    def _get(self) -> FailedJobStore:
        with self._lock:
            if self._store is None:
                self._store = self._factory()
            return self._store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)


def make_failed_store(settings: LaravelSettings, *, conn: Any = None) -> FailedJobStore:
    """The store ``queue.failer`` would be, chosen like ``QueueServiceProvider::registerFailedJobServices``.

    ``null`` (or an explicit null driver) → :class:`NullFailedJobStore`; ``file`` (10.10+) →
    :class:`FileFailedJobStore`; ``database-uuids`` → :class:`DatabaseUuidFailedJobStore`; any other
    driver with a table (including ``file`` before 10.10) → :class:`DatabaseFailedJobStore`.
    ``conn`` replaces the DB-API connection laraq would open from the ``DB_*`` settings.
    """
    tz: tzinfo = UTC
    tz_name = getattr(settings, "app_timezone", "UTC") or "UTC"
    if tz_name.upper() != "UTC":
        from zoneinfo import ZoneInfo  # start-up: loaded only for an app timezone other than UTC

        tz = ZoneInfo(tz_name)
    driver = settings.failed_driver
    if driver is None or driver == "null":
        return NullFailedJobStore()
    if driver == "file" and settings.version.has_file_failed_store:
        path = settings.failed_path
        if path is None:
            raise ValueError("the file failed-job store needs the project dir (env_file= or LARAQ_BASE_PATH)")
        return FileFailedJobStore(path, settings.failed_limit, timezone=tz)
    if driver == "dynamodb":
        raise NotImplementedError("the dynamodb failed-job driver is not supported by laraq")
    db = settings.database(settings.failed_database)
    reconnect: Callable[[], Any] | None = None
    if conn is None:
        conn = connect_database(db)
        reconnect = lambda: connect_database(db)  # noqa: E731 - the store reopens it after a restart
    cls = DatabaseUuidFailedJobStore if driver == "database-uuids" else DatabaseFailedJobStore
    return cls(conn, settings.failed_table, dialect=db.driver, timezone=tz, reconnect=reconnect)
