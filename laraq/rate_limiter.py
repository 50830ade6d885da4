"""Laravel's cache rate limiter (``Illuminate\\Cache\\RateLimiter``) over the Redis cache store, step for
step, so that PHP and Python workers count in the same keys.

A limiter key ``K`` is cleaned as PHP cleans it (``htmlentities`` then ``&name;`` → its first letter) and
kept in two cache entries: ``K`` (the hit count, stored raw as ``RedisStore`` stores numbers) and
``K:timer`` (the unix second the window ends). Both are written with the store's ``add`` (set only if
absent, with the window as TTL), then ``increment``, then - if the count key vanished between the two -
``put(K, 1)``, exactly the sequence of ``hit``. Used by :mod:`laraq.middleware` for ``ThrottlesExceptions``.
"""

from __future__ import annotations

import html.entities
import re
import time
from typing import Any

__all__ = ["RedisRateLimiter", "clean_key"]

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
