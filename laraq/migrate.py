"""Moving and copying jobs between queues, prefixes, databases, servers and Laravel key layouts.

A :class:`Transfer` takes the members of a source queue (ready list, ``:delayed`` with scores, and
optionally ``:reserved``) to a destination :class:`~laraq.queue.RedisQueue`, byte for byte: uuids,
ids, attempts and encrypted commands are never touched, only the key names change (another prefix,
the 12→13 default prefix change, ``{name}`` cluster hash tags of 13.5+, another db or server).

It is safe while workers run, and safe to kill at any point; re-running the same command finishes
the work. Every step is atomic:

* **same connection** (same server and db): one Lua script per member removes it from the source
  (``LREM``/``ZREM``; if a worker already took it, nothing happens) and adds it to the destination
  (``RPUSH`` + ``:notify``, or ``ZADD`` with the same score) in one step. A member is never in both
  places nor in neither.
* **another db or server**: two scripts and a journal. (1) on the source, atomically: remove the
  member and record it in the journal hash ``<source queue>:laraq-transfer:<id>:journal``; (2) on
  the destination, atomically: add it unless the marker set ``<dest queue>:laraq-transfer:<id>:done``
  already has it, and add it to that set; (3) delete the journal entry. A re-run first replays the
  journal, so a member killed between (1) and (2) is delivered once; one killed between (2) and (3)
  is not delivered twice. While a member is in the journal no worker can run it, so a move never
  runs a job twice. The journal and the marker set are deleted when a run completes.

``copy`` leaves the source alone and uses the marker set so that an interrupted copy re-run does not
duplicate what it already copied. Ready jobs are appended to the destination's tail in source order.
The transfer id is derived from the source, destination, mode, states and filter, so re-running the
same command line resumes the same transfer.

:func:`export_jobs` / :func:`import_jobs` write and read JSON Lines: ``{"queue", "state", "score",
"body"}`` (``body_b64`` when a member is not UTF-8).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from laraq.inspect import JobView, _matches
from laraq.queue import QueueKeys, RedisQueue
from laraq.versions import LaravelVersion

__all__ = ["TRANSFER_MARK", "Transfer", "TransferSummary", "export_jobs", "import_jobs", "unsupported_by"]

#: Infix of laraq's transfer bookkeeping keys (skipped by queue discovery).
TRANSFER_MARK = ":laraq-transfer:"

# Removes one member from the source (a list, with its wake-up token, or a sorted set); false when
# it is no longer there (a worker took it, or an earlier run already moved it).
_REMOVE_FROM_SOURCE = """\
local function remove_from_source(kind, key, notify, member)
  if kind == 'list' then
    if redis.call('LREM', key, 1, member) == 0 then return false end
    redis.call('LPOP', notify)
  elseif redis.call('ZREM', key, member) == 0 then
    return false
  end
  return true
end
"""

# KEYS: 1 src, 2 src notify, 3 dst, 4 dst notify, 5 marker set.
# ARGV: 1 src kind (list|zset), 2 dst kind, 3 member, 4 score, 5 move (1|0), 6 member hash.
_LOCAL = _REMOVE_FROM_SOURCE + """\
if ARGV[5] == '1' then
  if not remove_from_source(ARGV[1], KEYS[1], KEYS[2], ARGV[3]) then return 0 end
else
  if redis.call('SISMEMBER', KEYS[5], ARGV[6]) == 1 then return 0 end
  redis.call('SADD', KEYS[5], ARGV[6])
end
if ARGV[2] == 'list' then
  redis.call('RPUSH', KEYS[3], ARGV[3])
  redis.call('RPUSH', KEYS[4], 1)
