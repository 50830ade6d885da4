"""The overview's last hour: one sample of every queue every few seconds, kept in memory, drawn as charts.

A sample is ``laraq status``'s snapshot (:func:`laraq.cli.status_cmd.snapshot`) measured against the
marks the previous sample left on the ready lists (:func:`laraq.ops.inspect.mark_lists`): so each sample
carries the depth of every queue, the age of its oldest pending job, the jobs workers took since the
previous sample (PHP and Python alike: measured on the list, not reported by anyone) and the failed
count, whose growth is the failures per minute. :class:`History` keeps an hour of them (it starts empty
when the dashboard starts: nothing is stored in Redis), and :func:`chart` turns one series per queue into
SVG polyline points for the template (no script, no chart library: the page refresh redraws them).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from laraq.cli.common import Ops
from laraq.cli.status_cmd import snapshot
from laraq.ops.inspect import ListMark, mark_lists

__all__ = ["WINDOW", "History", "Sample", "chart"]

#: how much history the charts cover, in seconds
WINDOW = 3600.0


@dataclass(frozen=True)
class Sample:
    """Every queue at one moment (see the module docstring)."""

    at: float
    #: queue -> pending + delayed + reserved
    depth: dict[str, int]
    #: queue -> seconds the oldest pending job has waited (None: no pending job, or no createdAt)
    wait: dict[str, float | None]
    #: queue -> jobs taken from its ready list since the previous sample (None: not measured)
    taken: dict[str, int | None]
    #: queue -> failed jobs in the store (None: the store could not be read)
    failed: dict[str, int | None]
    #: seconds since the previous sample (0 for the first)
    seconds: float = 0.0


@dataclass
class History:
    """The samples of the last :data:`WINDOW` seconds, taken at most every ``every`` seconds."""

    every: float = 10.0
    samples: deque[Sample] = field(default_factory=deque)
    _marks: list[ListMark] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def maybe_sample(self, ops: Ops, now: float | None = None) -> Sample | None:
        """Take a sample when the last one is ``every`` seconds old (or there is none); the new sample or None."""
        with self._lock:
            clock = ops.queue.clock() if now is None else now
            if self.samples and clock - self.samples[-1].at < self.every:
                return None
            snap = snapshot(ops, [], self._marks, max_size=None)
            names = [s.queue for s in snap.statuses]
            self._marks = mark_lists(ops.queue, names)
            previous = self.samples[-1].at if self.samples else None
            sample = Sample(
                at=clock,
                depth={s.queue: s.total for s in snap.statuses},
                wait={s.queue: s.oldest_pending_age for s in snap.statuses},
                taken={n: (p.taken if (p := snap.pickups.get(n)) is not None else None) for n in names},
                failed={n: None if snap.failed is None else snap.failed.get(n, 0) for n in names},
                seconds=0.0 if previous is None else clock - previous,
            )
            self.samples.append(sample)
            while self.samples and clock - self.samples[0].at > WINDOW:
                self.samples.popleft()
            return sample

    def per_minute(self, queue: str) -> tuple[float | None, float | None]:
        """Jobs taken and jobs failed per minute on ``queue`` over the last two samples (None: not measured)."""
        with self._lock:
            if len(self.samples) < 2:
                return None, None
            before, last = self.samples[-2], self.samples[-1]
        if last.seconds <= 0:
            return None, None
        taken = last.taken.get(queue)
        failed_now, failed_before = last.failed.get(queue), before.failed.get(queue)
        failed = None if failed_now is None or failed_before is None else max(0, failed_now - failed_before)
        return (None if taken is None else taken * 60 / last.seconds,
                None if failed is None else failed * 60 / last.seconds)

    def series(self, what: str) -> dict[str, list[tuple[float, float]]]:
        """queue -> ``(time, value)`` points of ``what``: ``depth``, ``wait`` (seconds) or ``throughput``
        (jobs taken per minute)."""
        with self._lock:
            samples = list(self.samples)
        out: dict[str, list[tuple[float, float]]] = {}
        for s in samples:
            for queue, depth in s.depth.items():
                if what == "depth":
                    value: float | None = float(depth)
                elif what == "wait":
                    value = s.wait.get(queue) or 0.0
                else:
                    taken = s.taken.get(queue)
                    value = None if taken is None or s.seconds <= 0 else taken * 60 / s.seconds
                if value is not None:
                    out.setdefault(queue, []).append((s.at, value))
        return out


#: the chart's drawing area, in SVG user units
WIDTH, HEIGHT = 600.0, 120.0


def chart(series: dict[str, list[tuple[float, float]]], now: float, *, limit: int = 6) -> dict[str, Any]:
    """SVG polyline points for up to ``limit`` queues (the biggest by their latest value) over the last
    hour ending ``now``, scaled to the largest value shown; ``top`` is that value."""
    chosen = sorted(series.items(), key=lambda kv: -(kv[1][-1][1] if kv[1] else 0))[:limit]
    top = max((v for _, points in chosen for _, v in points), default=0.0)
    scale = HEIGHT / top if top > 0 else 0.0
    lines = []
    for queue, points in chosen:
        coords = " ".join(f"{max(0.0, WIDTH - (now - t) * WIDTH / WINDOW):.1f},{HEIGHT - v * scale:.1f}"
                          for t, v in points)
        lines.append({"queue": queue, "points": coords, "last": points[-1][1] if points else 0})
    return {"lines": lines, "top": top, "width": WIDTH, "height": HEIGHT}
