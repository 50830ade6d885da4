"""``RateLimited`` / ``RateLimitedWithRedis`` run by laraq with a Python twin of the PHP named limiter,
proven against artisan on Laravel 8 to 13.

The fixture apps declare ``RateLimiter::for('per-key' | 'pair' | 'open')``
(fixtures/laravel8/app/Providers/RateLimitsServiceProvider.php); tests/test_worker_support.py declares
the same limiters with ``app.rate_limiter``. The same dispatches are drained once by
``php artisan queue:work --stop-when-empty`` and once by laraq, one side after the other; after each
side the limiter state is snapshotted and removed: the cache keys and values (``RateLimited``) or the
DurationLimiter hashes (``RateLimitedWithRedis``), each window's end against the recorded start and end
of the drain, the delayed job's score against that window end, the runs and ``failed_jobs``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from typing import Any

import pytest
import test_worker_support as support
from middleware_php import ECHO, app_fixture, drain, kind_fixture  # noqa: F401 - fixtures app, kind
from phpapp import PhpApp

from laraq.bus.rate_limiter import clean_key
from laraq.cli.startup import limiter_warnings
from laraq.protocol.versions import LaravelVersion
from laraq.worker.worker import Worker

pytestmark = pytest.mark.php





def dispatch(app: PhpApp, queue: str, limiter: str, n: int, k: str, kind: str, *extra: str) -> None:
    for _ in range(n):
        app.tool("dispatch", "echo", f"--queue={queue}", f"--rate-limited={limiter}",
                 *(["--rate-redis"] if kind == "redis" else []), *extra,
                 "--args=" + json.dumps({"args": {"q": queue, "k": k}}))



def limiter_key(limiter: str, key: str) -> str:
    """PHP's key for one limit of a named limiter: md5(name . limit key)."""
    return hashlib.md5((limiter + key).encode()).hexdigest()


def snapshot(app: PhpApp, redis_client: Any, cache: Any, queue: str, start: int, end: int,
             decay: int = 60) -> dict[str, Any]:
    """The limiter state and the queue's outcome after one side's drain; the limiter state is removed."""
    version = LaravelVersion.parse(app.release)
    full_prefix = app.prefix + version.cache_key(app.cache_prefix, "")
    limits: dict[str, Any] = {}
    ends: list[int] = []
    for raw in cache.keys("*"):  # the cache RateLimiter: K (count) and K:timer (window end)
        name = raw.decode()
        value = int(cache.get(raw))
        if name.endswith(":timer"):
            ends.append(value)
            limits[name[len(full_prefix):]] = "window ok" if start <= value - decay <= end else value - start
        else:
            limits[name[len(full_prefix):]] = (value, 0 < cache.ttl(raw) <= decay)
        cache.delete(raw)
    for raw in redis_client.keys(app.prefix + "*"):  # DurationLimiter hashes (default connection)
        name = raw.decode()[len(app.prefix):]
        if not re.fullmatch(r"[0-9a-f]{32}", name):
            continue
        h = {k.decode(): int(v) for k, v in redis_client.hgetall(raw).items()}
        ends.append(h["end"])
        limits[name] = {"count": h["count"], "window ok": start <= h["start"] <= end and h["end"] == h["start"] + decay,
                        "ttl ok": 0 < redis_client.ttl(raw) <= 2 * decay}
        redis_client.delete(raw)
    until = max(ends, default=0)
    delayed = sorted((json.loads(m)["attempts"], int(s) - until)
                     for m, s in redis_client.zrange(app.prefix + "queues:" + queue + ":delayed", 0, -1, withscores=True))
    redis_client.delete(app.prefix + "queues:" + queue + ":delayed")
    conn = sqlite3.connect(app.db_path)
    failed = [json.loads(p)["displayName"] for q, p in conn.execute("SELECT queue, payload FROM failed_jobs")
              if q == queue]
    conn.close()
    runs = len([r for r in app.runs() if r.get("class") == ECHO and r.get("queue") == queue])
    return {"limits": limits, "runs": runs, "delayed": delayed, "failed": failed,
            "left": redis_client.llen(app.prefix + "queues:" + queue)
            + redis_client.zcard(app.prefix + "queues:" + queue + ":reserved")}


