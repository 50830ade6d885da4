"""Laravel's own settings, read from the same environment variables and ``.env`` file a Laravel app reads.

A Python worker that runs beside ``php artisan queue:work`` must agree with PHP on the Redis server, the
key prefixes, the cache store that carries the restart/pause signals and the database that holds
``failed_jobs``. A Laravel user already has all of that in ``.env``; :meth:`LaravelSettings.from_env`
reads exactly the variables the stock ``config/*.php`` files of the chosen Laravel line read (they differ
between lines: ``CACHE_DRIVER`` up to 10, ``CACHE_STORE`` from 11, ``DATABASE_URL`` vs ``DB_URL``, ...)
with the same defaults. Settings that stock apps hard-code in ``config/*.php`` (``retry_after`` before
11, ``block_for``, the queue connection name) can be overridden with ``LARAQ_*`` variables.

The ``.env`` parser (:mod:`laraq.config.envfile`) follows vlucas/phpdotenv for the common cases. Real
environment variables win over ``.env`` values, like Laravel's immutable Dotenv repository. The
framework version of a project directory is found by :mod:`laraq.config.detect`. Names of both are
importable from here too.

Every variable, its default per Laravel line and the ``LARAQ_*`` overrides are listed in
``compat-docs/configuration.md``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis

from laraq.config.cluster import cluster_client, cluster_nodes
from laraq.config.detect import VersionDetection, detect_laravel_version, detect_version
from laraq.config.envfile import Env, EnvFileError, parse_env_file, parse_env_text
from laraq.config.sentinel import sentinel_master, sentinel_settings
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
    "LaravelSettings",
    "RedisConnectionSettings",
    "DatabaseSettings",
    "EnvFileError",
    "parse_env_file",
    "parse_env_text",
    "parse_redis_url",
    "make_redis",
    "redis_from_settings",
    "detect_laravel_version",
    "detect_version",
    "VersionDetection",
]

_SECRET = "********"


def _php_native(value: str) -> Any:
    """``ConfigurationUrlParser::parseStringsToNativeTypes``: JSON-decodable strings become values."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_redis_url(url: str) -> dict[str, Any]:
    """Parse a ``REDIS_URL`` like Laravel's ``ConfigurationUrlParser`` + ``RedisManager``.

    Returns only the components present: ``scheme`` (``tcp``/``tls``; ``redis`` → tcp, ``rediss`` → tls),
    ``host``, ``port``, ``username``, ``password``, ``database`` (the path without its slash) and any
    query options (``?database=2``). In Laravel these override the connection's other settings.
    """
    parts = urlsplit(url)
    out: dict[str, Any] = {}
    scheme = (parts.scheme or "").lower()
    aliases = {"redis": "tcp", "rediss": "tls"}
    driver = aliases.get(scheme, scheme)
    if driver in ("tcp", "tls"):
        out["scheme"] = driver
    if parts.hostname:
        # urlsplit lower-cases the host; keep the original spelling
        netloc_host = parts.netloc.rsplit("@", 1)[-1]
        host = netloc_host[1:netloc_host.index("]")] if netloc_host.startswith("[") else netloc_host.split(":")[0]
        out["host"] = unquote(host)
    if parts.port is not None:
        out["port"] = parts.port
    if parts.username:
        out["username"] = _php_native(unquote(parts.username))
    if parts.password is not None:
        out["password"] = _php_native(unquote(parts.password))
    path = parts.path
    if path and path != "/":
        out["database"] = _php_native(unquote(path[1:]))
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        out[key] = _php_native(value)
    return out


# -- settings objects ------------------------------------------------------------------------------


def connection_prefix(redis_config: Mapping[str, Any], connection: str) -> str | None:
    """``RedisManager``: a connection's ``options.prefix`` over the global ``options.prefix`` (None: neither)."""
    conn = redis_config.get(connection)
    own = conn.get("options") if isinstance(conn, Mapping) else None
    if isinstance(own, Mapping) and own.get("prefix") is not None:
        return str(own["prefix"])
    glob = redis_config.get("options")
    if isinstance(glob, Mapping) and "prefix" in glob:
        return "" if glob["prefix"] is None else str(glob["prefix"])
    return None


