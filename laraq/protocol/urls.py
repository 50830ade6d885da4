"""Where a queue connects, told without its password: safe for logs and error messages.

:func:`redact_url` masks the password of a Redis URL; :func:`describe_client` builds the same kind of
password-free description for a redis-py client that was made without a URL (a plain server, a unix
socket, Sentinel or Cluster).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import redis


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (user names are kept), safe to log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = quote(parts.username or "", safe="")
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def describe_client(client: Any) -> str:
    """A password-free URL-like description of an existing redis-py client."""
    if isinstance(client, redis.RedisCluster):
        nodes = ",".join(f"{n.host}:{n.port}" for n in client.get_nodes()[:3])
        return f"redis-cluster://{nodes}"
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:
        watchers = getattr(getattr(pool, "sentinel_manager", None), "sentinels", [])
        found = [c.connection_pool.connection_kwargs for c in watchers]
        sentinels = ",".join(f"{k.get('host')}:{k.get('port')}" for k in found)
        return f"redis-sentinel://{sentinels}/{service}"
    kwargs: dict[str, Any] = dict(getattr(pool, "connection_kwargs", {}) or {})
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "redis"
    conn_class = getattr(pool, "connection_class", None)
    if conn_class is not None and "SSL" in getattr(conn_class, "__name__", ""):
        scheme = "rediss"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    auth = ""
    if kwargs.get("username"):
        auth = quote(str(kwargs["username"]), safe="")
    if kwargs.get("password"):
        auth += ":***"
    if auth:
        auth += "@"
    return f"{scheme}://{auth}{host}:{port}/{kwargs.get('db', 0)}"
