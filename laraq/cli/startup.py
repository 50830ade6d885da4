"""What a worker can use on this machine, found out before the first job, and said once at start.

``php artisan queue:work`` runs inside its app: the cache store, ``failed_jobs`` and ``APP_KEY`` are all
there. laraq may start without the app (``bash scripts/run`` on a fresh machine, no ``--env-file``), or with
an app whose database or Redis is not reachable. This module opens the pieces the worker needs and decides,
for each fault, whether the worker can run without it (saying so in one line, with what to pass) or must
not start (a :class:`StartupError` naming the cause, the fix and the exit code of
:mod:`laraq.config.faults`):

* **cache store** (restart/pause signals, ``maxExceptions``, unique locks): opened and read once. With no
  Laravel project behind the settings, a store that is not there (13's stock ``database`` store on
  ``database/database.sqlite``) is skipped with a warning; with a project it is an error.
* **failed-job store**: with no project and the stock store unreachable (8's MySQL), failed jobs go to a
  local SQLite ``failed_jobs`` (:func:`local_failed_store_path`: a ``0600`` file in the ``0700`` state
  directory of :mod:`laraq.cli.statefiles`), said loudly. With a project, an
  unreachable database is opened again when a job fails, like artisan.
* **APP_KEY**: a malformed key stops the worker at start, not jobs later.
* **Redis**: pinged once; refused connections and rejected credentials are start-up errors.

:func:`describe_setup` is the start-up banner and ``laraq config``: profile and how it was chosen, Redis URL
(password masked), prefix, queues, ``retry_after``/``block_for``, stores, handlers, and warnings (version
not detected, the asked-for queues empty while jobs wait under another prefix or key layout).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laraq import exitcodes
from laraq._version import __version__
from laraq.bus.middleware import limiter_names
from laraq.cli import linesink
from laraq.cli.statefiles import state_dir, state_dir_problem, touch_private
from laraq.config import faults
from laraq.config.provenance import setting_facts
from laraq.config.settings import LaravelSettings
from laraq.logtext import visible
from laraq.protocol import phparray
from laraq.protocol.encryption import Encrypter
from laraq.protocol.lua import Scripts
from laraq.protocol.payload import Payload
from laraq.protocol.serializer import loads
from laraq.stores.cache import UnsupportedCacheStore, make_cache
from laraq.stores.failed import DatabaseUuidFailedJobStore, LazyFailedJobStore, make_failed_store
from laraq.worker.eager import LoopKind, loop_name, uvloop_version

__all__ = [
    "StartupError",
    "OpenedStore",
    "check_redis",
    "open_cache",
    "open_failed_store",
    "check_app_key",
    "limiter_warnings",
    "local_failed_store_path",
    "queue_warnings",
    "describe_setup",
    "render_setup",
]

_FIX_PROJECT = "pass --env-file /path/to/your/laravel/.env to use your app's"


class StartupError(Exception):
    """A fault that stops the worker (or a command) before it touches a job: one line and an exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass
class OpenedStore:
    """A store the worker will use (or ``None``) and the one-line description the banner shows."""

    store: Any
    description: str
    warnings: list[str] = field(default_factory=list)


# -- Redis ---------------------------------------------------------------------------------------------

def check_redis(client: Any, shown_url: str) -> None:
    """PING once; a refused connection or refused credentials is a :class:`StartupError`."""
    try:
        client.ping()
    except Exception as exc:
        explained = faults.explain(exc, redis_url=shown_url)
        if explained is None:
            raise
        raise StartupError(*explained) from exc


# -- cache store ---------------------------------------------------------------------------------------

def _sqlite_missing(settings: LaravelSettings, connection: str | None) -> str | None:
    """The SQLite file path if the connection is SQLite on a file that does not exist (never created)."""
    db = settings.database(connection)
    if db.driver != "sqlite" or not db.database or db.database == ":memory:":
        return None
    return None if Path(db.database).exists() else db.database


