"""Laravel's cache rate limiter (``Illuminate\\Cache\\RateLimiter``) over the Redis cache store, step for
step, so that PHP and Python workers count in the same keys.

A limiter key ``K`` is cleaned as PHP cleans it (``htmlentities`` then ``&name;`` → its first letter) and
kept in two cache entries: ``K`` (the hit count, stored raw as ``RedisStore`` stores numbers) and
``K:timer`` (the unix second the window ends). Both are written with the store's ``add`` (set only if
absent, with the window as TTL), then ``increment``, then - if the count key vanished between the two -
``put(K, 1)``, exactly the sequence of ``hit``. Used by :mod:`laraq.bus.middleware` for ``ThrottlesExceptions``.

Also ``Illuminate\\Redis\\Limiters\\DurationLimiter`` (:class:`RedisDurationLimiter`), the window hash
``ThrottlesExceptionsWithRedis`` and ``RateLimitedWithRedis`` keep on a Redis connection, and the named
limiters of ``RateLimiter::for`` declared in Python (:class:`Limit`, ``App.rate_limiter``): PHP's closure
cannot run in Python, so ``RateLimited('name')`` is honoured only for a name the Python app declares too.
"""

from __future__ import annotations

import html.entities
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Limit", "LimiterFunc", "RedisDurationLimiter", "RedisRateLimiter", "clean_key", "limits_of",
           "named_limiter"]

#: ``RedisStore::add``: set with a TTL only when the key does not exist
_ADD = "return redis.call('exists',KEYS[1])<1 and redis.call('setex',KEYS[1],ARGV[2],ARGV[1])"
_ENTITY = re.compile(r"&([a-z])[a-z]+;", re.IGNORECASE)
_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#039;"}


def clean_key(key: str) -> str:
    """``RateLimiter::cleanRateLimiterKey``: PHP's ``htmlentities`` (HTML 4.01 table, quotes encoded), then
    every named entity replaced by its first letter (``&eacute;`` → ``e``, ``&amp;`` → ``a``)."""
    out = []
    for char in key:
        if char in _SPECIAL:
            out.append(_SPECIAL[char])
        elif ord(char) > 127 and ord(char) in html.entities.codepoint2name:
            out.append(f"&{html.entities.codepoint2name[ord(char)]};")
        else:
            out.append(char)
    return _ENTITY.sub(r"\1", "".join(out))


class RedisRateLimiter:
    """``RateLimiter`` bound to a :class:`laraq.stores.cache.LaravelCache` (its ``client``, ``key`` and codec)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def _add(self, key: str, value: int, seconds: int) -> bool:
        if seconds <= 0:  # Repository::add with a TTL <= 0 stores nothing
            return False
        return bool(self.cache.client.eval(_ADD, 1, self.cache.key(key), self.cache.encode(value), seconds))

    def attempts(self, key: str) -> int:
        return int(self.cache.get(clean_key(key), 0) or 0)

    def too_many_attempts(self, key: str, max_attempts: int) -> bool:
        """``tooManyAttempts``: at the limit while the window lasts; a count whose timer is gone is reset."""
        if self.attempts(key) >= max_attempts:
            if self.cache.has(clean_key(key) + ":timer"):
                return True
            self.cache.forget(clean_key(key))
        return False

    def hit(self, key: str, decay_seconds: int) -> int:
        """``hit``: open the window (timer and count) if absent, count one, repair a vanished count."""
        key = clean_key(key)
        decay = int(decay_seconds)
        self._add(key + ":timer", int(time.time()) + decay, decay)
        added = self._add(key, 0, decay)
        hits = int(self.cache.increment(key))
        if not added and hits == 1:
            self.cache.put(key, 1, decay)
        return hits

    def clear(self, key: str) -> None:
        key = clean_key(key)
        self.cache.forget(key)
        self.cache.forget(key + ":timer")

    def available_in(self, key: str) -> int:
        """Seconds until the window ends (0 when it has)."""
        timer = self.cache.get(clean_key(key) + ":timer")
        return max(0, int(timer or 0) - int(time.time()))


#: ``DurationLimiter::tooManyAttempts``: {window end, attempts left} inside the current window, else
#: {0, now + decay}. Times are compared as strings, as Laravel's script compares them.
_WINDOW = """
local now, now_int, decay, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local w = redis.call('HMGET', KEYS[1], 'start', 'end', 'count')
  if now >= w[1] and now <= w[2] then
    return {w[2], max - tonumber(w[3])}
  end
end
return {0, now_int + decay}
"""

#: ``DurationLimiter::acquire``: inside the current window count one and answer {count <= max, window
#: end, attempts left}; else open a new window of ``decay`` seconds holding one (the hash lives twice
#: the window) and answer {1, its end, max - 1}.
_ACQUIRE = """
local now, now_int, decay, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local w = redis.call('HMGET', KEYS[1], 'start', 'end')
  if now >= w[1] and now <= w[2] then
    local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
    return {count <= max and 1 or 0, w[2], max - count}
  end
