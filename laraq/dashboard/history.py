"""The overview's last hour: one sample of every queue every few seconds, kept in Redis, drawn as charts.

A sample is ``laraq status``'s snapshot (:func:`laraq.cli.status_cmd.snapshot`) measured against the
marks the previous sample of this process left on the ready lists (:func:`laraq.ops.inspect.mark_lists`):
so each sample carries the depth of every queue, the age of its oldest pending job, the jobs workers took
since that previous sample (PHP and Python alike: measured on the list, not reported by anyone) and the
failed count, whose growth is the failures per minute.

The samples live in one small ZSET under the app's prefix, ``<prefix>laraq:dashboard:history`` (member a
sample's JSON, score its time): each sample is one pipelined write (``ZADD``, the trims of what is older
than :data:`WINDOW` or past :data:`CAP` samples, ``EXPIRE``), so the charts survive a dashboard's restart,
several dashboards share them (a dashboard samples only when the newest stored sample, whoever wrote it,
is ``every`` seconds old), and the key is gone an hour after the last dashboard stops. :func:`chart`
turns one series per queue into SVG polyline points for the template (no script, no chart library: the
page refresh redraws them).
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from laraq.cli.common import Ops
from laraq.cli.status_cmd import snapshot
from laraq.ops.inspect import ListMark, mark_lists

__all__ = ["CAP", "WINDOW", "History", "Recent", "Sample", "chart", "history_key"]

#: how much history the charts cover, in seconds
WINDOW = 3600.0
#: the most samples the key keeps (an hour at one per 5 s)
CAP = 720


def history_key(prefix: str) -> str:
    """The ZSET of the samples, under the app's Redis prefix."""
    return f"{prefix}laraq:dashboard:history"


@dataclass(frozen=True)
class Sample:
    """Every queue at one moment (see the module docstring)."""

    at: float
    #: queue -> pending + delayed + reserved
    depth: dict[str, int]
    #: queue -> seconds the oldest pending job has waited (None: no pending job, or no createdAt)
    wait: dict[str, float | None]
    #: queue -> jobs taken from its ready list over ``seconds`` (None: not measured)
    taken: dict[str, int | None]
    #: queue -> failed jobs in the store (None: the store could not be read)
    failed: dict[str, int | None]
    #: seconds ``taken`` was measured over (0: not measured, the first sample of a dashboard process)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: bytes | str) -> Sample | None:
        """The sample, or None for a member that is not one (written by something else)."""
        try:
            d = json.loads(text)
            return cls(at=float(d["at"]), depth=dict(d["depth"]), wait=dict(d["wait"]), taken=dict(d["taken"]),
                       failed=dict(d["failed"]), seconds=float(d.get("seconds", 0.0)))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Recent:
    """The stored samples of the last :data:`WINDOW` seconds, oldest first."""

    samples: list[Sample]

    def per_minute(self, queue: str) -> tuple[float | None, float | None]:
        """Jobs taken and jobs failed per minute on ``queue`` over the last two samples (None: not measured)."""
        if len(self.samples) < 2:
            return None, None
        before, last = self.samples[-2], self.samples[-1]
        taken = last.taken.get(queue)
        failed_now, failed_before = last.failed.get(queue), before.failed.get(queue)
        apart = last.at - before.at
        failed = None if failed_now is None or failed_before is None or apart <= 0 else \
            max(0, failed_now - failed_before) * 60 / apart
        return (None if taken is None or last.seconds <= 0 else taken * 60 / last.seconds, failed)

    def series(self, what: str) -> dict[str, list[tuple[float, float]]]:
        """queue -> ``(time, value)`` points of ``what``: ``depth``, ``wait`` (seconds) or ``throughput``
        (jobs taken per minute)."""
        out: dict[str, list[tuple[float, float]]] = {}
        for s in self.samples:
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


@dataclass
class History:
    """Takes a sample at most every ``every`` seconds (counting every dashboard's samples) and reads the
    stored ones back."""

    every: float = 10.0
    _marks: list[ListMark] | None = None
    _marked_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def maybe_sample(self, ops: Ops, now: float | None = None) -> Sample | None:
        """Take and store a sample when the newest stored one is ``every`` seconds old (or there is none);
        the new sample or None."""
        client, key = ops.queue.client, history_key(ops.queue.prefix)
        with self._lock:
            clock = ops.queue.clock() if now is None else now
            newest = client.zrevrange(key, 0, 0, withscores=True)
            if newest and clock - float(newest[0][1]) < self.every:
                return None
            snap = snapshot(ops, [], self._marks, max_size=None)
            names = [s.queue for s in snap.statuses]
            self._marks = mark_lists(ops.queue, names)
            measured = self._marked_at is not None and clock > self._marked_at
            sample = Sample(
                at=clock,
                depth={s.queue: s.total for s in snap.statuses},
                wait={s.queue: s.oldest_pending_age for s in snap.statuses},
                taken={n: (p.taken if measured and (p := snap.pickups.get(n)) is not None else None)
                       for n in names},
                failed={n: None if snap.failed is None else snap.failed.get(n, 0) for n in names},
                seconds=clock - self._marked_at if measured and self._marked_at is not None else 0.0,
            )
            self._marked_at = clock
            pipe = client.pipeline(transaction=False)
            pipe.zadd(key, {sample.to_json(): clock})
            pipe.zremrangebyscore(key, "-inf", f"({clock - WINDOW!r}")
            pipe.zremrangebyrank(key, 0, -CAP - 1)
            pipe.expire(key, int(WINDOW) + 60)
            pipe.execute()
            return sample

    def recent(self, ops: Ops, now: float | None = None) -> Recent:
        """The stored samples of the last :data:`WINDOW` seconds before ``now`` (the queue's clock)."""
        clock = ops.queue.clock() if now is None else now
        members = ops.queue.client.zrangebyscore(history_key(ops.queue.prefix), clock - WINDOW, "+inf")
        return Recent([s for m in members if isinstance(m, bytes | str) and (s := Sample.from_json(m)) is not None])


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
