"""Laravel's ``file`` and ``database`` cache stores, byte for byte, behind :class:`laraq.stores.cache.CacheStore`.

Stock Laravel apps keep their cache in files (8–10: ``CACHE_DRIVER=file``) or in the database (11+:
``CACHE_STORE=database``), so ``queue:restart``, ``queue:pause``, the ``maxExceptions`` counters and
cache-based maintenance mode are found there. Both classes read and write exactly what PHP does.

:class:`FileCache` (``Illuminate\\Cache\\FileStore``, 8.x–13.x):

* the cache prefix is *not* used: the file of key ``k`` is ``<dir>/aa/bb/<sha1(k)>`` where ``aabb…`` is
  the hex SHA-1 of the key; directories are created ``0777`` (minus the umask), files ``0666``;
* content = the expiry as 10 decimal digits (unix seconds; ``9999999999`` = forever) followed by the
  PHP-``serialize()``d value (numbers too: ``i:3;``, ``true`` → ``b:1;``);
* reads take a shared ``flock`` (PHP's ``Filesystem::sharedGet``), writes an exclusive one on a file
  opened without truncation, then truncate and write (``file_put_contents(..., LOCK_EX)``); an expired or
  unreadable entry is deleted on read, as PHP does;
* ``increment`` = read, ``(int)`` + n, write back keeping the remaining lifetime (forever when the key was
  missing). PHP does that in two separately locked steps; laraq holds one exclusive lock for the whole
  read-modify-write, which PHP's locked reads and writes respect.

:class:`DatabaseCache` (``Illuminate\\Cache\\DatabaseStore``): table ``cache`` (``key`` primary,
``value`` text, ``expiration`` int); ``key`` = cache prefix + key (no separator); ``value`` =
``serialize()``, base64-encoded when it holds a NUL byte on PostgreSQL (all versions) and SQLite (11.38+);
``forever`` = 315360000 seconds (ten years); ``put`` is an upsert; ``increment`` runs in a transaction
(``SELECT … FOR UPDATE``; ``BEGIN IMMEDIATE`` on SQLite) and returns ``False`` for a missing or
non-numeric entry, like Laravel. Unique locks live in ``cache_locks`` (``DatabaseLock``). The connection
is any DB-API connection from :func:`laraq.stores.database.connect_database`; calls are serialized by a lock so
the worker's threads can share it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from laraq.protocol.payload import php_int_cast
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion
from laraq.stores.cache_base import CacheStore, is_php_numeric, php_serialize_scalar, php_unserialize_scalar
from laraq.stores.database import dialect_of, locked_cursor

__all__ = ["FileCache", "DatabaseCache", "FOREVER_EXPIRY", "DATABASE_FOREVER_SECONDS"]

#: ``FileStore``'s expiry of a ``forever`` entry.
FOREVER_EXPIRY = 9999999999
#: ``DatabaseStore::forever`` stores for ten years.
DATABASE_FOREVER_SECONDS = 315360000



# -- file store -------------------------------------------------------------------------------------


class FileCache(CacheStore):
    """``FileStore`` over ``directory`` (stock: ``storage/framework/cache/data``)."""

    driver = "file"

    def __init__(self, directory: str | Path, *, version: LaravelVersion | str = DEFAULT_VERSION,
                 store_name: str = "file") -> None:
        self.directory = Path(directory)
        self.version = LaravelVersion.parse(version)
        self.store_name = store_name

    def path(self, key: str) -> Path:
        """The file of a cache key: ``<dir>/<sha1[0:2]>/<sha1[2:4]>/<sha1>``."""
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()
        return self.directory / digest[:2] / digest[2:4] / digest

    # -- low level ------------------------------------------------------------------------------------

    @staticmethod
    def _expiry(seconds: int, now: int) -> int:
        """``FileStore::expiration``: ``0`` seconds (forever) or beyond the 10-digit range → 9999999999."""
        at = now + seconds
        return FOREVER_EXPIRY if seconds == 0 or at > FOREVER_EXPIRY else at

    @staticmethod
    def _parse(contents: bytes, now: int) -> tuple[bool, Any, int | None]:
        """``(valid, value, seconds left)`` of a file's contents; not valid = expired or unreadable."""
        head = contents[:10]
        if not head.isdigit() or now >= int(head):
            return False, None, None
        try:
            value = php_unserialize_scalar(contents[10:])
        except Exception:
            return False, None, None
        return True, value, int(head) - now

    def _ensure_dir(self, path: Path) -> None:
        path.parent.mkdir(mode=0o777, parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked_for_write(self, path: Path) -> Iterator[BinaryIO]:
        """Open ``path`` without truncating it and hold ``LOCK_EX``; retry if it was unlinked meanwhile."""
        self._ensure_dir(path)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            fh = os.fdopen(fd, "r+b")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:  # deleted (forget) or replaced between open and lock: start again
                    continue
                yield fh
                fh.flush()
                return
            finally:
                fh.close()  # closing drops the lock

    def _write(self, fh: BinaryIO, expiry: int, value: Any) -> None:
        fh.seek(0)
        fh.truncate(0)
        fh.write(b"%010d" % expiry + php_serialize_scalar(value))

    def _read(self, key: str) -> tuple[Any, int | None]:
        """``FileStore::getPayload``: ``(value, seconds left)``; an expired/unreadable file is deleted."""
        path = self.path(key)
        try:
            with open(path, "rb") as fh:
                fcntl.flock(fh, fcntl.LOCK_SH)
                contents = fh.read()
        except OSError:
            return None, None
        valid, value, left = self._parse(contents, int(time.time()))
        if not valid:
            self.forget(key)
            return None, None
        return value, left

    # -- store operations ------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        value, _ = self._read(key)
        return default if value is None else value

    def _put(self, key: str, value: Any, seconds: int) -> bool:
        with self._locked_for_write(self.path(key)) as fh:
            self._write(fh, self._expiry(seconds, int(time.time())), value)
        return True

    def forever(self, key: str, value: Any) -> bool:
        with self._locked_for_write(self.path(key)) as fh:
            self._write(fh, FOREVER_EXPIRY, value)
        return True

    def forget(self, key: str) -> bool:
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def increment(self, key: str, by: int = 1) -> int:
        with self._locked_for_write(self.path(key)) as fh:
            now = int(time.time())
            valid, value, left = self._parse(fh.read(), now)
            new = php_int_cast(value if valid else None) + by
            self._write(fh, self._expiry(left or 0, now), new)
        return new

    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool:
        """``CacheLock``/``FileLock`` release: the lock is a cache entry of the unprefixed lock key."""
        key = self.version.unique_lock_key(job_class, unique_id, display_name)
        if owner and self.get(key) != owner:
            return False
        return self.forget(key)


# -- database store -----------------------------------------------------------------------------------


class DatabaseCache(CacheStore):
    """``DatabaseStore`` over a DB-API connection (sqlite3, pymysql, psycopg 3)."""

    driver = "database"

    def __init__(self, conn: Any, *, table: str = "cache", prefix: str = "",
                 version: LaravelVersion | str = DEFAULT_VERSION, dialect: str | None = None,
                 lock_table: str = "cache_locks", store_name: str = "database") -> None:
        self.conn = conn
        self.table = table
        self.lock_table = lock_table
        self.prefix = prefix
        self.version = LaravelVersion.parse(version)
        dialect = dialect or dialect_of(conn)
        self.dialect = "mysql" if dialect == "mariadb" else dialect
        self.store_name = store_name
        self._lock = threading.RLock()
        self._ph = "?" if self.dialect == "sqlite" else "%s"

    # -- SQL helpers -------------------------------------------------------------------------------------

    def q(self, name: str) -> str:
        if self.dialect == "mysql":
            return "`" + name.replace("`", "``") + "`"
        return '"' + name.replace('"', '""') + '"'

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._ph) if self._ph != "?" else sql

    def _cursor(self, *, transaction: bool = False) -> contextlib.AbstractContextManager[Any]:
        """One unit of work under the store's lock (see :func:`laraq.stores.database.locked_cursor`)."""
        return locked_cursor(self.conn, self._lock, sqlite_immediate=transaction and self.dialect == "sqlite")

    @property
    def _base64(self) -> bool:
        return self.dialect == "pgsql" or (self.dialect == "sqlite" and self.version.database_cache_base64_on_sqlite)

    def serialize(self, value: Any) -> str:
        raw = php_serialize_scalar(value)
        if self._base64 and b"\0" in raw:
            return base64.b64encode(raw).decode("ascii")
        return raw.decode("utf-8", "surrogateescape")

    def unserialize(self, text: Any) -> Any:
        if isinstance(text, (bytes, bytearray, memoryview)):
            raw = bytes(text)
        else:
            raw = str(text).encode("utf-8", "surrogateescape")
        if self._base64 and b":" not in raw and b";" not in raw:
            raw = base64.b64decode(raw)
        return php_unserialize_scalar(raw)

    def ensure_tables(self) -> None:
        """Create ``cache`` and ``cache_locks`` as Laravel's ``cache:table`` migration does (if missing)."""
        t, lt = self.q(self.table), self.q(self.lock_table)
        k, v, e, o = self.q("key"), self.q("value"), self.q("expiration"), self.q("owner")
        if self.dialect == "mysql":
            ddl = [
                f"create table if not exists {t} ({k} varchar(255) not null, {v} mediumtext not null, "
                f"{e} int not null, primary key ({k})) default character set utf8mb4 collate utf8mb4_unicode_ci",
                f"create table if not exists {lt} ({k} varchar(255) not null, {o} varchar(255) not null, "
                f"{e} int not null, primary key ({k})) default character set utf8mb4 collate utf8mb4_unicode_ci",
            ]
        elif self.dialect == "pgsql":
            ddl = [
                f"create table if not exists {t} ({k} varchar(255) not null, {v} text not null, "
                f"{e} integer not null, primary key ({k}))",
                f"create table if not exists {lt} ({k} varchar(255) not null, {o} varchar(255) not null, "
                f"{e} integer not null, primary key ({k}))",
            ]
        else:
            ddl = [
                f"create table if not exists {t} ({k} varchar not null, {v} text not null, "
                f"{e} integer not null, primary key ({k}))",
                f"create table if not exists {lt} ({k} varchar not null, {o} varchar not null, "
                f"{e} integer not null, primary key ({k}))",
            ]
        with self._cursor() as cur:
            for statement in ddl:
                cur.execute(statement)

    # -- store operations ------------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        prefixed = self.prefix + key
        with self._cursor() as cur:
            cur.execute(self._sql(f"select {self.q('value')}, {self.q('expiration')} from {self.q(self.table)} "
                                  f"where {self.q('key')} = ?"), (prefixed,))
            row = cur.fetchone()
        if row is None:
            return default
        value, expiration = row
        if int(time.time()) >= int(expiration):
            self.forget(key)
            return default
        result = self.unserialize(value)
        return default if result is None else result

    def _put(self, key: str, value: Any, seconds: int) -> bool:
        t, k, v, e = self.q(self.table), self.q("key"), self.q("value"), self.q("expiration")
        if self.dialect == "mysql":
            sql = (f"insert into {t} ({k}, {v}, {e}) values (?, ?, ?) "
                   f"on duplicate key update {v} = values({v}), {e} = values({e})")
        else:
            sql = (f"insert into {t} ({k}, {v}, {e}) values (?, ?, ?) "
                   f"on conflict ({k}) do update set {v} = excluded.{v}, {e} = excluded.{e}")
        with self._cursor() as cur:
            cur.execute(self._sql(sql), (self.prefix + key, self.serialize(value), int(time.time()) + seconds))
        return True

    def forever(self, key: str, value: Any) -> bool:
        return self._put(key, value, DATABASE_FOREVER_SECONDS)

    def forget(self, key: str) -> bool:
        with self._cursor() as cur:
            cur.execute(self._sql(f"delete from {self.q(self.table)} where {self.q('key')} = ?"), (self.prefix + key,))
        return True

    def increment(self, key: str, by: int = 1) -> int | bool:
        """``DatabaseStore::incrementOrDecrement`` in one transaction; ``False`` if missing or not numeric."""
        prefixed = self.prefix + key
        lock = "" if self.dialect == "sqlite" else " for update"
        with self._cursor(transaction=True) as cur:
            cur.execute(self._sql(f"select {self.q('value')} from {self.q(self.table)} "
                                  f"where {self.q('key')} = ?{lock}"), (prefixed,))
            row = cur.fetchone()
            if row is None:
                return False
            current = self.unserialize(row[0])
            if not is_php_numeric(current):
                return False
            new = php_int_cast(current) + by
            cur.execute(self._sql(f"update {self.q(self.table)} set {self.q('value')} = ? where {self.q('key')} = ?"),
                        (self.serialize(new), prefixed))
        return new

    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool:
        """``DatabaseLock``: ``forceRelease`` deletes the row, an owner-checked release only the owner's."""
        name = self.prefix + self.version.unique_lock_key(job_class, unique_id, display_name)
        sql = f"delete from {self.q(self.lock_table)} where {self.q('key')} = ?"
        params: tuple[Any, ...] = (name,)
        if owner:
            sql += f" and {self.q('owner')} = ?"
            params = (name, owner)
        with self._cursor() as cur:
            cur.execute(self._sql(sql), params)
            return bool(cur.rowcount and cur.rowcount > 0)

    def close(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            self.conn.close()