@dataclass(frozen=True)
class RedisConnectionSettings:
    """One resolved Redis connection of ``config/database.php`` (``default`` or ``cache``)."""

    name: str
    host: str
    port: int
    database: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    scheme: str = "tcp"
    prefix: str = ""

    @property
    def tls(self) -> bool:
        return self.scheme == "tls"

    def url(self, *, mask: bool = False) -> str:
        """A ``redis://`` / ``rediss://`` URL for this connection (``mask=True`` hides the password)."""
        auth = ""
        if self.username or self.password:
            user = quote(self.username or "", safe="")
            pw = _SECRET if (mask and self.password) else quote(self.password or "", safe="")
            auth = f"{user}:{pw}@" if self.password else f"{user}@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'rediss' if self.tls else 'redis'}://{auth}{host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        return f"RedisConnectionSettings({self.name!r}, {self.url(mask=True)!r}, prefix={self.prefix!r})"


@dataclass(frozen=True)
class DatabaseSettings:
    """The resolved ``DB_*`` connection (used by the database failed-job stores)."""

    connection: str
    driver: str
    host: str | None
    port: int | None
    database: str | None
    username: str | None
    password: str | None = field(default=None, repr=False)
    socket: str | None = None

    def describe(self) -> str:
        if self.driver == "sqlite":
            return f"sqlite:{self.database}"
        pw = ":" + _SECRET if self.password else ""
        return f"{self.driver}://{self.username or ''}{pw}@{self.host}:{self.port}/{self.database}"


_DB_DRIVERS = {"sqlite": "sqlite", "mysql": "mysql", "mariadb": "mariadb", "pgsql": "pgsql", "sqlsrv": "sqlsrv"}
_DB_URL_ALIASES = {"mysql2": "mysql", "postgres": "pgsql", "postgresql": "pgsql", "sqlite3": "sqlite",
                   "mssql": "sqlsrv"}


