"""When the next delayed job comes due: how long an idle worker sleeps, or waits on ``:notify``, never longer
than ``--sleep`` (or ``block_for``).

Laravel's worker (``Illuminate\\Queue\\Worker::daemon``) sleeps the whole ``--sleep`` interval when a pop
finds nothing, so a job released or dispatched with a delay fires up to one interval after it is due.
:class:`Timers` reads, for the worker's ``--queue`` list, the lowest score of each ``:delayed`` sorted set
from the current second on (``ZRANGEBYSCORE <delayed> <second> +inf WITHSCORES LIMIT 0 1``: one
``O(log n)`` command per queue, pipelined) and shortens the sleep so the worker wakes just after that
second begins, the moment Laravel's ``migrate`` (``score <= floor(now)``) would move the job. The sleep
is still bounded by ``--sleep``, so a restart, pause or maintenance signal is seen no later than with
the plain ``--sleep``.

Nothing is written and the migrate itself is untouched: the worker's next pop migrates exactly as
Laravel's would. A score of the current second that the last pop left in place (a paused queue, or a
job that came due between the pop and this read) gives one immediate retry; after that the same second
is skipped, so a paused queue's due jobs never make the worker spin. Older scores (stuck behind a
pause) are ignored. When Redis cannot be read, the plain ``--sleep`` is used.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

#: How far past the due second's start the worker wakes (so ``floor(now)`` has reached the score).
WAKE_MARGIN = 0.002


class Timers:
    """The idle sleep of one worker: ``sleep_for(longest)`` = time until the next due delayed job; its
    ``wait_for`` is the ``wait_bound`` of :meth:`laraq.protocol.queue.RedisQueue.block_timeout`."""

    def __init__(self, queue: Any, queues: Sequence[str], clock: Callable[[], float] | None = None) -> None:
        self.queue = queue
        self.queues = list(queues)
        self.clock = clock or getattr(queue, "clock", None) or time.time
        #: the whole second already answered with "due now": not answered again (a paused queue's job)
        self._fired_second: int | None = None
        self._keys: list[str] | None = None

    def use(self, queues: Sequence[str]) -> None:
        """Watch these queues from now on (a ``--queue`` pattern matched new ones, or fewer)."""
        if list(queues) != self.queues:
            self.queues = list(queues)
            self._keys = None

    def delayed_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = [self.queue.keys(name).delayed for name in self.queues]
        return self._keys

    def next_due(self, since: int) -> float | None:
        """The lowest ``:delayed`` score >= ``since`` over the worker's queues (None: nothing scheduled)."""
        keys = self.delayed_keys()
        client = self.queue.client
        if len(keys) == 1:
            replies = [client.zrangebyscore(keys[0], since, "+inf", start=0, num=1, withscores=True)]
        else:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.zrangebyscore(key, since, "+inf", start=0, num=1, withscores=True)
            replies = pipe.execute()
        scores = [float(reply[0][1]) for reply in replies if reply]
        return min(scores) if scores else None

    def sleep_for(self, longest: float) -> float:
        """Seconds to sleep: ``longest`` (``--sleep``), cut short to just after the next due second."""
        if longest <= 0:
            return longest
        now = self.clock()
        second = math.floor(now)
        since = second + 1 if self._fired_second == second else second
        try:
            due = self.next_due(since)
        except Exception:  # Redis unreachable: the next reserve round reports it; sleep as Laravel does
            return longest
        if due is None:
            return longest
        wake = math.ceil(due)  # a score is whole seconds in Laravel; a fractional one is due at its next second
        if wake <= second:
            self._fired_second = second
            return 0.0
        return min(longest, max(0.0, wake - now + WAKE_MARGIN))

    def wait_for(self, block_for: float) -> float | None:
        """How long a ``block_for`` wait (``BLPOP :notify``; 0 = until a token comes) may last: cut short
        to just after the next delayed job's due second, so that a job coming due during the wait is
        migrated when it is due, not when the wait ends. None: a delayed job is due now (do not wait)."""
        longest = block_for if block_for > 0 else math.inf
        seconds = self.sleep_for(longest)
        if seconds == math.inf:
            return 0.0
        if seconds <= 0:
            return None
        return seconds
