"""``ThrottlesExceptions`` serialized on a job, run by laraq, proven against artisan on Laravel 8 to 13.

Each case dispatches the same EchoJob with the same middleware twice: once drained by
``php artisan queue:work --stop-when-empty`` and once by laraq. Between the two the limiter's cache
keys are snapshotted and removed (the class-hash key is shared by both sides). Compared: the job's
runs (attempt numbers), ``failed_jobs``, the limiter's count and TTL, the window's end relative to the
recorded start and end of the drain, and the delayed job's score relative to that window end (PHP
releases for ``availableIn + 3``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

import pytest
import xxhash
from middleware_php import ECHO, app_fixture, drain, kind_fixture  # noqa: F401 - fixtures app, kind
from phpapp import PhpApp

from laraq.protocol.versions import LaravelVersion
from laraq.worker.worker import Worker

pytestmark = pytest.mark.php




def limiter_key(app: PhpApp, how: str, queue: str, uuid: str) -> str:
    """The limiter key PHP's ThrottlesExceptions uses (before the cache prefixes)."""
    prefix = "laravel_throttles_exceptions:"
    if how == "by":
        return f"{prefix}{queue}-key"
    if how == "byJob":
        return f"{prefix}{uuid}"
    if int(app.version.split("-")[0]) <= 11:  # ThrottlesExceptions::getKey: md5(get_class) up to 11.x
        return prefix + hashlib.md5(ECHO.encode()).hexdigest()
    return prefix + xxhash.xxh3_128_hexdigest(ECHO.encode())  # 12.0+ (EchoJob has no displayName())



def one_side(app: PhpApp, redis_client: Any, cache: Any, workers: list[Worker], queue: str, how: str,
             throttle: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    settings = {"args": {"q": queue}, **job}
    if how == "by":
        throttle = {**throttle, "by": f"{queue}-key"}
    elif how == "byJob":
        throttle = {**throttle, "byJob": True}
    app.tool("dispatch", "echo", f"--queue={queue}", "--throttle=" + json.dumps(throttle), "--args=" + json.dumps(settings))
    (body,) = redis_client.lrange(app.prefix + "queues:" + queue, 0, -1)
    uuid = json.loads(body)["uuid"]
    decay = decay_seconds(app, throttle)
    start = int(redis_client.time()[0])
    drain(app, queue, workers)
    end = int(redis_client.time()[0]) + 1
    if throttle.get("redis"):
        # DurationLimiter: a hash {start, end, count} on the default connection, REDIS_PREFIX + key
        key = app.prefix + limiter_key(app, how, queue, uuid)
        window = redis_client.hgetall(key)
        count, until = window.get(b"count"), int(window.get(b"end", 0))
        ttl, max_ttl = redis_client.ttl(key), 2 * decay
        window_ok = None if not window else (start <= int(window[b"start"]) <= end
                                             and until == int(window[b"start"]) + decay)
        redis_client.delete(key)  # the class-hash key is the same for both sides
    else:
        # the cache RateLimiter: K (count) and K:timer (window end) in the cache store
        version = LaravelVersion.parse(app.release)
        key = app.prefix + version.cache_key(app.cache_prefix, limiter_key(app, how, queue, uuid))
        count, timer = cache.get(key), cache.get(key + ":timer")
        until = int(timer or 0)
        ttl, max_ttl = cache.ttl(key), decay
        window_ok = None if timer is None else (start <= until - decay <= end)
        cache.delete(key, key + ":timer")
    delayed = [(json.loads(m)["attempts"], int(s) - until)
               for m, s in redis_client.zrange(app.prefix + "queues:" + queue + ":delayed", 0, -1, withscores=True)]
    conn = sqlite3.connect(app.db_path)
    failed = [json.loads(p)["displayName"] for q, p in conn.execute("SELECT queue, payload FROM failed_jobs")
              if q == queue]
    conn.close()
    runs = [r["attempts"] for r in app.runs() if r.get("class") == ECHO and r.get("queue") == queue]
    return {"runs": runs, "failed": failed, "count": count, "ttl_ok": ttl == -2 or 0 < ttl <= max_ttl,
            "window_ok": window_ok, "delayed": delayed, "span": end - start,
            "reserved": redis_client.zcard(app.prefix + "queues:" + queue + ":reserved")}


def decay_in_minutes(app: PhpApp) -> bool:
    """The constructor's second argument: ``$decayMinutes`` up to Laravel 10, ``$decaySeconds`` from 11."""
    return int(app.version.split("-")[0]) <= 10


def decay_seconds(app: PhpApp, throttle: dict[str, Any]) -> int:
    return int(throttle["decay"]) * (60 if decay_in_minutes(app) else 1)


def both(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker], how: str,
         throttle: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    cache = redis_server.client(db=1)  # the stock ``cache`` Redis connection
    pq = one_side(app, redis_client, cache, workers, "pq", how, throttle, job)
    lq = one_side(app, redis_client, cache, workers, "lq", how, throttle, job)
    # Each side's release time is read from the clock at some second inside its own drain, so the
    # delayed scores are compared through their bounds (see released_within), not second for second.
    sides = [pq.pop("delayed"), lq.pop("delayed")]
    spans = [pq.pop("span"), lq.pop("span")]
    assert pq == lq
    assert [a for a, _ in sides[0]] == [a for a, _ in sides[1]]  # the same releases, attempt for attempt
    return {**pq, "delayed": sides[0], "sides": list(zip(sides, spans, strict=True))}


def released_within(result: dict[str, Any], low: int, high: int) -> bool:
    """Every side's delayed score, minus the window end, is in ``[low, high + the drain's length]``.

    Both instants PHP (or laraq) reads the clock at (the window end when the limit is hit, the release's
    ``availableAt``) lie inside the drain, whose bounds in whole seconds (``span``) are measured on Redis's
    clock: the offset can exceed its nominal value by at most that much, whatever the machine's load.
    """
    return all(low <= offset <= high + span for delayed, span in result["sides"] for _, offset in delayed)



def window(app: PhpApp, kind: str) -> dict[str, Any]:
    """A one-minute window: ``decayMinutes`` 1 on Laravel 8 to 10, ``decaySeconds`` 60 on 11+."""
    return {"decay": 1 if decay_in_minutes(app) else 60, **({"redis": True} if kind == "redis" else {})}


@pytest.mark.parametrize("how", ["by", "byJob", "class"])
def test_limit_reached_releases_for_the_rest_of_the_window(app: PhpApp, redis_client: Any, redis_server: Any,
                                                           workers: list[Worker], how: str, kind: str) -> None:
    # two exceptions (released at once: backoff 0), then the limit holds the job until the window ends
    result = both(app, redis_client, redis_server, workers, how, {"max": 2, **window(app, kind)},
                  {"mode": "fail", "settings": {"tries": 5}})
    assert result["runs"] == [1, 2] and result["failed"] == []
    assert result["count"] == b"2" and result["ttl_ok"] and result["window_ok"]
    (attempts, _), = result["delayed"]
    # released for the rest of the window: availableIn + 3 (cache), until its end (DurationLimiter)
    assert attempts == 3 and released_within(result, *((0, 0) if kind == "redis" else (3, 3)))
    assert result["reserved"] == 0


def test_backoff_releases_after_retry_minutes(app: PhpApp, redis_client: Any, redis_server: Any,
                                              workers: list[Worker], kind: str) -> None:
    result = both(app, redis_client, redis_server, workers, "by", {"max": 5, "backoff": 1, **window(app, kind)},
                  {"mode": "fail", "settings": {"tries": 5}})
    assert result["runs"] == [1] and result["count"] == b"1" and result["window_ok"]
    (attempts, _), = result["delayed"]
    # released for 60 s from the hit; the window (60 s) was opened by that same hit
    assert attempts == 1 and released_within(result, -1, 0)


def test_success_clears_the_count(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker],
                                  kind: str) -> None:
    result = both(app, redis_client, redis_server, workers, "by", {"max": 5, **window(app, kind)},
                  {"mode": "fail-until", "seconds": 2, "settings": {"tries": 5}})
    assert result["runs"] == [1, 2] and result["count"] is None and result["delayed"] == []


