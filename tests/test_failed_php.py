"""Differential tests against real PHP (the Laravel 8, 12 and 13 fixture apps): cache signals and
failed_jobs rows. The cache tests run on the Redis store and on the database store (SQLite, the 11+
default, with its ``cache``/``cache_locks`` tables migrated by the app).

* ``php artisan queue:restart`` writes the key laraq reads, and laraq's restart is what PHP's cache sees;
* the ``maxExceptions`` counter is shared by PHP and Python increments;
* a failed_jobs row written by laraq is listed by ``queue:failed`` and re-queued by ``queue:retry``;
* a row written by ``queue:work`` is read and forgotten by laraq.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator

import pytest
import redis

from laraq.config.settings import LaravelSettings
from laraq.stores.cache import CacheStore, LaravelCache, make_cache
from laraq.stores.failed import DatabaseUuidFailedJobStore, format_exception, make_failed_store

pytestmark = pytest.mark.php

@pytest.fixture(params=["redis", "database"])
def app(laravel: str, redis_server, request) -> Iterator[object]:  # type: ignore[no-untyped-def]
    from phpapp import PhpApp

    redis_server.client(0).flushall()
    redis_server.client(1).flushall()
    yield PhpApp(redis_server.port, version=laravel, queue="default", retry_after=90, cache_store=request.param)
    redis_server.client(0).flushall()


@pytest.fixture
def cache(app) -> Iterator[CacheStore]:  # type: ignore[no-untyped-def]
    settings = LaravelSettings.from_env(app.env, version=app.release)
    assert settings.cache_prefix == app.cache_prefix and settings.redis_prefix == app.prefix
    assert settings.cache_store == app.cache_store
    store = make_cache(settings)
    yield store
    store.close()


def redis_ttl(cache: CacheStore, key: str) -> int | None:
    """TTL of a cache key on the Redis store (None on other stores)."""
    if not isinstance(cache, LaravelCache):
        return None
    return int(cache.client.ttl(cache.key(key)))


def test_restart_signal_both_ways(app, cache: CacheStore) -> None:  # type: ignore[no-untyped-def]
    before = int(time.time())
    app.artisan("queue:restart", check=True)
    stamp = cache.restart_timestamp()
    assert stamp is not None and before <= stamp <= int(time.time()) + 1
    assert redis_ttl(cache, "illuminate:queue:restart") in (-1, None)
    cache.set_restart(1234567890)
    assert int(app.tool("cache-get", "illuminate:queue:restart")["value"]) == 1234567890


def test_pause_and_values_read_by_php(app, cache: CacheStore) -> None:  # type: ignore[no-untyped-def]
    cache.forever("laraq:flag", True)
    cache.forever("laraq:text", "héllo")
    assert app.tool("cache-get", "laraq:flag")["value"] is True
    assert app.tool("cache-get", "laraq:text")["value"] == "héllo"
    app.tool("cache-put", "php:text", "from php")
    assert cache.get("php:text") == "from php"


def test_max_exceptions_counter_shared(app, cache: CacheStore) -> None:  # type: ignore[no-untyped-def]
    uuid = "0b7c6a4e-1111-2222-3333-444455556666"
    key = f"job-exceptions:{uuid}"
    assert int(app.tool("cache-increment", key)["value"]) == 1
    php_ttl = redis_ttl(cache, key)
    assert cache.job_exceptions_increment(uuid) == 2
    assert int(app.tool("cache-increment", key)["value"]) == 3
    assert cache.get(key) == 3 and int(app.tool("cache-get", key)["value"]) == 3
    if isinstance(cache, LaravelCache):
        assert cache.client.get(cache.key(key)) == b"3"
    cache.job_exceptions_forget(uuid)
    assert app.tool("cache-get", key)["value"] is None
    assert cache.job_exceptions_increment(uuid) == 1
    assert int(app.tool("cache-get", key)["value"]) == 1
    if php_ttl is not None:
        # both sides create the counter for one day
        ttl = redis_ttl(cache, key)
        assert ttl is not None and abs(ttl - php_ttl) <= 2 and 86390 <= php_ttl <= 86400


def _queued(client: redis.Redis, prefix: str) -> list[bytes]:
    return client.lrange(f"{prefix}queues:default", 0, -1)


def test_row_written_by_laraq_is_retried_by_artisan(app, redis_server) -> None:  # type: ignore[no-untyped-def]
    client = redis_server.client(0)
    PREFIX = app.prefix
    app.tool("dispatch", "failing", "--queue=default")
    body = client.lpop(f"{PREFIX}queues:default")
    client.delete(f"{PREFIX}queues:default:notify")
    assert body is not None
    uuid = json.loads(body)["uuid"]

    settings = LaravelSettings.from_env(app.env, version=app.release)
    store = make_failed_store(settings)
    assert isinstance(store, DatabaseUuidFailedJobStore)
    try:
        raise RuntimeError("python handler failed")
    except RuntimeError as exc:
        assert store.log(settings.connection_name, "default", body, format_exception(exc)) == uuid

    listing = app.artisan("queue:failed", check=True).stdout
    assert uuid in listing and "App\\Jobs\\FailingJob" in listing and "redis" in listing

    # the row has the same shape as a row PHP writes itself
    app.tool("dispatch", "failing", "--queue=default")
    worker = app.artisan("queue:work", "redis", "--once", "--tries=1")
    assert worker.returncode == 0, worker.stderr
    conn = sqlite3.connect(app.db_path)
    conn.row_factory = sqlite3.Row
    rows = conn.execute("select * from failed_jobs order by id").fetchall()
    assert len(rows) == 2
    mine, theirs = dict(rows[0]), dict(rows[1])
    assert mine.keys() == theirs.keys()
    assert mine["payload"].encode() == body and mine["uuid"] == uuid
    assert (mine["connection"], mine["queue"]) == (theirs["connection"], theirs["queue"]) == ("redis", "default")
    assert len(mine["failed_at"]) == len(theirs["failed_at"]) == 19 and mine["failed_at"][10] == " "
    assert mine["exception"].startswith("RuntimeError: python handler failed in ")
    assert theirs["exception"].startswith("RuntimeException: ")
    assert "\nStack trace:\n#0 " in mine["exception"] and mine["exception"].endswith("{main}")
    conn.close()

    client.delete(f"{PREFIX}queues:default", f"{PREFIX}queues:default:notify")
    retry = app.artisan("queue:retry", uuid, check=True)
    assert uuid in retry.stdout or "pushed back" in retry.stdout.lower()
    queued = [json.loads(b) for b in _queued(client, PREFIX)]
    assert [q["uuid"] for q in queued] == [uuid] and queued[0]["attempts"] == 0
    assert store.find(uuid) is None and len(store.all()) == 1
    store.conn.close()


def test_row_written_by_php_is_read_and_forgotten(app) -> None:  # type: ignore[no-untyped-def]
    app.tool("dispatch", "failing", "--queue=default")
    worker = app.artisan("queue:work", "redis", "--once", "--tries=1")
    assert worker.returncode == 0, worker.stderr
    store = make_failed_store(LaravelSettings.from_env(app.env, version=app.release))
    jobs = store.all()
    assert len(jobs) == 1
    job = jobs[0]
    assert (job.connection, job.queue) == ("redis", "default") and job.display_name == "App\\Jobs\\FailingJob"
    assert job.exception.startswith("RuntimeException: ")
    assert store.find(job.id) == job and store.ids() == [job.id]
    assert store.forget(job.id) and store.all() == []
    assert "No failed jobs" in app.artisan("queue:failed").stdout
    store.conn.close()  # type: ignore[attr-defined]
