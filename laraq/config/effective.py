"""The settings laraq works with: the app's own configuration laid over the ``.env`` reading.

:func:`effective_settings` is what every command that builds settings calls. It reads ``.env`` and the
environment with :meth:`LaravelSettings.from_env`, then, when the app is found
(:func:`laraq.config.appconfig.find_app_path`), the app's ``config()`` (cached config, booted app or
exported file: :func:`laraq.config.appconfig.load_app_config`) and replaces every value laraq uses with
the app's: Redis connections and ``options.prefix`` (``Illuminate\\Redis\\RedisManager``), the queue
connection (``Illuminate\\Queue\\QueueManager``: the name given or ``queue.default``), the default cache
store (``Illuminate\\Cache\\CacheManager``: driver, ``prefix`` or ``cache.prefix``, connection, lock
connection, table), ``queue.failed``, ``queue.batching``, ``app.timezone`` and Horizon's prefix.
``LARAQ_*`` variables (and command-line flags, applied by the commands) still win. Where each value came
from is kept in :attr:`LaravelSettings.provenance` (:mod:`laraq.config.provenance`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from laraq.config.appconfig import AppConfig, find_app_path, load_app_config
from laraq.config.provenance import env_provenance
from laraq.config.settings import LaravelSettings, connection_prefix
from laraq.protocol.versions import LaravelVersion

__all__ = ["apply_app_config", "effective_settings", "queue_connection_name", "with_flags"]


def effective_settings(
    env: Mapping[str, str] | None = None,
    *,
    env_file: str | Path | None = None,
    version: LaravelVersion | str | None = None,
    app_path: str | Path | None = None,
    app_config: str | Path | None = None,
    connection: str | None = None,
    boot: bool = True,
) -> LaravelSettings:
    """The app's effective settings (see the module docstring).

    ``app_path`` (else ``LARAQ_APP_PATH``, else the ``env_file``'s directory when it holds ``artisan``)
    is the app; ``app_config`` (else ``LARAQ_APP_CONFIG``) a file from ``laraq config --from``;
    ``connection`` the queue connection asked for (else ``LARAQ_CONNECTION``, else the app's default).
    Raises ``ValueError`` (with the file and cause) when a source exists but cannot be read.
    """
    real = dict(os.environ if env is None else env)
    app = find_app_path(env_file, app_path, real)
    if app is not None and env_file is None:
        if (app / ".env").is_file():
            env_file = app / ".env"
        else:
            real.setdefault("LARAQ_BASE_PATH", str(app))
    base = LaravelSettings.from_env(real, env_file=env_file, version=version)
    base = dataclasses.replace(base, provenance=env_provenance(base))
    exported = app_config or real.get("LARAQ_APP_CONFIG") or None
    config = load_app_config(app, real, exported=exported, boot=boot) if (app or exported) else None
    if config is None:
        return base
    if not config.values:
        return dataclasses.replace(base, config_notes=config.notes)
    return apply_app_config(base, config, connection=connection)


def queue_connection_name(config: AppConfig, wanted: str | None) -> str | None:
    """The Redis queue connection: ``wanted``, else ``queue.default`` when it is a redis one, else the
    connection named ``redis``, else the first with the redis driver (None when the app has none)."""
    conns = config.get("queue.connections")
    if not isinstance(conns, Mapping):
        return wanted
    if wanted:
        return wanted

    def is_redis(name: Any) -> bool:
        c = conns.get(name)
        return isinstance(c, Mapping) and c.get("driver") == "redis"

    default = config.get("queue.default")
    if is_redis(default):
        return str(default)
    if is_redis("redis"):
        return "redis"
    return next((str(n) for n in conns if is_redis(n)), None)


def apply_app_config(base: LaravelSettings, config: AppConfig, *, connection: str | None = None) -> LaravelSettings:
    """``base`` with every value the app's configuration gives replaced, ``LARAQ_*`` variables excepted."""
    env = base.env
    changes: dict[str, Any] = {}
    prov = dict(base.provenance)
    notes = list(config.notes)
    source = config.source

    def put(key: str | None, name: str, value: Any, laraq_var: str | None = None) -> None:
        if laraq_var and laraq_var in env:
            return
        changes[name] = value
        if key:
            prov[key] = source

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    # app
    if config.has("app.timezone"):
        put("app.timezone", "app_timezone", text(config.get("app.timezone")) or "UTC")
    if config.get("queue.output_timezone"):
        put(None, "queue_output_timezone", text(config.get("queue.output_timezone")))
    if isinstance(config.get("app.key"), str):
        put(None, "app_key", config.get("app.key") or None)
    previous = config.get("app.previous_keys")
    if isinstance(previous, list):
        put(None, "app_previous_keys", tuple(str(k) for k in previous if k))
    for item in ("name", "env"):
        if isinstance(config.get(f"app.{item}"), str):
            put(None, f"app_{item}", config.get(f"app.{item}"))
    if isinstance(config.get("app.maintenance"), Mapping):
        put("maintenance.driver", "maintenance_driver", text(config.get("app.maintenance.driver")) or "file",
            "LARAQ_MAINTENANCE_DRIVER")
        put(None, "maintenance_store", text(config.get("app.maintenance.store")), "LARAQ_MAINTENANCE_STORE")

    # database
    if isinstance(config.get("database.connections"), Mapping):
        put(None, "db_connections", config.get("database.connections"))
    if config.get("database.default"):
        put(None, "db_connection", str(config.get("database.default")))
    redis_config = config.get("database.redis")
    if isinstance(redis_config, Mapping):
        put(None, "redis_config", redis_config)
        if redis_config.get("client"):
            put(None, "redis_client", str(redis_config["client"]))

    # queue
    if config.get("queue.default"):
        put(None, "queue_connection", str(config.get("queue.default")))
    wanted = connection or env.get("LARAQ_CONNECTION") or None
    name = queue_connection_name(config, wanted)
    qc = config.get(f"queue.connections.{name}") if name else None
    if name and not isinstance(qc, Mapping) and isinstance(config.get("queue.connections"), Mapping):
        notes.append(f"the app's config('queue.connections') has no {name!r} connection")
    if name and isinstance(qc, Mapping):
        if not wanted:
            put("queue.connection", "connection_name", name)
        if qc.get("driver") != "redis":
            notes.append(f"the app's queue connection {name!r} uses the {qc.get('driver')!r} driver, not redis")
        redis_conn = str(qc.get("connection") or "default")
        put("queue.redis_connection", "redis_queue_connection", redis_conn)
        put("queue.queue", "redis_queue", str(qc.get("queue") or "default"), "LARAQ_QUEUE")
        if "retry_after" in qc:
            ra = qc.get("retry_after")
            put("queue.retry_after", "retry_after", None if ra is None else int(ra), "LARAQ_RETRY_AFTER")
        if "block_for" in qc:
            bf = qc.get("block_for")
            put("queue.block_for", "block_for", None if bf in (None, "") else int(bf), "LARAQ_BLOCK_FOR")
        put("queue.after_commit", "after_commit", bool(qc.get("after_commit", False)))
        if qc.get("migration_batch_size") is not None:
            put("queue.migration_batch_size", "migration_batch_size", int(qc["migration_batch_size"]))
        if isinstance(redis_config, Mapping):
            prefix = connection_prefix(redis_config, redis_conn)
            if prefix is not None:
                put("redis.prefix", "redis_prefix", prefix, "LARAQ_REDIS_PREFIX")
            if isinstance(redis_config.get(redis_conn), Mapping) or redis_conn in (redis_config.get("clusters") or {}):
                prov["redis.queue"] = source
    elif not name and isinstance(config.get("queue.connections"), Mapping):
        notes.append("the app defines no redis queue connection (config('queue.connections'))")

    # cache
    stores = config.get("cache.stores")
    if isinstance(stores, Mapping):
        put(None, "cache_stores", stores)
    if config.get("cache.default"):
        put("cache.store", "cache_store", str(config.get("cache.default")), "LARAQ_CACHE_STORE")
    store_name = changes.get("cache_store", base.cache_store)
    store = stores.get(store_name) if isinstance(stores, Mapping) else None
    if isinstance(store, Mapping):
        prefix = store["prefix"] if "prefix" in store else config.get("cache.prefix")
        if prefix is not None or config.has("cache.prefix"):
            put("cache.prefix", "cache_prefix", text(prefix) or "", "LARAQ_CACHE_PREFIX")
        driver = store.get("driver")
        if driver == "redis":
            conn = str(store.get("connection") or "default")
            put("cache.connection", "redis_cache_connection", conn)
            put("cache.lock_connection", "redis_cache_lock_connection", str(store.get("lock_connection") or conn))
            if isinstance(redis_config, Mapping) and isinstance(redis_config.get(conn), Mapping):
                prov["redis.cache"] = source
        elif driver == "database":
            put("cache.connection", "db_cache_connection", text(store.get("connection")) or None,
                "LARAQ_CACHE_DB_CONNECTION")
            put("cache.table", "db_cache_table", str(store.get("table") or "cache"), "LARAQ_CACHE_TABLE")
            put(None, "db_cache_lock_table", str(store.get("lock_table") or "cache_locks"))
        elif driver == "file" and store.get("path"):
            put("cache.path", "cache_path", Path(str(store["path"])), "LARAQ_CACHE_PATH")
    elif isinstance(stores, Mapping):
        notes.append(f"the app's default cache store {store_name!r} is not in config('cache.stores')")

    # failed jobs and batches
    if isinstance(config.get("queue.failed"), Mapping):
        put("failed.driver", "failed_driver", text(config.get("queue.failed.driver")), "LARAQ_FAILED_DRIVER")
        db = config.get("queue.failed.database") or changes.get("db_connection", base.db_connection)
        put("failed.database", "failed_database", str(db), "LARAQ_FAILED_DATABASE")
        if config.get("queue.failed.table"):
            put("failed.table", "failed_table", str(config.get("queue.failed.table")), "LARAQ_FAILED_TABLE")
        if config.get("queue.failed.path"):
            put("failed.path", "failed_path", Path(str(config.get("queue.failed.path"))), "LARAQ_FAILED_PATH")
    if isinstance(config.get("queue.batching"), Mapping):
        put("batching.database", "batch_database", text(config.get("queue.batching.database")))
        put("batching.table", "batch_table", str(config.get("queue.batching.table") or "job_batches"))

    # Horizon
    if isinstance(config.get("horizon"), Mapping):
        if config.has("horizon.prefix"):
            put("horizon.prefix", "horizon_prefix", text(config.get("horizon.prefix")) or "")
        put("horizon.use", "horizon_use", str(config.get("horizon.use") or "default"))

    merged = dataclasses.replace(base, **changes, provenance=prov, app_config_source=config.label,
                                 config_notes=tuple(notes))
    try:  # --redis-url keeps the cache connection's database, as it keeps REDIS_CACHE_DB
        if merged.cache_store_driver() == "redis":
            merged = dataclasses.replace(
                merged, redis_cache_db=merged.redis_connection(merged.redis_cache_connection).database)
    except ValueError as exc:
        merged = dataclasses.replace(merged, config_notes=(*merged.config_notes, f"cache store: {exc}"))
    return merged


def with_flags(settings: LaravelSettings, *, prefix: str | None = None, connection: str | None = None,
               queue: str | None = None, retry_after: Any = None, block_for: Any = None,
               redis_url: str | None = None) -> LaravelSettings:
    """``settings`` with the command line's overrides: ``--prefix`` replaces the Redis prefix (every
    connection, as ``laraq work --prefix`` does); the others are applied by the command and only
    labelled here, so the banner says the value came from the command line."""
    prov = dict(settings.provenance)
    changes: dict[str, Any] = {}
    if prefix is not None:
        changes["redis_prefix"] = prefix
        prov["redis.prefix"] = "--prefix"
    for key, value, label in (("queue.connection", connection, "connection argument"), ("queue.queue", queue, "--queue"),
                              ("queue.retry_after", retry_after, "--retry-after"),
                              ("queue.block_for", block_for, "--block-for"), ("redis.queue", redis_url, "--redis-url")):
        if value is not None:
            prov[key] = label
    if connection is not None:
        changes["connection_name"] = connection
    return dataclasses.replace(settings, **changes, provenance=prov)