end
redis.call('HSET', KEYS[1], 'start', now_int, 'end', now_int + decay, 'count', 1)
redis.call('EXPIRE', KEYS[1], decay * 2)
return {1, now_int + decay, max - 1}
"""


def _php_microtime() -> str:
    """``microtime(true)`` as PHP turns it into a string (shortest round-trip form, no ``.0``)."""
    text = repr(time.time())
    return text[:-2] if text.endswith(".0") else text


class RedisDurationLimiter:
    """``Illuminate\\Redis\\Limiters\\DurationLimiter`` on a Redis connection whose keys PHP prefixes with
    ``prefix`` (``REDIS_PREFIX``): a hash ``{start, end, count}`` per key."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.decays_at = 0

    def too_many_attempts(self, key: str, max_attempts: int, decay_seconds: int) -> bool:
        """True while the window holds ``max_attempts``; ``decays_at`` is then the window's end."""
        decays_at, remaining = self.client.eval(_WINDOW, 1, self.prefix + key, _php_microtime(), int(time.time()),
                                                int(decay_seconds), int(max_attempts))
        self.decays_at = int(decays_at)
        return int(remaining) <= 0

    def acquire(self, key: str, max_attempts: int, decay_seconds: int) -> bool:
        """Count one attempt; False when that goes past ``max_attempts`` (``decays_at``: the window's end)."""
        acquired, decays_at, _left = self.client.eval(_ACQUIRE, 1, self.prefix + key, _php_microtime(),
                                                      int(time.time()), int(decay_seconds), int(max_attempts))
        self.decays_at = int(decays_at)
        return bool(acquired)

    def clear(self, key: str) -> None:
        self.client.delete(self.prefix + key)


# -- named limiters (``RateLimiter::for``), declared in Python ----------------------------------------------------


def php_string(value: Any) -> str:
    """A limit key as PHP's string conversion writes it (``true`` → ``1``, ``null``/``false`` → empty)."""
    if value is None or value is False:
        return ""
    if value is True:
        return "1"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class Limit:
    """``Illuminate\\Cache\\RateLimiting\\Limit``: ``max_attempts`` per ``decay_seconds``, counted per ``key``."""

    max_attempts: int
    decay_seconds: int = 60
    key: str = ""

    @classmethod
    def per_second(cls, max_attempts: int, decay_seconds: int = 1) -> Limit:
        return cls(max_attempts, decay_seconds)

    @classmethod
    def per_minute(cls, max_attempts: int, decay_minutes: int = 1) -> Limit:
        return cls(max_attempts, 60 * decay_minutes)

    @classmethod
    def per_minutes(cls, decay_minutes: int, max_attempts: int) -> Limit:
        return cls(max_attempts, 60 * decay_minutes)

    @classmethod
    def per_hour(cls, max_attempts: int, decay_hours: int = 1) -> Limit:
        return cls(max_attempts, 3600 * decay_hours)

    @classmethod
    def per_day(cls, max_attempts: int, decay_days: int = 1) -> Limit:
        return cls(max_attempts, 86400 * decay_days)

    @staticmethod
    def none() -> None:
        """``Limit::none()``: no limit (a limiter returning None lets the job run)."""
        return None

    def by(self, key: Any) -> Limit:
        return replace(self, key=php_string(key))

    def fallback_key(self) -> str:
        """The key PHP (11+) gives limits of one limiter that share a key."""
        prefix = f"{self.key}:" if self.key else ""
        return f"{prefix}attempts:{self.max_attempts}:decay:{self.decay_seconds}"


#: a named limiter: ``func(command, job)`` → a :class:`Limit`, a list of them, or None (unlimited)
LimiterFunc = Callable[[Any, Any], "Limit | Sequence[Limit] | None"]


def limits_of(result: Any, name: str, fallback_keys: bool) -> list[Limit]:
    """A limiter's answer as a list (``fallback_keys``: 11+'s rule for limits that share a key)."""
    if result is None:
        return []
    limits = [result] if isinstance(result, Limit) else list(result)
    for limit in limits:
        if not isinstance(limit, Limit):
            raise TypeError(f"the rate limiter {name!r} returned {limit!r}, not a laraq.Limit")
    if fallback_keys:
        keys = [limit.key for limit in limits]
        shared = {key for key in keys if keys.count(key) > 1}
        limits = [replace(limit, key=limit.fallback_key()) if limit.key in shared else limit for limit in limits]
    return limits


def named_limiter(name: str, func: LimiterFunc | None, *, per_second: int | None = None,
                  per_minute: int | None = None, per_hour: int | None = None, per_day: int | None = None,
                  by: Callable[[Any, Any], Any] | None = None) -> LimiterFunc:
    """The limiter function for ``App.rate_limiter``: ``func`` itself, or one limit from ``per_*`` and ``by``."""
    rates = {k: v for k, v in (("per_second", per_second), ("per_minute", per_minute), ("per_hour", per_hour),
                               ("per_day", per_day)) if v is not None}
    if func is not None:
        if rates or by is not None:
            raise ValueError(f"rate limiter {name!r}: give a function or per_*/by=, not both")
        if not callable(func):
            raise TypeError(f"rate limiter {name!r} is not callable")
        return func
    if len(rates) != 1:
        raise ValueError(f"rate limiter {name!r} needs exactly one of per_second/per_minute/per_hour/per_day "
                         "(or a function returning laraq.Limit)")
    (kind, count), = rates.items()
    base: Limit = getattr(Limit, kind)(int(count))

    def limiter(command: Any, job: Any) -> Limit:
        return base if by is None else base.by(by(command, job))

    return limiter
