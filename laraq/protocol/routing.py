"""Queue names as Laravel 12/13 resolve them: enum names and ``Queue::forward`` routes.

Mirrors ``Illuminate\\Support\\enum_value`` (a backed enum case is its value, a pure case its name;
Laravel 12's ``onQueue``, 13.25+ everywhere a queue name is taken) and 13.26's
``Illuminate\\Queue\\QueueRoutes`` forwards: ``Queue::forward('old', 'new')`` (or an array of them,
optionally restricted to one connection) makes ``RedisQueue`` push to, pop from, size and clear
``queues:new`` whenever it is asked for ``old``. The worker still reports the job's queue as the name
it was asked for (``old``), as ``RedisJob`` does.

A forward is code in the app (usually a service provider's ``boot``), so laraq reads it as
configuration: ``LARAQ_QUEUE_FORWARD="old=new,emails=mail@redis"`` (``from=to`` or
``from=to@connection``; ``from=@connection`` forwards to the same name on another connection, which
only changes where PHP pushes and is therefore a no-op for a connection other than the named one).
Before 13.26 forwards are ignored, as that Laravel has none.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["QueueForwards", "enum_value", "queue_name_of"]


def enum_value(value: Any) -> Any:
    """``enum_value()``: a backed case's value, a pure case's name; anything else unchanged.

    Python has no pure/backed split, so: ``StrEnum``/``IntEnum`` (and ``str``/``int`` mix-in enums) and
    plain ``Enum`` classes with ``str`` values count as backed; any other enum (``auto()`` numbers,
    tuples, ...) counts as pure and gives its member name.
    """
    if isinstance(value, enum.Enum):
        raw = value.value
        if isinstance(value, str | int) or isinstance(raw, str):
            return raw
        return value.name
    return value


def queue_name_of(queue: Any) -> str | None:
    """A queue argument (string, enum case, ``None``) as the name Laravel uses; ``None`` when empty."""
    value = enum_value(queue)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"a queue name must be a string or an enum case, not {type(queue).__name__}")
    return str(value)


@dataclass(frozen=True)
class QueueForwards:
    """``QueueRoutes``' forwards: ``{from: (connection or None, to or None)}``."""

    routes: Mapping[str, tuple[str | None, str | None]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> QueueForwards:
        """Read ``"old=new,emails=mail@redis"``; a malformed entry raises ``ValueError`` naming it."""
        routes: dict[str, tuple[str | None, str | None]] = {}
        for raw in (text or "").split(","):
            entry = raw.strip()
            if not entry:
                continue
            source, sep, target = entry.partition("=")
            source = source.strip()
            if not sep or not source:
                raise ValueError(f"queue forward {entry!r}: expected from=to or from=to@connection")
            to, _, connection = target.strip().partition("@")
            routes[source] = (connection.strip() or None, to.strip() or None)
        return cls(routes)

    @classmethod
    def of(cls, forwards: QueueForwards | Mapping[str, Any] | str | None) -> QueueForwards:
        """Accept a ``QueueForwards``, the text form, or ``{from: to}`` / ``{from: (connection, to)}``."""
        if isinstance(forwards, QueueForwards):
            return forwards
        if forwards is None or isinstance(forwards, str):
            return cls.parse(forwards)
        routes: dict[str, tuple[str | None, str | None]] = {}
        for source, target in forwards.items():
            name = queue_name_of(source)
            if name is None:
                raise ValueError("queue forward with an empty source queue")
            if isinstance(target, tuple):
                connection, to = target
                routes[name] = (connection, queue_name_of(to))
            else:
                routes[name] = (None, queue_name_of(target))
        return cls(routes)

    def __bool__(self) -> bool:
        return bool(self.routes)

    def resolve(self, queue: str, connection: str) -> str:
        """``forwardedQueue``: where a push/pop for ``queue`` on ``connection`` really goes."""
        route = self.routes.get(queue)
        if route is None:
            return queue
        forward_connection, forward_queue = route
        if forward_connection is None or forward_connection == connection:
            return forward_queue or queue
        return queue
