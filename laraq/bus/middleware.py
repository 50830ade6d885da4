"""Job middleware serialized on the job (``$job->through([...])``, Laravel's ``Queueable::$middleware``), as
``CallQueuedHandler::dispatchThroughMiddleware`` runs it.

laraq honours the stock middleware it implements with PHP's cache keys and outcomes, and sends every
other job with middleware back to PHP untouched and loudly (:func:`unsupported`), never running its
handler around a middleware it would bypass:

* ``Illuminate\\Queue\\Middleware\\WithoutOverlapping`` (mirrors it): the cache lock
  ``<prefix><command class>:<key>`` (prefix ``laravel-queue-overlap:``) on the cache store's lock
  connection, owner-checked like ``RedisLock``, ``expiresAfter`` as its TTL. Held by someone else: the
  job is released after ``releaseAfter`` seconds, or (``dontRelease()``) finishes without running,
  as in PHP. The lock is released when the handler ends, whatever happened.
* ``Illuminate\\Queue\\Middleware\\Skip`` (11+; ``Skip::when()`` / ``unless()`` decided at dispatch):
  a true ``skip`` ends the job without running its handler (it is deleted, the chain goes on), as in PHP.
* ``Illuminate\\Queue\\Middleware\\SkipIfBatchCancelled``: when the job's batch was cancelled
  (``job_batches.cancelled_at``, read through the app's database: :mod:`laraq.stores.batches`) the handler is
  not run and the job ends as after ``Skip`` (its batch success is recorded by PHP's steps).
* ``Illuminate\\Queue\\Middleware\\ThrottlesExceptions`` (mirrors it, over the Redis cache store): the
  limiter key ``<prefix><by() key>``, ``<prefix><job uuid>`` (``byJob()``) or ``<prefix><hash of the job
  name>`` (md5 of the class before 11, xxh128 of ``displayName()`` or the class from 11) in Laravel's
  cache ``RateLimiter`` (:mod:`laraq.bus.rate_limiter`). While ``maxAttempts`` exceptions are counted in the
  window the job is released for the window's remaining seconds + 3 without running; a handler
  exception counts one (window ``decaySeconds``, or ``decayMinutes`` × 60 on 8-10) and releases the job
  after ``retryAfterMinutes`` × 60 (``backoff()``) instead of reaching the worker; success clears the
  count. ``when``/``report``/``deleteWhen``/``failWhen`` closures (or a closure ``backoff``) run only in
  PHP: such a job goes back to PHP.
* ``Illuminate\\Queue\\Middleware\\ThrottlesExceptionsWithRedis``: the same rules over
  ``DurationLimiter``'s window hash (``REDIS_PREFIX`` + the same key, on the ``default`` Redis connection,
  which laraq reaches as the cache store's lock connection); at the limit the job is released until the
  window's end (no + 3), as in PHP.
* ``Illuminate\\Queue\\Middleware\\RateLimited`` / ``RateLimitedWithRedis``: the named limiter is a PHP
  closure, so the job runs here only when the Python app declares a limiter of the same name
  (``App.rate_limiter``); each of its limits counts in ``md5(name . key)`` (cache ``RateLimiter``, or a
  ``DurationLimiter`` acquire), so PHP and Python workers spend one budget. Over budget: released for
  ``releaseAfter`` (13) or the window's rest + 3 s, or ended unrun (``dontRelease``). Without the twin
  the job goes back to PHP naming the limiter (:func:`missing_limiter`).

Middleware a class returns from a ``middleware()`` *method* is not in the payload; Python cannot see
it (see compat-docs/worker.md).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xxhash

from laraq.bus.job import JobAbandoned
from laraq.bus.rate_limiter import RedisDurationLimiter, RedisRateLimiter, limits_of
from laraq.protocol.serializer import PHPObject
from laraq.stores.batches import batch_cancelled

if TYPE_CHECKING:
    from laraq.bus.job import Job

__all__ = ["Gate", "SUPPORTED", "enter", "limiter_names", "middleware_of", "unsupported"]

log = logging.getLogger("laraq.worker.worker")

WITHOUT_OVERLAPPING = "Illuminate\\Queue\\Middleware\\WithoutOverlapping"
SKIP = "Illuminate\\Queue\\Middleware\\Skip"
SKIP_IF_BATCH_CANCELLED = "Illuminate\\Queue\\Middleware\\SkipIfBatchCancelled"
THROTTLES_EXCEPTIONS = "Illuminate\\Queue\\Middleware\\ThrottlesExceptions"
THROTTLES_EXCEPTIONS_WITH_REDIS = "Illuminate\\Queue\\Middleware\\ThrottlesExceptionsWithRedis"
RATE_LIMITED = "Illuminate\\Queue\\Middleware\\RateLimited"
RATE_LIMITED_WITH_REDIS = "Illuminate\\Queue\\Middleware\\RateLimitedWithRedis"
SUPPORTED = (WITHOUT_OVERLAPPING, SKIP, SKIP_IF_BATCH_CANCELLED, THROTTLES_EXCEPTIONS, THROTTLES_EXCEPTIONS_WITH_REDIS,
             RATE_LIMITED, RATE_LIMITED_WITH_REDIS)
#: ThrottlesExceptions properties holding PHP closures (set by when/report/deleteWhen/failWhen)
_CLOSURES = ("whenCallback", "reportCallback", "deleteWhenCallbacks", "failWhenCallbacks")

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def middleware_of(job: Job) -> list[Any]:
    """The middleware serialized on the job's command (``$middleware``), in order."""
    command = job.command
    if not isinstance(command, PHPObject):
        return []
    value = command.get("middleware")
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def unsupported_names(command: Any) -> list[str]:
    """The classes of the serialized middleware laraq does not run."""
    value = command.get("middleware") if isinstance(command, PHPObject) else None
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    return [item.class_name if isinstance(item, PHPObject) else type(item).__name__
            for item in items if not (isinstance(item, PHPObject) and item.class_name in SUPPORTED)]


