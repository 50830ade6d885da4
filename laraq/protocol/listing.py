"""Laravel 13.4+'s queue listing helpers: ``pendingJobs``, ``delayedJobs``, ``reservedJobs`` and the
``all*`` variants of ``Illuminate\\Queue\\RedisQueue``, returning ``Illuminate\\Queue\\Jobs\\InspectedJob``.

Each helper reads one structure of a queue (the list, ``:delayed`` or ``:reserved``, in Redis order)
and describes every member as :class:`InspectedJob` does: ``uuid`` and ``displayName`` from the
payload, ``attempts`` from the payload (0 when absent), ``createdAt`` when the payload has it (12.11+),
and the queue name it was asked for. The ``all*`` helpers take every queue found under the
connection's ``queues:`` keys, naming a queue as Laravel does (``Str::between($key, 'queues:', ':')``:
after the first ``queues:``, up to the *last* ``:`` if any, cluster braces trimmed), quirks included:
``queues:a:b`` (the list of a queue named ``a:b``) is listed as ``a``.
Laravel uses ``KEYS``; laraq uses ``SCAN`` (the same keys, without blocking the server). A member
that is not a JSON object gives an entry with no uuid and no name, as PHP's null-safe reads do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, cast

from laraq.protocol.phpjson import json_loads
from laraq.protocol.queue import RedisQueue

__all__ = ["InspectedJob", "all_delayed_jobs", "all_pending_jobs", "all_queue_names", "all_reserved_jobs",
           "delayed_jobs", "pending_jobs", "reserved_jobs"]


@dataclass(frozen=True)
class InspectedJob:
    """``InspectedJob``: what the listing helpers return for one member."""

    uuid: str | None
    queue: str | None
    name: str | None
    attempts: int
    payload: dict[str, Any] = field(default_factory=dict, repr=False)
    created_at: datetime | None = None

    @classmethod
    def from_payload(cls, member: bytes | str, queue: str | None = None) -> InspectedJob:
        try:
            decoded = json_loads(member)
        except (ValueError, UnicodeDecodeError):
            decoded = None
        if not isinstance(decoded, dict):
            decoded = {}
        created = decoded.get("createdAt")
        created_at = None
        if isinstance(created, int | float) and not isinstance(created, bool):
            with contextlib.suppress(ValueError, OverflowError, OSError):  # no date (NaN, out of range)
                created_at = datetime.fromtimestamp(created, UTC)
        attempts = decoded.get("attempts", 0)
        return cls(
            uuid=_text(decoded.get("uuid")),
            queue=queue,
            name=_text(decoded.get("displayName")),
            attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
            payload=decoded,
            created_at=created_at,
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _members(reply: Any) -> list[bytes | str]:
    """A ZRANGE reply without scores: redis-py's types also allow the ``withscores`` pairs."""
    return cast("list[bytes | str]", reply)


def _inspect(members: Iterable[bytes | str], name: str) -> list[InspectedJob]:
    return [InspectedJob.from_payload(m, queue=name) for m in members]


def pending_jobs(queue: RedisQueue, name: str | Enum | None = None) -> list[InspectedJob]:
    """``pendingJobs``: the ready list, head first."""
    return _inspect(queue.client.lrange(queue.keys(name).list, 0, -1), queue.queue_name(name))


def delayed_jobs(queue: RedisQueue, name: str | Enum | None = None) -> list[InspectedJob]:
    """``delayedJobs``: ``:delayed`` by due time."""
    return _inspect(_members(queue.client.zrange(queue.keys(name).delayed, 0, -1)), queue.queue_name(name))


def reserved_jobs(queue: RedisQueue, name: str | Enum | None = None) -> list[InspectedJob]:
    """``reservedJobs``: ``:reserved`` by reservation expiry."""
    return _inspect(_members(queue.client.zrange(queue.keys(name).reserved, 0, -1)), queue.queue_name(name))


def all_queue_names(queue: RedisQueue) -> list[str]:
    """``allQueueNames``: every queue name under ``<prefix>queues:``, each once, in discovery order."""
    marker = "queues:"
    names: list[str] = []
    for raw in queue.client.scan_iter(match=f"{_glob_escape(queue.prefix)}{marker}*", count=1000):
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        rest = key[key.index(marker) + len(marker):]
        name = (rest.rsplit(":", 1)[0] if ":" in rest else rest).strip("{}")
        if name not in names:
            names.append(name)
    return names


def all_pending_jobs(queue: RedisQueue) -> list[InspectedJob]:
    return [job for name in all_queue_names(queue) for job in pending_jobs(queue, name)]


def all_delayed_jobs(queue: RedisQueue) -> list[InspectedJob]:
    return [job for name in all_queue_names(queue) for job in delayed_jobs(queue, name)]


def all_reserved_jobs(queue: RedisQueue) -> list[InspectedJob]:
    return [job for name in all_queue_names(queue) for job in reserved_jobs(queue, name)]


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
