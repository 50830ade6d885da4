"""Redis Sentinel: find the queue's master through sentinels, the way Laravel apps configure it.

Stock Laravel has no Sentinel block in ``config/database.php``; apps use one of two shapes, and laraq
reads the environment variables both use:

* the ``phpredis-sentinel`` driver (namoshek/laravel-redis-sentinel; ``REDIS_CLIENT=phpredis-sentinel``):
  ``REDIS_SENTINEL_HOST``, ``REDIS_SENTINEL_PORT`` (26379), ``REDIS_SENTINEL_SERVICE`` (``mymaster``),
  ``REDIS_SENTINEL_USERNAME``, ``REDIS_SENTINEL_PASSWORD``, ``REDIS_SENTINEL_TIMEOUT``, plus the usual
  ``REDIS_PASSWORD``/``REDIS_USERNAME``/``REDIS_DB``;
* predis' ``'replication' => 'sentinel'`` option (with monospice/laravel-redis-sentinel-drivers the
  sentinel list is ``REDIS_SENTINEL_HOST`` as a comma list, else a list of ``tcp://host:port`` URLs in
  the connection array): ``REDIS_SENTINEL_SERVICE`` names the master, the data password comes from
  ``REDIS_PASSWORD`` (predis' ``parameters.password``).

So ``REDIS_SENTINEL_HOST`` may hold one host or a comma list of ``host``, ``host:port``,
``tcp://host:port`` or ``tls://host:port`` (``REDIS_SENTINELS`` is read as a synonym). Sentinel mode
is on when ``REDIS_CLIENT`` is ``phpredis-sentinel``, ``LARAQ_REDIS_SENTINEL`` is true, or a sentinel
host list is set.

The client is redis-py's ``Sentinel(...).master_for(service)``: every new connection asks the
sentinels for the current master, and a connection to a master that was demoted (``READONLY``) is
dropped, so after a failover the worker's usual reconnect loop lands on the new master.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from redis.sentinel import Sentinel

__all__ = ["SentinelSettings", "sentinel_settings", "sentinel_master"]

_TRUE = ("1", "true", "yes", "on", "(true)")


@dataclass(frozen=True)
class SentinelSettings:
    """Where the sentinels are and which master they watch."""

    sentinels: tuple[tuple[str, int], ...]
    service: str = "mymaster"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float | None = None
    tls: bool = False

    def describe(self) -> str:
        nodes = ",".join(f"{h}:{p}" for h, p in self.sentinels)
        return f"sentinel://{nodes}/{self.service}"


def _parse_hosts(text: str, default_port: int) -> tuple[tuple[tuple[str, int], ...], bool]:
    hosts: list[tuple[str, int]] = []
    tls = False
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "://" not in item:
            item = "tcp://" + item
        parts = urlsplit(item)
        tls = tls or parts.scheme in ("tls", "rediss", "ssl")
        if not parts.hostname:
            raise ValueError(f"cannot read the sentinel address {item!r}")
        hosts.append((parts.hostname, parts.port or default_port))
    return tuple(hosts), tls


def sentinel_settings(env: Mapping[str, str]) -> SentinelSettings | None:
    """The Sentinel settings in ``env`` (a merged environment / ``.env``), or None when not configured."""
    raw = env.get("REDIS_SENTINEL_HOST") or env.get("REDIS_SENTINELS") or ""
    wanted = (env.get("REDIS_CLIENT", "").lower() == "phpredis-sentinel"
              or env.get("LARAQ_REDIS_SENTINEL", "").lower() in _TRUE or bool(raw))
    if not wanted:
        return None
    try:
        port = int(env.get("REDIS_SENTINEL_PORT") or 26379)
    except ValueError:
        raise ValueError(f"REDIS_SENTINEL_PORT is not a port number: {env.get('REDIS_SENTINEL_PORT')!r}") from None
    sentinels, tls = _parse_hosts(raw or "127.0.0.1", port)
    timeout_raw = env.get("REDIS_SENTINEL_TIMEOUT") or ""
    try:
        timeout = float(timeout_raw) if timeout_raw else None
    except ValueError:
        raise ValueError(f"REDIS_SENTINEL_TIMEOUT is not a number: {timeout_raw!r}") from None
    return SentinelSettings(
        sentinels=sentinels,
        service=env.get("REDIS_SENTINEL_SERVICE") or "mymaster",
        username=env.get("REDIS_SENTINEL_USERNAME") or None,
        password=env.get("REDIS_SENTINEL_PASSWORD") or None,
        timeout=timeout if timeout else None,
        tls=tls,
    )


def sentinel_master(settings: SentinelSettings, *, db: int = 0, username: str | None = None,
                    password: str | None = None, ssl: bool = False, **kwargs: Any) -> Any:
    """A ``redis.Redis`` bound to the current master of ``settings.service`` (follows failovers)."""
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": settings.timeout or 1.0,
                                       "socket_connect_timeout": settings.timeout or 1.0}
    if settings.password:
        sentinel_kwargs["password"] = settings.password
    if settings.username:
        sentinel_kwargs["username"] = settings.username
    if settings.tls:
        sentinel_kwargs["ssl"] = True
    sentinel = Sentinel(list(settings.sentinels), sentinel_kwargs=sentinel_kwargs)
    kwargs.setdefault("socket_connect_timeout", 2.0)
    kwargs.setdefault("health_check_interval", 10)
    return sentinel.master_for(settings.service, db=db, username=username, password=password, ssl=ssl, **kwargs)
