"""Laravel's cache as seen by the queue: restart, pause, maintenance and exception counters, per store.

``php artisan queue:restart``, ``queue:pause`` (12.40+), cache-based maintenance mode (9+), the
``maxExceptions`` counter (``job-exceptions:<uuid>``) and ``ShouldBeUnique`` locks all live in Laravel's
*default cache store*, not in the queue keys. :class:`CacheStore` is the one interface the worker and the
CLI use; :func:`make_cache` picks the implementation the app's ``CACHE_DRIVER`` / ``CACHE_STORE`` names:

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
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

if TYPE_CHECKING:
    import redis

    from laraq.config.settings import LaravelSettings

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
]

RESTART_KEY = "illuminate:queue:restart"
MAINTENANCE_KEY = "illuminate:foundation:down"
PAUSE_ALL_KEY = "illuminate:queues:paused"
JOB_EXCEPTIONS_TTL = 86400  # Carbon::now()->addDay()

log = logging.getLogger("laraq.stores.cache")

_NUMERIC_RE = re.compile(rb"^[ \t\n\r\v\f]*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?[ \t\n\r\v\f]*$")


class CacheValueError(ValueError):
    """A cached value laraq cannot decode (e.g. a serialized object without the full codec)."""


def is_php_numeric(value: Any) -> bool:
    """PHP 8 ``is_numeric()`` for the values a cache sees (bool is *not* numeric)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return True
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):
        return bool(_NUMERIC_RE.match(value))
    return False


def _php_float(value: float) -> str:
    try:
        from laraq.protocol.phpjson import php_float_repr

        return php_float_repr(value)
    except ImportError:  # pragma: no cover - phpjson is part of the package
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text


def php_serialize_scalar(value: Any) -> bytes:
    """PHP ``serialize()`` of ``None``/bool/int/float/str/bytes (and lists/dicts via the full codec)."""
    if value is None:
        return b"N;"
    if value is True:
        return b"b:1;"
    if value is False:
        return b"b:0;"
    if isinstance(value, int):
        return b"i:%d;" % value
    if isinstance(value, float):
        if math.isnan(value):
            return b"d:NAN;"
        if math.isinf(value):
            return b"d:INF;" if value > 0 else b"d:-INF;"
        return b"d:" + _php_float(value).encode() + b";"
    if isinstance(value, str):
        value = value.encode("utf-8")
    if isinstance(value, bytes):
        return b's:%d:"' % len(value) + value + b'";'
    try:
        from laraq.protocol.serializer import dumps  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise CacheValueError(f"cannot PHP-serialize {type(value).__name__} without laraq.protocol.serializer") from exc
    out = dumps(value)
    return out if isinstance(out, bytes) else str(out).encode()


_SCALAR_RE = re.compile(rb"^(?:N;|b:([01]);|i:([+-]?\d+);|d:([^;]+);|s:(\d+):\")", re.S)


def php_unserialize_scalar(raw: bytes) -> Any:
    """PHP ``unserialize()`` of scalars; other values go through ``laraq.protocol.serializer`` when present."""
    m = _SCALAR_RE.match(raw)
    if m:
        if raw == b"N;":
            return None
        if m.group(1) is not None and len(raw) == 4:
            return m.group(1) == b"1"
        if m.group(2) is not None and m.end() == len(raw):
            return int(m.group(2))
        if m.group(3) is not None and m.end() == len(raw):
            text = m.group(3).decode()
            return {"NAN": math.nan, "INF": math.inf, "-INF": -math.inf}.get(text) or float(text)
        if m.group(4) is not None:
            n = int(m.group(4))
            start = m.end()
            if raw[start + n: start + n + 2] == b'";' and len(raw) == start + n + 2:
                body = raw[start: start + n]
                try:
                    return body.decode("utf-8")
                except UnicodeDecodeError:
                    return body
    try:
        from laraq.protocol.serializer import loads  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise CacheValueError(f"cannot unserialize cached value {raw[:40]!r} without laraq.protocol.serializer") from exc
    return loads(raw)


def _numeric_text(value: Any) -> bytes:
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return _php_float(value).encode()
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _decode_numeric(raw: bytes) -> int | float:
    text = raw.decode().strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