def both(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker], limiter: str, n: int,
         kind: str, *extra: str) -> dict[str, Any]:
    """The same dispatches drained by artisan (pq), then by laraq (lq); the two outcomes must match."""
    cache = redis_server.client(db=1)  # the stock ``cache`` Redis connection
    sides = {}
    for queue in ("pq", "lq"):
        dispatch(app, queue, limiter, n, "k1", kind, *extra)
        start = int(redis_client.time()[0])
        drain(app, queue, workers)
        end = int(redis_client.time()[0]) + 1
        sides[queue] = snapshot(app, redis_client, cache, queue, start, end)
    assert sides["pq"] == sides["lq"]
    return sides["pq"]


def test_budget_spent_releases_the_job_until_the_window_ends(app: PhpApp, redis_client: Any, redis_server: Any,
                                                             workers: list[Worker], kind: str) -> None:
    result = both(app, redis_client, redis_server, workers, "per-key", 3, kind)
    key = limiter_key("per-key", "k1")
    assert result["runs"] == 2 and result["failed"] == [] and result["left"] == 0
    if kind == "cache":
        assert result["limits"] == {key: (2, True), key + ":timer": "window ok"}
    else:  # the third acquire counts too, and fails
        assert result["limits"] == {key: {"count": 3, "window ok": True, "ttl ok": True}}
    (attempts, after_window), = result["delayed"]
    assert attempts == 1 and after_window in (3, 4)  # released for the rest of the window + 3 s


def test_php_and_python_share_the_budget(app: PhpApp, redis_client: Any, redis_server: Any,
                                         workers: list[Worker], kind: str) -> None:
    dispatch(app, "pq", "per-key", 1, "shared", kind)
    drain(app, "pq", workers)  # PHP spends one of the two runs of the minute
    dispatch(app, "lq", "per-key", 2, "shared", kind)
    drain(app, "lq", workers)  # laraq may spend only the other one
    runs = [r["queue"] for r in app.runs() if r.get("class") == ECHO]
    assert runs == ["pq", "lq"]
    assert redis_client.zcard(app.prefix + "queues:lq:delayed") == 1


@pytest.mark.parametrize("release", ["none", "7"])
def test_dont_release_and_release_after(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker],
                                        release: str) -> None:
    if release == "7" and int(app.version.split("-")[0]) <= 11:
        pytest.skip(f"RateLimited::releaseAfter() arrived in Laravel 12.13 (this is {app.release})")
    result = both(app, redis_client, redis_server, workers, "per-key", 3, "cache", f"--rate-release={release}")
    assert result["runs"] == 2 and result["failed"] == [] and result["left"] == 0
    if release == "none":
        assert result["delayed"] == []  # the third job ended without running
    else:
        (attempts, after_window), = result["delayed"]
        # 13 serializes releaseAfter; 12's __sleep drops it, so the job waits for the window as without it
        assert attempts == 1 and (after_window < 0 if app.release.startswith("13") else after_window in (3, 4))


def test_limits_sharing_a_key(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker]) -> None:
    result = both(app, redis_client, redis_server, workers, "pair", 4, "cache")
    if int(app.version.split("-")[0]) <= 10:  # both limits count in md5('pair' . 'p'): two hits per run
        key = limiter_key("pair", "p")
        assert result["runs"] == 1 and result["limits"] == {key: (2, True), key + ":timer": "window ok"}
    else:  # 11.29+: the limits get fallback keys
        a, b = limiter_key("pair", "p:attempts:2:decay:60"), limiter_key("pair", "p:attempts:3:decay:60")
        assert result["runs"] == 2
        assert result["limits"] == {a: (2, True), a + ":timer": "window ok", b: (2, True), b + ":timer": "window ok"}


def test_unlimited_runs_every_job(app: PhpApp, redis_client: Any, redis_server: Any, workers: list[Worker]) -> None:
    result = both(app, redis_client, redis_server, workers, "open", 3, "cache")
    assert result == {"limits": {}, "runs": 3, "delayed": [], "failed": [], "left": 0}


def test_start_up_names_the_missing_limiter(app: PhpApp, redis_client: Any) -> None:
    dispatch(app, "lq", "backups", 1, "k1", "cache")
    dispatch(app, "lq", "per-key", 1, "k1", "cache")
    (warning,) = limiter_warnings(redis_client, app.prefix, ["lq"], support.app)
    assert "RateLimited('backups')" in warning and ECHO in warning and "app.rate_limiter('backups'" in warning


def test_limiter_keys_are_cleaned_as_php_cleans_them(app: PhpApp) -> None:
    keys = ["plain", "a&b", "<tag>", 'say "hi"', "it's", "café", "Ünïcode ✓ ß", "&amp;", "x&y;z", "€100", ""]
    assert [clean_key(k) for k in keys] == app.tool("rate-limiter-clean", "--keys=" + json.dumps(keys))["keys"]
