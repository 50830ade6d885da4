"""Where each setting came from, and the list of settings shown with it.

Every value laraq uses is read from one place: the app's configuration (``cached config``, ``booted app``,
``exported file``: :mod:`laraq.config.appconfig`), a ``.env`` variable, a process environment variable, a
``LARAQ_*`` variable, a command-line flag, or nothing (a default laraq assumed, marked ``assumed``).
:func:`env_provenance` labels the values :meth:`LaravelSettings.from_env` read; :func:`setting_facts`
lists the settings with their values and labels for the banner, ``laraq config`` and ``laraq doctor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.config.settings import LaravelSettings

__all__ = ["ASSUMED", "READ_FROM_APP", "env_provenance", "is_assumed", "setting_facts", "with_source"]

ASSUMED = "default (assumed)"
#: the labels of values read from the app's own configuration
READ_FROM_APP = ("cached config", "booted app", "exported file")

#: setting -> the variables that set it, first found wins (``LARAQ_*`` first)
_ENV_SOURCES: dict[str, tuple[str, ...]] = {
    "app.timezone": ("APP_TIMEZONE",),
    "redis.prefix": ("LARAQ_REDIS_PREFIX", "REDIS_PREFIX", "APP_NAME"),
    "redis.queue": ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_DB"),
    "redis.cache": ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_CACHE_DB"),
    "queue.connection": ("LARAQ_CONNECTION",),
    "queue.redis_connection": ("REDIS_QUEUE_CONNECTION",),
    "queue.queue": ("LARAQ_QUEUE", "REDIS_QUEUE"),
    "queue.retry_after": ("LARAQ_RETRY_AFTER", "REDIS_QUEUE_RETRY_AFTER"),
    "queue.block_for": ("LARAQ_BLOCK_FOR",),
    "queue.after_commit": (),
    "cache.store": ("LARAQ_CACHE_STORE", "CACHE_STORE", "CACHE_DRIVER"),
    "cache.prefix": ("LARAQ_CACHE_PREFIX", "CACHE_PREFIX", "APP_NAME"),
    "cache.connection": ("REDIS_CACHE_CONNECTION", "LARAQ_CACHE_DB_CONNECTION", "DB_CACHE_CONNECTION"),
    "cache.lock_connection": ("REDIS_CACHE_LOCK_CONNECTION",),
    "cache.table": ("LARAQ_CACHE_TABLE", "DB_CACHE_TABLE"),
    "failed.driver": ("LARAQ_FAILED_DRIVER", "QUEUE_FAILED_DRIVER"),
    "failed.database": ("LARAQ_FAILED_DATABASE", "DB_CONNECTION"),
    "failed.table": ("LARAQ_FAILED_TABLE",),
    "batching.table": (),
    "horizon.prefix": ("HORIZON_PREFIX",),
}


def env_provenance(settings: LaravelSettings) -> dict[str, str]:
    """The label of each setting as :meth:`LaravelSettings.from_env` read it."""
    legacy = settings.version.major < 11
    out: dict[str, str] = {}
    for key, names in _ENV_SOURCES.items():
        if legacy and key == "cache.store":
            names = ("LARAQ_CACHE_STORE", "CACHE_DRIVER")
        if legacy and key in ("queue.redis_connection", "queue.retry_after", "app.timezone"):
            names = tuple(n for n in names if n.startswith("LARAQ_"))
        out[key] = ASSUMED
        for name in names:
            if name in settings.env:
                out[key] = _label(settings, name)
                break
    return out


def _label(settings: LaravelSettings, name: str) -> str:
    if name.startswith("LARAQ_"):
        return name
    return f".env {name}" if name in settings.env_file_keys else f"environment {name}"


def with_source(provenance: Any, key: str, label: str) -> dict[str, str]:
    """``provenance`` with one setting's label replaced (a command-line flag, say)."""
    return {**dict(provenance or {}), key: label}


def is_assumed(label: str) -> bool:
    return label == ASSUMED or label.startswith("default")


def setting_facts(settings: LaravelSettings) -> list[dict[str, Any]]:
    """``[{setting, value, source, assumed}]`` for every value laraq takes from the app's configuration."""
    prov = settings.provenance
    driver = settings.cache_store_driver()

    def redis(name: str) -> str:
        try:
            return f"{name} {settings.redis_url_for(name, mask=True)}"
        except ValueError as exc:
            return f"{name} (unusable: {exc})"

    rows: list[tuple[str, Any]] = [
        ("app.timezone", settings.app_timezone),
        ("queue.connection", settings.connection_name),
        ("queue.redis_connection", settings.redis_queue_connection),
        ("redis.queue", redis(settings.redis_queue_connection)),
        ("redis.prefix", settings.redis_prefix),
        ("queue.queue", settings.redis_queue),
        ("queue.retry_after", settings.retry_after),
        ("queue.block_for", settings.block_for),
        ("queue.after_commit", settings.after_commit),
        ("cache.store", f"{settings.cache_store} (driver {driver})"),
        ("cache.prefix", settings.cache_prefix),
    ]
    if driver == "redis":
        rows += [("cache.connection", settings.redis_cache_connection),
                 ("redis.cache", redis(settings.redis_cache_connection)),
                 ("cache.lock_connection", settings.redis_cache_lock_connection)]
    elif driver == "database":
        rows += [("cache.connection", settings.db_cache_connection or settings.db_connection),
                 ("cache.table", settings.db_cache_table)]
    rows += [
        ("failed.driver", settings.failed_driver),
        ("failed.database", settings.failed_database),
        ("failed.table", settings.failed_table),
        ("batching.table", settings.batch_table),
    ]
    if settings.horizon_prefix is not None:
        rows += [("horizon.prefix", settings.horizon_prefix), ("horizon.use", settings.horizon_use)]
    out = []
    for key, value in rows:
        label = prov.get(key, ASSUMED)
        if key == "redis.cache" and label == ASSUMED:
            label = prov.get("redis.queue", ASSUMED)
        out.append({"setting": key, "value": value, "source": label, "assumed": is_assumed(label)})
    return out