def limiter_names(command: Any) -> list[str]:
    """The named limiters (``RateLimiter::for``) the command's ``RateLimited`` middleware use."""
    value = command.get("middleware") if isinstance(command, PHPObject) else None
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    return [str(item.get("limiterName")) for item in items
            if isinstance(item, PHPObject) and item.class_name in (RATE_LIMITED, RATE_LIMITED_WITH_REDIS)]


def missing_limiter(name: str) -> str:
    return (f"its rate limiter {name!r} is a PHP closure (RateLimiter::for) with no Python twin: declare "
            f"app.rate_limiter({name!r}, ...) with the same limits")


def unsupported(job: Job, cache: Any, limiters: Mapping[str, Any] | None = None) -> str | None:
    """Why laraq cannot run this job's middleware (the job then goes back to PHP), or None.
    ``limiters``: the named rate limiters the Python app declares (``App.rate_limiter``)."""
    names = []
    for item in middleware_of(job):
        name = item.class_name if isinstance(item, PHPObject) else type(item).__name__
        if name not in SUPPORTED:
            names.append(name)
        elif name == WITHOUT_OVERLAPPING and getattr(cache, "lock_client", None) is None:
            names.append(f"{name} (the cache store is not Redis)")
        elif name == SKIP_IF_BATCH_CANCELLED and getattr(job, "app_db", None) is None:
            names.append(f"{name} (no database configured to read the batch)")
        elif name in (RATE_LIMITED, RATE_LIMITED_WITH_REDIS):
            why = _rate_limited_unsupported(item, cache, limiters or {})
            if why:
                names.append(f"{name} ({why})")
        elif name in (THROTTLES_EXCEPTIONS, THROTTLES_EXCEPTIONS_WITH_REDIS):
            why = _throttle_unsupported(item, cache)
            if why:
                names.append(f"{name} ({why})")
    if not names:
        return None
    return f"{job.name} has job middleware laraq does not run: {', '.join(names)}"


@dataclass
class Gate:
    """The middleware's verdict for one run: ``proceed`` (run the handler) and what to undo afterwards."""

    proceed: bool = True
    locks: list[tuple[Any, str, str]] | None = None
    #: the ThrottlesExceptions around the handler, outermost first: (middleware, limiter, limiter key)
    throttles: list[tuple[PHPObject, RedisRateLimiter | RedisDurationLimiter, str]] | None = None

    def succeeded(self) -> None:
        """The handler returned: every ThrottlesExceptions around it clears its count."""
        for _mw, limiter, key in self.throttles or []:
            limiter.clear(key)

    def caught(self, job: Job, exc: BaseException) -> bool:
        """The handler raised: the innermost ThrottlesExceptions counts it and releases the job (True),
        and the ones outside it see a normal return (they clear); False if there is none."""
        if not self.throttles:
            return False
        *outer, (mw, limiter, key) = self.throttles
        if isinstance(limiter, RedisDurationLimiter):
            limiter.acquire(key, int(mw.get("maxAttempts") or 0), _decay_seconds(mw))
        else:
            limiter.hit(key, _decay_seconds(mw))
        delay = int(mw.get("retryAfterMinutes") or 0) * 60
        job.release(delay)
        log.info("%s (id %s): ThrottlesExceptions caught %s: %s: released for %ss", job.name, job.id,
                 type(exc).__name__, str(exc)[:200], delay)
        for _mw, other, other_key in outer:
            other.clear(other_key)
        return True

    def exit(self) -> None:
        for client, key, owner in reversed(self.locks or []):
            try:
                client.eval(_RELEASE, 1, key, owner)
            except Exception as exc:
                log.warning("could not release the WithoutOverlapping lock %s: %s", key, exc)


