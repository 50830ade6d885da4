"""The deep look of a selective reserve (``--unhandled leave``): what the reserve step keeps between calls
when it takes only jobs with a Python handler and leaves the others in the list for PHP workers.

Laravel's ``RedisQueue::pop`` takes the head job whatever it is; a selective reserve looks at the list's
first ``--scan-window`` members, then past them page by page (the deep look,
:data:`~laraq.protocol.lua_laraq.RESERVE_HANDLED`). :class:`DeepLook` owns, per queue, where the next page
starts, whether Redis refuses what the look needs (``LSET``/``LREM`` under an ACL: then only the window is
looked at), and what the look saw, told now and then: a whole window of jobs for PHP at a list's head (info,
once a minute), Python jobs beyond the look's reach (a warning, once a minute, and
:class:`~laraq.worker.events.JobsOutOfReach` when their count at the end of a look changed).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from laraq.protocol.lua_laraq import DEEP_REACH
from laraq.repeated import Repeated
from laraq.worker.events import JobsOutOfReach

if TYPE_CHECKING:
    from laraq.protocol.reserve import Reserved
    from laraq.worker.events import Listeners

__all__ = ["DeepLook"]

log = logging.getLogger("laraq.worker.worker")


class DeepLook:
    """Where each queue's deep look stands, and what it saw (see the module). ``selective``: only jobs with a
    Python handler are reserved (else no look past the head); ``window``: how many list heads a reserve
    looks at."""

    def __init__(self, events: Listeners, *, selective: bool, window: int) -> None:
        self.events = events
        self.selective = selective
        self.window = window
        #: per queue, where the next deep look past the window starts
        self._cursor: dict[str, int] = {}
        self._refused = False
        #: per queue, Python jobs beyond reach: seen so far in the look under way, and told at its last end
        self._beyond_now: dict[str, int] = {}
        self._beyond_told: dict[str, int] = {}
        #: a window full of jobs for PHP at the head of a queue: said once a minute at most
        self._left_alone = Repeated(log, "the first %d job(s) of queue %s (%d in all) have no Python handler: "
                                    "left for PHP workers (--unhandled leave); laraq looks for Python jobs "
                                    "behind them", every=60.0, level=logging.INFO)
        #: Python jobs the deep look cannot take (too far from both ends of a long list): warned once a minute
        self._beyond = Repeated(log, "queue %s: %d Python job(s) wait more than %d members from both ends of "
                                "its list (%d jobs, PHP workers not taking them): laraq takes them once the "
                                "jobs for PHP ahead of them are taken", every=60.0)

    def start(self, name: str) -> int | None:
        """Where the deep look of a selective reserve of ``name`` starts (None: no deep look: every job is
        taken from the head, or the ACL refuses what the look needs)."""
        if not self.selective or self._refused:
            return None
        return self._cursor.get(name, 0)

    def more(self, paused: Collection[str]) -> bool:
        """Has a deep look more of some list to read, one not ``paused`` (the next step comes at once)?"""
        return any(at > 0 for name, at in self._cursor.items() if name not in paused)

    def note(self, name: str, got: Reserved) -> None:
        """What a selective reserve saw: the deep look's next cursor; a whole window of jobs without a Python
        handler, and none taken (said now and then, info); Python jobs beyond the deep look's reach (a
        warning, once a minute)."""
        if got.cursor < 0:
            if not self._refused:
                log.warning("Redis refuses LSET/LREM to this ACL user: laraq looks for Python jobs among the "
                            "first %d jobs of a queue only (grant them: ACL SETUSER <user> +lset +lrem)",
                            self.window)
            self._refused = True
            self._cursor.clear()
        else:
            self._cursor[name] = got.cursor
        if not got.jobs and got.skipped >= self.window:
            self._left_alone.warn(self.window, name, got.depth)
        if got.beyond:
            self._beyond.warn(name, got.beyond, DEEP_REACH, got.depth)
        seen = self._beyond_now[name] = self._beyond_now.get(name, 0) + got.beyond
        if got.cursor <= 0:  # a whole look ended (or the next starts over): its count is told when it changed
            self._beyond_now[name] = 0
            if seen != self._beyond_told.get(name, 0):
                self._beyond_told[name] = seen
                if self.events.wants(JobsOutOfReach):
                    self.events.emit(JobsOutOfReach(name, seen, got.depth))
