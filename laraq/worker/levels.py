"""One reserve round over the selection's levels: Laravel's ``Worker::getNextJob`` asking each queue of the
``--queue`` list in turn, first queue first, until one gives a job.

:class:`LevelRound` walks :class:`~laraq.worker.selection.QueueSelection`'s levels in priority order
(patterns' queues and ``--fair`` turns within a level), skipping the paused queues it is handed and asking
each queue's ``--max-per-queue`` slots first; a round that found nothing while queues were known empty
probes them and goes once more. Two rounds:

- :meth:`LevelRound.pop` (``--batch 1``, ``--once``): ``RedisQueue::pop``, one job, call for call, or its
  selective form under ``--unhandled leave`` (the first job with a Python handler, the deep look past the
  window: :class:`~laraq.worker.deeplook.DeepLook`);
- :meth:`LevelRound.reserve`: up to ``want`` jobs, one batch reserve call per queue (the turns of a
  ``--fair`` level in one pipelined round trip), each carrying the deferred acks of its queue.

Both hand back the reservations and the members left for PHP; the reserver buffers them, and a fault
raises through to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from laraq.protocol.queue import RedisQueue, ReservedJob
    from laraq.protocol.reserve import Reserved, Reserving
    from laraq.protocol.timers import Timers
    from laraq.worker.deeplook import DeepLook
    from laraq.worker.selection import Level, QueueSelection, Slots

__all__ = ["LevelRound"]


class LevelRound:
    """The reserve calls of one step over the selection's levels (see the module). ``handled``: the names
    Python has handlers for when only those are reserved (None: the head jobs); ``window``: how many list
    heads a selective reserve looks at."""

    def __init__(self, queue: RedisQueue, reserving: Reserving, timers: Timers, selection: QueueSelection,
                 slots: Slots | None, deep: DeepLook, *, handled: list[str] | None, window: int) -> None:
        self.queue = queue
        self.reserving = reserving
        self.timers = timers
        self.selection = selection
        self.slots = slots
        self.deep = deep
        self.handled = handled
        self.window = window

    # -- Laravel's pop, one job ------------------------------------------------------------------------------

    def pop(self, paused: Collection[str]) -> tuple[ReservedJob | None, int]:
        """Laravel's ``getNextJob``: the first job of the queue list by Laravel's pop (selective under
        ``--unhandled leave``), blocking as its pop does; each queue's slot (``--max-per-queue``) asked for
        first. The job (None: none), and the members the last selective pop left for PHP."""
        left = 0
        for attempt in range(2):
            self.selection.probe_due(idle=False)
            for level in self.selection.levels:
                for name in self.selection.order(level):
                    if name in paused:
                        continue
                    tokens: dict[str, list[str]] = {}
                    if self.slots is not None:
                        granted, tokens = self.slots.acquire([(name, 1)])
                        if not granted:
                            continue
                    try:
                        index = self.selection.position(name)
                        if self.handled is None and not self.selection.dynamic:
                            reserved = self.queue.pop(name, index, self.timers.wait_for)
                        else:  # a pattern's queues are many and come and go: no wait on one's :notify
                            reserved, left = self._pop_handled(name, index, wait=not self.selection.dynamic)
                    except BaseException:
                        if self.slots is not None:
                            self.slots.unused(tokens)
                        raise
                    self.selection.took(level, name, 1, 0 if reserved is None else 1)
                    if self.slots is not None:
                        self.slots.assign(name, tokens[name], [] if reserved is None else [reserved.reserved])
                    if reserved is not None:
                        self.selection.served(level, name)
                        return reserved, left
            if attempt or not self.selection.wake():
                break
        return None, left

    def _pop_handled(self, name: str, index: int, *, wait: bool = True) -> tuple[ReservedJob | None, int]:
        """Laravel's pop (migrate, pop, ``BLPOP :notify`` and one more try) taking the first job with a
        Python handler among the list's first ``window`` members, then past them (the deep look), the head
        job whatever it is when no handler names are given; the others stay where they are. No wait when
        jobs for PHP were left (their tokens would wake it at once), nor without ``wait``."""
        block = wait and self.queue.blocks_at(index)
        got = self.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window,
                                           deep=self.deep.start(name))
        if not got.jobs and not got.skipped and block and self.queue.block_for is not None \
                and self.queue.wait_for_token(name, self.timers.wait_for):
            got = self.reserving.reserve_batch(name, 1, handled=self.handled, window=self.window,
                                               deep=self.deep.start(name))
        self.queue.popped_at(index, bool(got.jobs))
        self.deep.note(name, got)
        return (got.jobs[0] if got.jobs else None), got.skipped

    # -- batch reserves --------------------------------------------------------------------------------------

    def reserve(self, want: int, acks: dict[str, list[bytes]],
                paused: Collection[str]) -> tuple[list[ReservedJob], int]:
        """The levels in priority order until ``want`` jobs came, one batch reserve call per queue (sent
        together for the turns of a ``--fair`` level), the deferred ``acks`` riding on the call of their
        queue (those sent are taken out of ``acks``). The jobs, and the members left for PHP."""
        taken: list[ReservedJob] = []
        left = 0
        for attempt in range(2):
            self.selection.probe_due(idle=False)
            for level in self.selection.levels:
                if len(taken) >= want:
                    break
                jobs, skipped = self._level(level, want - len(taken), acks, paused)
                taken += jobs
                left += skipped
            if taken or attempt or not self.selection.wake():
                break
        return taken, left

    def _level(self, level: Level, want: int, acks: dict[str, list[bytes]],
               paused: Collection[str]) -> tuple[list[ReservedJob], int]:
        """Reserve from one level: its plan, then, while queues of it turned out empty and jobs are still
        wanted, a new plan without them (a turn that found nothing passes to the next queue)."""
        taken: list[ReservedJob] = []
        skipped = 0
        for _ in range(len(level.names) + 1):
            jobs, left, short = self._plan_once(level, want - len(taken), acks, paused)
            taken += jobs
            skipped += left
            if not short or len(taken) >= want:
                break
        return taken, skipped

    def _plan_once(self, level: Level, want: int, acks: dict[str, list[bytes]],
                   paused: Collection[str]) -> tuple[list[ReservedJob], int, bool]:
        """One plan of a level (cut to the slots granted), one call per queue; the jobs, the members left
        for PHP, and whether a queue of a ``--fair`` level gave fewer jobs than its turn."""
        short = False
        plan = [(name, n) for name, n in self.selection.plan(level, want) if name not in paused]
        tokens: dict[str, list[str]] = {}
        if plan and self.slots is not None:
            plan, tokens = self.slots.acquire(plan)
        taken: list[ReservedJob] = []
        skipped = 0
        try:
            if level.fair and len(plan) > 1:
                results = self._together(plan, acks)
            else:
                results = []
                count = 0
                for name, n in plan:
                    n = min(n, want - count)
                    if n <= 0:
                        break
                    mine = acks.pop(name, [])
                    try:
                        got = self.reserving.reserve_batch(name, n, mine, handled=self.handled, window=self.window,
                                                           deep=self.deep.start(name), record=True,
                                                           index=self.selection.position(name))
                    except BaseException:
                        acks.setdefault(name, []).extend(mine)
                        raise
                    results.append((name, n, got))
                    count += len(got.jobs)
            for name, n, got in results:
                skipped += got.skipped
                self.deep.note(name, got)
                self.selection.took(level, name, n, len(got.jobs))
                short = short or (level.fair and len(got.jobs) < n)
                if self.slots is not None:
                    self.slots.assign(name, tokens.pop(name, []), [j.reserved for j in got.jobs])
            taken = self.selection.interleave(level, [(name, got.jobs) for name, _, got in results])
        finally:
            if tokens and self.slots is not None:
                self.slots.unused(tokens)
        return taken, skipped, short

    def _together(self, plan: list[tuple[str, int]],
                  acks: dict[str, list[bytes]]) -> list[tuple[str, int, Reserved]]:
        """The calls of a ``--fair`` level's turns in one pipelined round trip (each the batch reserve of its
        queue, with that queue's acks). A call that failed is left out (its acks kept, to be sent again);
        if none came back, the first fault is raised."""
        mine = {name: acks.pop(name, []) for name, _ in plan}
        try:
            answers = self.reserving.reserve_batches([(name, n, mine[name]) for name, n in plan],
                                                     handled=self.handled, window=self.window, record=True,
                                                     deep=self.deep.start)
        except BaseException:
            for name, sent in mine.items():
                acks.setdefault(name, []).extend(sent)
            raise
        results: list[tuple[str, int, Reserved]] = []
        fault: Exception | None = None
        for (name, n), got in zip(plan, answers, strict=True):
            if isinstance(got, Exception):
                acks.setdefault(name, []).extend(mine[name])  # maybe applied, maybe not: a ZREM twice is harmless
                fault = fault or got
            else:
                results.append((name, n, got))
        if fault is not None and not any(got.jobs for _, _, got in results):
            raise fault
        return results
