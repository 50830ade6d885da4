"""Redis Cluster connections: when laraq's queue connection is a cluster, and how to reach it.

Laravel talks to a cluster through a ``clusters`` block in ``config/database.php`` (not in stock apps;
the seed nodes are usually ``REDIS_HOST``/``REDIS_PORT``) with ``options.cluster = 'redis'`` (native
cluster; ``REDIS_CLUSTER`` defaults to ``redis`` in every stock app, clustered or not, so it cannot tell
laraq that the app uses a cluster). laraq therefore turns cluster mode on with ``LARAQ_REDIS_CLUSTER``:
``true`` for both Redis connections, or a comma list of the connections that are clusters (``default``
is the queue's, ``cache`` the cache store's). The seed nodes are ``LARAQ_REDIS_CLUSTER_NODES`` (comma
list of ``host:port``), else the connection's ``REDIS_HOST``/``REDIS_PORT``/``REDIS_URL``.

On a cluster the queue's keys must share a hash slot: Laravel documents naming queues ``{default}``
(every version), and 13.5+ wraps untagged names itself (``queues:{default}``;
:meth:`laraq.protocol.keys.QueueKeys.for_queue`). redis-py's ``RedisCluster`` follows ``MOVED`` and ``ASK``
redirections (slot migration during a reshard) for commands and scripts; every laraq script touches
keys of one queue only, hence of one slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.cluster import ClusterNode, RedisCluster

__all__ = ["cluster_nodes", "cluster_client"]

_TRUE = ("1", "true", "yes", "on", "(true)")


def cluster_nodes(env: Mapping[str, str], default: tuple[str, int],
                  connection: str = "default") -> list[tuple[str, int]] | None:
    """The seed nodes when ``connection`` is a cluster (``LARAQ_REDIS_CLUSTER``), else None."""
    switch = env.get("LARAQ_REDIS_CLUSTER", "").strip().lower()
    if switch not in _TRUE and connection not in {c.strip() for c in switch.split(",")}:
        return None
    raw = env.get("LARAQ_REDIS_CLUSTER_NODES") or ""
    nodes: list[tuple[str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"LARAQ_REDIS_CLUSTER_NODES: expected host:port, got {item!r}")
        nodes.append((host.strip("[]") or "127.0.0.1", int(port)))
    return nodes or [default]


def cluster_client(nodes: list[tuple[str, int]], *, username: str | None = None, password: str | None = None,
                   ssl: bool = False, **kwargs: Any) -> Any:
    """A ``redis.RedisCluster`` over the seed ``nodes``."""
    kwargs.setdefault("socket_connect_timeout", 2.0)
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], username=username,
                        password=password, ssl=ssl, **kwargs)
