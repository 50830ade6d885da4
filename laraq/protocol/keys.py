"""The Redis keys of one queue, named as Laravel's ``Illuminate\\Queue\\RedisQueue`` names them.

``<prefix>queues:<name>`` is the list of waiting jobs; ``:delayed``, ``:reserved`` and ``:notify`` are
Laravel's companions of it, ``:poison`` and ``:laraq-unstarted`` laraq's own. On a cluster connection
Laravel 13.5+ wraps a queue name that has no hash tag in braces, so that every key of the queue falls in
one slot (:func:`has_hash_tag`, :meth:`QueueKeys.for_queue`). redis-py adds no key prefix of its own, so
every name here carries the prefix itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion


def has_hash_tag(name: str) -> bool:
    """True if ``name`` holds a Redis Cluster hash tag: a ``{`` and, later, a ``}`` with text between.

    Like Redis' own slot rule, only the first ``{`` and the first ``}`` after it count.
    """
    opening = name.find("{")
    if opening < 0:
        return False
    closing = name.find("}", opening + 1)
    return closing > opening + 1


@dataclass(frozen=True)
class QueueKeys:
    """The Redis keys of one queue, prefix included (redis-py adds no prefix of its own)."""

    prefix: str
    name: str
    hash_tagged: bool = False

    @classmethod
    def for_queue(
        cls,
        name: str,
        *,
        prefix: str = "",
        version: LaravelVersion | str = DEFAULT_VERSION,
        cluster: bool = False,
    ) -> QueueKeys:
        """Keys as ``RedisQueue`` of ``version`` names them on a (cluster) connection.

        On a cluster connection 13.5+ wraps a name without a hash tag in braces (``queues:{name}``);
        older versions never do (users had to name the queue ``{name}`` themselves).
        """
        version = LaravelVersion.parse(version)
        tagged = bool(cluster and version.cluster_hash_tags and not has_hash_tag(name))
        return cls(prefix, name, tagged)

    @property
    def base(self) -> str:
        """The list key, e.g. ``laravel_database_queues:default``."""
        shown = "{" + self.name + "}" if self.hash_tagged else self.name
        return f"{self.prefix}queues:{shown}"

    @property
    def list(self) -> str:
        return self.base

    @property
    def delayed(self) -> str:
        return self.base + ":delayed"

    @property
    def reserved(self) -> str:
        return self.base + ":reserved"

    @property
    def notify(self) -> str:
        return self.base + ":notify"

    @property
    def unstarted(self) -> str:
        """laraq's record of reserved jobs not started yet (a ZSET, not Laravel's; see
        :data:`laraq.protocol.lua_laraq.UNSTARTED`)."""
        return self.base + ":laraq-unstarted"

    @property
    def poison(self) -> str:
        """laraq's dead-letter list for members the pop script could not reserve (not Laravel's)."""
        return self.base + ":poison"
