"""Laravel version profiles: every per-version wire difference laraq knows about, in one place.

A :class:`LaravelVersion` answers questions such as "does this Laravel write ``createdAt``?" or
"what is the stock Redis prefix?". Every other module asks the profile instead of comparing version
numbers itself, so a new difference is added here once.

Several features were back-ported to older major lines (9.x, 10.x and 11.x still get releases), so
a feature is described by the first release *of each line* that has it (see :func:`_since`).

The facts and their version ranges are documented in ``compat-docs/protocol.md``.
"""

from __future__ import annotations

import builtins
import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache, total_ordering

import xxhash

#: The newest release of each major line that laraq was checked against (the wire corpus).
REFERENCE_RELEASES: dict[int, tuple[int, int, int]] = {
    8: (8, 83, 26),
    9: (9, 52, 22),
    10: (10, 50, 3),
    11: (11, 56, 0),
    12: (12, 67, 0),
    13: (13, 26, 1),
}

SUPPORTED_MAJORS = tuple(sorted(REFERENCE_RELEASES))

_VERSION_RE = re.compile(r"^\s*v?(\d+)(?:\.(\d+|x))?(?:\.(\d+|x))?\s*$")


def _slug(value: str, separator: str) -> str:
    """Laravel's ``Str::slug`` for the ASCII app names that end up in key prefixes."""
    text = value.replace("@", f"{separator}at{separator}")
    flip = "-" if separator == "_" else "_"
    text = text.replace(flip, separator)
    text = re.sub(r"[^" + re.escape(separator) + r"\w\s]+", "", text.lower(), flags=re.ASCII)
    text = re.sub(r"[" + re.escape(separator) + r"\s]+", separator, text)
    return text.strip(separator)


