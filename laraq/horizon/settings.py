"""Where Horizon keeps its records and for how long: ``config/horizon.php`` read the stock way.

Mirrors what ``Laravel\\Horizon\\Horizon::use`` and the published ``config/horizon.php`` decide:

* the key prefix: ``HORIZON_PREFIX``, else ``Str::slug(env('APP_NAME', 'laravel'), '_') . '_horizon:'``
  (a literal ``'prefix' => '...'`` in the app's config wins). Horizon's Redis connection is the
  ``use`` connection (stock ``default``) with this prefix *instead of* the database prefix;
* the ``trim`` minutes (``recent``, ``pending``, ``completed``, ``recent_failed``, ``failed``,
  ``monitored``) that ``RedisJobRepository`` turns into EXPIREATs and ``ZREMRANGEBYSCORE`` cuts;
* the ``silenced`` job classes and (Horizon 5.34+) ``silenced_tags`` (``JobPayload::shouldBeSilenced``),
  used when laraq dispatches (the settings are what :class:`laraq.bus.dispatch.PushMonitor` asks for);
* the Horizon release (:mod:`laraq.horizon.version`), which decides what laraq writes where Horizon
  changed after 5.29; on a Redis Cluster connection (``LARAQ_REDIS_CLUSTER`` names the ``use``
  connection) 5.46+ wraps the prefix in a hash tag (``{laravel_horizon:}``), as ``Horizon::use`` does.

Horizon is *in use* when the app has ``config/horizon.php`` or ``vendor/laravel/horizon``, when its
configuration (cached, booted or exported: :mod:`laraq.config.effective`) has a ``horizon`` prefix, or
when ``HORIZON_PREFIX`` is set; ``laraq work --horizon`` forces it. :func:`app_horizon` is that one
reading, made by ``laraq work``, ``laraq dispatch`` and ``Dispatcher.from_app`` alike. The config file is
PHP, so laraq reads only literal values from it (numbers, quoted strings, ``X::class``); anything
computed keeps Horizon's stock default, except the prefix and ``use``, which the app's own configuration
gives when laraq reads it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laraq.config.cluster import cluster_nodes
from laraq.config.envfile import parse_env_file
from laraq.config.settings import make_redis
from laraq.horizon.records import HorizonRecords
from laraq.horizon.version import NEWEST, HorizonVersion, detect_horizon_version
from laraq.protocol.versions import _slug

if TYPE_CHECKING:
    from laraq.config.settings import LaravelSettings

__all__ = ["HorizonSettings", "HorizonTrim", "app_horizon", "hash_tagged", "horizon_in_use", "records_client"]

log = logging.getLogger("laraq.horizon")


@dataclass(frozen=True)
class HorizonTrim:
    """``horizon.trim``: minutes each kind of record is kept (``RedisJobRepository``'s defaults)."""

    recent: int = 60
    pending: int = 60
    completed: int = 60
    failed: int = 10080
    #: ``recent_failed`` falls back to ``failed`` in Horizon.
    recent_failed: int | None = None
    monitored: int = 10080

    @property
    def recent_failed_minutes(self) -> int:
        return self.failed if self.recent_failed is None else self.recent_failed


@dataclass(frozen=True)
class HorizonSettings:
    """Horizon's settings as laraq needs them (key prefix, trim minutes, silenced classes)."""

    prefix: str = "laravel_horizon:"
    trim: HorizonTrim = field(default_factory=HorizonTrim)
    silenced: tuple[str, ...] = ()
    #: The Redis connection Horizon stores on (``horizon.use``).
    use: str = "default"
    #: ``horizon.environments`` key the master reports (``APP_ENV``).
    environment: str = "production"
    #: ``horizon.silenced_tags`` (Horizon 5.34+; ignored before).
    silenced_tags: tuple[str, ...] = ()
    #: The app's Horizon release (:mod:`laraq.horizon.version`) and where it was read.
    version: HorizonVersion = NEWEST
    version_source: str = "default"

    def key(self, name: str) -> str:
        """The full Redis key of one of Horizon's records."""
        return self.prefix + name

    # -- what the dispatcher asks of a monitored app (laraq.bus.dispatch.PushMonitor) -----------------

    def is_silenced(self, class_name: str, tags: Sequence[str] = ()) -> bool:
        """``JobPayload::shouldBeSilenced`` by the config: ``class_name`` in ``silenced``, or (5.34+) one
        of the job's ``tags`` in ``silenced_tags``."""
        if class_name in self.silenced:
            return True
        return self.version.has_silenced_tags and bool(set(tags) & set(self.silenced_tags))

    @property
    def pending_before_push(self) -> bool:
        """Horizon 5.42+: the dispatcher writes the pending record before it pushes."""
        return self.version.pending_before_push

    @property
    def delay_in_delayed_payload(self) -> bool:
        """Horizon 5.45.6+: a delayed dispatch's payload keeps its ``delay`` (Laravel 12.11+ payloads);
        before, Horizon's ``later`` built the payload without it (``"delay": null``)."""
        return self.version.delay_in_delayed_payload

    def push_recorder(self, client: Any) -> HorizonRecords:
        """The records a dispatch through the redis-py ``client`` writes (``JobPushed``)."""
        return HorizonRecords(client, self)

    @classmethod
    def from_app(cls, env: Mapping[str, str], base_path: str | Path | None = None) -> HorizonSettings:
        """The settings of the app at ``base_path`` with environment ``env``: the app's ``.env`` is merged in
        under ``env``, as Laravel's ``LoadEnvironmentVariables`` does (a variable already set wins)."""
        base_path = None if base_path is None else Path(base_path)
        if base_path is not None and (base_path / ".env").is_file():
            env = {**parse_env_file(base_path / ".env", env), **env}
        app_name = env.get("APP_NAME") or "laravel"
        prefix = env.get("HORIZON_PREFIX") or _slug(app_name, "_") + "_horizon:"
        trim = HorizonTrim()
        silenced: tuple[str, ...] = ()
        use = "default"
        silenced_tags: tuple[str, ...] = ()
        text = _read_config(base_path)
        if text:
            literal = _literal_string(text, "prefix")
            if literal is not None and "HORIZON_PREFIX" not in env:
                prefix = literal
            use = _literal_string(text, "use") or use
            numbers = _block_numbers(text, "trim")
            trim = HorizonTrim(
                recent=numbers.get("recent", trim.recent),
                pending=numbers.get("pending", trim.pending),
                completed=numbers.get("completed", trim.completed),
                failed=numbers.get("failed", trim.failed),
                recent_failed=numbers.get("recent_failed"),
                monitored=numbers.get("monitored", trim.monitored),
            )
            silenced = _block_classes(text, "silenced")
            silenced_tags = _block_strings(text, "silenced_tags")
        version, source = detect_horizon_version(env, base_path)
        if version.cluster_hash_tag and cluster_nodes(env, ("127.0.0.1", 6379), use) is not None:
            prefix = hash_tagged(prefix)
        return cls(prefix=prefix, trim=trim, silenced=silenced, use=use,
                   environment=env.get("APP_ENV") or "production", silenced_tags=silenced_tags,
                   version=version, version_source=source)


def app_horizon(settings: LaravelSettings, wanted: bool | None = None) -> HorizonSettings | None:
    """The app's Horizon settings, or ``None`` when it does not use Horizon (see the module docstring).

    ``wanted``: ``True`` forces Horizon (``--horizon``), ``False`` turns it off, ``None`` detects it. The
    prefix and ``use`` the app's own configuration gives (``settings.horizon_prefix``) win over the
    literal reading of ``config/horizon.php``."""
    if wanted is False:
        return None
    if wanted is None and settings.horizon_prefix is None and not horizon_in_use(settings.env, settings.base_path):
        return None
    found = HorizonSettings.from_app(settings.env, settings.base_path)
    if settings.horizon_prefix is not None:
        prefix = settings.horizon_prefix
        if found.version.cluster_hash_tag and cluster_nodes(settings.env, ("127.0.0.1", 6379), settings.horizon_use):
            prefix = hash_tagged(prefix)
        found = dataclasses.replace(found, prefix=prefix, use=settings.horizon_use)
    return found


def records_client(settings: LaravelSettings, horizon: HorizonSettings, client: Any) -> Any:
    """The redis-py client Horizon's records are written with: one on ``horizon.use`` when that is not the
    queue's connection (``Horizon::use``), else ``client``. A connection laraq cannot open is logged and
    ``client`` is used."""
    if horizon.use == settings.redis_queue_connection:
        return client
    try:
        return make_redis(settings, horizon.use)
    except ValueError as exc:
        log.warning("horizon: config/horizon.php uses Redis connection %r (%s); "
                    "writing Horizon's records on the queue's connection", horizon.use, exc)
        return client


def hash_tagged(prefix: str) -> str:
    """``Horizon::ensureHashTaggedPrefix``: the prefix as is when it has a ``{tag}``, else ``{prefix}``."""
    return prefix if re.search(r"\{[^}]+\}", prefix) else "{" + prefix + "}"


def horizon_in_use(env: Mapping[str, str], base_path: Path | None) -> bool:
    """Whether the app uses Horizon (see the module docstring)."""
    if env.get("HORIZON_PREFIX"):
        return True
    if base_path is None:
        return False
    return (base_path / "config" / "horizon.php").is_file() or (base_path / "vendor" / "laravel" / "horizon").is_dir()


# -- reading literals out of config/horizon.php ------------------------------------------------------

def _read_config(base_path: Path | None) -> str:
    if base_path is None:
        return ""
    path = base_path / "config" / "horizon.php"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    # Comments would hide or fake keys.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"(?m)^\s*(//|#).*$", "", text)


def _literal_string(text: str, key: str) -> str | None:
    match = re.search(r"['\"]" + re.escape(key) + r"['\"]\s*=>\s*'([^'\\]*)'\s*,", text)
    return match.group(1) if match else None


def _block(text: str, key: str) -> str:
    match = re.search(r"['\"]" + re.escape(key) + r"['\"]\s*=>\s*\[", text)
    if not match:
        return ""
    depth, i = 1, match.end()
    while i < len(text) and depth:
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        i += 1
    return text[match.end():i - 1]


def _block_numbers(text: str, key: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"['\"](\w+)['\"]\s*=>\s*(\d+)", _block(text, key))}


def _block_strings(text: str, key: str) -> tuple[str, ...]:
    """The quoted strings listed in a literal ``'key' => [...]`` block."""
    return tuple(m.group(1) for m in re.finditer(r"'([^'\\]*)'", _block(text, key)))


def _block_classes(text: str, key: str) -> tuple[str, ...]:
    block = _block(text, key)
    imports = {m.group(1).rsplit("\\", 1)[-1]: m.group(1)
               for m in re.finditer(r"(?m)^use\s+\\?([\w\\]+)\s*;", text)}
    names = [imports.get(m.group(1), m.group(1)).lstrip("\\")
             for m in re.finditer(r"\\?([\w\\]+)::class", block)]
    names += [m.group(1).replace("\\\\", "\\") for m in re.finditer(r"'([\w\\]+)'", block)]
    return tuple(names)