def test_tries_exhausted_fails_on_the_next_pickup(app: PhpApp, redis_client: Any, redis_server: Any,
                                                 workers: list[Worker], kind: str) -> None:
    # the middleware swallows each exception, so the job fails only when picked up past its tries
    result = both(app, redis_client, redis_server, workers, "by", {"max": 10, **window(app, kind)},
                  {"mode": "fail", "settings": {"tries": 2}})
    assert result["runs"] == [1, 2] and result["failed"] == [ECHO] and result["delayed"] == []


def test_a_stop_inside_the_throttle_clears_its_count(app: PhpApp, redis_client: Any, redis_server: Any,
                                                      workers: list[Worker]) -> None:
    # ThrottlesExceptions around WithoutOverlapping whose lock is held: the inner middleware releases the
    # job without an exception, so the throttle sees a normal return and clears its (seeded) count
    cache = redis_server.client(db=1)
    version = LaravelVersion.parse(app.release)
    outcome = {}
    for queue in ("pq", "lq"):
        key = app.prefix + version.cache_key(app.cache_prefix, limiter_key(app, "by", queue, ""))
        now = int(redis_client.time()[0])
        cache.set(key, 1, ex=60)
        cache.set(key + ":timer", now + 60, ex=60)
        overlap = app.prefix + version.cache_key(app.cache_prefix, f"laravel-queue-overlap:{ECHO}:{queue}-k")
        redis_client.set(overlap, "another-worker")
        app.tool("dispatch", "echo", f"--queue={queue}", f"--overlap={queue}-k", "--release-after=7",
                 "--throttle=" + json.dumps({"max": 5, "by": f"{queue}-key", **window(app, "cache")}),
                 "--args=" + json.dumps({"args": {"q": queue}}))
        start = int(redis_client.time()[0])
        drain(app, queue, workers)
        end = int(redis_client.time()[0]) + 1
        delayed = [(json.loads(m)["attempts"], start + 7 <= s <= end + 7)
                   for m, s in redis_client.zrange(app.prefix + "queues:" + queue + ":delayed", 0, -1, withscores=True)]
        runs = [r for r in app.runs() if r.get("class") == ECHO and r.get("queue") == queue]
        outcome[queue] = {"count": cache.get(key), "timer": cache.exists(key + ":timer"), "delayed": delayed,
                          "runs": len(runs), "lock": redis_client.get(overlap)}
    assert outcome["pq"] == outcome["lq"]
    assert outcome["pq"] == {"count": None, "timer": 0, "delayed": [(1, True)], "runs": 0, "lock": b"another-worker"}