class CacheStore:
    """The one cache interface the worker and the CLI use, whatever Laravel's default store is.

    Subclasses implement a store's primitives (``get``, ``_put``, ``forever``, ``forget``, ``increment``,
    ``unique_lock_release``) with that store's exact key and value rules; this class adds Laravel's
    ``Repository`` semantics (``put`` without a TTL is ``forever``, a TTL ≤ 0 forgets) and the queue
    signals built on them: ``queue:restart``, ``queue:pause``, cache-based maintenance mode and the
    ``maxExceptions`` counter. ``store_name`` is the name of the store in ``config/cache.php``.
    """

    driver: str = ""
    store_name: str = ""
    version: LaravelVersion = DEFAULT_VERSION

    # -- store primitives (per store) ---------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def _put(self, key: str, value: Any, seconds: int) -> bool:
        raise NotImplementedError

    def forever(self, key: str, value: Any) -> bool:
        raise NotImplementedError

    def forget(self, key: str) -> bool:
        raise NotImplementedError

    def increment(self, key: str, by: int = 1) -> int | bool:
        """The store's ``increment`` (``False`` where Laravel's store returns false)."""
        raise NotImplementedError

    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections/handles (no-op for stores that hold none)."""

    # -- Repository semantics ----------------------------------------------------------------------------

    def many(self, keys: Iterable[str]) -> dict[str, Any]:
        return {k: self.get(k) for k in keys}

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, value: Any, seconds: int | float | None = None) -> bool:
        """``Repository::put``: no TTL → forever; TTL ≤ 0 → forget; else the store's put (min 1 s)."""
        if seconds is None:
            return self.forever(key, value)
        if int(seconds) <= 0:
            return self.forget(key)
        return self._put(key, value, max(1, int(seconds)))

    def decrement(self, key: str, by: int = 1) -> int | bool:
        return self.increment(key, -by)

    # -- queue:restart ----------------------------------------------------------------------------------

    def restart_timestamp(self) -> int | None:
        """The value of ``illuminate:queue:restart`` (unix seconds of the last ``queue:restart``)."""
        value = self.get(RESTART_KEY)
        if value is None:
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    def set_restart(self, now: int | float | None = None) -> int:
        """Broadcast a restart like ``php artisan queue:restart`` (``forever``, int seconds)."""
        stamp = int(time.time() if now is None else now)
        self.forever(RESTART_KEY, stamp)
        return stamp

    # -- queue:pause (12.40+) -------------------------------------------------------------------------------

    @staticmethod
    def pause_key(connection: str, queue: str) -> str:
        return f"illuminate:queue:paused:{connection}:{queue}"

    def _require_pause(self) -> None:
        if not self.version.has_queue_pause:
            raise NotImplementedError(f"Laravel {self.version} has no queue pause (added in 12.40)")

    def is_paused(self, connection: str, queue: str) -> bool:
        """``QueueManager::isPaused``: the global flag (13.25+) or the per-queue flag; always False < 12.40."""
        if not self.version.has_queue_pause:
            return False
        keys = [self.pause_key(connection, queue)]
        if self.version.has_global_pause:
            keys.insert(0, PAUSE_ALL_KEY)
        return any(bool(v) for v in self.many(keys).values())

    def paused_queues(self, connection: str, queues: Iterable[str]) -> list[str]:
        """The subset of ``queues`` that is paused (one ``many`` call)."""
        queues = list(queues)
        if not self.version.has_queue_pause or not queues:
            return []
        keys = [self.pause_key(connection, q) for q in queues]
        if self.version.has_global_pause:
            keys.append(PAUSE_ALL_KEY)
        values = self.many(keys)
        if self.version.has_global_pause and values.get(PAUSE_ALL_KEY):
            return queues
        return [q for q in queues if values.get(self.pause_key(connection, q))]

    def pause(self, connection: str, queue: str, ttl: int | None = None) -> None:
        """``queue:pause connection:queue`` (``forever`` true, or ``put`` with a TTL like ``pauseFor``)."""
        self._require_pause()
        self.put(self.pause_key(connection, queue), True, ttl)

    def resume(self, connection: str, queue: str) -> None:
        self._require_pause()
        self.forget(self.pause_key(connection, queue))

    def pause_all(self) -> None:
        """``queue:pause --all`` (13.25+)."""
        if not self.version.has_global_pause:
            raise NotImplementedError(f"Laravel {self.version} has no global pause (added in 13.25)")
        self.forever(PAUSE_ALL_KEY, True)

    def resume_all(self) -> None:
        if not self.version.has_global_pause:
            raise NotImplementedError(f"Laravel {self.version} has no global pause (added in 13.25)")
        self.forget(PAUSE_ALL_KEY)

    # -- maintenance mode (9+) -----------------------------------------------------------------------------

    def maintenance_via_cache_active(self) -> bool:
        """``CacheBasedMaintenanceMode::active`` (``has('illuminate:foundation:down')``); False on 8.x."""
        if not self.version.maintenance_via_cache:
            return False
        return self.has(MAINTENANCE_KEY)

    # -- maxExceptions -------------------------------------------------------------------------------------

    @staticmethod
    def job_exceptions_key(uuid: str) -> str:
        return f"job-exceptions:{uuid}"

    def job_exceptions_increment(self, uuid: str) -> int:
        """The Worker's ``maxExceptions`` bookkeeping, step for step.

        ``get``; if the value is missing or falsy (``0``), ``put(key, 0, 86400)``; then ``increment``.
        Returns the new count (0 when the store's increment found nothing, as PHP's ``false``).
        """
        key = self.job_exceptions_key(uuid)
        if not self.get(key):
            self.put(key, 0, JOB_EXCEPTIONS_TTL)
        value = self.increment(key)
        return 0 if value is False else int(value)

    def job_exceptions_forget(self, uuid: str) -> bool:
        return self.forget(self.job_exceptions_key(uuid))


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
    ) -> None:
        self.client = client
        self.lock_client = lock_client if lock_client is not None else client
        self.version = LaravelVersion.parse(version)
        self.redis_prefix = self.version.default_redis_prefix() if redis_prefix is None else redis_prefix
        self.cache_prefix = self.version.default_cache_prefix() if cache_prefix is None else cache_prefix
        self.store_name = store_name

    @classmethod
    def from_settings(cls, settings: LaravelSettings, **redis_kwargs: Any) -> LaravelCache:
        """A cache over the stock Redis ``cache`` connection (db 1) and ``default`` lock connection."""
        from laraq.config.settings import make_redis

        return cls(
            make_redis(settings, "cache", **redis_kwargs),
            version=settings.version,
            redis_prefix=settings.redis_prefix,
            cache_prefix=settings.cache_prefix,
            lock_client=make_redis(settings, "default", **redis_kwargs),
            store_name=settings.cache_store if settings.cache_uses_redis else "redis",
        )

    # -- keys ------------------------------------------------------------------------------------

    def key(self, key: str) -> str:
        """The full Redis key of a cache key (both prefixes applied)."""
        return self.redis_prefix + self.version.cache_key(self.cache_prefix, key)

    @staticmethod
    def encode(value: Any) -> bytes:
        """``RedisStore::serialize``: numbers raw, everything else PHP-serialized."""
        if is_php_numeric(value) and not (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
            return _numeric_text(value)
        return php_serialize_scalar(value)

    @staticmethod
    def decode(raw: bytes | None) -> Any:
        """``RedisStore::unserialize``: numeric strings become int/float, the rest is unserialized."""
        if raw is None:
            return None
        if is_php_numeric(raw):
            return _decode_numeric(raw)
        return php_unserialize_scalar(raw)

    # -- store operations ----------------------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        value = self.decode(self.client.get(self.key(key)))
        return default if value is None else value

    def many(self, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(keys)
        if not keys:
            return {}
        raws = self.client.mget([self.key(k) for k in keys])
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
        return self.key(self.version.unique_lock_key(job_class, unique_id, display_name))

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
        key = self.key(name)
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
    name = store or settings.cache_store
    version = settings.version
    if name == "redis":
        if redis_url:
            import redis as redis_mod

            return LaravelCache(redis_mod.Redis.from_url(redis_url, db=settings.redis_cache_db), version=version,
                                redis_prefix=settings.redis_prefix, cache_prefix=settings.cache_prefix,
                                lock_client=redis_mod.Redis.from_url(redis_url))
        return LaravelCache.from_settings(settings)
    if name == "file":
        from laraq.stores.cache_stores import FileCache

        if settings.cache_path is None:
            raise UnsupportedCacheStore("the file cache store needs the Laravel project dir (--env-file or "
                                        "LARAQ_BASE_PATH) or LARAQ_CACHE_PATH")
        return FileCache(settings.cache_path, version=version)
    if name == "database":
        from laraq.stores.cache_stores import DatabaseCache
        from laraq.stores.failed import connect_database

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
