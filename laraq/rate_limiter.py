"""Laravel's cache rate limiter (``Illuminate\\Cache\\RateLimiter``) over the Redis cache store, step for
step, so that PHP and Python workers count in the same keys.

A limiter key ``K`` is cleaned as PHP cleans it (``htmlentities`` then ``&name;`` → its first letter) and
kept in two cache entries: ``K`` (the hit count, stored raw as ``RedisStore`` stores numbers) and
``K:timer`` (the unix second the window ends). Both are written with the store's ``add`` (set only if
absent, with the window as TTL), then ``increment``, then - if the count key vanished between the two -
``put(K, 1)``, exactly the sequence of ``hit``. Used by :mod:`laraq.middleware` for ``ThrottlesExceptions``.

Also ``Illuminate\\Redis\\Limiters\\DurationLimiter`` (:class:`RedisDurationLimiter`), the window hash
``ThrottlesExceptionsWithRedis`` keeps on a Redis connection.
"""

from __future__ import annotations

import html.entities
import re
import time
from typing import Any

__all__ = ["RedisDurationLimiter", "RedisRateLimiter", "clean_key"]

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
    """``RateLimiter`` bound to a :class:`laraq.cache.LaravelCache` (its ``client``, ``key`` and codec)."""

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

#: ``DurationLimiter::acquire``: count one inside the current window, else open a new window of ``decay``
#: seconds holding one (the hash lives twice the window).
_ACQUIRE = """
local now, now_int, decay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local w = redis.call('HMGET', KEYS[1], 'start', 'end')
  if now >= w[1] and now <= w[2] then
    redis.call('HINCRBY', KEYS[1], 'count', 1)
    return 1
  end
end
redis.call('HSET', KEYS[1], 'start', now_int, 'end', now_int + decay, 'count', 1)
redis.call('EXPIRE', KEYS[1], decay * 2)
return 1
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

    def hit(self, key: str, decay_seconds: int) -> None:
        self.client.eval(_ACQUIRE, 1, self.prefix + key, _php_microtime(), int(time.time()), int(decay_seconds))

    def clear(self, key: str) -> None:
        self.client.delete(self.prefix + key)