def _cache_prefixes(settings: LaravelSettings) -> str:
    """What a Redis cache key starts with: the cache connection's own key prefix, then the store's prefix
    joined as this version's ``RedisStore`` joins it (``keys 'app_database_app_cache_:…'``), and the two parts."""
    try:
        connection = settings.redis_connection(settings.redis_cache_connection).prefix
    except ValueError:  # no such connection: opening the store says so
        return f"prefix {settings.cache_prefix!r}"
    joined = connection + settings.version.cache_key(settings.cache_prefix, "")
    return f"keys {joined + '…'!r} (connection prefix {connection!r} + cache prefix {settings.cache_prefix!r})"


def open_cache(settings: LaravelSettings, *, redis_url: str | None = None) -> OpenedStore:
    """The app's default cache store, read once; see the module docstring for what happens on failure."""
    name = settings.cache_store_driver()
    no_project = settings.base_path is None
    store = "" if settings.cache_store == name else f"{settings.cache_store!r}: "
    where = name
    if name == "database":
        where = f"database ({store}{settings.db_cache_table!r} table on {settings.database(settings.db_cache_connection).describe()})"
    elif name == "file":
        where = f"file ({store}{settings.cache_path})"
    elif name == "redis":
        where = (f"redis ({store}connection {settings.redis_cache_connection!r}, locks on "
                 f"{settings.redis_cache_lock_connection!r}, {_cache_prefixes(settings)})")
    try:
        missing = _sqlite_missing(settings, settings.db_cache_connection) if name == "database" else None
        if missing:
            raise FileNotFoundError(f"the SQLite database {missing} does not exist")
        cache = make_cache(settings, redis_url=redis_url)
        cache.get("illuminate:queue:restart")
    except UnsupportedCacheStore as exc:
        return OpenedStore(None, f"{name} (not readable by laraq)",
                           [f"{exc}: queue:restart, queue:pause, maxExceptions and unique locks are not seen"])
    except Exception as exc:
        reason = faults.one_line(exc)
        if no_project:
            return OpenedStore(None, f"none (stock {name!r} store not available)", [
                f"no Laravel project: the stock {name!r} cache store is not available ({reason}), so queue:restart"
                f", queue:pause and maxExceptions are not seen; {_FIX_PROJECT}"])
        fix = ("run `php artisan cache:table && php artisan migrate` in the app, or set CACHE_STORE "
               "(CACHE_DRIVER before Laravel 11) to the store the app really uses") \
            if "no such table" in reason or "doesn't exist" in reason or "does not exist" in reason \
            else "check the app's CACHE_STORE/CACHE_DRIVER and DB_* settings"
        raise StartupError(f"cannot use the {where} cache store: {reason}; {fix}", exitcodes.EXIT_DATABASE) from exc
    return OpenedStore(cache, where)


# -- failed-job store ------------------------------------------------------------------------------------

def local_failed_store_path() -> Path:
    """Where failed jobs go when no Laravel project is given and the stock store is not reachable."""
    return state_dir() / "failed_jobs.sqlite"


def _local_failed_store(settings: LaravelSettings) -> DatabaseUuidFailedJobStore:
    path = local_failed_store_path()
    # 0600 before SQLite opens it: its -journal and -wal files take the database file's mode
    touch_private(path)
    import sqlite3  # start-up: ~1 MB resident, loaded only for the local failed-job file

    conn = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
    store = make_failed_store(_as_sqlite_uuids(settings), conn=conn)
    assert isinstance(store, DatabaseUuidFailedJobStore)
    store.ensure_table()
    return store


def _as_sqlite_uuids(settings: LaravelSettings) -> LaravelSettings:
    return dataclasses.replace(settings, failed_driver="database-uuids", failed_database="sqlite",
                               db_connection="sqlite", db_url=None, db_database=str(local_failed_store_path()))


