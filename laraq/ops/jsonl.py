"""Jobs written to and read from JSON Lines: ``laraq export`` and ``laraq import``.

One object per line: ``{"queue", "state", "score", "body"}`` (``body_b64`` when a member is not UTF-8),
the member's bytes unchanged. :func:`export_jobs` writes the members of some queues and states;
:func:`import_jobs` checks every line before it writes anything (a bad line is an
:class:`ImportLineError` with its number), then writes the file in one ``MULTI``/``EXEC``, each job
once (by uuid/id, remembered per queue, so re-running an import never duplicates).
:func:`remove_exported` deletes from the source what an export copied, once it is safe.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

import redis

from laraq.ops.inspect import identities_at, iter_members, job_identity
from laraq.ops.transfers import TRANSFER_MARK
from laraq.protocol.phpjson import json_loads
from laraq.protocol.queue import RedisQueue

__all__ = ["REMEMBER_SECONDS", "ImportLineError", "export_jobs", "import_jobs", "remove_exported"]

#: How long an import remembers the jobs it wrote to a queue (so a re-run skips those a worker ran).
REMEMBER_SECONDS = 30 * 86400


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


def _parse_line(number: int, text: str | bytes, queue: str | None, reserved_as: str, *,
                keep_poison: bool = False) -> _Entry | None:
    try:
        line = json_loads(text)
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
    if state == "poison" and not keep_poison:
        state = "pending"
    return _Entry(state, name, member, _score(score) if state not in ("pending", "poison") else None)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _remembered_key(target: RedisQueue, queue: str) -> str:
    """The set of identities an import wrote to ``queue`` (skipped by queue discovery and ``status``)."""
    return target.keys(queue).base + TRANSFER_MARK + "imported"


def import_jobs(target: RedisQueue, stream: Iterable[str | bytes], *, queue: str | None = None,
                reserved_as: str = "pending", progress: Callable[[int], Any] | None = None,
                allow_duplicates: bool = False, remember: int = REMEMBER_SECONDS,
                dry_run: bool = False) -> dict[str, int]:
    """Push the jobs of an export, all or nothing, each job once.

    Every line is read and checked first; a bad line raises :class:`ImportLineError` (its number and
    cause) before anything is written. Then the jobs go to Redis in one ``MULTI``/``EXEC`` transaction
    (one per queue on a cluster, where a queue's keys share a hash slot): pending to the list
    (+ ``:notify``), delayed and reserved with their scores. ``queue`` overrides every line's queue;
    ``reserved_as`` is ``pending`` (the job runs again soon, the usual choice when the old workers are
    gone), ``reserved`` or ``skip``. ``progress(1)`` is called for every line read.

    Idempotent, like ``copy``: a job whose uuid/id (:func:`~laraq.ops.inspect.job_identity`) is at the
    destination in any queue under its prefix and any state (:func:`~laraq.ops.inspect.identities_at`),
    or was written by an earlier import into that queue (remembered in
    ``<queue>:laraq-transfer:imported`` for ``remember`` seconds, so a job a worker already ran is not
    imported again), or comes twice in the file, is counted in ``existing`` and not written, unless
    ``allow_duplicates``. The remembered set is written in the same transaction as the jobs and
    WATCHed, so two imports at once cannot both write a job. With ``dry_run`` the same checks run and
    the counts are what would be written; nothing is."""
    counts = {"pending": 0, "delayed": 0, "reserved": 0, "skipped": 0, "existing": 0}
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
        written = _write_group(target, group, allow_duplicates, remember, dry_run)
        for entry in written:
            counts[entry.state] += 1
        counts["existing"] += len(group) - len(written)
    return counts


def _write_group(target: RedisQueue, group: list[_Entry], allow_duplicates: bool, remember: int,
                 dry_run: bool = False) -> list[_Entry]:
    queues = list(dict.fromkeys(e.queue for e in group))
    marks = {name: _remembered_key(target, name) for name in queues}
    while True:
        with target.client.pipeline(transaction=True) as pipe:
            try:
                if not allow_duplicates:
                    pipe.watch(*marks.values())
                chosen: list[tuple[_Entry, str]] = []
                if allow_duplicates:
                    chosen = [(e, "") for e in group]
                else:
                    # one server: a job already in any of its queues (under the prefix) is not written again
                    seen = identities_at(target, queues)
                    for name in queues:
                        seen.update(_text(m) for m in target.client.smembers(marks[name]))
                    for entry in group:
                        ident = job_identity(entry.member)
                        if ident in seen:
                            continue
                        seen.add(ident)
                        chosen.append((entry, ident))
                if dry_run:
                    return [e for e, _ in chosen]
                pipe.multi()
                for entry, ident in chosen:
                    keys = target.keys(entry.queue)
                    if entry.state == "pending":
                        pipe.rpush(keys.list, entry.member)
                        pipe.rpush(keys.notify, 1)
                    else:
                        assert entry.score is not None  # _parse_line gives every delayed and reserved job its score
                        pipe.zadd(keys.delayed if entry.state == "delayed" else keys.reserved,
                                  {entry.member: entry.score})
                    if ident:
                        pipe.sadd(marks[entry.queue], ident)
                if not allow_duplicates:
                    for name in queues:
                        if any(e.queue == name for e, _ in chosen):
                            pipe.expire(marks[name], remember)
                pipe.execute()
                return [e for e, _ in chosen]
            except redis.WatchError:
                continue  # another import wrote to the same queue meanwhile: read again


def remove_exported(source: RedisQueue, stream: Iterable[str | bytes], *, dry_run: bool = False) -> dict[str, int]:
    """Delete from ``source`` the members of an export file that are still there, byte for byte
    (``LREM`` one copy each with its wake-up token, or ``ZREM``): what ``export`` copied, once the
    import is checked. Members a worker took or changed since are not there and are counted as ``gone``.
    Every line is checked first, as for an import. With ``dry_run`` the members still there are counted
    (``removed``: what would be removed) and nothing is."""
    entries = []
    for number, text in enumerate(stream, 1):
        if text.strip():
            entry = _parse_line(number, text, None, "reserved", keep_poison=True)
            if entry is not None:
                entries.append(entry)
    counts = {"removed": 0, "gone": 0}
    script = source.client.register_script(_REMOVE)
    for entry in entries:
        keys = source.keys(entry.queue)
        key = {"pending": keys.list, "delayed": keys.delayed, "reserved": keys.reserved,
               "poison": keys.poison}[entry.state]
        kind = "list" if entry.state in ("pending", "poison") else "zset"
        notify = keys.notify if entry.state == "pending" else ""
        if dry_run:
            here = (source.client.execute_command("LPOS", key, entry.member) is not None if kind == "list"
                    else source.client.zscore(key, entry.member) is not None)
            counts["removed" if here else "gone"] += 1
            continue
        if script(keys=[key, notify or key], args=[kind, entry.member, "1" if notify else "0"]):
            counts["removed"] += 1
        else:
            counts["gone"] += 1
    return counts


# KEYS: 1 list or zset, 2 notify. ARGV: 1 kind, 2 member, 3 pop a wake-up token (1|0).
_REMOVE = """\
if ARGV[1] == 'list' then
  if redis.call('LREM', KEYS[1], 1, ARGV[2]) == 0 then return 0 end
  if ARGV[3] == '1' then redis.call('LPOP', KEYS[2]) end
  return 1
end
return redis.call('ZREM', KEYS[1], ARGV[2])
"""
