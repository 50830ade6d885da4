"""Which queues a reserve step asks, in what order and for how many jobs: the ``--queue`` list as
priority levels, queues named by pattern, ``--fair`` round-robin and ``--max-per-queue`` slots.

Laravel's ``Worker::getNextJob`` walks the ``--queue`` list in order and the first queue with a job
wins. :class:`QueueSelection` keeps that order as *levels*: each item of the list is one level, a
literal name a level of one queue, a pattern (``tenant-*``) a level of every queue it matches
(:class:`~laraq.protocol.discovery.QueueDiscovery`, refreshed every ``--discover-every`` seconds). A
level is asked only for what the levels before it left. Inside a pattern level the queues go by name;
with ``--fair`` they take turns instead: each round starts after the queue the last one ended on, and a
queue's turn is its weight in jobs (``--weights 'tenant-vip=4'``, default 1), so a 100,000-job tenant gets
one job in each turn like every other tenant. With ``--fair`` and no pattern, the whole list is one
round-robin level. A plain list without ``--fair`` is exactly Laravel's order, one queue per level,
every queue asked every round.

Queues of a pattern level that a reserve found empty are not asked again until a probe
(:func:`~laraq.protocol.discovery.probe`: a waiting job, a due ``:delayed`` one, an expired
reservation) says they have work; probes run at most every :data:`PROBE_EVERY` seconds while the known
busy queues keep the worker busy, and on every round that would otherwise find nothing. So an emptied
tenant costs three ``ZCOUNT``/``LLEN`` in a pipeline now and then, and the migrate Laravel's pop runs
still runs, inside the reserve call, whenever a queue has something due.

:class:`Slots` holds the worker's side of ``--max-per-queue``: tokens asked for just before a queue is
reserved from (:class:`~laraq.protocol.queueslots.QueueSlots`), one per job reserved, given back when
the job is settled (a listener on the worker's events), renewed while it runs, and left to expire if the
process dies.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from laraq.protocol.discovery import QueueDiscovery, is_pattern, probe
from laraq.protocol.queue import RedisQueue
from laraq.protocol.queueslots import QueueSlots
from laraq.worker.events import JobFailed, JobProcessed, JobReleased, JobUnhandled, WorkerListener

__all__ = ["Level", "QueueSelection", "Slots", "parse_weights"]

log = logging.getLogger("laraq.worker.worker")

_T = TypeVar("_T")

#: The longest a queue known empty goes without a probe while other queues keep the worker busy (s).
PROBE_EVERY = 0.25
#: How long the slots of settled jobs may wait for the next reserve step before they go back anyway (s).
FLUSH_EVERY = 0.05


def parse_weights(text: str | None) -> list[tuple[str, int]]:
    """``--weights 'tenant-vip=4,tenant-b*=2'``: (name or pattern, weight) pairs, first match wins."""
    out: list[tuple[str, int]] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.rpartition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"--weights item {item!r} is not NAME=N with N a whole number of at least 1")
        out.append((name.strip(), int(value)))
    return out


@dataclass
class Level:
    """One item of the ``--queue`` list: a queue, or the queues a pattern matches."""

    item: str
    pattern: bool
    fair: bool
    #: the queues of this level now, in order (a pattern's by name)
    names: list[str] = field(default_factory=list)
    #: --fair: the index the next round starts at
    cursor: int = 0
    #: --fair, one job per step: jobs taken in a row from the queue at the cursor
    streak: int = 0


class QueueSelection:
    """The ``--queue`` list as levels (see the module). ``queue`` is used for discovery and probes only."""

    def __init__(self, queue: RedisQueue, spec: Sequence[str], *, fair: bool = False,
                 weights: Sequence[tuple[str, int]] = (), discover_every: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queue = queue
        self.spec = [s for s in spec if s] or ["default"]
        self.fair = fair
        self.weights = list(weights)
        self.discover_every = discover_every
        self.clock = clock
        patterns = [s for s in self.spec if is_pattern(s)]
        self.dynamic = bool(patterns)
        self.discovery = QueueDiscovery(queue, patterns) if patterns else None
        if fair and not patterns:  # a list without a pattern: one round-robin level
            self.levels = [Level(",".join(self.spec), False, True, list(dict.fromkeys(self.spec)))]
        else:
            self.levels = [Level(s, is_pattern(s), fair and is_pattern(s), [] if is_pattern(s) else [s])
                           for s in self.spec]
        self._empty: set[str] = set()
        self._probed_at = -1e9
        self._discovered_at = -1e9
        #: every queue served, in priority order (a pattern's: after the first :meth:`refresh`)
        self._names: list[str] = list(dict.fromkeys(n for level in self.levels for n in level.names))
        self._positions = {n: i for i, n in enumerate(self._names)}
        self._started = not self.dynamic

    # -- what the worker serves --------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every queue served now, in priority order (each once; a pattern's queues once discovered)."""
        return self._names

    def position(self, name: str) -> int:
        """A queue's place in :meth:`names` (Laravel's ``$index`` in ``getNextJob``, paused queues counted:
        its first-queue rule)."""
        return self._positions.get(name, len(self._positions))

    @property
    def single(self) -> str | None:
        """The one queue of a one-literal list (the reserver's ask-ahead and ``BLPOP`` paths), else None."""
        return self.spec[0] if len(self.spec) == 1 and not self.dynamic else None

    def weight(self, name: str) -> int:
        for pattern, weight in self.weights:
            if fnmatch.fnmatchcase(name, pattern):
                return weight
        return 1

    def refresh(self) -> bool:
        """Discovery when due (a bounded ``SCAN``); True when the set of queues changed."""
        now = self.clock()
        changed = not self._started
        self._started = True
        if self.discovery is not None and now - self._discovered_at >= self.discover_every:
            self._discovered_at = now
            if self.discovery.passes == 0:
                self.discovery.full_pass()
            else:
                self.discovery.refresh()
            for level in self.levels:
                if level.pattern:
                    found = self.discovery.matched(level.item)
                    if found != level.names:
                        changed = True
                        kept = level.names[level.cursor] if level.names and level.cursor < len(level.names) else None
                        level.names = found
                        level.cursor = found.index(kept) if kept in found else level.cursor % max(1, len(found))
        if changed:
            self._names = list(dict.fromkeys(n for level in self.levels for n in level.names))
            self._positions = {n: i for i, n in enumerate(self._names)}
            self._empty &= set(self._names)
        return changed

    # -- one round ---------------------------------------------------------------------------------------

    def probe_due(self, idle: bool) -> None:
        """Probe the queues known empty when :data:`PROBE_EVERY` passed, or when nothing else is known busy
        (``idle``: a round that would otherwise find nothing)."""
        if not self._empty:
            return
        now = self.clock()
        if not idle and now - self._probed_at < PROBE_EVERY:
            return
        self._probed_at = now
        busy = probe(self.queue, sorted(self._empty))
        self._empty -= {n for n, has in busy.items() if has}

    def tracked(self, level: Level) -> bool:
        """Is a level's emptiness tracked (several queues, or a pattern)? A literal queue of a priority list
        is asked every round, as Laravel's pop asks it."""
        return level.pattern or len(level.names) > 1

    def order(self, level: Level) -> list[str]:
        """The queues of ``level`` to ask now, in order: by name (or list order), or with ``--fair`` in turns
        from the cursor; queues known empty left out."""
        tracked = self.tracked(level)
        names = [n for n in level.names if not (tracked and n in self._empty)]
        if not level.fair or not names:
            return names
        start = level.cursor % len(level.names)
        live = set(names)
        return [n for n in level.names[start:] + level.names[:start] if n in live]

    def plan(self, level: Level, want: int) -> list[tuple[str, int]]:
        """The queues of ``level`` to ask this round and how many jobs at most from each. Priority: every
        live queue in order, each for all of ``want``. Fair: turns from the cursor, a queue's turn its
        weight, until ``want`` is shared out; the cursor moves past the last queue served."""
        order = self.order(level)
        if not level.fair or not order:
            return [(n, want) for n in order]
        shares: dict[str, int] = {}
        left, last = want, order[0]
        while left > 0:
            for name in order:
                give = min(self.weight(name), left)
                shares[name] = shares.get(name, 0) + give
                left -= give
                last = name
                if left <= 0:
                    break
        level.cursor, level.streak = (level.names.index(last) + 1) % len(level.names), 0
        return [(n, shares[n]) for n in order if n in shares]

    def interleave(self, level: Level, taken: list[tuple[str, list[_T]]]) -> list[_T]:
        """The jobs a round took from a level's queues, in the order they start: with ``--fair`` turn by turn
        (each queue's weight in jobs, then the next queue), otherwise queue after queue."""
        if not level.fair:
            return [job for _, jobs in taken for job in jobs]
        out: list[_T] = []
        queues = [(self.weight(name), list(jobs)) for name, jobs in taken]
        while any(jobs for _, jobs in queues):
            for weight, jobs in queues:
                out += jobs[:weight]
                del jobs[:weight]
        return out

    def served(self, level: Level, name: str) -> None:
        """One job was taken from ``name`` (one job per step, ``--batch 1``): with ``--fair`` the turn moves
        on once the queue had as many jobs in a row as its weight."""
        if not level.fair or name not in level.names:
            return
        at = level.names.index(name)
        level.streak = level.streak + 1 if at == level.cursor % len(level.names) else 1
        level.cursor = at
        if level.streak >= self.weight(name):
            level.cursor, level.streak = (at + 1) % len(level.names), 0

    def wake(self) -> bool:
        """A round that found nothing: probe every queue known empty now; True if one has work."""
        if not self._empty:
            return False
        before = len(self._empty)
        self.probe_due(idle=True)
        return len(self._empty) < before

    def took(self, level: Level, name: str, asked: int, got: int) -> None:
        """A reserve of ``name`` for ``asked`` jobs took ``got``: fewer means the queue is empty for now."""
        if self.tracked(level) and got < asked:
            self._empty.add(name)

    def known_empty(self, name: str) -> bool:
        return name in self._empty


