"""What is running now: each reserved job, the worker that holds it, since when, and when its lease ends.

A reservation is a member of ``queues:NAME:reserved`` scored with the time its lease ends (``now +
retry_after`` when it was popped). Redis does not say who popped it; laraq workers do, in their heartbeat
record (:mod:`laraq.production.heartbeat`: the payload ids they hold and when they took each). So each
reserved job is:

* ``held``: a live laraq worker (by heartbeat) holds it; ``worker``, ``host`` and ``pid`` say which, and
  ``since`` is when it took the job;
* ``unattributed``: no live laraq worker holds it. Either a PHP worker (``queue:work`` or Horizon, which
  keep no such record) runs it, or its worker is gone: it is an *orphan*, and comes back by itself when its
  lease ends: the next pop on the queue (PHP's or laraq's) moves it back to the ready list, its attempt
  counted (``retry_after``). ``since`` is estimated as ``lease end - retry_after``;
* ``expired``: the lease already ended and nobody has moved it back yet (no worker pops that queue): an
  orphan for sure; it goes back to the ready list at the next pop.

Recently reserved jobs show as ``unattributed`` until their worker's next beat (every few seconds).
:func:`reservations` reads it with one ``ZRANGE`` per queue (at most ``limit`` members each) and the live
worker records; ``laraq status --reserved`` prints it and :class:`laraq.production.metrics.QueueSampler`
exports the counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from laraq.production.heartbeat import WorkerRecord, live_workers
from laraq.protocol.payload import is_queued_command
from laraq.protocol.phpjson import json_loads

__all__ = ["Reservation", "holders", "reservations", "running_counts"]

STATES = ("held", "unattributed", "expired")


@dataclass(frozen=True)
class Reservation:
    """One reservation (see the module docstring)."""

    queue: str
    key: str
    id: str | None
    uuid: str | None
    job: str
    attempts: int | None
    lease_ends_at: float
    state: str
    since: float | None
    since_estimated: bool
    worker: str | None = None
    host: str | None = None
    pid: int | None = None

    @property
    def orphan(self) -> bool:
        return self.state != "held"

    def comes_back(self, now: float) -> str:
        """How an orphan returns to the ready list."""
        if self.state == "held":
            return ""
        if self.lease_ends_at <= now:
            return f"lease ended {now - self.lease_ends_at:.0f}s ago: the next pop on {self.queue} moves it back"
        return (f"in {self.lease_ends_at - now:.0f}s (retry_after): the next pop on {self.queue} after its lease "
                "ends moves it back, its attempt counted")

    def to_dict(self, now: float) -> dict[str, Any]:
        out = asdict(self)
        out["orphan"] = self.orphan
        out["comes_back"] = self.comes_back(now) or None
        return out


def holders(records: Iterable[WorkerRecord]) -> dict[str, tuple[WorkerRecord, float]]:
    """Payload id -> (the live worker holding it, when it took it), from the heartbeat records."""
    out: dict[str, tuple[WorkerRecord, float]] = {}
    for record in records:
        try:
            held = json.loads(record.extra.get("holding") or "{}")
        except ValueError:
            continue
        if isinstance(held, dict):
            for job_id, since in held.items():
                if isinstance(since, int | float):
                    out[str(job_id)] = (record, float(since))
    return out


def _describe(member: bytes) -> tuple[str | None, str | None, str, int | None]:
    try:
        decoded = json_loads(member)
    except ValueError:
        return None, None, "(not a JSON payload)", None
    if not isinstance(decoded, dict):
        return None, None, "(not a JSON payload)", None
    data = decoded.get("data")
    command = data.get("commandName") if isinstance(data, dict) and is_queued_command(decoded.get("job")) else None
    name = command or decoded.get("displayName") or decoded.get("job") or "?"
    attempts = decoded.get("attempts")
    return (str(decoded["id"]) if decoded.get("id") is not None else None,
            str(decoded["uuid"]) if decoded.get("uuid") is not None else None, str(name),
            attempts if isinstance(attempts, int) else None)


def reservations(redis_queue: Any, queues: Iterable[str], *, retry_after: int | None = None,
                  limit: int = 1000, records: list[WorkerRecord] | None = None) -> list[Reservation]:
    """Every reservation of ``queues`` (at most ``limit`` per queue, soonest lease end first)."""
    names = [q for q in dict.fromkeys(queues) if q]
    if not names:
        return []
    if records is None:
        records = live_workers(redis_queue.client, redis_queue.prefix)
    held = holders(records)
    retry = retry_after if retry_after is not None else getattr(redis_queue, "retry_after", None)
    now = float(redis_queue.current_time())
    pipe = redis_queue.client.pipeline(transaction=False)
    for name in names:
        pipe.zrange(redis_queue.keys(name).reserved, 0, limit - 1, withscores=True)
    out: list[Reservation] = []
    for name, members in zip(names, pipe.execute(), strict=True):
        key = redis_queue.keys(name).reserved
        for member, score in members:
            job_id, uuid, job, attempts = _describe(member)
            holder = held.get(job_id or "")
            if holder is not None:
                record, since = holder
                out.append(Reservation(name, key, job_id, uuid, job, attempts, float(score), "held", since, False,
                                       record.id, record.host, record.pid))
                continue
            state = "expired" if float(score) <= now else "unattributed"
            since_estimate = float(score) - retry if retry else None
            out.append(Reservation(name, key, job_id, uuid, job, attempts, float(score), state, since_estimate,
                                   since_estimate is not None))
    return out


def running_counts(jobs: Iterable[Reservation]) -> dict[tuple[str, str], int]:
    """(queue, state) -> how many reservations, for the Prometheus gauge."""
    counts: dict[tuple[str, str], int] = {}
    for job in jobs:
        counts[(job.queue, job.state)] = counts.get((job.queue, job.state), 0) + 1
    return counts