else
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
end
return 1
"""

# Source side of a cross-server move. KEYS: 1 src, 2 src notify, 3 journal.
# ARGV: 1 src kind, 2 member, 3 member hash, 4 journal value.
_TAKE = _REMOVE_FROM_SOURCE + """\
if not remove_from_source(ARGV[1], KEYS[1], KEYS[2], ARGV[2]) then return 0 end
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
return 1
"""

# Destination side. KEYS: 1 dst, 2 dst notify, 3 marker set. ARGV: 1 dst kind, 2 member, 3 score, 4 hash.
_GIVE = """\
if redis.call('SISMEMBER', KEYS[3], ARGV[4]) == 1 then return 0 end
if ARGV[1] == 'list' then
  redis.call('RPUSH', KEYS[1], ARGV[2])
  redis.call('RPUSH', KEYS[2], 1)
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
end
redis.call('SADD', KEYS[3], ARGV[4])
return 1
"""


def _kind(state: str) -> str:
    return "list" if state in ("pending", "poison") else "zset"


def _key(keys: QueueKeys, state: str) -> str:
    return {"pending": keys.list, "delayed": keys.delayed, "reserved": keys.reserved, "poison": keys.poison}[state]


def _hash(member: bytes) -> str:
    return hashlib.sha1(member).hexdigest()


def _same_connection(a: Any, b: Any) -> bool:
    if a is b:
        return True
    ka = getattr(getattr(a, "connection_pool", None), "connection_kwargs", None)
    kb = getattr(getattr(b, "connection_pool", None), "connection_kwargs", None)
    if not ka or not kb:
        return False
    fields = ("host", "port", "db", "path", "username")
    return all(ka.get(f) == kb.get(f) for f in fields)


@dataclass
class TransferSummary:
    """What a transfer did (or, for a dry run, would do), per state."""

    mode: str
    source: str
    destination: str
    transferred: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    recovered: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "source": self.source, "destination": self.destination,
                "transferred": self.transferred, "skipped_by_filter": self.skipped, "recovered": self.recovered}

    def describe(self, *, dry_run: bool = False) -> str:
        done = sum(self.transferred.values())
        parts = ", ".join(f"{n} {state}" for state, n in self.transferred.items()) or "nothing"
        verb = ("would " + self.mode) if dry_run else (self.mode[:-1] + "ied" if self.mode == "copy" else "moved")
        text = f"{verb} {done} jobs ({parts}) from {self.source} to {self.destination}"
        if any(self.skipped.values()):
            text += f"; {sum(self.skipped.values())} left in place by --filter"
        if self.recovered:
            text += f"; {self.recovered} recovered from an interrupted run"
        return text


#: A non-empty ``debounceOwner`` in a serialized command (as it appears inside the JSON payload).
_DEBOUNCED = re.compile(rb's:13:\\"debounceOwner\\";s:[1-9][0-9]*:')


def unsupported_by(member: bytes, version: LaravelVersion) -> str | None:
    """Why ``version``'s worker cannot run this payload the way the dispatching version would, or None.

    Payloads are moved byte for byte and every line from 8 to 13 reads the others' payloads (proven
    live for 8 and 13 both ways in ``tests/test_live_crossversion.py``); what an older worker cannot do
    is honour a feature it lacks. Today: a debounced job (``#[DebounceFor]``, 13.6+) would run on an
    older worker even when a newer dispatch superseded it. An encrypted command cannot be looked into.
    """
    if not version.since("13.6") and _DEBOUNCED.search(member):
        return f"it is debounced (#[DebounceFor], Laravel 13.6+); Laravel {version} would run superseded copies"
    return None


def _describe_member(member: bytes) -> str:
    try:
        doc = json.loads(member)
    except (ValueError, UnicodeDecodeError):
        return "an unreadable member"
    if not isinstance(doc, dict):
        return "an unreadable member"
    return f"{doc.get('displayName') or doc.get('job') or '?'} (uuid {doc.get('uuid') or '?'})"


class Transfer:
    """Move (or copy) the jobs of ``source_name`` on ``source`` to ``dest_name`` on ``dest``."""

    def __init__(
        self,
        source: RedisQueue,
        source_name: str,
        dest: RedisQueue,
        dest_name: str | None = None,
        *,
        move: bool = True,
        states: Iterable[str] = ("pending", "delayed"),
        class_filter: str | None = None,
        batch: int = 200,
    ) -> None:
        self.source, self.dest = source, dest
        self.source_name = source.queue_name(source_name)
        self.dest_name = dest_name or self.source_name
        self.move = move
        self.states = tuple(states)
        for state in self.states:
            if state not in ("pending", "delayed", "reserved"):
                raise ValueError(f"cannot transfer state {state!r}")
        self.class_filter = class_filter
        self.batch = batch
        self.src_keys = source.keys(self.source_name)
        self.dst_keys = dest.keys(self.dest_name)
        self.local = _same_connection(source.client, dest.client) and not (source.cluster or dest.cluster)
        if self.local and self.src_keys.base == self.dst_keys.base:
            raise ValueError("source and destination are the same queue")
        ident = "|".join([
            "move" if move else "copy", source.redacted_url(), self.src_keys.base, dest.redacted_url(),
            self.dst_keys.base, ",".join(self.states), class_filter or "",
        ])
        self.id = hashlib.sha1(ident.encode()).hexdigest()[:16]
        self.journal_key = self.src_keys.base + TRANSFER_MARK + self.id + ":journal"
        self.marker_key = self.dst_keys.base + TRANSFER_MARK + self.id + ":done"
        self._local = source.client.register_script(_LOCAL)
        self._take = source.client.register_script(_TAKE)
        self._give = dest.client.register_script(_GIVE)

    # -- describing ------------------------------------------------------------------------------

    def describe_source(self) -> str:
        return f"{self.source.redacted_url()} {self.src_keys.base}"

    def describe_dest(self) -> str:
        return f"{self.dest.redacted_url()} {self.dst_keys.base}"

    def count(self) -> int:
        """How many members the selected states hold now (before filtering)."""
        total = 0
        for state in self.states:
            key = _key(self.src_keys, state)
            total += int(self.source.client.llen(key) if _kind(state) == "list" else self.source.client.zcard(key))
        return total + int(self.source.client.hlen(self.journal_key))

    def _wanted(self, member: bytes, state: str) -> bool:
        if not self.class_filter:
            return True
        return _matches(JobView.from_member(self.source_name, state, member, with_properties=False),
                        self.class_filter)

    def _members(self, state: str) -> Iterator[tuple[bytes, float | None]]:
        """Members of one state, head first, read in batches.

        The caller sends back whether the member stayed in the source (filtered out, or a copy);
        members that left (moved, or taken by a worker) do not advance the read position.
        """
        client, key = self.source.client, _key(self.src_keys, state)
        kept = 0
        while True:
            if _kind(state) == "list":
                chunk = [(m, None) for m in client.lrange(key, kept, kept + self.batch - 1)]
            else:
                chunk = [(m, float(s)) for m, s in client.zrange(key, kept, kept + self.batch - 1, withscores=True)]
            for member, score in chunk:
                stayed = yield member, score
                if stayed:
                    kept += 1
            if len(chunk) < self.batch:
                return

    # -- running -----------------------------------------------------------------------------------

    def plan(self) -> TransferSummary:
        """A dry run: what :meth:`run` would transfer now."""
        summary = self._summary()
        for state in self.states:
            key = _key(self.src_keys, state)
            members = (self.source.client.lrange(key, 0, -1) if _kind(state) == "list"
                       else self.source.client.zrange(key, 0, -1))
            wanted = sum(1 for m in members if self._wanted(m, state))
            summary.transferred[state] = wanted
            summary.skipped[state] = len(members) - wanted
        return summary

    def incompatible(self) -> list[str]:
        """Jobs (of the wanted ones) the destination's Laravel cannot run as the source's would.

        Each entry names the job and the reason (see :func:`unsupported_by`); empty when all can run.
        """
        problems: list[str] = []
        for state in self.states:
            key = _key(self.src_keys, state)
            members = (self.source.client.lrange(key, 0, -1) if _kind(state) == "list"
                       else self.source.client.zrange(key, 0, -1))
            for member in members:
                if not self._wanted(member, state):
                    continue
                reason = unsupported_by(member, self.dest.version)
                if reason:
                    problems.append(f"{_describe_member(member)}: {reason}")
        return problems

    def _summary(self) -> TransferSummary:
        return TransferSummary("move" if self.move else "copy", self.describe_source(), self.describe_dest())

    def run(self, progress: Callable[[int], Any] | None = None) -> TransferSummary:
        """Transfer everything that matches; resumes an interrupted run of the same transfer first.

        A move repeats its pass until a pass transfers nothing, so members shifted by concurrent
        workers popping the list are not left behind.
        """
        summary = self._summary()
        summary.recovered = self.recover()
        for state in self.states:
            summary.transferred[state] = 0
            summary.skipped[state] = 0
            while True:
                moved, skipped = self._pass(state, progress)
                summary.transferred[state] += moved
                summary.skipped[state] = skipped
                if not self.move or moved == 0:
                    break
        self.finish()
        return summary

    def _pass(self, state: str, progress: Callable[[int], Any] | None) -> tuple[int, int]:
        moved = skipped = 0
        gen = self._members(state)
        try:
            member, score = next(gen)
            while True:
                stayed = not self.move
                if self._wanted(member, state):
                    if self._one(state, member, score):
                        moved += 1
                else:
                    skipped += 1
                    stayed = True
                if progress is not None:
                    progress(1)
                member, score = gen.send(stayed)
        except StopIteration:
            pass
        return moved, skipped

    def _one(self, state: str, member: bytes, score: float | None) -> bool:
        kind = _kind(state)
        src_key, dst_key = _key(self.src_keys, state), _key(self.dst_keys, state)
        digest = _hash(member)
        score_arg = 0 if score is None else int(score) if float(score).is_integer() else score
        if self.local:
            return bool(self._local(
                keys=[src_key, self.src_keys.notify, dst_key, self.dst_keys.notify, self.marker_key],
                args=[kind, kind, member, score_arg, "1" if self.move else "0", digest],
            ))
        if self.move:
            entry = f"{state}\n{score_arg}\n".encode() + member
            if not self._take(keys=[src_key, self.src_keys.notify, self.journal_key],
                              args=[kind, member, digest, entry]):
                return False
            self._deliver(state, member, score_arg, digest)
            self.source.client.hdel(self.journal_key, digest)
            return True
        return bool(self._deliver(state, member, score_arg, digest))

    def _deliver(self, state: str, member: bytes, score: Any, digest: str) -> int:
        return int(self._give(keys=[_key(self.dst_keys, state), self.dst_keys.notify, self.marker_key],
                              args=[_kind(state), member, score, digest]))

    def recover(self) -> int:
        """Deliver the members an interrupted run had taken from the source but not finished."""
        entries = self.source.client.hgetall(self.journal_key)
        for digest, entry in entries.items():
            state_b, score_b, member = entry.split(b"\n", 2)
            self._deliver(state_b.decode(), member, score_b.decode(), digest.decode())
            self.source.client.hdel(self.journal_key, digest)
        return len(entries)

    def finish(self) -> None:
        """Drop the bookkeeping keys once nothing is left in the journal."""
        if self.source.client.hlen(self.journal_key) == 0:
            self.source.client.delete(self.journal_key)
            self.dest.client.delete(self.marker_key)


# -- JSON Lines ----------------------------------------------------------------------------------------

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
    from laraq.inspect import iter_members

    count = 0
    for name in names:
        for state in states:
            for member, score, _ in iter_members(queue, name, state):
                stream.write(json.dumps(_line(name, state, score, member), ensure_ascii=False) + "\n")
                count += 1
    return count


def import_jobs(target: RedisQueue, stream: Iterable[str], *, queue: str | None = None,
                reserved_as: str = "pending", progress: Callable[[int], Any] | None = None) -> dict[str, int]:
    """Push the jobs of an export: pending to the list (+ ``:notify``), delayed and reserved with
    their scores. ``queue`` overrides every line's queue; ``reserved_as`` is ``pending`` (the job
    runs again soon, the usual choice when the old workers are gone), ``reserved`` or ``skip``.
    ``progress(1)`` is called for every line read."""
    counts = {"pending": 0, "delayed": 0, "reserved": 0, "skipped": 0}
    for number, text in enumerate(stream, 1):
        if progress is not None:
            progress(1)
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            member = (line["body"].encode("utf-8") if "body" in line
                      else base64.b64decode(line["body_b64"], validate=True))
            state, name, score = line["state"], queue or line["queue"], line.get("score")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: not an export line ({exc})") from None
        if state == "reserved" and reserved_as != "reserved":
            if reserved_as == "skip":
                counts["skipped"] += 1
                continue
            state = "pending"
        keys = target.keys(name)
        if state in ("pending", "poison"):
            target.push_raw(member, name)
            state = "pending"
        elif state in ("delayed", "reserved"):
            target.client.zadd(keys.delayed if state == "delayed" else keys.reserved, {member: _score(score)})
        else:
            raise ValueError(f"line {number}: unknown state {state!r}")
        counts[state] += 1
    return counts