@total_ordering
@dataclass(frozen=True)
class LaravelVersion:
    """One Laravel framework release, e.g. ``LaravelVersion.parse("12.45")``."""

    major: int
    minor: int = 0
    patch: int = 0

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | int | LaravelVersion) -> LaravelVersion:
        """Parse ``"8"``, ``"12.45"``, ``"13.x"`` or ``"v10.50.3"``.

        A bare major (or ``N.x``) means the newest release of that line that laraq was checked
        against, because that is what ``composer update`` gives a maintained app.
        """
        if isinstance(text, LaravelVersion):
            return text
        m = _VERSION_RE.match(str(text))
        if not m:
            raise ValueError(f"not a Laravel version: {text!r} (expected e.g. 8, 11.27 or 13.x)")
        major = int(m.group(1))
        if major not in REFERENCE_RELEASES:
            raise ValueError(
                f"Laravel {major} is not supported; laraq speaks Laravel "
                f"{SUPPORTED_MAJORS[0]} to {SUPPORTED_MAJORS[-1]}"
            )
        minor_s, patch_s = m.group(2), m.group(3)
        if minor_s is None or minor_s == "x":
            return cls(*REFERENCE_RELEASES[major])
        if patch_s is None or patch_s == "x":
            return cls(major, int(minor_s), 0)
        return cls(major, int(minor_s), int(patch_s))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, LaravelVersion):
            return NotImplemented
        return (self.major, self.minor, self.patch) < (other.major, other.minor, other.patch)

    @property
    def tuple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def since(self, *first_releases: str) -> bool:
        """True if this version has a feature that first appeared in ``first_releases``.

        Each argument is the first release of one major line (``"11.53", "12.60", "13.10"``). Lines
        newer than the newest listed line have the feature; lines older than the oldest do not.
        """
        return _since_cached(self.major, self.minor, self.patch, first_releases)

    # -- key prefixes and names ----------------------------------------------------------------

    def default_redis_prefix(self, app_name: str = "Laravel") -> str:
        """The stock ``database.redis.options.prefix`` of a fresh app of this line.

        Laravel 12 apps created from skeleton v12.1.0 on (July 2025) and all 13.x apps use hyphens;
        12.0.x skeleton apps kept underscores and must set ``REDIS_PREFIX`` / ``--prefix``.
        """
        if self.major >= 12:
            return _slug(app_name or "laravel", "-") + "-database-"
        return _slug(app_name or "laravel", "_") + "_database_"

    def default_cache_prefix(self, app_name: str = "Laravel") -> str:
        """The stock ``cache.prefix`` (before the Redis store adds its own join)."""
        if self.major >= 12:
            return _slug(app_name or "laravel", "-") + "-cache-"
        if self.major == 8:
            return _slug(app_name or "laravel", "_") + "_cache"
        return _slug(app_name or "laravel", "_") + "_cache_"

    @property
    def cache_prefix_appends_colon(self) -> bool:
        """Laravel ≤ 10's ``RedisStore::setPrefix`` appends ``:`` to a non-empty cache prefix."""
        return self.major <= 10

    def cache_key(self, cache_prefix: str, key: str) -> str:
        """Join a cache prefix and a cache key the way this version's ``RedisStore`` does.

        The Redis connection's own key prefix is *not* included; it is applied by the client.
        """
        if cache_prefix and self.cache_prefix_appends_colon:
            return f"{cache_prefix}:{key}"
        return f"{cache_prefix}{key}"

    @property
    def cluster_hash_tags(self) -> bool:
        """13.5+: on a cluster connection queue keys become ``queues:{name}`` automatically."""
        return self.since("13.5")

    # -- Lua scripts and RedisQueue --------------------------------------------------------------

    @property
    def migrate_has_limit(self) -> bool:
        """9.23+: ``migrateExpiredJobs`` takes a batch-size limit (``migration_batch_size``)."""
        return self.since("9.23")

    @property
    def later_uses_script(self) -> bool:
        """12.45+: a delayed push runs a Lua ``later`` script instead of a plain ``ZADD``."""
        return self.since("12.45")

    @property
    def has_clear(self) -> bool:
        """8.4+: ``queue:clear`` and the ``clear`` script exist."""
        return self.since("8.4")

    @property
    def clear_deletes_notify(self) -> bool:
        """8.9+: ``clear`` also deletes the ``:notify`` list."""
        return self.since("8.9")

    @property
    def blocks_only_on_first_queue(self) -> bool:
        """11.27+: with several queues, ``block_for`` applies only when polling the first one."""
        return self.since("11.27")

    @property
    def bulk_honours_delay(self) -> bool:
        """9.7+: ``bulk()`` sends jobs with a ``delay`` property through ``later``."""
        return self.since("9.7")

    # -- payload ---------------------------------------------------------------------------------

    @property
    def payload_has_fail_on_timeout(self) -> bool:
        return self.since("8.43")

    @property
    def payload_unescaped_unicode(self) -> bool:
        """8.82+: payloads are written with ``JSON_UNESCAPED_UNICODE``."""
        return self.since("8.82")

    @property
    def payload_has_created_at_and_delay(self) -> bool:
        """12.11+: ``createdAt`` and a trailing ``delay`` field."""
        return self.since("12.11")

    @property
    def payload_has_batch_id(self) -> bool:
        """12.51+: ``data.batchId``."""
        return self.since("12.51")

    @property
    def payload_has_delete_when_missing_models(self) -> bool:
        """13.0+: ``deleteWhenMissingModels`` after ``retryUntil``."""
        return self.major >= 13

    @property
    def payload_has_context_hook(self) -> bool:
        """11.0+: the Context payload hook adds ``illuminate:log:context`` (before ``id``) when non-empty."""
        return self.major >= 11

    @property
    def retry_until_falls_back_to_timeout_at(self) -> bool:
        """8.x reads the legacy ``timeoutAt`` when ``retryUntil`` is missing."""
        return self.major == 8

    @property
    def backoff_falls_back_to_delay(self) -> bool:
        """``backoff() = payload.backoff ?? payload.delay``; ``delay`` is only written from 12.11."""
        return True

    @property
    def serializes_models_skips_defaults(self) -> bool:
        """9.4+: ``SerializesModels`` leaves default-valued properties out of the command."""
        return self.since("9.4")

    def queueable_properties(self) -> list[builtins.tuple[str, object]]:
        """The ``Queueable`` trait's properties in declaration order with their defaults."""
        head: list[builtins.tuple[str, object]] = [("connection", None), ("queue", None)]
        if self.since("12.27") and not self.since("12.28.1"):
            head.append(("group", None))
        elif self.since("12.28.1"):
            head.append(("messageGroup", None))
        if self.since("12.32"):
            head.append(("deduplicator", None))
        if self.since("13.6"):
            head.append(("debounceOwner", ""))
        if self.since("13.24"):
            head.append(("uniqueLockOwner", ""))
        chain = [("chainConnection", None), ("chainQueue", None), ("chainCatchCallbacks", None)]
        after_commit = [("afterCommit", None)] if self.since("8.19") else []
        tail: list[builtins.tuple[str, object]] = [("delay", None), *after_commit, ("middleware", []), ("chained", [])]
        if self.since("11.2"):
            return head + tail + chain
        return head + chain + tail

    # -- cache-driven signals --------------------------------------------------------------------

    @property
    def has_queue_pause(self) -> bool:
        """12.40+: ``illuminate:queue:paused:<connection>:<queue>`` cache keys."""
        return self.since("12.40")

    @property
    def has_global_pause(self) -> bool:
        """13.25+: ``illuminate:queues:paused`` pauses every queue."""
        return self.since("13.25")

    @property
    def database_cache_base64_on_sqlite(self) -> bool:
        """11.38+: the ``database`` cache store base64-encodes values holding NUL bytes on SQLite too
        (PostgreSQL always did)."""
        return self.since("11.38")

    @property
    def maintenance_via_cache(self) -> bool:
        """9.0+: maintenance mode may live in the cache (``illuminate:foundation:down``)."""
        return self.major >= 9

    @property
    def until_processing_lock_after_middleware(self) -> bool:
        """11.40+: ``CallQueuedHandler`` releases a ``ShouldBeUniqueUntilProcessing`` lock at the end of the
        job's middleware pipeline, right before ``handle()``; before 11.40 it went before the middleware
        ran. So a middleware that stops the job (``WithoutOverlapping``, ``RateLimited``, ``Skip``) leaves
        the lock held from 11.40 on."""
        return self.since("11.40")

    @property
    def until_processing_lock_freed_when_stopped(self) -> bool:
        """12.21+: when the middleware stopped the job without releasing it back to the queue (deleted,
        not run), the pipeline's ``finally`` still releases the ``ShouldBeUniqueUntilProcessing`` lock;
        11.40 to 12.20 leave it to expire. A job the middleware released keeps its lock on both."""
        return self.since("12.21")

    def throttles_exceptions_job_hash(self, job_class: str, display_name: str | None = None) -> str:
        """``ThrottlesExceptions``' per-class key part (no ``by``/``byJob``): ``md5`` of the class up to 11.x,
        ``xxh128`` from 12.0, of ``displayName()`` (when the class has one) from 12.41."""
        if self.major <= 11:
            return hashlib.md5(job_class.encode()).hexdigest()
        name = display_name if display_name is not None and self.since("12.41") else job_class
        return xxhash.xxh3_128_hexdigest(name.encode())

    def unique_lock_key(self, job_class: str, unique_id: str, display_name: str | None = None) -> str:
        """The ShouldBeUnique lock key before the cache prefix is applied."""
        if self.major <= 10:
            return f"laravel_unique_job:{job_class}{unique_id}"
        if self.since("12.41") and display_name is not None:
            name = display_name
            if self.since("12.54"):
                name = xxhash.xxh3_128_hexdigest(display_name.encode())
            return f"laravel_unique_job:{name}:{unique_id}"
        return f"laravel_unique_job:{job_class}:{unique_id}"

    # -- worker ----------------------------------------------------------------------------------

    @property
    def memory_zero_is_unlimited(self) -> bool:
        return self.since("12.54")

    @property
    def timeout_exception_style(self) -> str:
        """``"max-attempts"`` (≤10.9) or ``"timeout-exceeded"`` (10.10+)."""
        return "timeout-exceeded" if self.since("10.10") else "max-attempts"

    @property
    def has_file_failed_store(self) -> bool:
        return self.since("10.10")

    @property
    def has_stop_when_empty_for(self) -> bool:
        return self.since("11.53", "12.60", "13.10")

    @property
    def output_style(self) -> str:
        """Console output of ``queue:work``: ``"legacy"`` (≤9.20), ``"inline"`` (9.21–9.40), ``"two-line"``."""
        if not self.since("9.21"):
            return "legacy"
        if not self.since("9.41"):
            return "inline"
        return "two-line"


def _parse_release(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")]
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def _since(version: LaravelVersion, first_releases: tuple[str, ...]) -> bool:
    return _since_cached(version.major, version.minor, version.patch, tuple(first_releases))


@lru_cache(maxsize=4096)
def _since_cached(major: int, minor: int, patch: int, first_releases: tuple[str, ...]) -> bool:
    """:func:`_since` memoised: the answer only depends on the release numbers, and feature checks
    run on every payload built or read (parsing the release strings on every call would be a hot spot)."""
    firsts = sorted(_parse_release(t) for t in first_releases)
    by_major = {f[0]: f for f in firsts}
    if major in by_major:
        return (major, minor, patch) >= by_major[major]
    return major > firsts[-1][0]


DEFAULT_VERSION = LaravelVersion.parse("13")
