"""The app's SQL databases as laraq reaches them: Laravel's ``DB_*`` connections opened with DB-API drivers.

Laravel's ``DatabaseManager`` hands its stores a PDO connection per ``config/database.php`` entry; laraq
opens the same database with the Python driver of its kind (:func:`connect_database`: ``sqlite3``,
``pymysql`` for MySQL/MariaDB, ``psycopg`` 3 for PostgreSQL), tells a connection's SQL dialect
(:func:`dialect_of`) and runs one unit of work at a time on a connection shared by threads
(:func:`locked_cursor`). The failed-job store (:mod:`laraq.stores.failed`), the database cache
(:mod:`laraq.stores.cache_stores`) and the model loader (:mod:`laraq.bus.models`) are built on these.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.config.settings import DatabaseSettings

__all__ = ["connect_database", "dialect_of", "locked_cursor"]


def dialect_of(conn: Any) -> str:
    """``sqlite``, ``mysql`` or ``pgsql``: the SQL dialect of a DB-API connection, told by its driver module."""
    module = type(conn).__module__
    if module.startswith("sqlite3"):
        return "sqlite"
    if module.startswith("pymysql") or module.startswith("MySQLdb") or module.startswith("mysql"):
        return "mysql"
    if module.startswith("psycopg"):
        return "pgsql"
    raise ValueError(f"unsupported DB-API connection {type(conn)!r}; pass dialect= explicitly")


@contextlib.contextmanager
def locked_cursor(conn: Any, lock: AbstractContextManager[Any], *, sqlite_immediate: bool = False) -> Iterator[Any]:
    """One unit of work on a DB-API connection shared by threads.

    Serialized by ``lock``; committed at the end, reads included, so MySQL/PostgreSQL see fresh data
    the next time; rolled back on any error. ``sqlite_immediate`` takes SQLite's write lock up front
    (``BEGIN IMMEDIATE``) for a read-modify-write such as a cache increment.
    """
    with lock:
        if sqlite_immediate:
            if conn.in_transaction:
                conn.commit()
            conn.execute("BEGIN IMMEDIATE")
        cur = conn.cursor()
        try:
            yield cur
        except BaseException:
            with contextlib.suppress(Exception):
                conn.rollback()
            raise
        else:
            conn.commit()
        finally:
            with contextlib.suppress(Exception):
                cur.close()


def connect_database(db: DatabaseSettings) -> Any:
    """Open a DB-API connection for a resolved ``DB_*`` connection (sqlite3 / pymysql / psycopg).

    The connection may be used from any thread (SQLite is opened with ``check_same_thread=False``), one
    call at a time: the failed-job and cache stores that own it hold a lock around every statement.
    """
    if db.driver == "sqlite":
        # usable from the worker's threads: the stores serialize their calls with a lock
        return sqlite3.connect(db.database or ":memory:", timeout=30, check_same_thread=False)
    if db.driver in ("mysql", "mariadb"):
        try:
            import pymysql  # optional dependency (laraq[mysql])
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError("the MySQL/MariaDB failed-job store needs pymysql: pip install laraq[mysql]") from exc
        kwargs: dict[str, Any] = {
            "user": db.username or "", "password": db.password or "", "database": db.database,
            "charset": "utf8mb4", "autocommit": False,
        }
        if db.socket:
            kwargs["unix_socket"] = db.socket
        else:
            kwargs["host"] = db.host or "127.0.0.1"
            kwargs["port"] = int(db.port or 3306)
        return pymysql.connect(**kwargs)
    if db.driver == "pgsql":
        try:
            import psycopg  # optional dependency (laraq[postgres])
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError("the PostgreSQL failed-job store needs psycopg 3: pip install laraq[postgres]") \
                from exc
        return psycopg.connect(host=db.host, port=int(db.port or 5432), dbname=db.database,
                               user=db.username, password=db.password or None)
    raise ValueError(f"laraq has no failed-job support for database driver {db.driver!r}")
