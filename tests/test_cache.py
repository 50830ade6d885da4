"""LaravelCache: RedisStore key/value rules, queue signals, and the corpus' exact key names per version."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from conftest import corpus_dir

from laraq.config.settings import LaravelSettings
from laraq.protocol.versions import LaravelVersion
from laraq.stores.cache import LaravelCache, is_php_numeric, maintenance_active, php_serialize_scalar

CORPUS = corpus_dir()


def _versions() -> list[dict]:
    path = CORPUS / "versions.json"
    if not path.exists():
        pytest.skip(f"wire corpus not found at {CORPUS}")
    return json.loads(path.read_text())


def _manifest() -> list[dict]:
    return json.loads((CORPUS / "manifest.json").read_text())


@pytest.fixture
def cache_db(redis_server) -> redis.Redis:  # type: ignore[no-untyped-def]
    client = redis_server.client(1)
    client.flushall()
    return client


def _cache_for(entry: dict, client: redis.Redis) -> LaravelCache:
    cfg = entry["stock_config_used"]
    return LaravelCache(client, version=LaravelVersion.parse(entry["version"]),
                        redis_prefix=cfg["database.redis.options.prefix"], cache_prefix=cfg["cache.prefix"])


@pytest.mark.parametrize("index", range(6))
def test_key_names_match_corpus(index: int, cache_db: redis.Redis) -> None:
    entries = _versions()
    if index >= len(entries):
        pytest.skip("fewer corpus versions")
    entry = entries[index]
    keys = entry["key_names"]
    cache = _cache_for(entry, cache_db)
    assert cache.key("illuminate:queue:restart") == keys["restart_signal (db 1)"]
    # stock settings resolve to the same prefixes
    s = LaravelSettings.from_env({"APP_NAME": "Laravel"}, version=entry["version"])
    assert LaravelCache(cache_db, version=s.version, redis_prefix=s.redis_prefix,
                        cache_prefix=s.cache_prefix).key("x") == cache.key("x")

    now = int(time.time())
    cache.set_restart(now)
    assert cache_db.get(keys["restart_signal (db 1)"]) == str(now).encode()
    assert cache_db.ttl(keys["restart_signal (db 1)"]) == -1
    assert cache.restart_timestamp() == now

    if keys["pause_one_queue (db 1)"]:
        cache.pause("redis", "default")
        assert cache_db.get(keys["pause_one_queue (db 1)"]) == b"b:1;"
        assert cache_db.ttl(keys["pause_one_queue (db 1)"]) == -1
        assert cache.is_paused("redis", "default") and not cache.is_paused("redis", "other")
        cache.resume("redis", "default")
        assert not cache.is_paused("redis", "default")
    else:
        assert not cache.version.has_queue_pause
        assert not cache.is_paused("redis", "default")
        with pytest.raises(NotImplementedError):
            cache.pause("redis", "default")

    if keys["pause_all_queues (db 1)"]:
        cache.pause_all()
        assert cache_db.get(keys["pause_all_queues (db 1)"]) == b"b:1;"
        assert cache.is_paused("redis", "anything")
        assert cache.paused_queues("redis", ["a", "b"]) == ["a", "b"]
        cache.resume_all()
        assert not cache.is_paused("redis", "anything")
    else:
        with pytest.raises(NotImplementedError):
            cache.pause_all()

    for label, expected in keys.items():
        if label.startswith("unique_lock") and expected:
            job = "App\\Jobs\\" + label.split()[1]
            display = "Sync order 42" if "Named" in label else None  # UniqueNamedJob::displayName()
            assert cache.unique_lock_key(job, "order-42", display) == expected


def test_corpus_values_decode() -> None:
    for e in _manifest():
        if e["kind"] in ("queue-restart", "queue-pause", "queue-pause-all") and e.get("file"):
            raw = (CORPUS / e["file"]).read_bytes()
            value = LaravelCache.decode(raw)
            if e["kind"] == "queue-restart":
                assert isinstance(value, int) and value > 1_600_000_000
            else:
                assert value is True
            assert LaravelCache.encode(value) == raw


def test_value_encoding_rules() -> None:
    assert LaravelCache.encode(5) == b"5"
    assert LaravelCache.encode("42") == b"42"
    assert LaravelCache.encode(1.5) == b"1.5"
    assert LaravelCache.encode(True) == b"b:1;" and LaravelCache.encode(False) == b"b:0;"
    assert LaravelCache.encode("abc") == b's:3:"abc";'
    assert LaravelCache.encode("é") == b's:2:"\xc3\xa9";'
    assert LaravelCache.encode(None) == b"N;"
    assert LaravelCache.encode(float("inf")) == b"d:INF;"
    assert LaravelCache.decode(b's:2:"\xc3\xa9";') == "é"
    assert LaravelCache.decode(b"i:7;") == 7 and LaravelCache.decode(b"d:0.5;") == 0.5
    assert LaravelCache.decode(b" 12 ") == 12 and LaravelCache.decode(b"1e3") == 1000.0
    assert is_php_numeric("1e5") and is_php_numeric(" .5") and not is_php_numeric("0x1A")
    assert not is_php_numeric(True) and not is_php_numeric("")
    assert php_serialize_scalar(-3) == b"i:-3;"


def test_store_operations(cache_db: redis.Redis) -> None:
    cache = LaravelCache(cache_db, version="11", redis_prefix="p_", cache_prefix="c_")
    assert cache.put("k", "v", 10)
    assert cache_db.get("p_c_k") == b's:1:"v";' and 0 < cache_db.ttl("p_c_k") <= 10
    assert cache.get("k") == "v" and cache.has("k")
    cache.put("short", 1, 1)
    assert cache_db.ttl("p_c_short") == 1
    cache.put("fraction", 1, 0.5)  # Repository::put casts the TTL to int: 0 means forget
    assert cache_db.exists("p_c_fraction") == 0
    cache.put("gone", 1, 0)
    assert not cache.has("gone")
    assert cache.increment("n") == 1 and cache.increment("n", 4) == 5 and cache.decrement("n") == 4
    assert cache.get("n") == 4
    assert cache.forget("n") and not cache.forget("n")
    assert cache.get("missing", "dflt") == "dflt"
    cache8 = LaravelCache(cache_db, version="8", redis_prefix="laravel_database_", cache_prefix="laravel_cache")
    assert cache8.key("a") == "laravel_database_laravel_cache:a"
    assert LaravelCache(cache_db, version="8", redis_prefix="x_", cache_prefix="").key("a") == "x_a"


def test_job_exceptions_counter_commands(cache_db: redis.Redis) -> None:
    cache = LaravelCache(cache_db, version="8", redis_prefix="laravel_database_", cache_prefix="laravel_cache")
    key = "laravel_database_laravel_cache:job-exceptions:U1"
    assert cache.job_exceptions_increment("U1") == 1
    assert cache_db.get(key) == b"1"
    assert 86390 <= cache_db.ttl(key) <= 86400
    assert cache.job_exceptions_increment("U1") == 2
    assert cache.job_exceptions_forget("U1") and cache_db.get(key) is None


def test_unique_lock_release_uses_lock_connection(redis_server) -> None:  # type: ignore[no-untyped-def]
    db0, db1 = redis_server.client(0), redis_server.client(1)
    db0.flushall()
    cache = LaravelCache(db1, version="13", redis_prefix="laravel-database-", cache_prefix="laravel-cache-",
                         lock_client=db0)
    key = "laravel-database-laravel-cache-laravel_unique_job:App\\Jobs\\UniqueJob:order-42"
    db0.set(key, "owner123")
    assert not cache.unique_lock_release("App\\Jobs\\UniqueJob", "order-42", owner="someone-else")
    assert db0.get(key) == b"owner123"
    assert cache.unique_lock_release("App\\Jobs\\UniqueJob", "order-42", owner="owner123")
    db0.set(key, "x")
    assert cache.unique_lock_release("App\\Jobs\\UniqueJob", "order-42") and db0.get(key) is None


def test_maintenance(tmp_path: Path, redis_server) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / ".env").write_text(f"REDIS_PORT={redis_server.port}\nCACHE_STORE=redis\n")
    s = LaravelSettings.from_env({}, env_file=tmp_path / ".env", version="11")
    assert not maintenance_active(s)
    (tmp_path / "storage/framework").mkdir(parents=True)
    (tmp_path / "storage/framework/down").write_text("{}")
    assert maintenance_active(s)
    s = LaravelSettings.from_env({"APP_MAINTENANCE_DRIVER": "cache", "APP_MAINTENANCE_STORE": "redis"},
                                 env_file=tmp_path / ".env", version="11")
    cache = LaravelCache.from_settings(s)
    cache.client.flushall()
    assert not maintenance_active(s, cache)  # the file does not count for the cache driver
    cache.forever("illuminate:foundation:down", True)
    assert cache.client.get("laravel_database_laravel_cache_illuminate:foundation:down") == b"b:1;"
    assert maintenance_active(s, cache) and cache.maintenance_via_cache_active()
    cache8 = LaravelCache(cache.client, version="8", redis_prefix="", cache_prefix="")
    cache8.forever("illuminate:foundation:down", True)
    assert not cache8.maintenance_via_cache_active()
    cache.client.flushall()
