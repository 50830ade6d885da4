"""What every operations command shares: the settings and connections (:class:`Ops`), the
``--env-file``/``--laravel``/``--prefix``/``--redis-url`` options (:func:`settings_options`), JSON
output and the parsing of delays and ``NAME=JSON`` assignments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click
import redis

from laraq.config.effective import effective_settings, with_flags
from laraq.config.settings import LaravelSettings, make_redis
from laraq.logtext import visible
from laraq.ops.inspect import discover_queues
from laraq.protocol.discovery import expand
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.stores.cache import make_cache
from laraq.stores.failed import make_failed_store

__all__ = ["Ops", "emit_json", "fmt_time", "human_age", "parse_assignments", "parse_delay", "settings_options"]

@dataclass
class Ops:
    """The settings and connections one command works with."""

    settings: LaravelSettings
    queue: RedisQueue
    encrypter: Any
    #: ``--redis-url``: replaces the queue connection (and the cache connection's host, as ``laraq work``).
    redis_url: str | None = None

    @classmethod
    def load(cls, env_file: str | None, laravel: str | None, prefix: str | None,
             redis_url: str | None = None, *, app_path: str | None = None, app_config: str | None = None,
             connection: str | None = None) -> Ops:
        """The app's effective settings (:func:`laraq.config.effective.effective_settings`: its own config
        over ``.env``) with the command line's overrides, and the queue they describe."""
        try:
            settings = effective_settings(env_file=env_file, version=laravel, app_path=app_path,
                                          app_config=app_config, connection=connection)
        except (OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        # --prefix: REDIS_PREFIX for every connection, as `laraq work --prefix` (cache keys too)
        settings = with_flags(settings, prefix=prefix, connection=connection, redis_url=redis_url)
        if redis_url:
            try:
                client = redis.Redis.from_url(redis_url)
            except ValueError as exc:
                raise click.BadParameter(f"{exc}", param_hint="--redis-url") from exc
        else:
            try:
                client = make_redis(settings, settings.redis_queue_connection)
            except ValueError as exc:
                raise click.ClickException(f"the queue's Redis connection: {exc}") from exc
        queue = RedisQueue(
            client,
            connection_name=settings.connection_name,
            default_queue=settings.redis_queue,
            prefix=settings.redis_prefix,
            retry_after=settings.retry_after,
            version=settings.version,
            forwards=settings.env.get("LARAQ_QUEUE_FORWARD"),
            migration_batch_size=settings.migration_batch_size,
        )
        encrypter = None
        if settings.app_key:
            try:
                encrypter = Encrypter.from_app_key(settings.app_key, previous_keys=settings.app_previous_keys)
            except ValueError:
                encrypter = None
        return cls(settings, queue, encrypter, redis_url)

    def failed_store(self) -> Any:
        try:
            return make_failed_store(self.settings)
        except (ValueError, NotImplementedError, ImportError) as exc:
            raise click.ClickException(f"cannot open the failed-job store: {exc}") from exc

    def cache(self) -> Any:
        """The app's default cache store (redis, file or database), where the queue signals live."""
        try:
            return make_cache(self.settings, redis_url=self.redis_url)
        except Exception as exc:
            raise click.ClickException(f"cannot open the {self.settings.cache_store!r} cache store: {exc}") from exc

    def queues(self, names: Sequence[str] = ()) -> list[str]:
        """The queues asked for, a pattern (``tenant-*``) replaced by the queues it matches now; none asked
        for: every queue found."""
        return expand(self.queue, names) if names else discover_queues(self.queue.client, self.queue.prefix)


APP_PATH_HELP = ("The Laravel app's directory, whose config laraq reads (default: LARAQ_APP_PATH, else the "
                 "--env-file's directory when artisan is there).")
APP_CONFIG_HELP = "The app's config exported by `laraq config --from APP -o FILE` (default: LARAQ_APP_CONFIG)."


def settings_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--env-file``, ``--app-path``, ``--app-config``, ``--laravel``, ``--prefix`` and ``--redis-url``; the
    command receives an :class:`Ops` as ``ops``."""

    @click.option("--env-file", type=click.Path(dir_okay=False), default=None, help="The Laravel app's .env file.")
    @click.option("--app-path", type=click.Path(file_okay=False), default=None, help=APP_PATH_HELP)
    @click.option("--app-config", type=click.Path(dir_okay=False), default=None, help=APP_CONFIG_HELP)
    @click.option("--laravel", "laravel", default=None, help="Laravel version of the app (e.g. 8, 12.45, 13).")
    @click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
    @click.option("--redis-url", default=None, metavar="URL",
                  help="Queue Redis URL, e.g. redis://:secret@host:6379/0 (overrides REDIS_URL/REDIS_HOST/...).")
    def wrapper(env_file: str | None, app_path: str | None, app_config: str | None, laravel: str | None,
                prefix: str | None, redis_url: str | None, **kwargs: Any) -> Any:
        return func(Ops.load(env_file, laravel, prefix, redis_url, app_path=app_path, app_config=app_config),
                    **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    own = getattr(wrapper, "__click_params__", [])
    wrapper.__click_params__ = [*getattr(func, "__click_params__", []), *own]  # type: ignore[attr-defined]
    return wrapper


def emit_json(value: Any) -> None:
    """``value`` as indented JSON, non-ASCII text raw but control and format characters as JSON escapes
    (:func:`laraq.logtext.visible`): the same document, safe on a terminal."""
    click.echo(visible(json.dumps(value, ensure_ascii=False, indent=2, default=str), multiline=True, json=True))


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60}s"
    return f"{seconds}s"


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def parse_delay(text: str | None) -> int | datetime | None:
    """``30`` (seconds), ``5m``/``2h``/``1d``, or an ISO date-time (UTC if no offset)."""
    if text is None:
        return None
    text = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"not a delay: {text!r} (seconds, 5m, 2h, 1d or an ISO date-time)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_assignments(values: Sequence[str], what: str) -> dict[str, Any]:
    """``name=JSON`` pairs (a value that is not JSON is taken as a string)."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{what} must be NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out
