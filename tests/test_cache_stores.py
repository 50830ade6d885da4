"""The ``file`` and ``database`` cache stores: Laravel's exact formats, checked against real PHP.

Python-side rules (paths, 10-digit expiry + ``serialize()``, ``forever``, increment keeping the TTL,
expired entries deleted on read, locking under concurrent increments, the ``cache`` table rows on SQLite,
MariaDB and PostgreSQL, base64 per dialect and version) and byte interop with the Laravel 8 fixture app:
values written by ``Cache::forever``/``put``/``increment`` in PHP are read by laraq and the reverse, and
the ``maxExceptions`` counter is incremented alternately by both languages.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from phpapp import PhpApp

from laraq.config.settings import LaravelSettings
from laraq.protocol.payload import php_int_cast as php_int
from laraq.stores.cache import LaravelCache, UnsupportedCacheStore, make_cache
from laraq.stores.cache_stores import DATABASE_FOREVER_SECONDS, DatabaseCache, FileCache
from laraq.stores.failed import connect_database

# -- file store -------------------------------------------------------------------------------------


def test_file_path_is_sha1_of_the_bare_key(tmp_path: Path) -> None:
    cache = FileCache(tmp_path, version="13")
    digest = hashlib.sha1(b"illuminate:queue:restart").hexdigest()
    assert cache.path("illuminate:queue:restart") == tmp_path / digest[:2] / digest[2:4] / digest
    cache.set_restart(1700000000)
    assert cache.path("illuminate:queue:restart").read_bytes() == b"9999999999i:1700000000;"
    assert cache.restart_timestamp() == 1700000000


def test_file_put_increment_and_expiry(tmp_path: Path) -> None:
    cache = FileCache(tmp_path, version="8")
    now = int(time.time())
    cache.put("k", True, 100)
    raw = cache.path("k").read_bytes()
    assert raw[10:] == b"b:1;" and now + 100 <= int(raw[:10]) <= int(time.time()) + 100
    assert cache.get("k") is True

    # increment keeps the remaining lifetime; a missing key becomes a forever entry
    cache.put("n", 0, 86400)
    assert cache.increment("n") == 1 and cache.increment("n", 4) == 5
    raw = cache.path("n").read_bytes()
    assert raw[10:] == b"i:5;" and now + 86400 - 2 <= int(raw[:10]) <= int(time.time()) + 86400
    assert cache.increment("fresh") == 1 and cache.path("fresh").read_bytes() == b"9999999999i:1;"
    assert cache.decrement("fresh", 3) == -2

    # expired entries read as missing and are deleted, like FileStore::getPayload
    cache.path("k").write_bytes(b"%010di:1;" % (now - 1))
    assert cache.get("k") is None and not cache.path("k").exists()
    # an unreadable entry too
    cache.path("n").write_bytes(b"9999999999garbage")
    assert cache.get("n") is None and not cache.path("n").exists()
    # Repository::put with a TTL <= 0 forgets, without a TTL it is forever
    cache.put("f", "v")
    assert cache.path("f").read_bytes() == b'9999999999s:1:"v";'
    cache.put("f", "v", 0)
    assert not cache.path("f").exists()
    assert cache.forget("f") is False


def test_file_increments_from_threads_are_not_lost(tmp_path: Path) -> None:
    cache = FileCache(tmp_path)

    def bump() -> None:
        for _ in range(50):
            cache.increment("count")

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get("count") == 400


def test_php_int_cast() -> None:
    assert [php_int(v) for v in (None, False, True, 7, 2.9, "12abc", "abc", " 3", "1e3", b"-4")] == \
        [0, 0, 1, 7, 2, 12, 0, 3, 1000, -4]


# -- database store ---------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "mysql", "pgsql"])
def db_cache_conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    if request.param == "sqlite":
        conn = sqlite3.connect(tmp_path / "db.sqlite", check_same_thread=False)
    elif request.param == "mysql":
        conn = request.getfixturevalue("mariadb").connect()
    else:
        conn = request.getfixturevalue("postgres").connect()
    cur = conn.cursor()
    q = "`" if request.param == "mysql" else '"'
    for table in ("cache", "cache_locks"):
        cur.execute(f"drop table if exists {q}{table}{q}")
    conn.commit()
    yield conn, request.param
    conn.close()


def rows(conn: Any, dialect: str) -> dict[str, tuple[str, int]]:
    q = "`" if dialect == "mysql" else '"'
    cur = conn.cursor()
    cur.execute(f"select {q}key{q}, {q}value{q}, {q}expiration{q} from {q}cache{q}")
    out = {k: (v, int(e)) for k, v, e in cur.fetchall()}
    conn.commit()
    return out


def test_database_rows(db_cache_conn: tuple[Any, str]) -> None:
    conn, dialect = db_cache_conn
    cache = DatabaseCache(conn, prefix="laravel_cache_", version="11.56", dialect=dialect)
    cache.ensure_tables()
    now = int(time.time())
    cache.set_restart(1700000000)
    cache.put("job-exceptions:u", 0, 86400)
    assert cache.increment("job-exceptions:u") == 1
    assert cache.job_exceptions_increment("u") == 2
    got = rows(conn, dialect)
    value, expires = got["laravel_cache_illuminate:queue:restart"]
    assert value == "i:1700000000;" and now + DATABASE_FOREVER_SECONDS <= expires <= now + DATABASE_FOREVER_SECONDS + 2
    value, expires = got["laravel_cache_job-exceptions:u"]
    assert value == "i:2;" and now + 86400 <= expires <= now + 86402
    assert cache.restart_timestamp() == 1700000000

    assert cache.increment("missing") is False  # DatabaseStore returns false, writes nothing
    cache.forever("word", "abc")
    assert cache.increment("word") is False
    cache.forever("word", "abc")  # upsert: no duplicate-key error
    assert "laravel_cache_missing" not in rows(conn, dialect)

    # expired rows read as missing and are deleted
    cache.put("old", True, 5)
    cur = conn.cursor()
    q = "`" if dialect == "mysql" else '"'
    ph = "?" if dialect == "sqlite" else "%s"
    cur.execute(f"update {q}cache{q} set {q}expiration{q} = {ph} where {q}key{q} = {ph}",
                (now - 1, "laravel_cache_old"))
    conn.commit()
    assert cache.get("old") is None and "laravel_cache_old" not in rows(conn, dialect)

    # a serialized value with NUL bytes is base64 on PostgreSQL (all versions) and SQLite (11.38+)
    cache.forever("nul", "a\0b")
    stored = rows(conn, dialect)["laravel_cache_nul"][0]
    assert stored == ('czozOiJhAGIiOw==' if dialect in ("pgsql", "sqlite") else 's:3:"a\0b";')
    assert cache.get("nul") == "a\0b"
    if dialect == "sqlite":
        old = DatabaseCache(conn, prefix="laravel_cache_", version="11.37", dialect=dialect)
        old.forever("nul", "a\0b")
        assert rows(conn, dialect)["laravel_cache_nul"][0] == 's:3:"a\0b";' and old.get("nul") == "a\0b"

    # unique locks live in cache_locks
    key = "laravel_cache_" + cache.version.unique_lock_key("App\\Jobs\\U", "7")
    cur.execute(f"insert into {q}cache_locks{q} ({q}key{q}, {q}owner{q}, {q}expiration{q}) values ({ph}, {ph}, {ph})",
                (key, "me", now + 60))
    conn.commit()
    assert not cache.unique_lock_release("App\\Jobs\\U", "7", owner="other")
    assert cache.unique_lock_release("App\\Jobs\\U", "7", owner="me")
    assert not cache.unique_lock_release("App\\Jobs\\U", "7")


def test_database_increments_from_threads(tmp_path: Path) -> None:
    settings = LaravelSettings.from_env({"DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "c.sqlite"),
                                         "CACHE_STORE": "database"}, version="11")
    cache = make_cache(settings)
    assert isinstance(cache, DatabaseCache)
    cache.ensure_tables()
    cache.forever("count", 0)

    def bump() -> None:
        for _ in range(25):
            cache.increment("count")

    threads = [threading.Thread(target=bump) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get("count") == 150


# -- choosing the store -----------------------------------------------------------------------------


def test_make_cache_follows_the_settings(tmp_path: Path, redis_server: Any) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"REDIS_PORT={redis_server.port}\n")
    s8 = LaravelSettings.from_env({}, env_file=env_file, version="8")
    assert s8.cache_store == "file"  # the 8-10 default
    file_cache = make_cache(s8)
    assert isinstance(file_cache, FileCache)
    assert file_cache.directory == tmp_path / "storage" / "framework" / "cache" / "data"
    assert isinstance(make_cache(LaravelSettings.from_env({"CACHE_DRIVER": "redis"}, env_file=env_file,
                                                          version="10")), LaravelCache)
    s11 = LaravelSettings.from_env({"DB_CACHE_TABLE": "my_cache", "DB_DATABASE": "db.sqlite"},
                                   env_file=env_file, version="11")
    assert s11.cache_store == "database"  # the 11+ default
    db_cache = make_cache(s11)
    assert isinstance(db_cache, DatabaseCache)
    assert (db_cache.table, db_cache.prefix, db_cache.dialect) == ("my_cache", "laravel_cache_", "sqlite")
    assert isinstance(make_cache(s11, "file"), FileCache)
    with pytest.raises(UnsupportedCacheStore):
        make_cache(LaravelSettings.from_env({"CACHE_STORE": "memcached"}, version="11"))
    with pytest.raises(UnsupportedCacheStore):  # no project dir: no storage path
        make_cache(LaravelSettings.from_env({"CACHE_DRIVER": "file"}, version="8"))
    custom = LaravelSettings.from_env({"CACHE_DRIVER": "file", "LARAQ_CACHE_PATH": str(tmp_path / "c")}, version="8")
    assert make_cache(custom).directory == tmp_path / "c"


def test_failed_store_connection_is_usable_from_threads(tmp_path: Path) -> None:
    from laraq.stores.failed import make_failed_store

    settings = LaravelSettings.from_env({"DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "f.sqlite")},
                                        version="8")
    store = make_failed_store(settings)
    store.ensure_table()  # type: ignore[attr-defined]
    errors: list[BaseException] = []

    def log(i: int) -> None:
        try:
            store.log("redis", "q", f'{{"uuid":"u-{i}","attempts":0}}', "RuntimeError: x")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=log, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(store.all()) == 10
    assert connect_database(settings.database()).execute("select 1").fetchone() == (1,)


# -- real PHP ---------------------------------------------------------------------------------------


@pytest.fixture
def php_file(laravel: str, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel, cache_store="file")


@pytest.fixture
def php_db(laravel: str, redis_server: Any) -> PhpApp:
    """The database store: on 12/13 the stock default, its tables made by the skeleton's migration."""
    return PhpApp(redis_server.port, version=laravel, cache_store="database")


