"""Queues named by a pattern (``--queue 'tenant-*'``): found with a bounded ``SCAN``, and told apart
cheaply as busy or empty. Laravel has no counterpart: ``RedisQueue`` only knows the names it is given.

:class:`QueueDiscovery` walks ``SCAN ... MATCH <prefix>queues:*<literal head>*`` a few calls at a time
(never ``KEYS``), on every master of a Redis Cluster, and maps each key back to its queue name: the list
itself and its ``:delayed``, ``:reserved``, ``:notify`` and ``:laraq-unstarted`` companions all name the
queue (a queue whose jobs are all delayed or all reserved is still found), ``:poison`` and laraq's
``:laraq-slots`` do not. The braces of the 13.5+ cluster layout (``queues:{name}``) are taken off when
:meth:`RedisQueue.keys` would put them on. A complete pass replaces what was found, so a queue whose
keys are all gone (emptied) drops out; a new one appears as soon as a pass reaches it.

:func:`probe` asks, in one pipelined round trip, which of some queues have work for a reserve call:
a waiting job, a ``:delayed`` job due, or (``retry_after`` set) an expired reservation (the migrate steps
Laravel's pop runs). A queue that has none needs no pop until it has.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue

__all__ = ["QueueDiscovery", "expand", "is_pattern", "probe", "queue_name_of"]

#: Suffixes of the keys that belong to a queue with jobs (the list has none).
_JOB_SUFFIXES = (":delayed", ":reserved", ":notify", ":laraq-unstarted")
#: Suffixes of keys that do not make a queue: the poison list, the fleet's slot leases.
_OTHER_SUFFIXES = (":poison", ":laraq-slots")
_GLOB_CHARS = "*?["


def is_pattern(name: str) -> bool:
    """Does a ``--queue`` item name queues by a glob? One with a ``*`` does (then ``?`` and ``[...]`` in it
    are glob too); a name with only ``?`` or ``[`` is a queue's own name, as Laravel takes it."""
    return "*" in name


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _literal_head(pattern: str) -> str:
    """The part of a glob before its first wildcard (narrows the ``SCAN MATCH``)."""
    cut = min((pattern.index(ch) for ch in _GLOB_CHARS if ch in pattern), default=len(pattern))
    return pattern[:cut]


def queue_name_of(queue: RedisQueue, key: str) -> str | None:
    """The queue a key belongs to (None: not a queue's job key under this prefix)."""
    start = f"{queue.prefix}queues:"
    if not key.startswith(start):
        return None
    rest = key[len(start):]
    if rest.endswith(_OTHER_SUFFIXES):
        return None
    for suffix in _JOB_SUFFIXES:
        if rest.endswith(suffix):
            rest = rest[: -len(suffix)]
            break
    if not rest:
        return None
    if rest.startswith("{") and rest.endswith("}") and queue.keys(rest[1:-1]).list == start + rest:
        return rest[1:-1]  # 13.5+ cluster layout: the braces are the key's, not the name's
    return rest


class QueueDiscovery:
    """The queues that match some patterns, found by a bounded ``SCAN`` (see the module).

    :meth:`refresh` makes at most ``calls`` ``SCAN`` calls of ``count`` keys; :meth:`matched` answers from
    the last complete pass plus what the current pass found so far."""

    def __init__(self, queue: RedisQueue, patterns: Sequence[str], *, count: int = 1000, calls: int = 20) -> None:
        self.queue = queue
        self.patterns = list(patterns)
        self.count = count
        self.calls = calls
        heads = {_literal_head(p) for p in self.patterns}
        head = heads.pop() if len(heads) == 1 else ""
        self.match = f"{_glob_escape(queue.prefix)}queues:*{_glob_escape(head)}*" if head \
            else f"{_glob_escape(queue.prefix)}queues:*"
        self._complete: set[str] = set()
        self._partial: set[str] = set()
        self._cursors: dict[int, int] = {}
        #: complete passes made (a test or a status line may wait for one)
        self.passes = 0
        #: when the last complete pass ended (monotonic seconds)
        self.completed_at = 0.0

    def _nodes(self) -> list[Any]:
        """A client per master: the client itself, or one per primary of a Redis Cluster."""
        client = self.queue.client
        if isinstance(client, redis.RedisCluster):
            return [client.get_redis_connection(node) for node in client.get_primaries()]
        return [client]

    def refresh(self) -> bool:
        """Scan on (at most ``calls`` calls over all masters); True when this call completed a pass."""
        nodes = self._nodes()
        if not self._cursors:
            self._cursors = dict.fromkeys(range(len(nodes)), 0)
        budget = self.calls
        while budget > 0 and self._cursors:
            index = next(iter(self._cursors))
            cursor, keys = nodes[index].scan(self._cursors[index], match=self.match, count=self.count)
            budget -= 1
            self._take(keys)
            if int(cursor) == 0:
                del self._cursors[index]
            else:
                self._cursors[index] = int(cursor)
        if self._cursors:
            return False
        self._complete, self._partial = self._partial, set()
        self.passes += 1
        self.completed_at = time.monotonic()
        return True

    def full_pass(self, most_calls: int = 10_000) -> None:
        """Scan until a pass is complete (at start: the first round sees every matching queue)."""
        calls = self.calls
        try:
            self.calls = most_calls
            while not self.refresh():
                pass
        finally:
            self.calls = calls

    def _take(self, keys: Iterable[Any]) -> None:
        for raw in keys:
            key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            name = queue_name_of(self.queue, key)
            if name is not None and any(fnmatch.fnmatchcase(name, p) for p in self.patterns):
                self._partial.add(name)

    def matched(self, pattern: str | None = None) -> list[str]:
        """The queues found (matching ``pattern``, one of :attr:`patterns`), sorted by name."""
        found = self._complete | self._partial
        if pattern is not None:
            found = {n for n in found if fnmatch.fnmatchcase(n, pattern)}
        return sorted(found)


def expand(queue: RedisQueue, items: Sequence[str]) -> list[str]:
    """A ``--queue`` list with each pattern replaced by the queues it matches now (one full ``SCAN`` pass),
    each queue once, in list order: for the commands that read queues once (status, doctor, start-up)."""
    patterns = [i for i in items if is_pattern(i)]
    if not patterns:
        return list(dict.fromkeys(items))
    discovery = QueueDiscovery(queue, patterns)
    discovery.full_pass()
    out: list[str] = []
    for item in items:
        out += discovery.matched(item) if is_pattern(item) else [item]
    return list(dict.fromkeys(out))


def probe(queue: RedisQueue, names: Sequence[str], now: float | None = None) -> dict[str, bool]:
    """Which of ``names`` have work for a reserve call now (see the module): one pipelined round trip of
    ``LLEN`` and ``ZCOUNT``s, nothing written."""
    if not names:
        return {}
    at = int(time.time() if now is None else now)
    reserved = queue.retry_after is not None
    pipe = queue.client.pipeline(transaction=False)
    for name in names:
        keys = queue.keys(name)
        pipe.llen(keys.list)
        pipe.zcount(keys.delayed, "-inf", at)
        if reserved:
            pipe.zcount(keys.reserved, "-inf", at)
        pipe.zcount(keys.unstarted, "-inf", at)
    replies = pipe.execute()
    width = 4 if reserved else 3
    return {name: any(int(r or 0) > 0 for r in replies[i * width:(i + 1) * width]) for i, name in enumerate(names)}
