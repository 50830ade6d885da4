"""Repeated warnings, rate-limited: the first occurrence is logged at once, the repeats are counted and
summed up in one line every few seconds, and the end of the run of repeats is said once.

A worker that loses Redis meets the same fault on every pass of its loop (every 50 ms, or for every
buffered lease), and one line per pass would flood the log. :class:`Repeated` is the small object each
such warning goes through::

    acks_unsent = Repeated(log, "could not send %d ack(s) (%s): retrying", every=5.0)
    acks_unsent.warn(len(acks), exc)      # logged at once the first time
    acks_unsent.warn(len(acks), exc)      # counted; every 5 s: "... (12 more times in the last 5s)"
    acks_unsent.clear("acks sent again")  # the fault is over: one line with the total, if any repeats
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Repeated"]


class Repeated:
    """One warning message that is logged at most once per ``every`` seconds, with a count of the repeats
    in between (thread-safe; the clock is ``time.monotonic`` unless given)."""

    def __init__(self, logger: logging.Logger, message: str, *, every: float = 5.0, level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.message = message
        self.every = every
        self.level = level
        self.clock = clock
        self._lock = threading.Lock()
        #: when the last line was written (None: not in a run of repeats)
        self._logged_at: float | None = None
        #: repeats since the last line
        self._since = 0
        #: repeats in the whole run (for the closing line)
        self.total = 0

    @property
    def active(self) -> bool:
        """Is a run of repeats going on (the warning was logged and not cleared)?"""
        return self._logged_at is not None

    def warn(self, *args: Any) -> bool:
        """Log the message with ``args`` now, or count it when it was logged less than ``every`` seconds
        ago; True if a line was written."""
        now = self.clock()
        with self._lock:
            self.total += 1
            if self._logged_at is not None and now - self._logged_at < self.every:
                self._since += 1
                return False
            repeats, self._since = self._since, 0
            first = self._logged_at is None
            self._logged_at = now
        if first or not repeats:
            self.logger.log(self.level, self.message, *args)
        else:
            self.logger.log(self.level, self.message + " (%d more time(s) in the last %.0fs)", *args, repeats,
                            self.every)
        return True

    def clear(self, note: str | None = None) -> None:
        """The fault is over: with ``note``, one line saying so and how often it was met in all."""
        with self._lock:
            was, total = self._logged_at is not None, self.total
            self._logged_at, self._since, self.total = None, 0, 0
        if was and note:
            self.logger.log(self.level, "%s (after %d occurrence(s))", note, total)