def enter(job: Job, cache: Any, limiters: Mapping[str, Any] | None = None) -> Gate:
    """Run the middleware's "before" half, in order; a middleware that stops the job stops the rest.

    As in PHP's pipeline, a ThrottlesExceptions already entered sees a later middleware's stop as a
    normal return (it clears its count) and a later middleware's exception as the handler's (it may
    take it). If the exception goes on, the locks taken so far are released first."""
    gate = Gate(locks=[], throttles=[])
    try:
        for item in middleware_of(job):
            if isinstance(item, PHPObject) and not _before(job, item, cache, limiters or {}, gate):
                gate.proceed = False
                break
    except Exception as exc:
        if not gate.throttles or isinstance(exc, JobAbandoned) or not gate.caught(job, exc):
            gate.exit()
            raise
        gate.proceed = False
        return gate
    if not gate.proceed:
        gate.succeeded()
    elif (passed := getattr(job, "on_middleware_passed", None)) is not None:
        passed()  # 11.40+: a ShouldBeUniqueUntilProcessing lock goes now, before handle() (callqueued.py)
    return gate


def _before(job: Job, item: PHPObject, cache: Any, limiters: Mapping[str, Any], gate: Gate) -> bool:
    """One middleware's "before" half: False when it stops the job."""
    name = item.class_name
    if name == SKIP and item.get("skip"):
        log.info("%s (id %s): skipped by its Skip middleware", job.name, job.id)
        return False
    if name == SKIP_IF_BATCH_CANCELLED and batch_cancelled(job):
        log.info("%s (id %s): its batch was cancelled: skipped by SkipIfBatchCancelled", job.name, job.id)
        return False
    if name == WITHOUT_OVERLAPPING:
        return _without_overlapping(job, item, cache, gate)
    if name in (RATE_LIMITED, RATE_LIMITED_WITH_REDIS):
        return _rate_limited(job, item, cache, limiters)
    if name in (THROTTLES_EXCEPTIONS, THROTTLES_EXCEPTIONS_WITH_REDIS):
        return _throttles_exceptions(job, item, cache, gate)
    return True


def _job_name(job: Job, class_name: str) -> str:
    """The job's name in a lock key: the class, or (12.41+) its ``displayName()`` - hashed from 12.54 -
    when the class has that method (then the payload's ``displayName`` differs from the class name)."""
    display = job.display_name
    version = job.payload.version
    if display in (None, class_name) or not version.since("12.41"):
        return class_name
    return xxhash.xxh3_128_hexdigest(str(display).encode()) if version.since("12.54") else str(display)


def _without_overlapping(job: Job, mw: PHPObject, cache: Any, gate: Gate) -> bool:
    command = job.command
    prefix = mw.get("prefix")
    prefix = "laravel-queue-overlap:" if prefix is None else str(prefix)
    if mw.get("shareKey"):
        name = f"{prefix}{mw.get('key') or ''}"
    else:
        name = f"{prefix}{_job_name(job, command.class_name)}:{mw.get('key') or ''}"
    key = cache.key(name)
    owner = secrets.token_urlsafe(12)[:16]
    expires = int(mw.get("expiresAfter") or 0)
    client = cache.lock_client
    acquired = client.set(key, owner, nx=True, ex=expires) if expires > 0 else client.set(key, owner, nx=True)
    if acquired:
        assert gate.locks is not None
        gate.locks.append((client, key, owner))
        return True
    release_after = mw.get("releaseAfter")
    if release_after is not None:
        job.release(int(release_after))
        log.info("%s (id %s): WithoutOverlapping lock %s is held: released for %ss",
                 job.name, job.id, name, release_after)
    else:
        log.info("%s (id %s): WithoutOverlapping lock %s is held: not run (dontRelease)", job.name, job.id, name)
    return False


def _throttle_unsupported(mw: PHPObject, cache: Any) -> str | None:
    if mw.class_name == THROTTLES_EXCEPTIONS_WITH_REDIS:
        problem = _redis_connection_problem(mw, cache)
        if problem:
            return problem
    elif getattr(cache, "client", None) is None or getattr(cache, "driver", "") != "redis":
        return "the cache store is not Redis"
    closures = [name for name in _CLOSURES if mw.get(name)]
    if not isinstance(mw.get("retryAfterMinutes") or 0, int):
        closures.append("backoff")
    if closures:
        return f"its {', '.join(closures)} closure runs only in PHP"
    return None


