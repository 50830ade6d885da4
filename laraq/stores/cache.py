"""Laravel's cache as seen by the queue: restart, pause, maintenance and exception counters, per store.

``php artisan queue:restart``, ``queue:pause`` (12.40+), cache-based maintenance mode (9+), the
``maxExceptions`` counter (``job-exceptions:<uuid>``) and ``ShouldBeUnique`` locks all live in Laravel's
*default cache store*, not in the queue keys. :class:`~laraq.stores.cache_base.CacheStore` is the one
interface the worker and the CLI use (it and the shared value rules are in :mod:`laraq.stores.cache_base`,
importable from here too); :func:`make_cache` picks the implementation the app's ``CACHE_DRIVER`` /
``CACHE_STORE`` names:

* ``redis`` → :class:`LaravelCache` (``Illuminate\\Cache\\RedisStore``, below);
* ``file`` → :class:`laraq.stores.cache_stores.FileCache` (``FileStore``: one file per key under
  ``storage/framework/cache/data``);
* ``database`` → :class:`laraq.stores.cache_stores.DatabaseCache` (``DatabaseStore``: the ``cache`` table).

:class:`LaravelCache` follows ``RedisStore``'s key and value rules so PHP and Python read and write the
same bytes:

* key = Redis connection prefix (``REDIS_PREFIX``) + cache prefix joined per version
  (:meth:`LaravelVersion.cache_key`: ≤10 inserts ``:`` after a non-empty cache prefix) + the cache key;
* numeric values (ints, finite floats, numeric strings; not booleans) are stored raw as decimal text,
  everything else PHP-``serialize()``d (``true`` → ``b:1;``);
* ``put`` is ``SETEX`` with at least 1 second, ``forever`` is ``SET``, ``increment`` is ``INCRBY``,
  ``forget`` is ``DEL``.

Its client must point at the cache store's Redis database (``REDIS_CACHE_DB``, db 1 in stock apps);
unique locks use the store's *lock* connection (``default``, db 0), pass it as ``lock_client``.
:class:`MaintenanceMode` combines the ``storage/framework/down`` file with the cache flag.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import redis

from laraq.config.settings import LaravelSettings, make_redis
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion
from laraq.stores.cache_base import (
    JOB_EXCEPTIONS_TTL,
    MAINTENANCE_KEY,
    PAUSE_ALL_KEY,
    RESTART_KEY,
    CacheStore,
    CacheValueError,
    decode_numeric,
    is_php_numeric,
    numeric_text,
    php_serialize_scalar,
    php_unserialize_scalar,
)
from laraq.stores.cache_stores import DatabaseCache, FileCache
from laraq.stores.database import connect_database

__all__ = [
    "CacheStore",
    "LaravelCache",
    "MaintenanceMode",
    "UnsupportedCacheStore",
    "make_cache",
    "CacheValueError",
    "php_serialize_scalar",
    "php_unserialize_scalar",
    "is_php_numeric",
    "maintenance_active",
    "RESTART_KEY",
    "MAINTENANCE_KEY",
    "PAUSE_ALL_KEY",
    "JOB_EXCEPTIONS_TTL",
]

log = logging.getLogger("laraq.stores.cache")


class LaravelCache(CacheStore):
    """``Illuminate\\Cache\\RedisStore`` over a redis-py client of the cache database.

    ``redis_prefix`` is the Redis connection prefix (``REDIS_PREFIX``), ``cache_prefix`` the cache
    store prefix (``CACHE_PREFIX``), joined per ``version``. ``lock_client`` is the store's lock
    connection (stock: Redis ``default``, db 0) used for ``ShouldBeUnique`` locks; it defaults to
    ``client``.
    """

    driver = "redis"

    def __init__(
        self,
        client: redis.Redis,
        *,
        version: LaravelVersion | str = DEFAULT_VERSION,
        redis_prefix: str | None = None,
        cache_prefix: str | None = None,
        lock_client: redis.Redis | None = None,
        store_name: str = "redis",
        lock_redis_prefix: str | None = None,
    ) -> None:
        self.client = client
        self.lock_client = lock_client if lock_client is not None else client
        self.version = LaravelVersion.parse(version)
        self.redis_prefix = self.version.default_redis_prefix() if redis_prefix is None else redis_prefix
        self.cache_prefix = self.version.default_cache_prefix() if cache_prefix is None else cache_prefix
        self.store_name = store_name
        #: the lock connection's own key prefix (phpredis applies each connection's ``options.prefix``)
        self.lock_redis_prefix = self.redis_prefix if lock_redis_prefix is None else lock_redis_prefix

    @classmethod
    def from_settings(cls, settings: LaravelSettings, **redis_kwargs: Any) -> LaravelCache:
        """A cache over the stock Redis ``cache`` connection (db 1) and ``default`` lock connection."""
        return cls(
            make_redis(settings, settings.redis_cache_connection, **redis_kwargs),
            version=settings.version,
            redis_prefix=settings.redis_connection(settings.redis_cache_connection).prefix,
            cache_prefix=settings.cache_prefix,
            lock_client=make_redis(settings, settings.redis_cache_lock_connection, **redis_kwargs),
            store_name=settings.cache_store if settings.cache_uses_redis else "redis",
            lock_redis_prefix=settings.redis_connection(settings.redis_cache_lock_connection).prefix,
        )

    # -- keys ------------------------------------------------------------------------------------

    def key(self, key: str) -> str:
        """The full Redis key of a cache key (both prefixes applied)."""
        return self.redis_prefix + self.version.cache_key(self.cache_prefix, key)

    def lock_key(self, key: str) -> str:
        """The full Redis key of a lock on the lock connection (its own connection prefix)."""
        return self.lock_redis_prefix + self.version.cache_key(self.cache_prefix, key)

    @staticmethod
    def encode(value: Any) -> bytes:
        """``RedisStore::serialize``: numbers raw, everything else PHP-serialized."""
        if is_php_numeric(value) and not (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
            return numeric_text(value)
        return php_serialize_scalar(value)

    @staticmethod
    def decode(raw: bytes | None) -> Any:
        """``RedisStore::unserialize``: numeric strings become int/float, the rest is unserialized."""
        if raw is None:
            return None
        if is_php_numeric(raw):
            return decode_numeric(raw)
        return php_unserialize_scalar(raw)

    # -- store operations ----------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        # the client answers bytes (built without decode_responses); redis-py's types also allow str
        value = self.decode(cast("bytes | None", self.client.get(self.key(key))))
        return default if value is None else value

    def many(self, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(keys)
        if not keys:
            return {}
        raws = cast("list[bytes | None]", self.client.mget([self.key(k) for k in keys]))
        return {k: self.decode(r) for k, r in zip(keys, raws, strict=True)}

    def _put(self, key: str, value: Any, seconds: int) -> bool:
        # the same SETEX command PHP sends (redis-py deprecates its setex() wrapper)
        return bool(self.client.execute_command("SETEX", self.key(key), seconds, self.encode(value)))

    def forever(self, key: str, value: Any) -> bool:
        return bool(self.client.set(self.key(key), self.encode(value)))

    def forget(self, key: str) -> bool:
        return bool(self.client.delete(self.key(key)))

    def increment(self, key: str, by: int = 1) -> int:
        return int(self.client.incrby(self.key(key), by))

    def decrement(self, key: str, by: int = 1) -> int:
        return int(self.client.decrby(self.key(key), by))

    def close(self) -> None:
        for client in {id(self.client): self.client, id(self.lock_client): self.lock_client}.values():
            with contextlib.suppress(Exception):
                client.close()

    # -- ShouldBeUnique ----------------------------------------------------------------------------------------

    def unique_lock_key(self, job_class: str, unique_id: str, display_name: str | None = None) -> str:
        """The full Redis key of a ``ShouldBeUnique`` lock (in the lock connection's database)."""
        return self.lock_key(self.version.unique_lock_key(job_class, unique_id, display_name))

    def unique_lock_acquire(self, job_class: str, unique_id: str, display_name: str | None, seconds: int,
                            owner: str) -> bool:
        """``UniqueLock::acquire`` at dispatch: Laravel's ``RedisLock`` (``SET NX EX`` with a TTL, else
        ``SETNX``), the owner as the value. False: the lock is held, PHP drops such a dispatch."""
        key = self.unique_lock_key(job_class, unique_id, display_name)
        if seconds > 0:
            return bool(self.lock_client.set(key, owner, ex=seconds, nx=True))
        return bool(self.lock_client.setnx(key, owner))

    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool:
        """Release a unique lock like the worker does: ``forceRelease`` (``DEL``), or an owner-checked
        release when ``owner`` is given (13.24+ ``uniqueLockOwner``)."""
        return self.release_lock(self.version.unique_lock_key(job_class, unique_id, display_name), owner=owner)

    def release_lock(self, name: str, *, owner: str | None = None) -> bool:
        """Release the cache lock ``name`` (before prefixes): owner-checked when ``owner`` is given
        (``RedisLock::release``), else ``forceRelease``."""
        key = self.lock_key(name)
        if owner:
            script = ("if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) "
                      "else return 0 end")
            return bool(self.lock_client.eval(script, 1, key, owner))
        return bool(self.lock_client.delete(key))


class UnsupportedCacheStore(ValueError):
    """The default (or maintenance) cache store is one laraq cannot read (memcached, dynamodb, ...)."""


def make_cache(settings: LaravelSettings, store: str | None = None, *, redis_url: str | None = None,
               conn: Any = None) -> CacheStore:
    """The cache store ``store`` (default: the app's default store) as Laravel's ``CacheManager`` builds it.

    ``redis``: :class:`LaravelCache` over the ``cache`` connection (``redis_url`` replaces it, keeping
    ``REDIS_CACHE_DB``); ``file``: :class:`~laraq.stores.cache_stores.FileCache` at ``settings.cache_path``;
    ``database``: :class:`~laraq.stores.cache_stores.DatabaseCache` on ``DB_CACHE_CONNECTION``/``DB_CONNECTION``
    (``conn`` replaces the connection laraq would open). Stock store names are their driver names.
    """
    name = settings.cache_store_driver(store or settings.cache_store)  # a store's driver (stock: its name)
    version = settings.version
    if name == "redis":
        if redis_url:
            return LaravelCache(redis.Redis.from_url(redis_url, db=settings.redis_cache_db), version=version,
                                redis_prefix=settings.redis_prefix, cache_prefix=settings.cache_prefix,
                                lock_client=redis.Redis.from_url(redis_url))
        return LaravelCache.from_settings(settings)
    if name == "file":
        if settings.cache_path is None:
            raise UnsupportedCacheStore("the file cache store needs the Laravel project dir (--env-file or "
                                        "LARAQ_BASE_PATH) or LARAQ_CACHE_PATH")
        return FileCache(settings.cache_path, version=version)
    if name == "database":
        db = settings.database(settings.db_cache_connection)
        if conn is None:
            conn = connect_database(db)
        return DatabaseCache(conn, table=settings.db_cache_table, prefix=settings.cache_prefix, version=version,
                             dialect=db.driver, lock_table=settings.db_cache_lock_table)
    raise UnsupportedCacheStore(f"laraq cannot read the {name!r} cache store (supported: redis, file, database)")


class MaintenanceMode:
    """Is the Laravel app down, as ``queue:work`` without ``--force`` sees it? (a callable, checked every loop)

    8.x and the ``file`` driver: ``storage/framework/down`` exists. 9+ with the ``cache`` driver:
    ``illuminate:foundation:down`` is in the maintenance store (``APP_MAINTENANCE_STORE``, else the default
    store). ``cache`` is reused when it is that store; otherwise the store is opened on first use.
    """

    def __init__(self, settings: LaravelSettings, cache: CacheStore | None = None) -> None:
        self.settings = settings
        self._cache = cache
        self._store: CacheStore | None = None
        self._unsupported = False

    @property
    def uses_cache(self) -> bool:
        return self.settings.version.maintenance_via_cache and self.settings.maintenance_driver == "cache"

    def store(self) -> CacheStore:
        if self._store is None:
            name = self.settings.maintenance_cache_store
            if self._cache is not None and self._cache.store_name == name:
                self._store = self._cache
            else:
                self._store = make_cache(self.settings, name)
        return self._store

    def __call__(self) -> bool:
        if self.uses_cache:
            if self._unsupported:
                return False
            try:
                return self.store().maintenance_via_cache_active()
            except UnsupportedCacheStore as exc:
                self._unsupported = True
                log.warning("maintenance mode cannot be checked: %s", exc)
                return False
        down: Path | None = self.settings.maintenance_file
        return down is not None and down.exists()


def maintenance_active(settings: LaravelSettings, cache: CacheStore | None = None) -> bool:
    """One-shot :class:`MaintenanceMode` check (the worker keeps one :class:`MaintenanceMode` instead)."""
    return MaintenanceMode(settings, cache)()
