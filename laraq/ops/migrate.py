"""Moving and copying jobs between queues, prefixes, databases, servers and Laravel key layouts.

A :class:`Transfer` takes the members of a source queue (ready list, ``:delayed`` with scores, and
optionally ``:reserved``) to a destination :class:`~laraq.protocol.queue.RedisQueue`, byte for byte: uuids,
ids, attempts and encrypted commands are never touched, only the key names change (another prefix,
the 12→13 default prefix change, ``{name}`` cluster hash tags of 13.5+, another db or server).

It is safe while workers run, and safe to kill at any point; re-running the same command finishes
the work. Every step is atomic:

* **same connection** (same server and db): one Lua script per member removes it from the source
  (``LREM``/``ZREM``; if a worker already took it, nothing happens) and adds it to the destination
  (``RPUSH`` + ``:notify``, or ``ZADD`` with the same score) in one step. A member is never in both
  places nor in neither.
* **another db or server**: two scripts and a journal. (1) on the source, atomically: remove the
  member and record it in the journal hash ``<source queue>:laraq-transfer:<id>:journal`` under a
  token ``<sha1>:<sequence>`` (so two identical members are two entries, never one); (2) on the
  destination, atomically: add it unless the marker set ``<dest queue>:laraq-transfer:<id>:done``
  already has the token, and add the token to that set; (3) delete the journal entry (in the same script
  as the next member's step (1), so a member costs two round trips). A re-run first
  replays the journal, so a member killed between (1) and (2) is delivered once; one killed between
  (2) and (3) is not delivered twice. While a member is in the journal no worker can run it, so a
  move never runs a job twice. The journal and the marker set are deleted when a run completes.
  Before taking anything, :meth:`Transfer.preflight` checks the destination (credentials, a scripted
  write) and every journal of the source queue (:mod:`laraq.ops.transfers`): one left for the same
  destination, however its URL was spelt, is replayed; one for another destination stops the move.

``copy`` leaves the source alone. By default it skips a job whose uuid (else payload id) is already
at the destination in any state and any queue under its prefix (:func:`job_identity`,
:func:`~laraq.ops.inspect.identities_at`), so re-running a copy never duplicates; ``allow_duplicates``
copies anyway. A move does the same check and removes such a job from the source without writing it
again, so ``copy`` then ``move`` ends with each job once, at the destination; ``move --recover`` (on to
the destination) skips a held job already there too. Whatever the order of these commands, no job id is
left twice on one server, nor on both sides unless a copy was asked for. An interrupted copy re-run does not duplicate what it already
copied either way (marker tokens ``<state>:<sha1>:<n-th occurrence>``). Ready jobs are appended to
the destination's tail in source order. The transfer id is derived from the source, destination,
mode, states and filter, so re-running the same command line resumes the same transfer.

What a run reports is what the destination acknowledged writing, per state; :meth:`Transfer.verify`
then reads the destination back and counts those members there (the report,
:class:`~laraq.ops.transfer_report.TransferSummary`, says only what was measured). Reserved members (jobs
workers are running) are only taken when asked; otherwise the summary says how many were left.

Export and import as JSON Lines live in :mod:`laraq.ops.jsonl` (their names are importable from here too).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, cast

import redis

from laraq.ops.inspect import JobView, _matches, identities_at, job_identity, list_members, scored_members
from laraq.ops.jsonl import ImportLineError, export_jobs, import_jobs
from laraq.ops.transfer_report import TransferSummary, _count
from laraq.ops.transfers import (
    META,
    SEQ,
    TRANSFER_MARK,
    DestinationError,
    HeldElsewhere,
    HeldTransfer,
    check_destination,
    deliver_held,
    destination_fault,
    destination_identity,
    find_held,
)
from laraq.protocol.keys import QueueKeys
from laraq.protocol.phpjson import json_loads
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

__all__ = ["GIVE_SCRIPT", "TRANSFER_MARK", "DestinationError", "HeldElsewhere", "ImportLineError", "Transfer", "TransferSummary",
           "export_jobs", "import_jobs", "job_identity", "unsupported_by"]

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

# A member of a move that is already at the destination: removed from the source only. KEYS: 1 src,
# 2 src notify. ARGV: 1 src kind, 2 member.
_DROP = _REMOVE_FROM_SOURCE + """\
if remove_from_source(ARGV[1], KEYS[1], KEYS[2], ARGV[2]) then return 1 end
return 0
"""

# Source side of a cross-server move. KEYS: 1 src, 2 src notify, 3 journal.
# ARGV: 1 src kind, 2 member, 3 member hash, 4 journal value, 5 the transfer's description (#meta),
# 6 (optional) the field of the job delivered before this one, deleted first: the destination has it, so
# its entry goes in this same round trip instead of one of its own.
# Returns the journal field, ``<hash>:<sequence>`` (so two identical members stay two entries), or false.
_TAKE = _REMOVE_FROM_SOURCE + """\
if ARGV[6] and ARGV[6] ~= '' then redis.call('HDEL', KEYS[3], ARGV[6]) end
if not remove_from_source(ARGV[1], KEYS[1], KEYS[2], ARGV[2]) then return false end
redis.call('HSETNX', KEYS[3], '#meta', ARGV[5])
local token = ARGV[3] .. ':' .. redis.call('HINCRBY', KEYS[3], '#seq', 1)
redis.call('HSET', KEYS[3], token, ARGV[4])
return token
"""

# Destination side (also used by ``move --recover``). KEYS: 1 dst, 2 dst notify, 3 marker set. ARGV: 1 dst kind, 2 member, 3 score, 4 token.
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
GIVE_SCRIPT = _GIVE




def _kind(state: str) -> str:
    return "list" if state in ("pending", "poison") else "zset"


def _key(keys: QueueKeys, state: str) -> str:
    return {"pending": keys.list, "delayed": keys.delayed, "reserved": keys.reserved, "poison": keys.poison}[state]


def _range(client: Any, state: str, key: str, start: int, end: int) -> list[bytes]:
    """``LRANGE`` or ``ZRANGE`` (members only) of one state's key; bytes, as the queue's client never decodes."""
    members: list[bytes] = client.lrange(key, start, end) if _kind(state) == "list" else client.zrange(key, start, end)
    return members


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


#: A non-empty ``debounceOwner`` in a serialized command (as it appears inside the JSON payload).
_DEBOUNCED = re.compile(rb's:13:\\"debounceOwner\\";s:[1-9][0-9]*:')


def unsupported_by(member: bytes, version: LaravelVersion) -> str | None:
    """Why ``version``'s worker cannot run this payload the way the dispatching version would, or None.

    Payloads are moved byte for byte and every line from 8 to 13 reads the others' payloads (proven
    live for 8 and 13 both ways in ``tests/test_live_crossversion.py``); what an older worker cannot do
    is honour a feature it lacks. The one such feature checked: a debounced job (``#[DebounceFor]``,
    13.6+) would run on an older worker even when a newer dispatch superseded it. An encrypted command
    cannot be looked into.
    """
    if not version.since("13.6") and _DEBOUNCED.search(member):
        return f"it is debounced (#[DebounceFor], Laravel 13.6+); Laravel {version} would run superseded copies"
    return None


def _describe_member(member: bytes) -> str:
    try:
        doc = json_loads(member)
    except (ValueError, UnicodeDecodeError):
        return "an unreadable member"
    if not isinstance(doc, dict):
        return "an unreadable member"
    return f"{doc.get('displayName') or doc.get('job') or '?'} (uuid {doc.get('uuid') or '?'})"


class Transfer:
    """Move (or copy) the jobs of ``source_name`` on ``source`` to ``dest_name`` on ``dest``.

    A copy skips jobs whose uuid/id is already at the destination (any state), unless
    ``allow_duplicates``; an interrupted copy re-run never duplicates either way.
    """

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
        allow_duplicates: bool = False,
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
        #: members this transfer leaves in the source whatever the filter says (e.g. classes the destination lacks)
        self.keep: Callable[[bytes], bool] | None = None
        self.batch = batch
        #: skip jobs whose uuid/id is already at the destination (a move removes them from the source)
        self.dedupe = not allow_duplicates
        self.src_keys = source.keys(self.source_name)
        self.dst_keys = dest.keys(self.dest_name)
        self.local = _same_connection(source.client, dest.client) and not (source.cluster or dest.cluster)
        if self.local and self.src_keys.base == self.dst_keys.base:
            raise ValueError("source and destination are the same queue")
        # The id names the destination by where it really is (host resolved, port, db), never by the
        # spelling of its URL, so a re-run with another spelling finds the same journal.
        self.dest_ident = destination_identity(dest)
        ident = "|".join([
            "move" if move else "copy", self.src_keys.base, self.dest_ident,
            self.dst_keys.base, ",".join(self.states), class_filter or "",
        ])
        self.id = hashlib.sha1(ident.encode()).hexdigest()[:16]
        self.meta = json.dumps({
            "created": int(time.time()), "mode": "move" if move else "copy", "dest_url": dest.redacted_url(),
            "dest_ident": self.dest_ident, "dest_base": self.dst_keys.base, "dest_prefix": dest.prefix,
            "dest_queue": self.dest_name, "dest_version": str(dest.version), "dest_cluster": bool(dest.cluster),
            "states": list(self.states), "filter": class_filter,
            "dest_auth": bool((getattr(getattr(dest.client, "connection_pool", None), "connection_kwargs", None)
                               or {}).get("password")),
        })
        self.journal_key = self.src_keys.base + TRANSFER_MARK + self.id + ":journal"
        self.marker_key = self.dst_keys.base + TRANSFER_MARK + self.id + ":done"
        self._local = source.client.register_script(_LOCAL)
        self._take = source.client.register_script(_TAKE)
        self._drop = source.client.register_script(_DROP)
        self._give = dest.client.register_script(_GIVE)
        self._arrived: Counter[tuple[str, str]] = Counter()
        self._arrived_ident: dict[str, str] = {}
        self._dest_ids: set[str] | None = None
        #: journals of this source queue left by runs to the same destination (another state set or filter)
        self._adopted: list[HeldTransfer] = []
        #: the journal field of the last job delivered, deleted by the next take (or :meth:`_settle`)
        self._delivered_token = ""

    # -- describing ------------------------------------------------------------------------------

    def describe_source(self) -> str:
        return f"{self.source.redacted_url()} {self.src_keys.base}"

    def describe_dest(self) -> str:
        return f"{self.dest.redacted_url()} {self.dst_keys.base}"

    def _journal_entries(self) -> dict[bytes, bytes]:
        # the queue's client never decodes replies (decode_responses=False): fields and values are bytes
        entries = cast(dict[bytes, bytes], self.source.client.hgetall(self.journal_key))
        entries.pop(SEQ, None)
        entries.pop(META, None)
        return entries

    def preflight(self) -> None:
        """Before anything is taken: the destination must accept a scripted write, and no other
        unfinished move may hold jobs of this source queue (:class:`HeldElsewhere` lists them).

        Journals of the same source queue left by a run to this same destination (however its URL was
        spelt) are adopted: :meth:`recover` delivers them under their own done-markers."""
        if not self.local:
            check_destination(self.dest, self.dst_keys.base)
        if not self.move:
            return
        blocking = []
        self._adopted = []
        for held in find_held(self.source.client, source_base=self.src_keys.base):
            if held.transfer_id == self.id:
                continue
            if (held.meta.get("dest_ident") == self.dest_ident and held.meta.get("dest_base") == self.dst_keys.base
                    and not self.local):
                self._adopted.append(held)
            else:
                blocking.append(held)
        if blocking:
            raise HeldElsewhere(blocking, self.source.prefix)

    def count(self) -> int:
        """How many members the selected states hold now (before filtering), plus unfinished journal entries."""
        total = 0
        for state in self.states:
            key = _key(self.src_keys, state)
            total += int(self.source.client.llen(key) if _kind(state) == "list" else self.source.client.zcard(key))
        return total + len(self._journal_entries())

    def _wanted(self, member: bytes, state: str) -> bool:
        if self.keep is not None and self.keep(member):
            return False
        if not self.class_filter:
            return True
        return _matches(JobView.from_member(self.source_name, state, member, with_properties=False),
                        self.class_filter)

    def _members(self, state: str) -> Generator[tuple[bytes, float | None], bool | None, None]:
        """Members of one state, head first, read in batches.

        The caller sends back whether the member stayed in the source (filtered out, or a copy);
        members that left (moved, or taken by a worker) do not advance the read position.
        """
        client, key = self.source.client, _key(self.src_keys, state)
        kept = 0
        while True:
            if _kind(state) == "list":
                chunk: list[tuple[bytes, float | None]] = [(m, None) for m in list_members(client, key, kept,
                                                                                       kept + self.batch - 1)]
            else:
                chunk = [(m, s) for m, s in scored_members(client, key, kept, kept + self.batch - 1)]
            for member, score in chunk:
                stayed = yield member, score
                if stayed:
                    kept += 1
            if len(chunk) < self.batch:
                return

    def _scan(self, client: Any, keys: QueueKeys, state: str) -> Iterator[bytes]:
        key = _key(keys, state)
        start = 0
        while True:
            chunk = _range(client, state, key, start, start + 999)
            yield from chunk
            if len(chunk) < 1000:
                return
            start += 1000

    def members_of(self, state: str) -> Iterator[bytes]:
        """The wanted members of one source state (after ``--filter``), head first."""
        return (m for m in self._scan(self.source.client, self.src_keys, state) if self._wanted(m, state))

    def destination_ids(self) -> set[str]:
        """The identities (:func:`job_identity`) of every job at the destination server, in the destination
        queue or any other under its prefix, ready, delayed or reserved (never the source queue itself;
        only the destination queue when both are under one prefix of one server).

        Read once per run. A copy adds what it writes; a move does not (two identical members at the
        source are two jobs, and both move)."""
        if self._dest_ids is None:
            # a queue renamed under the same prefix of one server: only the destination queue is "there"
            # (the other queues beside it are the source's own app, not a destination)
            same_app = self.local and self.source.prefix == self.dest.prefix
            self._dest_ids = identities_at(self.dest, [self.dest_name], everywhere=not same_app,
                                           exclude=[self.src_keys.base] if self.local else [])
        return self._dest_ids

    def _left_reserved(self, summary: TransferSummary) -> None:
        """Count (and name the first few of) the reserved members this transfer leaves in the source."""
        if "reserved" in self.states:
            return
        now = time.time()
        scored = scored_members(self.source.client, self.src_keys.reserved, 0, -1)
        left = [m for m, _ in scored if self._wanted(m, "reserved")]
        summary.left_reserved = len(left)
        summary.left_reserved_expired = sum(1 for m, score in scored if score <= now and self._wanted(m, "reserved"))
        for member in left[:5]:
            view = JobView.from_member(self.source_name, "reserved", member, with_properties=False)
            summary.left_reserved_jobs.append(f"{view.name or '?'} {view.uuid or view.id or _hash(member)[:12]}")

    # -- running -----------------------------------------------------------------------------------

    def plan(self) -> TransferSummary:
        """A dry run: what :meth:`run` would transfer now."""
        summary = self._summary()
        summary.dry_run = True
        seen = set(self.destination_ids()) if self.dedupe else set()
        for state in self.states:
            summary.transferred[state] = summary.skipped[state] = summary.existing[state] = 0
            for member in self._scan(self.source.client, self.src_keys, state):
                if not self._wanted(member, state):
                    summary.skipped[state] += 1
                    continue
                if self.dedupe:
                    ident = job_identity(member)
                    if ident in seen:
                        summary.existing[state] += 1
                        continue
                    if not self.move:
                        seen.add(ident)
                summary.transferred[state] += 1
        self._left_reserved(summary)
        return summary

    def incompatible(self) -> list[str]:
        """Jobs (of the wanted ones) the destination's Laravel cannot run as the source's would.

        Each entry names the job and the reason (see :func:`unsupported_by`); empty when all can run.
        """
        problems: list[str] = []
        for state in self.states:
            key = _key(self.src_keys, state)
            members = _range(self.source.client, state, key, 0, -1)
            for member in members:
                if not self._wanted(member, state):
                    continue
                reason = unsupported_by(member, self.dest.version)
                if reason:
                    problems.append(f"{_describe_member(member)}: {reason}")
        return problems

    def _summary(self) -> TransferSummary:
        return TransferSummary("move" if self.move else "copy", self.describe_source(), self.describe_dest(),
                               retry_after=self.source.retry_after)

    def run(self, progress: Callable[[int], Any] | None = None, *, verify: bool = True) -> TransferSummary:
        """Transfer everything that matches; resumes an interrupted run of the same transfer first.

        A move repeats its pass until a pass transfers nothing, so members shifted by concurrent
        workers popping the list are not left behind. With ``verify`` the destination is read back
        at the end and every member this run wrote is looked for (:attr:`TransferSummary.verified`).
        """
        summary = self._summary()
        self._arrived.clear()
        for state in self.states:
            summary.transferred[state] = summary.skipped[state] = summary.existing[state] = 0
        self.preflight()
        summary.recovered = self.recover(summary)
        for state in self.states:
            occurrences: Counter[str] = Counter()
            while True:
                moved, skipped, existing = self._pass(state, progress, occurrences)
                summary.transferred[state] += moved
                summary.skipped[state] = skipped
                summary.existing[state] += existing
                if not self.move or moved == 0:
                    break
        self.finish()
        self._left_reserved(summary)
        if verify:
            summary.verified = self.verify()
            if _count(summary.verified) < _count(summary.transferred):
                summary.running_there = self.running_at_destination()
        return summary

    def _settle(self) -> None:
        """Delete the journal entry of the last job delivered (see :meth:`_one`)."""
        if self._delivered_token:
            token, self._delivered_token = self._delivered_token, ""
            # a source that fails here leaves the entry: the destination's done-marker says it was delivered
            with contextlib.suppress(redis.RedisError):
                self.source.client.hdel(self.journal_key, token)

    def _pass(self, state: str, progress: Callable[[int], Any] | None,
              occurrences: Counter[str]) -> tuple[int, int, int]:
        try:
            return self._pass_members(state, progress, occurrences)
        finally:
            self._settle()

    def _pass_members(self, state: str, progress: Callable[[int], Any] | None,
                      occurrences: Counter[str]) -> tuple[int, int, int]:
        moved = skipped = existing = 0
        gen = self._members(state)
        try:
            member, score = next(gen)
            while True:
                stayed = not self.move
                if not self._wanted(member, state):
                    skipped += 1
                    stayed = True
                elif self.dedupe and job_identity(member) in self.destination_ids():
                    existing += 1
                    if self.move:  # the destination has this job: the move leaves it there, once
                        self._drop(keys=[_key(self.src_keys, state), self.src_keys.notify], args=[_kind(state), member])
                else:
                    digest = _hash(member)
                    occurrences[digest] += 1
                    if self._one(state, member, score, digest, occurrences[digest]):
                        moved += 1
                        self._arrived[(state, digest)] += 1
                        self._arrived_ident[digest] = job_identity(member)
                        if self.dedupe and not self.move:
                            self.destination_ids().add(job_identity(member))
                if progress is not None:
                    progress(1)
                member, score = gen.send(stayed)
        except StopIteration:
            pass
        return moved, skipped, existing

    def _one(self, state: str, member: bytes, score: float | None, digest: str, occurrence: int) -> bool:
        """Transfer one member; True when the destination wrote it."""
        kind = _kind(state)
        src_key, dst_key = _key(self.src_keys, state), _key(self.dst_keys, state)
        score_arg = 0 if score is None else int(score) if float(score).is_integer() else score
        token = f"{state}:{digest}:{occurrence}"  # a copy's marker: the n-th identical member of this run
        if self.local:
            return bool(self._local(
                keys=[src_key, self.src_keys.notify, dst_key, self.dst_keys.notify, self.marker_key],
                args=[kind, kind, member, score_arg, "1" if self.move else "0", token],
            ))
        if self.move:
            entry = f"{state}\n{score_arg}\n".encode() + member
            taken = self._take(keys=[src_key, self.src_keys.notify, self.journal_key],
                               args=[kind, member, digest, entry, self.meta, self._delivered_token])
            self._delivered_token = ""
            if not taken:
                return False
            token = taken.decode() if isinstance(taken, bytes) else str(taken)
            delivered = self._deliver(state, member, score_arg, token, held=True)
            self._delivered_token = token  # its entry goes with the next take: the destination's marker has it
            return bool(delivered)
        return bool(self._deliver(state, member, score_arg, token))

    def _deliver(self, state: str, member: bytes, score: Any, token: str, *, held: bool = False) -> int:
        try:
            return int(self._give(keys=[_key(self.dst_keys, state), self.dst_keys.notify, self.marker_key],
                                  args=[_kind(state), member, score, token]))
        except redis.RedisError as exc:
            raise self._destination_failed(exc, held) from exc

    def _destination_failed(self, exc: Exception, held: bool) -> DestinationError:
        text, code = destination_fault(exc, self.dest.redacted_url())
        delivered = sum(self._arrived.values())
        message = (f"{text}; this run had {'moved' if self.move else 'copied'} {delivered} job(s) there before "
                   "it failed (they stay there)")
        if held or (self.move and self._journal_entries()):
            source_prefix = self.source.prefix
            message += (f"; the job(s) taken are held on the source in {self.journal_key} (no worker runs them "
                        "there): re-run the same command once the destination is back, or `laraq move --recover "
                        f"{self.source_name} --prefix {source_prefix} --to-source` to put them back")
        else:
            message += "; re-run the same command once the destination is back: it goes on from there"
        return DestinationError(message, code)

    def recover(self, summary: TransferSummary | None = None) -> int:
        """Deliver the members an interrupted run had taken from the source but not finished, including
        those of journals :meth:`preflight` adopted (same source queue, same destination)."""
        adopted = 0
        ids = self.destination_ids() if self.dedupe else set()
        for held in self._adopted:
            try:
                done, present = deliver_held(self.source, held, self.dest, self.dst_keys.base, self._give,
                                             already=lambda m: job_identity(m) in ids)
            except redis.RedisError as exc:
                raise self._destination_failed(exc, True) from exc
            adopted += held.jobs
            if summary is not None:
                for state, n in done.items():
                    summary.transferred[state] = summary.transferred.get(state, 0) + n
                for state, n in present.items():
                    summary.existing[state] = summary.existing.get(state, 0) + n
        self._adopted = []
        entries = self._journal_entries()
        for token, entry in entries.items():
            state_b, score_b, member = entry.split(b"\n", 2)
            state = state_b.decode()
            if job_identity(member) in ids:
                # already at the destination (written by the interrupted run, or there before): not twice
                if summary is not None:
                    summary.existing[state] = summary.existing.get(state, 0) + 1
            elif self._deliver(state, member, score_b.decode(), token.decode()):
                self._arrived[(state, _hash(member))] += 1
                self._arrived_ident[_hash(member)] = job_identity(member)
                if summary is not None:
                    summary.transferred[state] = summary.transferred.get(state, 0) + 1
            self.source.client.hdel(self.journal_key, token)
        return len(entries) + adopted

    def finish(self) -> None:
        """Drop the bookkeeping keys once nothing is left in the journal."""
        if not self._journal_entries():
            self.source.client.delete(self.journal_key)
            self.dest.client.delete(self.marker_key)

    def verify(self) -> dict[str, int]:
        """How many of the members this run wrote are at the destination now, per state."""
        found: dict[str, int] = {}
        for state in dict.fromkeys(s for s, _ in self._arrived):
            wanted = Counter({d: n for (s, d), n in self._arrived.items() if s == state})
            present = Counter(_hash(m) for m in self._scan(self.dest.client, self.dst_keys, state))
            found[state] = sum(min(n, present[d]) for d, n in wanted.items())
        for state in self.states:
            found.setdefault(state, 0)
        return found

    def running_at_destination(self) -> int:
        """How many of the jobs this run wrote sit in the destination's reserved set now (by uuid/id):
        workers there took them and are running them (measured, not guessed)."""
        if not self._arrived_ident:
            return 0
        reserved = {job_identity(m) for m in self._scan(self.dest.client, self.dst_keys, "reserved")}
        return sum(1 for (state, digest) in self._arrived if state != "reserved"
                   and self._arrived_ident.get(digest) in reserved)