def _decay_seconds(mw: PHPObject) -> int:
    """The window: ``decaySeconds`` (11+), or ``decayMinutes`` × 60 (8-10)."""
    if mw.get("decaySeconds") is not None:
        return int(mw.get("decaySeconds"))
    return int(mw.get("decayMinutes") or 0) * 60


def _throttle_key(job: Job, mw: PHPObject) -> str:
    prefix = mw.get("prefix")
    prefix = "laravel_throttles_exceptions:" if prefix is None else str(prefix)
    if mw.get("key"):
        return f"{prefix}{mw.get('key')}"
    if mw.get("byJob"):
        return f"{prefix}{job.uuid}"
    class_name = job.command.class_name
    display = job.display_name  # differs from the class name exactly when the class has displayName()
    return prefix + job.payload.version.throttles_exceptions_job_hash(
        class_name, None if display in (None, class_name) else str(display))


def _throttles_exceptions(job: Job, mw: PHPObject, cache: Any, gate: Gate) -> bool:
    key = _throttle_key(job, mw)
    limiter: RedisRateLimiter | RedisDurationLimiter
    if mw.class_name == THROTTLES_EXCEPTIONS_WITH_REDIS:
        limiter = RedisDurationLimiter(cache.lock_client, cache.redis_prefix)
        full = limiter.too_many_attempts(key, int(mw.get("maxAttempts") or 0), _decay_seconds(mw))
        delay = limiter.decays_at - int(time.time())
    else:
        limiter = RedisRateLimiter(cache)
        full = limiter.too_many_attempts(key, int(mw.get("maxAttempts") or 0))
        delay = limiter.available_in(key) + 3 if full else 0
    if full:
        job.release(delay)
        log.info("%s (id %s): ThrottlesExceptions %s is at its limit: released for %ss", job.name, job.id, key, delay)
        return False
    assert gate.throttles is not None
    gate.throttles.append((mw, limiter, key))
    return True


def _redis_connection_problem(mw: PHPObject, cache: Any) -> str | None:
    """The ``*WithRedis`` middleware count on a Redis connection (``default`` unless ``connection()``);
    laraq reaches ``default`` as the cache store's lock connection."""
    if getattr(cache, "lock_client", None) is None or not hasattr(cache, "redis_prefix"):
        return "no Redis cache store to reach the default Redis connection"
    if mw.get("connectionName") not in (None, "default"):
        return f"it counts on the Redis connection {mw.get('connectionName')!r}, laraq only on 'default'"
    return None


def _rate_limited_unsupported(mw: PHPObject, cache: Any, limiters: Mapping[str, Any]) -> str | None:
    name = str(mw.get("limiterName"))
    if name not in limiters:
        return missing_limiter(name)
    if mw.class_name == RATE_LIMITED_WITH_REDIS:
        return _redis_connection_problem(mw, cache)
    if getattr(cache, "client", None) is None or getattr(cache, "driver", "") != "redis":
        return "the cache store is not Redis"
    return None


def _rate_limited(job: Job, mw: PHPObject, cache: Any, limiters: Mapping[str, Any]) -> bool:
    """``RateLimited::handle`` / ``RateLimitedWithRedis`` with the Python twin of the named limiter."""
    name = str(mw.get("limiterName"))
    limits = limits_of(limiters[name](job.command, job), name, job.payload.version.since("11.29"))  # fallback keys: 11.29+
    with_redis = mw.class_name == RATE_LIMITED_WITH_REDIS
    for limit in limits:
        key = hashlib.md5((name + limit.key).encode()).hexdigest()
        if with_redis:
            duration = RedisDurationLimiter(cache.lock_client, cache.redis_prefix)
            full = not duration.acquire(key, limit.max_attempts, limit.decay_seconds)
            wait = duration.decays_at - int(time.time()) + 3
        else:
            limiter = RedisRateLimiter(cache)
            full = limiter.too_many_attempts(key, limit.max_attempts)
            wait = limiter.available_in(key) + 3 if full else 0
            if not full:
                limiter.hit(key, limit.decay_seconds)
        if not full:
            continue
        if mw.get("shouldRelease") is False:
            log.info("%s (id %s): rate limiter %r is full: not run (dontRelease)", job.name, job.id, name)
            return False
        delay = int(mw.get("releaseAfter") or 0) or wait
        job.release(delay)
        log.info("%s (id %s): rate limiter %r is full: released for %ss", job.name, job.id, name, delay)
        return False
    return True