def _file_cache(app: PhpApp) -> FileCache:
    env = {**app.env, "LARAQ_BASE_PATH": str(app.workdir)}
    cache = make_cache(LaravelSettings.from_env(env, version=app.release))
    assert isinstance(cache, FileCache)
    return cache


def _db_cache(app: PhpApp) -> DatabaseCache:
    cache = make_cache(LaravelSettings.from_env(app.env, version=app.release))
    assert isinstance(cache, DatabaseCache) and cache.prefix == app.cache_prefix
    return cache


@pytest.mark.php
def test_file_store_bytes_both_ways(php_file: PhpApp) -> None:
    cache = _file_cache(php_file)
    php_file.artisan("queue:restart", check=True)
    raw = cache.path("illuminate:queue:restart").read_bytes()
    assert raw[:10] == b"9999999999" and raw[10:] == b"i:%d;" % cache.restart_timestamp()
    cache.set_restart(1234567890)
    assert php_file.tool("cache-get", "illuminate:queue:restart") == {"value": 1234567890}

    php_file.tool("cache-put", "ttl", "héllo", "--ttl=300")
    raw = cache.path("ttl").read_bytes()
    assert raw[10:] == 's:6:"héllo";'.encode() and int(raw[:10]) > time.time() + 290
    assert cache.get("ttl") == "héllo"
    cache.put("py", "ünï", 300)
    assert php_file.tool("cache-get", "py") == {"value": "ünï"}
    cache.put("flag", True)
    assert php_file.tool("cache-get", "flag") == {"value": True}