def open_failed_store(settings: LaravelSettings, *, fallback: bool = True) -> OpenedStore:
    """The failed-job store; see the module docstring for the no-project fallback."""
    driver = settings.failed_driver
    described = "null (failed jobs are dropped, like Laravel's null driver)" if driver in (None, "null") else (
        f"file ({settings.failed_path})" if driver == "file" and settings.version.has_file_failed_store else
        f"{driver} ({settings.failed_table!r} table on {settings.database(settings.failed_database).describe()})")
    try:
        missing = _sqlite_missing(settings, settings.failed_database) \
            if driver not in (None, "null", "file") else None
        if missing:
            raise FileNotFoundError(f"the SQLite database {missing} does not exist")
        return OpenedStore(make_failed_store(settings), described)
    except Exception as exc:
        reason = faults.one_line(exc)
        if settings.base_path is None and fallback:
            local = local_failed_store_path()
            try:
                store = _local_failed_store(settings)
            except Exception as exc2:
                raise StartupError(f"no failed-job store: the stock one is not available ({reason}) and the "
                                   f"local one at {local} cannot be opened ({faults.one_line(exc2)})",
                                   exitcodes.EXIT_DATABASE) from exc2
            loose = state_dir_problem(local.parent)
            return OpenedStore(store, f"local SQLite {local} (fallback)", [
                f"no Laravel project: the stock failed-job store {described} is not available ({reason}); "
                f"failed jobs go to {local} instead ({_FIX_PROJECT})", *([loose] if loose else [])])
        # Like artisan: start anyway; failed_jobs is only needed when a job fails, and a job that cannot
        # be logged then is put back on its queue, never dropped.
        return OpenedStore(LazyFailedJobStore(lambda: make_failed_store(settings)), described + " (not reachable now)", [
            f"the failed-job store {described} is not reachable now ({reason}); laraq opens it again when a "
            "job fails, and keeps the job until it can"])


# -- APP_KEY ---------------------------------------------------------------------------------------------

def check_app_key(settings: LaravelSettings) -> Encrypter | None:
    """The :class:`~laraq.protocol.encryption.Encrypter` for ``APP_KEY`` (``None`` when unset); malformed = error."""
    if not settings.app_key:
        return None
    try:
        return Encrypter.from_app_key(settings.app_key, previous_keys=settings.app_previous_keys)
    except ValueError as exc:
        raise StartupError(f"APP_KEY is malformed ({exc}); copy APP_KEY exactly from the app's .env "
                           "(it looks like base64:... for a 32-byte key)", exitcodes.EXIT_CONFIG) from exc


# -- queue warnings ------------------------------------------------------------------------------------

def _queue_key_prefixes(client: Any, *, rounds: int = 50) -> dict[str, int]:
    """Prefixes of ``*queues:*`` keys, from at most ``rounds`` SCAN calls (a big keyspace is sampled,
    not walked: start-up must stay quick)."""
    found: dict[str, int] = {}
    cursor = 0
    for _ in range(rounds):
        cursor, keys = client.scan(cursor, match="*queues:*", count=1000)
        for raw in keys:
            key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            prefix = key[: key.find("queues:")]
            found[prefix] = found.get(prefix, 0) + 1
        if not cursor:
            break
    return found


def queue_warnings(client: Any, prefix: str, queues: list[str]) -> list[str]:
    """A warning when every asked-for queue is empty but queue keys exist under another prefix or layout."""
    try:
        pipe = client.pipeline(transaction=False)
        for q in queues:
            base = f"{prefix}queues:{q}"
            pipe.llen(base)
            pipe.zcard(base + ":delayed")
            pipe.zcard(base + ":reserved")
        if any(pipe.execute()):
            return []
        found = _queue_key_prefixes(client)
    except Exception:  # a warning helper never stops the worker; Redis faults are reported elsewhere
        return []
    asked = {f"{prefix}queues:{q}" for q in queues}
    elsewhere: list[str] = []
    for other, count in sorted(found.items(), key=lambda kv: -kv[1]):
        if other != prefix:
            elsewhere.append(f"prefix {other!r} ({count} key(s))")
    try:
        tagged = [q for q in queues if client.exists(f"{prefix}queues:{{{q}}}")]
    except Exception:  # a hint never stops the worker (an ACL without EXISTS only loses the hint)
        tagged = []
    out: list[str] = []
    if elsewhere:
        out.append(f"the queues asked for ({', '.join(sorted(asked))}) are empty, but queue keys exist under "
                   f"{'; '.join(elsewhere[:5])}: pass --prefix or the app's --env-file (REDIS_PREFIX, APP_NAME) "
                   "if that is your app")
    if tagged:
        out.append(f"jobs wait under the cluster hash-tagged layout queues:{{{tagged[0]}}} (Laravel 13.5+ on a "
                   "cluster connection): pass --queue '{" + tagged[0] + "}' or the app's --laravel/--env-file")
    return out


