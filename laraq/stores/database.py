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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.config.settings import DatabaseSettings

__all__ = ["connect_database", "connection_lost", "dialect_of", "locked_cursor", "revive"]


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


#: pymysql/MySQL client error codes of a connection that is gone (0: the server closed it, e.g. restarted;
#: 2006: server has gone away; 2013: lost connection during query; 2003: cannot connect; 2055: lost, with a reason)
_MYSQL_GONE = {0, 2003, 2006, 2013, 2055}


def connection_lost(exc: BaseException, conn: Any) -> bool:
    """Did ``exc`` (raised by a unit of work on ``conn``) come from a lost connection, not from the SQL?

    MySQL/MariaDB: pymysql's ``OperationalError``/``InterfaceError`` with a client "gone" code.
    PostgreSQL: psycopg marks the connection ``broken``/``closed`` when the server went away.
    """
    module = type(exc).__module__
    if module.startswith("pymysql"):
        if type(exc).__name__ == "InterfaceError":
            return True
        code = exc.args[0] if exc.args else None
        return type(exc).__name__ == "OperationalError" and code in _MYSQL_GONE
    if module.startswith("psycopg"):
        return bool(getattr(conn, "broken", False) or getattr(conn, "closed", False))
    return False


def revive(conn: Any, reconnect: Callable[[], Any] | None = None) -> Any:
    """``conn``, or ``reconnect()`` when ``conn`` is known to be dead; called before a unit of work.

    MySQL/MariaDB: a ``ping()`` (one round trip; after a server restart pymysql's socket is dead and
    the ping fails). PostgreSQL: psycopg marks a connection broken/closed after the server went away.
    Without ``reconnect``, or when reconnecting fails too, the old connection is returned and the unit
    of work raises the real error.
    """
    if reconnect is None:
        return conn
    module = type(conn).__module__
    if module.startswith("pymysql"):
        try:
            conn.ping(False)
            return conn
        except Exception:
            pass
    elif not (module.startswith("psycopg") and (getattr(conn, "broken", False) or getattr(conn, "closed", False))):
        return conn
    try:
        fresh = reconnect()
    except Exception:
        return conn
    with contextlib.suppress(Exception):
        conn.close()
    return fresh


def connect_database(db: DatabaseSettings) -> Any:
    """Open a DB-API connection for a resolved ``DB_*`` connection (sqlite3 / pymysql / psycopg).

    The connection may be used from any thread (SQLite is opened with ``check_same_thread=False``), one
    call at a time: the failed-job and cache stores that own it hold a lock around every statement.
    """
    if db.driver == "sqlite":
        import sqlite3  # start-up: ~1 MB resident, loaded only for an SQLite connection

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
