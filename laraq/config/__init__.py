"""A Laravel app's settings as laraq reads them, and the Redis connection they describe.

:mod:`.settings` reads the app's env / ``.env`` (Laravel's ``config/database.php``, ``queue.php``,
``cache.php`` defaults) with the ``.env`` parser of :mod:`.envfile` and the framework version found by
:mod:`.detect`; :mod:`.sentinel` and :mod:`.cluster` build the client for a Sentinel or Cluster
connection (``Illuminate\\Redis\\Connectors``). The app's own ``config()`` (:mod:`.appconfig`, with
:mod:`.varexport` for a cached config) is laid over those values by :mod:`.effective`, which records
where each came from (:mod:`.provenance`). :mod:`.faults` turns a fault of the surroundings into one
line and an exit code; :mod:`.phpworkers` finds Horizon's PHP workers on laraq's queues.
"""

from laraq.config.settings import (
    DatabaseSettings,
    EnvFileError,
    LaravelSettings,
    RedisConnectionSettings,
    VersionDetection,
    detect_laravel_version,
    detect_version,
    make_redis,
    parse_env_file,
    parse_env_text,
    parse_redis_url,
    redis_from_settings,
)

__all__ = [
    "DatabaseSettings",
    "EnvFileError",
    "LaravelSettings",
    "RedisConnectionSettings",
    "VersionDetection",
    "detect_laravel_version",
    "detect_version",
    "make_redis",
    "parse_env_file",
    "parse_env_text",
    "parse_redis_url",
    "redis_from_settings",
]