@pytest.mark.php
def test_file_store_counter_shared(php_file: PhpApp) -> None:
    cache = _file_cache(php_file)
    key = "job-exceptions:uuid-1"
    assert php_file.tool("cache-increment", key) == {"value": 1}
    expiry = cache.path(key).read_bytes()[:10]
    assert cache.job_exceptions_increment("uuid-1") == 2
    assert cache.path(key).read_bytes()[:10] == expiry  # the day-long TTL is kept
    assert php_file.tool("cache-increment", key) == {"value": 3}
    assert cache.get(key) == 3
    assert cache.job_exceptions_forget("uuid-1") and php_file.tool("cache-get", key) == {"value": None}


@pytest.mark.php
def test_database_store_rows_both_ways(php_db: PhpApp) -> None:
    cache = _db_cache(php_db)
    php_db.artisan("queue:restart", check=True)
    stamp = cache.restart_timestamp()
    assert stamp and abs(stamp - time.time()) < 60
    cache.set_restart(1234567890)
    assert php_db.tool("cache-get", "illuminate:queue:restart") == {"value": 1234567890}
    php_db.tool("cache-put", "ttl", "héllo", "--ttl=300")
    assert cache.get("ttl") == "héllo"
    cache.put("py", "ünï", 300)
    assert php_db.tool("cache-get", "py") == {"value": "ünï"}

    assert php_db.tool("cache-increment", "job-exceptions:u") == {"value": 1}
    assert cache.job_exceptions_increment("u") == 2
    assert php_db.tool("cache-increment", "job-exceptions:u") == {"value": 3}
    conn = sqlite3.connect(php_db.db_path)
    (value, expiration), = conn.execute("select value, expiration from cache where key = ?",
                                        (php_db.cache_prefix + "job-exceptions:u",))
    conn.close()
    assert value == "i:3;" and 0 < expiration - time.time() <= 86400