def limiter_warnings(client: Any, prefix: str, queues: list[str], app: Any, *, sample: int = 100) -> list[str]:
    """One warning per ``RateLimited(name)`` seen on the first ``sample`` waiting/delayed jobs of each asked
    queue whose limiter the Python app does not declare (``app.rate_limiter``): those jobs go back to PHP.
    Only jobs of at most 64 KB are looked at (:meth:`~laraq.protocol.lua.Scripts.excerpts`): a queue of
    huge jobs costs the start-up a bounded read."""
    declared = getattr(app, "rate_limiters", {})
    missing: dict[str, set[str]] = {}
    scripts = Scripts(client)
    try:
        for q in queues:
            base = f"{prefix}queues:{q}"
            excerpts = scripts.excerpts(base, "list", 0, sample - 1) + \
                scripts.excerpts(base + ":delayed", "zset", 0, sample - 1)
            for body in (e.whole for e in excerpts if e.whole is not None):
                try:
                    payload = Payload.parse(body)
                    text = payload.command
                    if not text or not text.startswith("O:") or app.resolve(payload) is None:
                        continue
                    for name in limiter_names(loads(text.encode("utf-8"))):
                        if name not in declared:
                            missing.setdefault(name, set()).add(payload.command_name or payload.display_name or "?")
                except Exception:
                    continue  # a job laraq cannot read is reported when it is popped
    except Exception:  # a warning helper never stops the worker; Redis faults are reported elsewhere
        return []
    return [f"jobs of {', '.join(sorted(classes))} use RateLimited({name!r}), and the app declares no rate limiter "
            f"{name!r}: they go back to PHP; declare app.rate_limiter({name!r}, ...) with PHP's limits to run them"
            for name, classes in sorted(missing.items())]


# -- the banner ----------------------------------------------------------------------------------------

def describe_setup(settings: LaravelSettings, *, redis_url: str, prefix: str, queues: list[str],
                   retry_after: int | None, block_for: float | None, cache: str, failed: str,
                   handlers: list[str] | None, app_spec: str | None, warnings: list[str],
                   loop: LoopKind = "auto") -> dict[str, Any]:
    """The banner's facts as a dict (``laraq config --json``); never holds a password or APP_KEY."""
    return {
        "laraq": __version__,
        "laravel": str(settings.version),
        "laravel_source": settings.version_source,
        "project": str(settings.base_path) if settings.base_path else None,
        "redis": redis_url,
        "prefix": prefix,
        "queues": queues,
        "retry_after": retry_after,
        "block_for": block_for,
        "cache_store": cache,
        "failed_store": failed,
        "app": app_spec,
        "handlers": handlers,
        "app_key": "set" if settings.app_key else "not set",
        "unserialize": unserialize_path(),
        "console_lines": console_lines_path(),
        "event_loop": event_loop_path(loop),
        # where the app's config was read (None: .env and the environment only), and each value's source
        "config": settings.app_config_source,
        "settings": setting_facts(settings),
        "warnings": [*settings.config_notes, *warnings],
    }


def _src(info: dict[str, Any], *keys: str) -> str:
    """`` [source]`` of a banner row (``[assumed]`` when laraq guessed it), from ``info['settings']``."""
    facts = {f["setting"]: f for f in info.get("settings") or ()}
    labels = []
    for key in keys:
        fact = facts.get(key)
        if fact is None:
            continue
        label = "assumed" if fact["assumed"] else fact["source"]
        if label not in labels:
            labels.append(label)
    return f"   [{', '.join(labels)}]" if labels else ""


