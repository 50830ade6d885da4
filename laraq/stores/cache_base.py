"""The cache interface the queue uses, and the value rules every Laravel cache store shares.

:class:`CacheStore` is ``Illuminate\\Cache\\Repository`` as the worker and the CLI need it: a store's
primitives (implemented per store in :mod:`laraq.stores.cache` and :mod:`laraq.stores.cache_stores`) plus
the queue signals built on them (``queue:restart``, ``queue:pause``, cache-based maintenance mode, the
``maxExceptions`` counter). The helpers here are the stores' shared value rules: PHP's ``is_numeric``
(:func:`is_php_numeric`) and ``serialize``/``unserialize`` of cached values (:func:`php_serialize_scalar`,
:func:`php_unserialize_scalar`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from typing import Any

from laraq.protocol.phpjson import php_float_repr
from laraq.protocol.serializer import dumps, loads
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
    "CacheStore",
    "CacheValueError",
    "JOB_EXCEPTIONS_TTL",
    "MAINTENANCE_KEY",
    "PAUSE_ALL_KEY",
    "RESTART_KEY",
    "decode_numeric",
    "is_php_numeric",
    "numeric_text",
    "php_serialize_scalar",
    "php_unserialize_scalar",
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
    return php_float_repr(value)


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
    out = dumps(value)
    return out if isinstance(out, bytes) else str(out).encode()


_SCALAR_RE = re.compile(rb"^(?:N;|b:([01]);|i:([+-]?\d+);|d:([^;]+);|s:(\d+):\")", re.S)


def php_unserialize_scalar(raw: bytes) -> Any:
    """PHP ``unserialize()`` of scalars; other values go through :mod:`laraq.protocol.serializer`."""
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
    return loads(raw)


def numeric_text(value: Any) -> bytes:
    """A number as the decimal text a store keeps raw (PHP's string cast of an int or float)."""
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return _php_float(value).encode()
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def decode_numeric(raw: bytes) -> int | float:
    """The number a raw numeric value reads back as: an int when it is one, else a float."""
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
