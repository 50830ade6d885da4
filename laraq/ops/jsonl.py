"""Jobs written to and read from JSON Lines: ``laraq export`` and ``laraq import``.

One object per line: ``{"queue", "state", "score", "body"}`` (``body_b64`` when a member is not UTF-8),
the member's bytes unchanged. :func:`export_jobs` writes the members of some queues and states;
:func:`import_jobs` checks every line before it writes anything (a bad line is an
:class:`ImportLineError` with its number), then writes the file in one ``MULTI``/``EXEC``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

from laraq.ops.inspect import iter_members
from laraq.protocol.queue import RedisQueue

__all__ = ["ImportLineError", "export_jobs", "import_jobs"]


def _line(queue: str, state: str, score: float | None, member: bytes) -> dict[str, Any]:
    if score is not None and float(score).is_integer():
        score = int(score)  # Laravel's scores are whole seconds; a fractional one is kept as is
    out: dict[str, Any] = {"queue": queue, "state": state, "score": score}
    try:
        out["body"] = member.decode("utf-8")
    except UnicodeDecodeError:
        out["body_b64"] = base64.b64encode(member).decode("ascii")
    return out


def _score(value: Any) -> int | float:
    number = float(value or 0)
    return int(number) if number.is_integer() else number


def export_jobs(queue: RedisQueue, names: Iterable[str], stream: IO[str], *,
                states: Iterable[str] = ("pending", "delayed", "reserved")) -> int:
    """Write every member of ``names`` (the given states) as one JSON object per line."""
    count = 0
    for name in names:
        for state in states:
            for member, score, _ in iter_members(queue, name, state):
                stream.write(json.dumps(_line(name, state, score, member), ensure_ascii=False) + "\n")
                count += 1
    return count


class ImportLineError(ValueError):
    """A line of an export file that cannot be imported; nothing of the file was written."""

    def __init__(self, line: int, cause: str) -> None:
        super().__init__(f"line {line}: {cause}; nothing was imported")
        self.line, self.cause = line, cause


@dataclass(frozen=True)
class _Entry:
    state: str
    queue: str
    member: bytes
    score: int | float | None


def _parse_line(number: int, text: str | bytes, queue: str | None, reserved_as: str) -> _Entry | None:
    try:
        line = json.loads(text)
    except ValueError as exc:
        raise ImportLineError(number, f"not JSON ({exc})") from None
    if not isinstance(line, dict):
        raise ImportLineError(number, "not a JSON object")
    if isinstance(line.get("body"), str):
        member = line["body"].encode("utf-8")
    elif isinstance(line.get("body_b64"), str):
        try:
            member = base64.b64decode(line["body_b64"], validate=True)
        except ValueError as exc:
            raise ImportLineError(number, f"body_b64 is not base64 ({exc})") from None
    else:
        raise ImportLineError(number, 'no "body" (text) or "body_b64" field')
    state = line.get("state")
    if state not in ("pending", "delayed", "reserved", "poison"):
        raise ImportLineError(number, f"unknown state {state!r} (pending, delayed, reserved or poison)")
    name = queue or line.get("queue")
    if not isinstance(name, str) or not name:
        raise ImportLineError(number, 'no "queue" (pass --queue to put every job on one queue)')
    score = line.get("score")
    if state in ("delayed", "reserved") and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise ImportLineError(number, f"a {state} job needs a numeric score, got {score!r}")
    if state == "reserved" and reserved_as != "reserved":
        if reserved_as == "skip":
            return None
        state = "pending"
    if state == "poison":
        state = "pending"
    return _Entry(state, name, member, _score(score) if state != "pending" else None)


def import_jobs(target: RedisQueue, stream: Iterable[str | bytes], *, queue: str | None = None,
                reserved_as: str = "pending", progress: Callable[[int], Any] | None = None) -> dict[str, int]:
    """Push the jobs of an export, all or nothing.

    Every line is read and checked first; a bad line raises :class:`ImportLineError` (its number and
    cause) before anything is written. Then the jobs go to Redis in one ``MULTI``/``EXEC`` transaction
    (one per queue on a cluster, where a queue's keys share a hash slot): pending to the list
    (+ ``:notify``), delayed and reserved with their scores. ``queue`` overrides every line's queue;
    ``reserved_as`` is ``pending`` (the job runs again soon, the usual choice when the old workers are
    gone), ``reserved`` or ``skip``. ``progress(1)`` is called for every line read."""
    counts = {"pending": 0, "delayed": 0, "reserved": 0, "skipped": 0}
    entries: list[_Entry] = []
    for number, text in enumerate(stream, 1):
        if progress is not None:
            progress(1)
        if not text.strip():
            continue
        entry = _parse_line(number, text, queue, reserved_as)
        if entry is None:
            counts["skipped"] += 1
            continue
        entries.append(entry)
    groups: dict[str | None, list[_Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.queue if target.cluster else None, []).append(entry)
    for group in groups.values():
        pipe = target.client.pipeline(transaction=True)
        for entry in group:
            keys = target.keys(entry.queue)
            if entry.state == "pending":
                pipe.rpush(keys.list, entry.member)
                pipe.rpush(keys.notify, 1)
            else:
                assert entry.score is not None  # _parse_line gives every delayed and reserved job its score
                pipe.zadd(keys.delayed if entry.state == "delayed" else keys.reserved, {entry.member: entry.score})
        pipe.execute()
    for entry in entries:
        counts[entry.state] += 1
    return counts