class Slots(WorkerListener):
    """This worker's ``--max-per-queue`` slots (see the module): tokens per reserved job, given back when the
    job is settled, renewed every third of a lease."""

    def __init__(self, queue: RedisQueue, limit: int, lease: float) -> None:
        self.store = QueueSlots(queue, limit, lease)
        self.lease = lease
        self.prefix = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}:"
        self._seq = 0
        self._lock = threading.Lock()
        #: reserved member -> (queue, token) of every job reserved and not settled
        self._held: dict[bytes, tuple[str, str]] = {}
        #: tokens of settled jobs, to give back on the next pass
        self._done: dict[str, list[str]] = {}
        self._renew_at = 0.0
        self._flush_at = 0.0

    def acquire(self, plan: list[tuple[str, int]]) -> tuple[list[tuple[str, int]], dict[str, list[str]]]:
        """Slots for a plan: the plan cut to what was granted (queues granted none dropped) and the tokens."""
        self.flush()
        asked: dict[str, list[str]] = {}
        for name, count in plan:
            asked[name] = [self._token() for _ in range(count)]
        granted = self.store.acquire(asked)
        tokens = {n: asked[n][:granted.get(n, 0)] for n in asked}
        return [(n, len(tokens[n])) for n, _ in plan if tokens[n]], tokens

    def _token(self) -> str:
        self._seq += 1
        return f"{self.prefix}{self._seq}"

    def assign(self, name: str, tokens: list[str], members: list[bytes]) -> None:
        """The jobs a reserve took on ``name`` hold the first tokens; the rest go back at once."""
        with self._lock:
            for token, member in zip(tokens, members, strict=False):
                self._held[member] = (name, token)
        if len(tokens) > len(members):
            self.store.release({name: tokens[len(members):]})

    def unused(self, tokens: dict[str, list[str]]) -> None:
        """Tokens granted for a reserve that failed: back at once."""
        self.store.release(tokens)

    def forget(self, members: Sequence[bytes]) -> None:
        """Jobs given back unstarted (or otherwise settled): their slots go with the next flush."""
        with self._lock:
            for member in members:
                held = self._held.pop(member, None)
                if held is not None:
                    self._done.setdefault(held[0], []).append(held[1])

    def flush(self) -> None:
        """Give back the slots of settled jobs (one round trip, only when there are some)."""
        with self._lock:
            done, self._done = self._done, {}
        if done:
            try:
                self.store.release(done)
            except Exception as exc:  # they expire with their lease
                log.warning("could not give back %d queue slot(s) (%s): they expire within %.0fs",
                            sum(len(t) for t in done.values()), exc, self.lease)

    def flush_due(self) -> None:
        """:meth:`flush` at most every :data:`FLUSH_EVERY` seconds (between reserve steps, which flush first)."""
        now = time.monotonic()
        if self._done and now >= self._flush_at:
            self._flush_at = now + FLUSH_EVERY
            self.flush()

    def renew_due(self) -> None:
        """Every third of a lease: renew the slots of reserved jobs, drop those whose job is gone."""
        now = time.monotonic()
        if now < self._renew_at:
            return
        self._renew_at = now + self.lease / 3
        self.flush()
        with self._lock:
            by_queue: dict[str, list[tuple[str, bytes]]] = {}
            for member, (name, token) in self._held.items():
                by_queue.setdefault(name, []).append((token, member))
        if not by_queue:
            return
        try:
            answers = self.store.renew(by_queue)
        except Exception as exc:
            log.warning("could not renew %d queue slot(s) (%s)", sum(len(p) for p in by_queue.values()), exc)
            return
        with self._lock:
            for name, pairs in by_queue.items():
                for (_token, member), kept in zip(pairs, answers.get(name, []), strict=False):
                    if not kept:
                        self._held.pop(member, None)

    @property
    def holding(self) -> int:
        return len(self._held)

    # -- the events that settle a job --------------------------------------------------------------------

    def _settled(self, job: object) -> None:
        reserved = getattr(getattr(job, "reserved_job", None), "reserved", None)
        if isinstance(reserved, bytes):
            self.forget([reserved])

    def job_processed(self, event: JobProcessed) -> None:
        self._settled(event.job)

    def job_failed(self, event: JobFailed) -> None:
        self._settled(event.job)

    def job_released(self, event: JobReleased) -> None:
        self._settled(event.job)

    def job_unhandled(self, event: JobUnhandled) -> None:
        self._settled(event.job)