def _c_path(in_use: bool, built: bool) -> str:
    """A banner row for one piece of the C build: in use, turned off, or not built."""
    if in_use:
        return "C (laraq._speedups)"
    if built:
        return "pure Python (LARAQ_PURE_PYTHON is set)"
    return "pure Python (no C build: reinstall with a C compiler and Python's headers for the faster path)"


def unserialize_path() -> str:
    """Which codec decodes commands on the worker's hot path: the C build or the pure-Python one."""
    return _c_path(phparray._c_pairs_loads is not None, phparray._speedups is not None)


def console_lines_path() -> str:
    """Which sink prints a job's console lines on a real stdout: the C build or the pure-Python one."""
    return _c_path(linesink.c_sinks_enabled(),
                   linesink._speedups is not None and hasattr(linesink._speedups, "LineSink"))


def event_loop_path(kind: LoopKind = "auto") -> str:
    """Which event loop ``async def`` handlers run on, and what chose it (``--loop``, ``LARAQ_LOOP``)."""
    try:
        name = loop_name(kind)
    except ValueError as exc:
        return str(exc)
    chosen = f"--loop {kind}" if kind != "auto" else \
        f"LARAQ_LOOP={os.environ['LARAQ_LOOP'].strip()}" if os.environ.get("LARAQ_LOOP", "").strip() else ""
    policy = type(asyncio.get_event_loop_policy())
    if not chosen and policy is not asyncio.DefaultEventLoopPolicy:
        return f"the app's event-loop policy ({policy.__name__})"
    if name == "uvloop":
        return f"uvloop {uvloop_version()}" + (f" ({chosen})" if chosen else "")
    if chosen:
        return f"asyncio ({chosen})"
    return "asyncio (uvloop is not installed: pip install uvloop for faster I/O-bound jobs)"


def render_setup(info: dict[str, Any]) -> str:
    """The banner as text lines (what ``laraq work`` prints at start and ``laraq config`` prints)."""
    handlers = info.get("handlers")
    if handlers is None:
        shown_handlers = "(no --app given)"
    elif handlers:
        shown_handlers = f"{len(handlers)} from {info['app']}: " + ", ".join(handlers)
    else:
        shown_handlers = f"none in {info['app']} (every job gets the --unhandled policy)"
    facts = {f["setting"]: f for f in info.get("settings") or ()}
    connection = facts["queue.connection"]["value"] if "queue.connection" in facts else None
    rows = [
        ("Laravel profile", f"{info['laravel']} ({info['laravel_source']})"),
        ("project", info["project"] or "(none)"),
        ("config", info.get("config") or ".env and the environment (the app's config/*.php not read)"),
        ("Redis", info["redis"] + _src(info, "redis.queue")),
        ("prefix", repr(info["prefix"]) + _src(info, "redis.prefix")),
        ("queues", ", ".join(info["queues"]) + (f" on connection {connection!r}" if connection else "")
         + _src(info, "queue.queue")),
        ("retry_after", f"{info['retry_after']}   block_for: {info['block_for']}"
         + _src(info, "queue.retry_after", "queue.block_for")),
        ("cache store", info["cache_store"] + _src(info, "cache.store", "cache.prefix", "cache.connection")),
        ("failed store", info["failed_store"] + _src(info, "failed.driver", "failed.table")),
        ("timezone", (facts["app.timezone"]["value"] if "app.timezone" in facts else "UTC")
         + _src(info, "app.timezone")),
        ("APP_KEY", info["app_key"]),
        ("handlers", shown_handlers),
        ("unserialize", info.get("unserialize") or unserialize_path()),
        ("console lines", info.get("console_lines") or console_lines_path()),
        ("event loop", info.get("event_loop") or event_loop_path()),
    ]
    # queue and class names come from the command line, the app's config and the jobs: shown escaped
    lines = [f"laraq {info['laraq']}"] + [f"  {k:<17}{visible(v)}" for k, v in rows]
    lines += [f"  WARNING: {visible(w)}" for w in info["warnings"]]
    return "\n".join(lines)
