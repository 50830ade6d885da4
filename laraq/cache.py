"""Laravel's Redis cache store as seen by the queue: restart, pause, maintenance and exception counters.

``php artisan queue:restart``, ``queue:pause`` (12.40+), cache-based maintenance mode (9+), the
``maxExceptions`` counter (``job-exceptions:<uuid>``) and ``ShouldBeUnique`` locks all live in Laravel's
*cache*, not in the queue keys. :class:`LaravelCache` implements ``Illuminate\\Cache\\RedisStore``'s key and
value rules so PHP and Python read and write the same bytes:

* key = Redis connection prefix (``REDIS_PREFIX``) + cache prefix joined per version
  (:meth:`LaravelVersion.cache_key`: ≤10 inserts ``:`` after a non-empty cache prefix) + the cache key;
* numeric values (ints, finite floats, numeric strings; not booleans) are stored raw as decimal text,
  everything else PHP-``serialize()``d (``true`` → ``b:1;``);
* ``put`` is ``SETEX`` with at least 1 second, ``forever`` is ``SET``, ``increment`` is ``INCRBY``,
  ``forget`` is ``DEL``.

The client passed in must point at the cache store's Redis database (``REDIS_CACHE_DB``, db 1 in stock
apps); unique locks use the store's *lock* connection (``default``, db 0), pass it as ``lock_client``.
:func:`maintenance_active` combines the ``storage/framework/down`` file with the cache flag.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laraq.versions import DEFAULT_VERSION, LaravelVersion

if TYPE_CHECKING:
    import redis

    from laraq.config import LaravelSettings

__all__ = [
    "LaravelCache",
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
        from laraq.phpjson import php_float_repr

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
        from laraq.serializer import dumps  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise CacheValueError(f"cannot PHP-serialize {type(value).__name__} without laraq.serializer") from exc
    out = dumps(value)
    return out if isinstance(out, bytes) else str(out).encode()


_SCALAR_RE = re.compile(rb"^(?:N;|b:([01]);|i:([+-]?\d+);|d:([^;]+);|s:(\d+):\")", re.S)


def php_unserialize_scalar(raw: bytes) -> Any:
    """PHP ``unserialize()`` of scalars; other values go through ``laraq.serializer`` when present."""
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
        from laraq.serializer import loads  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise CacheValueError(f"cannot unserialize cached value {raw[:40]!r} without laraq.serializer") from exc
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


class LaravelCache:
    """``Illuminate\\Cache\\RedisStore`` over a redis-py client of the cache database.

    ``redis_prefix`` is the Redis connection prefix (``REDIS_PREFIX``), ``cache_prefix`` the cache
    store prefix (``CACHE_PREFIX``), joined per ``version``. ``lock_client`` is the store's lock
    connection (stock: Redis ``default``, db 0) used for ``ShouldBeUnique`` locks; it defaults to
    ``client``.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        version: LaravelVersion | str = DEFAULT_VERSION,
        redis_prefix: str | None = None,
        cache_prefix: str | None = None,
        lock_client: redis.Redis | None = None,
    ) -> None:
        self.client = client
        self.lock_client = lock_client if lock_client is not None else client
        self.version = LaravelVersion.parse(version)
        self.redis_prefix = self.version.default_redis_prefix() if redis_prefix is None else redis_prefix
        self.cache_prefix = self.version.default_cache_prefix() if cache_prefix is None else cache_prefix

    @classmethod
    def from_settings(cls, settings: LaravelSettings, **redis_kwargs: Any) -> LaravelCache:
        """A cache over the stock Redis ``cache`` connection (db 1) and ``default`` lock connection."""
        from laraq.config import make_redis

        return cls(
            make_redis(settings, "cache", **redis_kwargs),
            version=settings.version,
            redis_prefix=settings.redis_prefix,
            cache_prefix=settings.cache_prefix,
            lock_client=make_redis(settings, "default", **redis_kwargs),
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

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, value: Any, seconds: int | float | None = None) -> bool:
        """``Repository::put``: no TTL → forever; TTL ≤ 0 → forget; else ``SETEX`` (min 1 s)."""
        if seconds is None:
            return self.forever(key, value)
        if int(seconds) <= 0:
            return self.forget(key)
        # the same SETEX command PHP sends (redis-py deprecates its setex() wrapper)
        return bool(self.client.execute_command("SETEX", self.key(key), max(1, int(seconds)), self.encode(value)))

    def forever(self, key: str, value: Any) -> bool:
        return bool(self.client.set(self.key(key), self.encode(value)))

    def forget(self, key: str) -> bool:
        return bool(self.client.delete(self.key(key)))

    def increment(self, key: str, by: int = 1) -> int:
        return int(self.client.incrby(self.key(key), by))

    def decrement(self, key: str, by: int = 1) -> int:
        return int(self.client.decrby(self.key(key), by))

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
        """The subset of ``queues`` that is paused (one MGET)."""
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
        """The Worker's ``maxExceptions`` bookkeeping, command for command.

        ``GET``; if the value is missing or falsy (``"0"``), ``SETEX key 86400 0``; then ``INCRBY key 1``.
        Returns the new count.
        """
        key = self.job_exceptions_key(uuid)
        if not self.get(key):
            self.put(key, 0, JOB_EXCEPTIONS_TTL)
        return self.increment(key)

    def job_exceptions_forget(self, uuid: str) -> bool:
        return self.forget(self.job_exceptions_key(uuid))

    # -- ShouldBeUnique ----------------------------------------------------------------------------------------

    def unique_lock_key(self, job_class: str, unique_id: str, display_name: str | None = None) -> str:
        """The full Redis key of a ``ShouldBeUnique`` lock (in the lock connection's database)."""
        return self.key(self.version.unique_lock_key(job_class, unique_id, display_name))

    def unique_lock_release(self, job_class: str, unique_id: str = "", display_name: str | None = None,
                            *, owner: str | None = None) -> bool:
        """Release a unique lock like the worker does: ``forceRelease`` (``DEL``), or an owner-checked
        release when ``owner`` is given (13.24+ ``uniqueLockOwner``)."""
        key = self.unique_lock_key(job_class, unique_id, display_name)
        if owner:
            script = ("if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) "
                      "else return 0 end")
            return bool(self.lock_client.eval(script, 1, key, owner))
        return bool(self.lock_client.delete(key))


def maintenance_active(settings: LaravelSettings, cache: LaravelCache | None = None) -> bool:
    """Is the Laravel app down for maintenance, as ``queue:work`` (without ``--force``) would see it?

    8.x and the ``file`` driver: ``storage/framework/down`` exists. 9+ with the ``cache`` driver:
    ``illuminate:foundation:down`` is in the maintenance store; laraq can read it only when that store
    is the Redis cache store and ``cache`` is given (or can be built from ``settings``).
    """
    if settings.version.maintenance_via_cache and settings.maintenance_driver == "cache":
        if settings.maintenance_cache_store != "redis":
            return False
        if cache is None:
            cache = LaravelCache.from_settings(settings)
        return cache.maintenance_via_cache_active()
    down: Path | None = settings.maintenance_file
    return down is not None and down.exists()