@dataclass(frozen=True)
class LaravelSettings:
    """The Laravel configuration laraq needs, resolved from env / ``.env`` per Laravel line.

    Build it with :meth:`from_env`. ``repr()`` and :meth:`describe` never show passwords or APP_KEY.
    """

    version: LaravelVersion = DEFAULT_VERSION
    base_path: Path | None = None
    # app
    app_name: str = "Laravel"
    app_env: str = "production"
    app_timezone: str = "UTC"
    #: ``queue.output_timezone`` (9.49+): the zone of ``queue:work``'s console lines when it is set and differs
    #: from ``app.timezone`` (:attr:`line_timezone`)
    queue_output_timezone: str | None = None
    app_key: str | None = field(default=None, repr=False)
    app_previous_keys: tuple[str, ...] = field(default=(), repr=False)
    # redis
    redis_client: str = "phpredis"
    redis_prefix: str = "laravel-database-"
    redis_url: str | None = field(default=None, repr=False)
    redis_host: str = "127.0.0.1"
    redis_port: int = 6379
    redis_username: str | None = None
    redis_password: str | None = field(default=None, repr=False)
    redis_db: int = 0
    redis_cache_db: int = 1
    redis_scheme: str | None = None
    # queue
    queue_connection: str = "database"
    connection_name: str = "redis"
    redis_queue_connection: str = "default"
    redis_queue: str = "default"
    retry_after: int | None = 90
    block_for: int | None = None
    after_commit: bool = False
    db_queue_connection: str | None = None
    db_queue_table: str = "jobs"
    db_queue: str = "default"
    db_queue_retry_after: int = 90
    # cache
    cache_store: str = "database"
    cache_prefix: str = "laravel-cache-"
    redis_cache_connection: str = "cache"
    redis_cache_lock_connection: str = "default"
    #: the ``file`` store's directory (``storage/framework/cache/data``); ``LARAQ_CACHE_PATH`` overrides
    cache_path: Path | None = None
    #: the ``database`` store: connection (None = ``DB_CONNECTION``), table and lock table
    db_cache_connection: str | None = None
    db_cache_table: str = "cache"
    db_cache_lock_table: str = "cache_locks"
    # database / failed jobs
    db_connection: str = "sqlite"
    db_host: str | None = "127.0.0.1"
    db_port: int | None = None
    db_database: str | None = None
    db_username: str | None = None
    db_password: str | None = field(default=None, repr=False)
    db_socket: str | None = None
    db_url: str | None = field(default=None, repr=False)
    failed_driver: str | None = "database-uuids"
    failed_database: str = "sqlite"
    failed_table: str = "failed_jobs"
    failed_path: Path | None = None
    failed_limit: int = 100
    # maintenance mode
    maintenance_driver: str = "file"
    maintenance_store: str | None = None
    #: how :attr:`version` was chosen ("--laravel", "detected from <file>", "default ...")
    version_source: str = field(default="default", compare=False)
    #: set when the project's version could not be detected (said at start, never silent)
    version_warning: str | None = field(default=None, compare=False)
    # the merged variables that were read (not shown, not compared)
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False, hash=False)
    #: the names of :attr:`env` that came from the ``.env`` file (the rest are the process environment)
    env_file_keys: frozenset[str] = field(default=frozenset(), repr=False, compare=False, hash=False)
    # -- read from the app's own configuration (:mod:`laraq.config.effective`); None = not read --------
    #: ``config('database.redis')`` (connections, ``options``, ``clusters``)
    redis_config: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)
    #: ``config('database.connections')``
    db_connections: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)
    #: ``config('cache.stores')``
    cache_stores: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)
    #: the queue connection's ``migration_batch_size`` (-1: all at once) and ``after_commit``
    migration_batch_size: int = -1
    #: ``queue.batching``: connection (None = the default) and table
    batch_database: str | None = None
    batch_table: str = "job_batches"
    #: Horizon's ``horizon.prefix`` and ``horizon.use`` when read from the app (None: Horizon's own reading)
    horizon_prefix: str | None = None
    horizon_use: str = "default"
    #: setting -> where its value came from (:mod:`laraq.config.provenance`)
    provenance: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False, hash=False)
    #: where the app's configuration was read ("cached config (/app/bootstrap/cache/config.php)"), if it was
    app_config_source: str | None = field(default=None, compare=False)
    #: notes from reading it (a failed boot, an unused --app-config file)
    config_notes: tuple[str, ...] = field(default=(), compare=False)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        env_file: str | Path | None = None,
        version: LaravelVersion | str | None = None,
    ) -> LaravelSettings:
        """Resolve the settings a stock app of ``version`` would have with this environment.

        ``env`` defaults to ``os.environ``. ``env_file`` is a Laravel ``.env``; its directory becomes
        :attr:`base_path` (the project dir, for ``storage/``). The Laravel line comes from ``version``,
        else ``LARAQ_LARAVEL_VERSION``, else the project's installed framework, else the newest line.
        """
        real = dict(os.environ if env is None else env)
        base_path: Path | None = None
        merged = dict(real)
        file_keys: frozenset[str] = frozenset()
        if env_file is not None:
            env_path = Path(env_file)
            base_path = env_path.resolve().parent
            file_values = parse_env_file(env_path, real)
            merged = {**file_values, **real}
            file_keys = frozenset(k for k in file_values if k not in real)
        elif real.get("LARAQ_BASE_PATH"):
            base_path = Path(real["LARAQ_BASE_PATH"]).resolve()
        e = Env(merged)

        version_source, version_warning = "--laravel", None
        if version is None:
            version = e.str("LARAQ_LARAVEL_VERSION") or None
            version_source = "LARAQ_LARAVEL_VERSION"
            if version is None and base_path is not None:
                found = detect_version(base_path)
                version, version_source = found.version, found.source
                if version is None:
                    version_warning = (f"Laravel version not detected ({found.source}); using the Laravel "
                                       f"{DEFAULT_VERSION.major} profile: pass --laravel N if that is wrong")
        if version is None:
            version_source = ("default (detection failed)" if version_warning
                              else "default (no Laravel project given: --env-file or --laravel choose one)")
        v = LaravelVersion.parse(version) if version is not None else DEFAULT_VERSION
        modern = v.major >= 11

        app_name = e.str("APP_NAME", "Laravel") or ""
        # config/app.php reads env('APP_NAME', 'Laravel'); the prefixes slug env('APP_NAME', 'laravel')
        prefix_name = app_name if "APP_NAME" in merged else "laravel"

        def override(name: str, value: Any) -> Any:
            return e.get(name) if name in merged else value

        # redis
        redis_prefix = e.str("REDIS_PREFIX", v.default_redis_prefix(prefix_name)) or ""
        redis_prefix = override("LARAQ_REDIS_PREFIX", redis_prefix) or ""

        # queue
        queue_connection = e.str("QUEUE_CONNECTION", "database" if modern else "sync") or ""
        retry_after = e.int("REDIS_QUEUE_RETRY_AFTER", 90) if modern else 90
        retry_after = e.int("LARAQ_RETRY_AFTER", retry_after)
        block_for = e.int("LARAQ_BLOCK_FOR", None)

        # cache
        cache_store = e.str("CACHE_STORE", "database") if modern else e.str("CACHE_DRIVER", "file")
        cache_store = e.str("LARAQ_CACHE_STORE", cache_store)
        cache_prefix = e.str("CACHE_PREFIX", v.default_cache_prefix(prefix_name)) or ""
        cache_path_raw = e.str("LARAQ_CACHE_PATH")
        cache_path = Path(cache_path_raw) if cache_path_raw else (
            base_path / "storage" / "framework" / "cache" / "data" if base_path else None
        )
        if modern:
            db_cache_connection = e.str("DB_CACHE_CONNECTION") or None
            db_cache_table = e.str("DB_CACHE_TABLE", "cache") or "cache"
            db_cache_lock_table = e.str("DB_CACHE_LOCK_TABLE") or "cache_locks"
        else:
            db_cache_connection, db_cache_table, db_cache_lock_table = None, "cache", "cache_locks"
        db_cache_connection = e.str("LARAQ_CACHE_DB_CONNECTION", db_cache_connection) or None
        db_cache_table = e.str("LARAQ_CACHE_TABLE", db_cache_table) or "cache"

        # database
        db_connection = e.str("DB_CONNECTION", "sqlite" if modern else "mysql") or ""
        db_url = e.str("DB_URL" if modern else "DATABASE_URL")
        driver = _DB_DRIVERS.get(db_connection, db_connection)
        if driver in ("mysql", "mariadb"):
            default_port: int | None = 3306
        elif driver == "pgsql":
            default_port = 5432
        elif driver == "sqlsrv":
            default_port = 1433
        else:
            default_port = None
        if driver == "sqlite":
            default_db: str | None = str((base_path or Path(".")) / "database" / "database.sqlite")
            db_host = None
        else:
            default_db = "laravel" if modern else "forge"
            db_host = e.str("DB_HOST", "localhost" if driver == "sqlsrv" else "127.0.0.1")
        db_database = e.str("DB_DATABASE", default_db)
        if driver == "sqlite" and db_database and db_database != ":memory:" and base_path is not None \
                and not os.path.isabs(db_database):
            db_database = str(base_path / db_database)

        failed_path_raw = e.str("LARAQ_FAILED_PATH")
        failed_path = Path(failed_path_raw) if failed_path_raw else (
            base_path / "storage" / "framework" / "cache" / "failed-jobs.json" if base_path else None
        )

        if modern:
            maintenance_driver = e.str("APP_MAINTENANCE_DRIVER", "file") or "file"
            maintenance_store = e.str("APP_MAINTENANCE_STORE", "database")
        else:
            maintenance_driver, maintenance_store = "file", None
        maintenance_driver = e.str("LARAQ_MAINTENANCE_DRIVER", maintenance_driver) or "file"
        maintenance_store = e.str("LARAQ_MAINTENANCE_STORE", maintenance_store)

        previous = tuple(k for k in (e.str("APP_PREVIOUS_KEYS", "") or "").split(",") if k) if modern else ()

        failed_driver = e.get("QUEUE_FAILED_DRIVER", "database-uuids")
        failed_driver = override("LARAQ_FAILED_DRIVER", failed_driver)

        return cls(
            version=v,
            base_path=base_path,
            app_name=app_name,
            app_env=e.str("APP_ENV", "production") or "",
            app_timezone=(e.str("APP_TIMEZONE", "UTC") if modern else "UTC") or "UTC",
            app_key=e.str("APP_KEY"),
            app_previous_keys=previous,
            redis_client=e.str("REDIS_CLIENT", "phpredis") or "phpredis",
            redis_prefix=redis_prefix,
            redis_url=e.str("REDIS_URL"),
            redis_host=e.str("REDIS_HOST", "127.0.0.1") or "127.0.0.1",
            redis_port=e.int("REDIS_PORT", 6379) or 6379,
            redis_username=e.str("REDIS_USERNAME") or None,
            redis_password=e.str("REDIS_PASSWORD") or None,
            redis_db=e.int("REDIS_DB", 0) or 0,
            redis_cache_db=e.int("REDIS_CACHE_DB", 1) or 0,
            redis_scheme=e.str("REDIS_SCHEME") or None,
            queue_connection=queue_connection,
            connection_name=e.str("LARAQ_CONNECTION", "redis") or "redis",
            redis_queue_connection=(e.str("REDIS_QUEUE_CONNECTION", "default") if modern else "default")
            or "default",
            redis_queue=e.str("LARAQ_QUEUE", e.str("REDIS_QUEUE", "default")) or "default",
            retry_after=retry_after if retry_after is not None else 90,
            block_for=block_for,
            db_queue_connection=e.str("DB_QUEUE_CONNECTION") if modern else None,
            db_queue_table=(e.str("DB_QUEUE_TABLE", "jobs") if modern else "jobs") or "jobs",
            db_queue=(e.str("DB_QUEUE", "default") if modern else "default") or "default",
            db_queue_retry_after=(e.int("DB_QUEUE_RETRY_AFTER", 90) if modern else 90) or 0,
            cache_store=cache_store or "",
            cache_prefix=e.str("LARAQ_CACHE_PREFIX", cache_prefix) or "",
            redis_cache_connection=(e.str("REDIS_CACHE_CONNECTION", "cache") if modern else "cache") or "cache",
            redis_cache_lock_connection=(e.str("REDIS_CACHE_LOCK_CONNECTION", "default") if modern else "default")
            or "default",
            cache_path=cache_path,
            db_cache_connection=db_cache_connection,
            db_cache_table=db_cache_table,
            db_cache_lock_table=db_cache_lock_table,
            db_connection=db_connection,
            db_host=db_host,
            db_port=e.int("DB_PORT", default_port) if driver != "sqlite" else None,
            db_database=db_database,
            db_username=e.str("DB_USERNAME", "root" if modern else "forge") if driver != "sqlite" else None,
            db_password=e.str("DB_PASSWORD", "") if driver != "sqlite" else None,
            db_socket=e.str("DB_SOCKET") or None,
            db_url=db_url,
            failed_driver=None if failed_driver is None else str(failed_driver),
            failed_database=e.str("LARAQ_FAILED_DATABASE", db_connection) or db_connection,
            failed_table=e.str("LARAQ_FAILED_TABLE", "failed_jobs") or "failed_jobs",
            failed_path=failed_path,
            failed_limit=e.int("LARAQ_FAILED_LIMIT", 100) or 100,
            maintenance_driver=maintenance_driver,
            maintenance_store=maintenance_store,
            env=merged,
            env_file_keys=file_keys,
            version_source=version_source,
            version_warning=version_warning,
        )

    # -- derived values -----------------------------------------------------------------------------

    def storage_path(self, *parts: str) -> Path:
        """``storage_path()`` of the Laravel project (needs :attr:`base_path`)."""
        if self.base_path is None:
            raise ValueError("the Laravel project dir is unknown: pass env_file= or set LARAQ_BASE_PATH")
        return self.base_path.joinpath("storage", *parts)

    @property
    def maintenance_file(self) -> Path | None:
        """``storage/framework/down`` (the ``file`` maintenance driver), if the project dir is known."""
        return None if self.base_path is None else self.storage_path("framework", "down")

    @property
    def maintenance_cache_store(self) -> str:
        """The store the ``cache`` maintenance driver uses: ``app.maintenance.store`` or the default."""
        return self.maintenance_store or self.cache_store

    def redis_connection(self, connection: str = "default") -> RedisConnectionSettings:
        """Resolve one Redis connection of ``database.redis`` by name.

        With the app's configuration read (:attr:`redis_config`) any connection it defines is resolved
        from it; otherwise the stock ``default`` and ``cache`` blocks from ``REDIS_*``. As in Laravel,
        components present in the connection's ``url`` (``REDIS_URL``, including a ``/db`` path) override
        its host, port, database, username and password.
        """
        if self.redis_config is not None:
            conn = self.redis_config.get(connection)
            if connection in ("client", "options", "clusters") or not isinstance(conn, Mapping):
                have = ", ".join(k for k, v in self.redis_config.items()
                                 if isinstance(v, Mapping) and k not in ("options", "clusters"))
                raise ValueError(f"the app's config('database.redis') has no connection {connection!r} "
                                 f"(it has: {have or 'none'})")
            cfg: dict[str, Any] = {
                "host": conn.get("host") or "127.0.0.1",
                "port": conn.get("port") or 6379,
                "username": conn.get("username"),
                "password": conn.get("password"),
                "database": conn.get("database") or 0,
                "scheme": conn.get("scheme") or "tcp",
            }
            url = conn.get("url")
        else:
            if connection not in ("default", "cache"):
                raise ValueError(f"unknown Redis connection {connection!r} (stock apps define default and cache; "
                                 "give laraq the app (--app-path) to read its own connections)")
            cfg = {
                "host": self.redis_host,
                "port": self.redis_port,
                "username": self.redis_username,
                "password": self.redis_password,
                "database": self.redis_db if connection == "default" else self.redis_cache_db,
                "scheme": self.redis_scheme or "tcp",
            }
            url = self.redis_url
        if url:
            cfg.update(parse_redis_url(str(url)))
        return RedisConnectionSettings(
            name=connection,
            host=str(cfg["host"]),
            port=int(cfg["port"]),
            database=int(cfg["database"] or 0),
            username=None if cfg.get("username") in (None, "") else str(cfg["username"]),
            password=None if cfg.get("password") in (None, "") else str(cfg["password"]),
            scheme="tls" if str(cfg.get("scheme") or "tcp").lower() in ("tls", "rediss", "ssl") else "tcp",
            prefix=self._connection_prefix(connection),
        )

    def _connection_prefix(self, connection: str) -> str:
        """The key prefix phpredis applies on ``connection``: the queue connection's is :attr:`redis_prefix`
        (``LARAQ_REDIS_PREFIX`` included); another connection of the app's config has its own
        ``options.prefix`` over the global one (``RedisManager`` merges them); stock apps share one."""
        if self.redis_config is None or connection == self.redis_queue_connection:
            return self.redis_prefix
        own = connection_prefix(self.redis_config, connection)
        return self.redis_prefix if own is None else own

    def redis_cluster_nodes(self, connection: str) -> list[tuple[str, int]] | None:
        """The seed nodes of ``config('database.redis.clusters.<connection>')``, when the app defines it."""
        clusters = (self.redis_config or {}).get("clusters")
        nodes = clusters.get(connection) if isinstance(clusters, Mapping) else None
        if not isinstance(nodes, (list, Mapping)):
            return None
        out = []
        for node in (nodes.values() if isinstance(nodes, Mapping) else nodes):
            if isinstance(node, Mapping) and node.get("host") is not None:
                out.append((str(node.get("host")), int(node.get("port") or 6379)))
        return out or None

    def redis_url_for(self, connection: str = "default", *, mask: bool = False) -> str:
        """A redis-py URL for the ``default`` (queue) or ``cache`` connection."""
        return self.redis_connection(connection).url(mask=mask)

    @property
    def cache_uses_redis(self) -> bool:
        return self.cache_store_driver() == "redis"

    def cache_store_driver(self, store: str | None = None) -> str:
        """The driver of a cache store (``config('cache.stores.<name>.driver')``; stock stores are named after
        their driver)."""
        name = store or self.cache_store
        conf = (self.cache_stores or {}).get(name)
        return str(conf.get("driver") or name) if isinstance(conf, Mapping) else name

    def database(self, connection: str | None = None) -> DatabaseSettings:
        """The resolved database connection (``DB_*``, with ``DB_URL``/``DATABASE_URL`` overriding)."""
        name = connection or self.db_connection
        driver = _DB_DRIVERS.get(name, name)
        host, port, database = self.db_host, self.db_port, self.db_database
        username, password, socket = self.db_username, self.db_password, self.db_socket
        db_url = self.db_url
        conf = (self.db_connections or {}).get(name)
        if isinstance(conf, Mapping):  # config('database.connections.<name>') of the app
            driver = str(conf.get("driver") or driver)
            host = None if conf.get("host") is None else str(conf.get("host"))
            port = int(conf["port"]) if str(conf.get("port") or "").isdigit() else None
            database = None if conf.get("database") is None else str(conf.get("database"))
            username = None if conf.get("username") is None else str(conf.get("username"))
            password = None if conf.get("password") is None else str(conf.get("password"))
            socket = conf.get("unix_socket") or None
            db_url = conf.get("url") or None
        if db_url:
            parts = urlsplit(re.sub(r"^(sqlite3?):///", r"\1://null/", db_url))
            scheme = (parts.scheme or "").lower()
            if scheme:
                driver = _DB_URL_ALIASES.get(scheme, scheme)
            if parts.hostname and parts.hostname != "null":
                host = unquote(parts.hostname)
            if parts.port:
                port = parts.port
            if parts.username:
                username = unquote(parts.username)
            if parts.password is not None:
                password = unquote(parts.password)
            if parts.path and parts.path != "/":
                database = unquote(parts.path[1:])
        return DatabaseSettings(name, driver, host, port, database, username, password or None, socket)

    # -- display --------------------------------------------------------------------------------------

    @property
    def line_timezone(self) -> str:
        """The zone ``queue:work`` prints its console lines' dates in (``WorkCommand::now()``): the
        default timezone, ``app.timezone``, unless ``queue.output_timezone`` (read from 9.49) names another."""
        output = self.queue_output_timezone
        if output and output != self.app_timezone and self.version.since("9.49"):
            return output
        return self.app_timezone or "UTC"

    def describe(self) -> str:
        """A multi-line human summary; passwords and keys are masked."""
        lines = [
            f"Laravel {self.version} (app {self.app_name!r}, env {self.app_env})",
            f"project dir: {self.base_path or '(unknown)'}",
            f"APP_KEY: {'set' if self.app_key else 'not set'}"
            + (f" (+{len(self.app_previous_keys)} previous)" if self.app_previous_keys else ""),
            f"redis queue:   {self._shown_redis(self.redis_queue_connection)} prefix {self.redis_prefix!r}",
            f"redis cache:   {self._shown_redis(self.redis_cache_connection)}",
            f"queue: connection {self.connection_name!r}, queue {self.redis_queue!r}, "
            f"retry_after {self.retry_after}, block_for {self.block_for}",
            f"cache: store {self.cache_store!r}, prefix {self.cache_prefix!r}"
            + (f", path {self.cache_path}" if self.cache_store == "file" else "")
            + (f", table {self.db_cache_table!r} on {self.database(self.db_cache_connection).describe()}"
               if self.cache_store == "database" else ""),
            f"failed jobs: driver {self.failed_driver!r}, database {self.database(self.failed_database).describe()}"
            f", table {self.failed_table!r}",
            f"maintenance: driver {self.maintenance_driver!r}"
            + (f", store {self.maintenance_cache_store!r}" if self.maintenance_driver == "cache" else ""),
        ]
        return "\n".join(lines)

    def _shown_redis(self, name: str) -> str:
        try:
            return f"{name} {self.redis_url_for(name, mask=True)}"
        except ValueError as exc:
            return f"{name} (unusable: {exc})"

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            if not f.repr:
                continue
            shown.append(f"{f.name}={getattr(self, f.name)!r}")
        shown.append(f"app_key={'<set>' if self.app_key else None}")
        shown.append(f"redis_password={'<set>' if self.redis_password else None}")
        shown.append(f"db_password={'<set>' if self.db_password else None}")
        if self.redis_url:
            shown.append(f"redis_url={self.redis_connection('default').url(mask=True)!r}")
        return "LaravelSettings(" + ", ".join(shown) + ")"

    __str__ = describe


def make_redis(settings: LaravelSettings, which: str = "default", **kwargs: Any) -> Any:
    """A ``redis.Redis`` client for the ``default`` (queue) or ``cache`` connection.

    Behind Sentinel (:mod:`laraq.config.sentinel`) it follows the current master; in cluster mode
    (:mod:`laraq.config.cluster`) it is a ``redis.RedisCluster``.

    The client does *not* apply Laravel's key prefix (redis-py has none); callers add
    ``settings.redis_prefix`` to key names themselves.
    """
    conn = settings.redis_connection(which)
    sentinel = sentinel_settings(settings.env)
    if sentinel is not None:
        return sentinel_master(sentinel, db=conn.database, username=conn.username, password=conn.password,
                               ssl=conn.tls, **kwargs)
    nodes = settings.redis_cluster_nodes(which) or cluster_nodes(settings.env, (conn.host, conn.port), which)
    if nodes is not None:
        return cluster_client(nodes, username=conn.username, password=conn.password, ssl=conn.tls, **kwargs)
    return redis.Redis(
        host=conn.host,
        port=conn.port,
        db=conn.database,
        username=conn.username,
        password=conn.password,
        ssl=conn.tls,
        **kwargs,
    )


redis_from_settings = make_redis
