"""Looking at Laravel Redis queues without touching them: discovery, sizes, ages and decoded jobs.

* :func:`discover_queues` finds every queue under a key prefix with ``SCAN`` (never ``KEYS``): a
  key ``<prefix>queues:<name>`` or ``<prefix>queues:<name>:{delayed,reserved,notify,poison}``
  names the queue ``<name>``. A cluster hash tag stays part of the name (``{default}``), which gives
  back the same keys whatever the version.
* :func:`queue_status` reads one queue's counters in a single pipeline: pending (``LLEN``), delayed
  and reserved (``ZCARD``), delayed jobs already due and reservations already expired (``ZCOUNT
  -inf now``: a worker would migrate them on its next pop; many of them mean no worker runs, or
  ``retry_after`` is null), the ``:notify`` length, laraq's ``:poison`` list, and the age of the
  oldest pending job (its ``createdAt``, written from 12.11; older payloads have none).
* :func:`list_jobs` / :func:`find_job` decode members into :class:`JobView`: class, handler,
  attempts, uuid, id, when available (delayed score) or when the reservation expires, the retry
  settings, and a readable view of the command's properties (decrypted when an Encrypter is given).
  A member that is not a job (not JSON, no ``attempts``, nested 512 levels deep) is shown with its
  error, never dropped.
* What they read is bounded per member: :func:`queue_status`, :func:`list_jobs` and the search of
  :func:`find_job` read members through :meth:`~laraq.protocol.queue.RedisQueue.excerpts`, whole up to
  64 KB (2 x :data:`~laraq.protocol.lua.EXCERPT_SIDE`), else their first and last 32 KB. A longer
  member is listed from those ends (:meth:`JobView.from_excerpt`: the fields before ``data`` and the
  scalar ones after it, ``size`` its length, its command not decoded); ``find_job`` reads in full only
  the members it matched. :func:`list_jobs` cuts a name or handler longer than :data:`NAME_LIMIT`
  characters, saying how long it was.
  :func:`find_job` also looks into the journals of unfinished moves (:mod:`laraq.ops.transfers`): a
  job held there is shown in state ``held`` with the commands that finish or undo the move.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from laraq.ops.transfers import find_held, journal_members
from laraq.protocol.payload import Payload, PayloadError, leading_uuid
from laraq.protocol.phpjson import PhpJsonError, check_json_depth, json_loads
from laraq.protocol.queue import Excerpt, RedisQueue, excerpts_from, member_fields
from laraq.protocol.serializer import PHPEnum, PHPObject, PHPReference, PHPSerializeError, loads

__all__ = [
    "identities_at",
    "NAME_LIMIT",
    "STATES",
    "SUFFIXES",
    "JobView",
    "ListMark",
    "Pickups",
    "QueueStatus",
    "command_view",
    "discover_queues",
    "find_failed",
    "find_job",
    "find_job_near",
    "clip",
    "iter_excerpts",
    "iter_members",
    "job_identity",
    "leading_fields",
    "list_members",
    "list_jobs",
    "scored_members",
    "mark_lists",
    "pickups_since",
    "queue_status",
    "to_plain",
]

#: The companion keys of a queue list, and laraq's dead-letter list.
SUFFIXES = (":delayed", ":reserved", ":notify", ":poison", ":failed-parked",  # laraq.stores.parked
            ":laraq-unstarted")  # laraq.worker.unstarted

#: Where a job can be: the ready list, the delayed ZSET, the reserved ZSET, laraq's poison list.
STATES = ("pending", "delayed", "reserved", "poison")

T = TypeVar("T")

#: The most characters of a job's name or handler :func:`list_jobs` keeps.
NAME_LIMIT = 200


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def split_queue_key(key: str, prefix: str) -> tuple[str, str] | None:
    """``(queue name, suffix)`` for a queue key under ``prefix``, else ``None``."""
    head = prefix + "queues:"
    if not key.startswith(head):
        return None
    rest = key[len(head):]
    if ":laraq-transfer:" in rest:  # laraq.ops.migrate bookkeeping, not a queue
        return None
    for suffix in SUFFIXES:
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return rest[: -len(suffix)], suffix
    return (rest, "") if rest else None


def discover_queues(client: Any, prefix: str, *, count: int = 1000) -> list[str]:
    """Every queue name with at least one key under ``prefix``, sorted (SCAN, never KEYS)."""
    names: set[str] = set()
    pattern = _glob_escape(prefix) + "queues:*"
    for raw in client.scan_iter(match=pattern, count=count):
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        split = split_queue_key(key, prefix)
        if split is not None:
            names.add(split[0])
    return sorted(names)


def discover_prefixes(client: Any, *, count: int = 1000, limit: int = 100_000) -> dict[str, int]:
    """Key prefixes that hold queue keys (``<prefix>queues:...``) and how many keys each has.

    Scans at most ``limit`` keys. Used by ``laraq doctor`` to spot a prefix mismatch.
    """
    found: dict[str, int] = {}
    for seen, raw in enumerate(client.scan_iter(match="*queues:*", count=count)):
        if seen >= limit:
            break
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        prefix = key[: key.find("queues:")]
        found[prefix] = found.get(prefix, 0) + 1
    return found


# -- status ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueueStatus:
    """One queue's counters at one moment (see the module docstring)."""

    queue: str
    pending: int
    delayed: int
    reserved: int
    due_delayed: int
    expired_reserved: int
    notify: int
    poison: int
    oldest_pending_age: float | None
    next_delayed_at: int | None

    @property
    def total(self) -> int:
        """Laravel's ``size()``: pending + delayed + reserved."""
        return self.pending + self.delayed + self.reserved

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["total"] = self.total
        return out


def queue_status(queue: RedisQueue, name: str | None = None) -> QueueStatus:
    """The counters of one queue, read in one pipeline round trip."""
    keys = queue.keys(name)
    now = queue.current_time()
    pipe = queue.client.pipeline(transaction=False)
    pipe.llen(keys.list)
    pipe.zcard(keys.delayed)
    pipe.zcard(keys.reserved)
    pipe.zcount(keys.delayed, "-inf", now)
    pipe.zcount(keys.reserved, "-inf", now)
    pipe.llen(keys.notify)
    pipe.llen(keys.poison)
    queue.excerpts(keys.list, "list", 0, 0, client=pipe)
    pipe.zrange(keys.delayed, 0, 0, withscores=True)
    pending, delayed, reserved, due, expired, notify, poison, head, first = pipe.execute()
    age: float | None = None
    heads = excerpts_from(head)
    created = member_fields(heads[0], ("createdAt",)).get("createdAt") if heads else None
    if isinstance(created, int | float) and not isinstance(created, bool) and math.isfinite(created):
        age = max(0.0, queue.clock() - int(created))
    return QueueStatus(
        queue=queue.queue_name(name), pending=int(pending), delayed=int(delayed), reserved=int(reserved),
        due_delayed=int(due), expired_reserved=int(expired), notify=int(notify), poison=int(poison),
        oldest_pending_age=age, next_delayed_at=int(first[0][1]) if first else None,
    )


# -- pickup rate ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ListMark:
    """A queue's ready list at one moment: its length and its last member (see :func:`pickups_since`)."""

    queue: str
    length: int
    tail: bytes | None
    at: float


@dataclass(frozen=True)
class Pickups:
    """Jobs taken from the head of a ready list between two moments, by any worker (PHP or Python)."""

    taken: int
    seconds: float
    #: False when the marked tail was taken too: ``taken`` is then a lower bound.
    exact: bool

    @property
    def rate(self) -> float:
        return self.taken / self.seconds if self.seconds > 0 else 0.0


def mark_lists(queue: RedisQueue, names: list[str]) -> list[ListMark]:
    """:class:`ListMark` of each queue, in one pipeline round trip."""
    pipe = queue.client.pipeline(transaction=False)
    for name in names:
        keys = queue.keys(name)
        pipe.llen(keys.list)
        pipe.lindex(keys.list, -1)
    replies = pipe.execute()
    now = queue.clock()
    return [ListMark(name, int(replies[2 * i]), replies[2 * i + 1], now) for i, name in enumerate(names)]


def pickups_since(queue: RedisQueue, marks: list[ListMark]) -> dict[str, Pickups | None]:
    """How many jobs left the head of each ready list since its mark.

    Every pop (Laravel's and laraq's) takes from the head and every push, release-to-ready and
    delayed migration adds at the tail, so the members in front of the marked tail member are the
    jobs taken since: ``marked position - position now``. The marked member is looked for from the
    tail (``LPOS ... RANK -1``): a queue holding identical copies of it (an import run twice) would
    otherwise match the first copy near the head and count every member between as taken.
    ``None`` when the list was empty at the mark (nothing to measure against).
    """
    pipe = queue.client.pipeline(transaction=False)
    for mark in marks:
        if mark.tail is not None:
            # redis-py types LPOS's element as str; like every command's argument it takes bytes
            pipe.lpos(queue.keys(mark.queue).list, mark.tail, rank=-1)  # type: ignore[arg-type]
    replies = iter(pipe.execute())
    now = queue.clock()
    out: dict[str, Pickups | None] = {}
    for mark in marks:
        if mark.tail is None:
            out[mark.queue] = None
            continue
        position = next(replies)
        seconds = max(0.0, now - mark.at)
        if position is None:
            out[mark.queue] = Pickups(mark.length, seconds, exact=False)
        else:
            out[mark.queue] = Pickups(max(0, mark.length - 1 - int(position)), seconds, exact=True)
    return out


# -- decoded jobs ------------------------------------------------------------------------------------

def to_plain(value: Any, *, depth: int = 0) -> Any:
    """A JSON-friendly view of an unserialized PHP value (objects as ``{"@class": ..., props}``)."""
    if depth > 64:
        return "…"
    if isinstance(value, PHPReference):
        return to_plain(value.value, depth=depth + 1)
    if isinstance(value, PHPEnum):
        return f"{value.class_name}::{value.case}"
    if isinstance(value, PHPObject):
        out: dict[str, Any] = {"@class": value.class_name}
        for key, item in value.properties().items():
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            out[name] = to_plain(item, depth=depth + 1)
        return out
    if isinstance(value, dict):
        return {str(k if not isinstance(k, bytes) else k.decode("utf-8", "replace")): to_plain(v, depth=depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v, depth=depth + 1) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


_TRAIT_PROPS = {
    "job", "connection", "queue", "group", "messageGroup", "deduplicator", "debounceOwner", "uniqueLockOwner",
    "chainConnection", "chainQueue", "chainCatchCallbacks", "delay", "afterCommit", "middleware", "chained",
}


def command_view(payload: Payload, encrypter: Any = None, *, include_defaults: bool = False,
                 max_elements: int | None = None) -> dict[str, Any]:
    """The command's properties in a readable form, or ``{"@error": ...}``.

    Queueable/InteractsWithQueue properties still at their defaults are left out unless
    ``include_defaults``. An encrypted command without ``encrypter`` gives ``{"@encrypted": true}``.
    ``max_elements`` bounds the work: a command with more values than that is not decoded
    (``{"@skipped": ...}`` says why), so a huge job is shown in about a second.
    """
    command = payload.command
    if command is None:
        return {}
    raw = command.encode("utf-8")
    if payload.is_encrypted_command:
        if encrypter is None:
            return {"@encrypted": True}
        try:
            raw = encrypter.decrypt(command)
        except Exception as exc:  # DecryptError or a malformed document
            return {"@encrypted": True, "@error": f"cannot decrypt: {exc}"}
    try:
        obj = loads(raw) if max_elements is None else loads(raw, max_elements=max_elements)
    except PHPSerializeError as exc:
        if max_elements is not None and "max_elements" in str(exc):
            return {"@skipped": f"the command holds more than {max_elements:,} values ({len(raw):,} bytes); "
                                "--full decodes it"}
        return {"@error": f"cannot unserialize: {exc}"}
    view = to_plain(obj)
    if not isinstance(view, dict):
        return {"@value": view}
    if not include_defaults:
        for name in list(view):
            if name in _TRAIT_PROPS and view[name] in (None, [], {}, ""):
                del view[name]
    return view


@dataclass
class JobView:
    """One member of a queue, decoded for humans and ``--json``."""

    queue: str
    state: str
    raw: bytes = field(repr=False)
    score: float | None = None
    index: int | None = None
    error: str | None = None
    name: str | None = None
    job: str | None = None
    uuid: str | None = None
    id: str | None = None
    attempts: int | None = None
    max_tries: int | None = None
    backoff: Any = None
    timeout: int | None = None
    retry_until: int | None = None
    created_at: int | None = None
    encrypted: bool = False
    properties: Any = None
    data: Any = None
    #: Where the job sits outside Redis (``failed_jobs``: connection, failed_id, failed_at, exception).
    extra: dict[str, Any] = field(default_factory=dict)
    #: The member's length in bytes when only its two ends were read (:meth:`from_excerpt`), else None.
    size: int | None = None

    @classmethod
    def from_member(
        cls, queue: str, state: str, raw: bytes, score: float | None = None, index: int | None = None,
        *, encrypter: Any = None, with_properties: bool = True, max_elements: int | None = None,
    ) -> JobView:
        view = cls(queue=queue, state=state, raw=raw, score=score, index=index)
        try:
            p = Payload.parse(raw)
        except PayloadError as exc:
            view.error = str(exc)
            view.uuid = leading_uuid(raw)
            return view
        view.name = p.resolve_name
        view.job = p.get("job") if isinstance(p.get("job"), str) else None
        view.uuid, view.id = p.uuid, p.id
        view.attempts = p.attempts
        for attr in ("max_tries", "timeout", "retry_until", "created_at"):
            with contextlib.suppress(PayloadError):
                setattr(view, attr, getattr(p, attr))
        view.backoff = p.get("backoff")
        if p.command is not None:
            view.encrypted = p.is_encrypted_command
            if with_properties:
                view.properties = command_view(p, encrypter, max_elements=max_elements)
        else:
            view.data = to_plain(p.get("data"))
        return view

    @classmethod
    def from_excerpt(cls, queue: str, state: str, excerpt: Excerpt, index: int | None = None, *,
                     encrypter: Any = None, with_properties: bool = True) -> JobView:
        """:meth:`from_member` for a member read whole; a longer one is described from its two ends: the
        top-level fields its first bytes hold before one is cut off, the scalar fields of its last bytes
        (``id``, ``attempts``, ``createdAt``), ``raw`` its first bytes, ``size`` its length, its name and
        handler cut to :data:`NAME_LIMIT` characters. First bytes already nested too deep make it
        unreadable, with :meth:`from_member`'s error."""
        whole = excerpt.whole
        if whole is not None:
            return cls.from_member(queue, state, whole, excerpt.score, index, encrypter=encrypter,
                                   with_properties=with_properties)
        view = cls(queue=queue, state=state, raw=excerpt.head, score=excerpt.score, index=index,
                   size=excerpt.length)
        try:  # nested too deep already in its first bytes: unreadable as a whole (what from_member says)
            check_json_depth(excerpt.head)
        except PhpJsonError as exc:
            view.error = f"job payload is not valid JSON: {exc}"
            view.uuid = leading_uuid(excerpt.head)
            return view
        fields, cut = leading_fields(excerpt.head)
        fields.update(member_fields(excerpt, ("id", "attempts", "createdAt", "retryUntil")))
        for key in ("displayName", "job"):  # names cut to NAME_LIMIT; a name cut off by the read says so
            if isinstance(fields.get(key), str):
                fields[key] = clip(fields[key], min(NAME_LIMIT, len(fields[key])) if key == cut else NAME_LIMIT,
                                   more=key == cut)
        display, job = fields.get("displayName"), fields.get("job")
        view.name = display if isinstance(display, str) and display not in ("", "0") else \
            job if isinstance(job, str) else None
        view.job = job if isinstance(job, str) else None
        for attr, key in (("uuid", "uuid"), ("id", "id")):
            value = fields.get(key)
            setattr(view, attr, None if value is None or isinstance(value, dict | list) else str(value))
        for attr, key in (("attempts", "attempts"), ("max_tries", "maxTries"), ("timeout", "timeout"),
                          ("retry_until", "retryUntil"), ("created_at", "createdAt")):
            value = fields.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                setattr(view, attr, int(value))
        view.backoff = fields.get("backoff")
        if with_properties:
            view.properties = {"@skipped": f"the job is {excerpt.length:,} bytes: only its first and last "
                                           f"{len(excerpt.head):,} were read (laraq show reads it all)"}
        return view

    @property
    def available_at(self) -> int | None:
        """When a delayed job becomes due (its score); None for other states."""
        return int(self.score) if self.state == "delayed" and self.score is not None else None

    @property
    def reserved_until(self) -> int | None:
        return int(self.score) if self.state == "reserved" and self.score is not None else None

    def to_dict(self, *, raw: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("raw", "extra")}
        out.update(self.extra)
        out["available_at"] = self.available_at
        out["reserved_until"] = self.reserved_until
        if raw or self.error:
            try:
                out["body"] = self.raw.decode("utf-8")
            except UnicodeDecodeError:
                out["body_b64"] = base64.b64encode(self.raw).decode("ascii")
            if self.size is not None:
                out["body_truncated"] = True
        return out


_LEADING_KEY = re.compile(r'\s*[{,]\s*"([^"\\]{1,64})"\s*:\s*')
_CUT_STRING = re.compile(r'"((?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*)')


def leading_fields(head: bytes) -> tuple[dict[str, Any], str | None]:
    """The top-level fields of a member's first bytes, in order, up to the first one whose value is cut off,
    and the name of that one when it is a string, kept as far as it goes (else None)."""
    text = head.decode("utf-8", "ignore")  # a character cut at the end is dropped
    decoder = json.JSONDecoder()
    fields: dict[str, Any] = {}
    pos = 0
    while (key := _LEADING_KEY.match(text, pos)) is not None:
        try:
            value, pos = decoder.raw_decode(text, key.end())
        except (ValueError, RecursionError):
            cut = _CUT_STRING.match(text, key.end())
            if cut is not None and cut.end() == len(text):
                fields[key.group(1)] = json.loads('"' + cut.group(1) + '"')
                return fields, key.group(1)
            break
        fields[key.group(1)] = value
    return fields, None


def clip(text: str | None, limit: int = NAME_LIMIT, *, more: bool = False) -> str | None:
    """``text`` cut to ``limit`` characters, saying how long it was (``more``: ``text`` is itself only the
    start of a longer one)."""
    if text is None or (len(text) <= limit and not more):
        return text
    return text[:limit] + (f"… (more than {len(text):,} characters)" if more else f"… ({len(text):,} characters)")


def job_identity(member: bytes) -> str:
    """What makes a member the same job: its payload ``uuid``, else its ``id``, else its bytes' SHA-1.

    Laravel writes ``uuid`` first (8.x+), so the usual case is read without decoding the body."""
    uuid = leading_uuid(member)
    if uuid is not None:
        return "uuid:" + uuid
    try:
        data = json_loads(member)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for name in ("uuid", "id"):
            if isinstance(data.get(name), str | int) and data.get(name) not in ("", None):
                return f"{name}:{data[name]}"
    return "sha1:" + hashlib.sha1(member).hexdigest()


def identities_at(queue: RedisQueue, names: Iterable[str] = (), *, everywhere: bool = True,
                  exclude: Iterable[str] = ()) -> set[str]:
    """The :func:`job_identity` of every job waiting, delayed or reserved in the queues ``names`` and, with
    ``everywhere``, in every queue under ``queue``'s prefix; queues whose key base is in ``exclude`` (the
    source of a move on the same server) are not read.

    What ``copy``, ``move``, ``move --recover`` and ``import`` compare against, so that no job id is
    written twice to one server: a job already there, in any queue and any state, is skipped."""
    wanted = list(dict.fromkeys([*names, *(discover_queues(queue.client, queue.prefix) if everywhere else [])]))
    skip = set(exclude)
    found: set[str] = set()
    for name in wanted:
        keys = queue.keys(name)
        if keys.base in skip:
            continue
        for key, kind in ((keys.list, "list"), (keys.delayed, "zset"), (keys.reserved, "zset")):
            start = 0
            while True:
                chunk = (list_members(queue.client, key, start, start + 999) if kind == "list"
                         else [m for m, _ in scored_members(queue.client, key, start, start + 999)])
                found.update(job_identity(m) for m in chunk)
                if len(chunk) < 1000:
                    break
                start += 1000
    return found


def list_members(client: Any, key: str, start: int, end: int) -> list[bytes]:
    """``LRANGE``: the queue's client never decodes replies (``decode_responses=False``), so members are bytes."""
    members: list[bytes] = client.lrange(key, start, end)
    return members


def scored_members(client: Any, key: str, start: int, end: int) -> list[tuple[bytes, float]]:
    """``ZRANGE ... WITHSCORES`` as ``(member, score)``, members as bytes (see :func:`list_members`)."""
    return [(m, float(s)) for m, s in client.zrange(key, start, end, withscores=True)]


def _state_key(queue: RedisQueue, name: str | None, state: str) -> tuple[str, str]:
    """The key of one state of a queue, and its kind (``list`` or ``zset``)."""
    keys = queue.keys(name)
    if state in ("pending", "poison"):
        return (keys.list if state == "pending" else keys.poison), "list"
    if state in ("delayed", "reserved"):
        return (keys.delayed if state == "delayed" else keys.reserved), "zset"
    raise ValueError(f"unknown state {state!r} (one of {', '.join(STATES)})")


def _members(client: Any, key: str, kind: str, start: int, end: int) -> list[tuple[bytes, float | None]]:
    """``(member, score)`` at ``start``..``end`` of a list (score None) or a ZSET."""
    if kind == "list":
        return [(m, None) for m in list_members(client, key, start, end)]
    return list(scored_members(client, key, start, end))


def _pages(read: Callable[[int, int], list[T]], batch: int) -> Iterator[tuple[T, int]]:
    """``(item, index)`` of what ``read(start, end)`` returns, a batch at a time, until a short batch."""
    start = 0
    while True:
        chunk = read(start, start + batch - 1)
        for offset, item in enumerate(chunk):
            yield item, start + offset
        if len(chunk) < batch:
            return
        start += batch


def iter_members(
    queue: RedisQueue, name: str | None, state: str, *, batch: int = 500
) -> Iterator[tuple[bytes, float | None, int]]:
    """``(member, score, index)`` of one state of a queue, in queue order, in batches."""
    key, kind = _state_key(queue, name, state)
    for (member, score), index in _pages(lambda a, b: _members(queue.client, key, kind, a, b), batch):
        yield member, score, index


def iter_excerpts(queue: RedisQueue, name: str | None, state: str, *, batch: int = 100) -> Iterator[
        tuple[Excerpt, int]]:
    """``(excerpt, index)`` of one state of a queue, in queue order, in batches: :func:`iter_members` with
    each member whole or cut to its two ends (:meth:`~laraq.protocol.queue.RedisQueue.excerpts`)."""
    key, kind = _state_key(queue, name, state)
    yield from _pages(lambda a, b: queue.excerpts(key, kind, a, b), batch)


def list_jobs(
    queue: RedisQueue, name: str | None = None, state: str = "pending", *, offset: int = 0, limit: int = 20,
    encrypter: Any = None, class_filter: str | None = None, scan_limit: int | None = None,
) -> list[JobView]:
    """Decoded jobs of one state, ``offset``/``limit`` applied after the optional class filter (each member
    read whole up to 64 KB, else from its two ends; names cut to :data:`NAME_LIMIT` characters);
    ``scan_limit``: read no further than the first that many members (None: as far as needed)."""
    out: list[JobView] = []
    skipped = 0
    qname = queue.queue_name(name)
    for excerpt, index in iter_excerpts(queue, name, state):
        if scan_limit is not None and index >= scan_limit:
            break
        view = JobView.from_excerpt(qname, state, excerpt, index, encrypter=encrypter, with_properties=False)
        if class_filter and not _matches(view, class_filter):
            continue
        if skipped < offset:
            skipped += 1
            continue
        view = JobView.from_excerpt(qname, state, excerpt, index, encrypter=encrypter)
        if view.size is None:  # read whole (from_excerpt cuts the names of the others)
            view.name, view.job = clip(view.name), clip(view.job)
        out.append(view)
        if len(out) >= limit:
            break
    return out


def _matches(view: JobView, class_filter: str) -> bool:
    names = [n for n in (view.name, view.job) if n]
    return any(n == class_filter or fnmatchcase(n, class_filter) for n in names)


def find_job(
    queue: RedisQueue, ident: str, queues: list[str] | None = None, *, encrypter: Any = None,
    max_elements: int | None = None, scan_limit: int | None = None, states: Iterable[str] = STATES,
) -> list[JobView]:
    """Every member (any queue, any of ``states``) whose payload ``id`` or ``uuid`` is ``ident``.

    Members are only decoded when their bytes contain ``ident``; ``max_elements`` bounds the
    decoding of each match's command (see :func:`command_view`); ``scan_limit`` reads only the first that
    many members of each state (None: all of them)."""
    found: list[JobView] = []
    needle = ident.encode("utf-8")
    for name in queues if queues is not None else discover_queues(queue.client, queue.prefix):
        for state in states:
            for excerpt, index in iter_excerpts(queue, name, state):
                if scan_limit is not None and index >= scan_limit:
                    break
                view = _match(queue, name, state, excerpt, index, ident, encrypter, max_elements)
                if view is not None:
                    found.append(view)
    found.extend(_find_held(queue, ident, needle, queues, encrypter, max_elements))
    return found


def find_job_near(
    queue: RedisQueue, ident: str, name: str, state: str, position: float, *, window: int = 200,
    encrypter: Any = None, max_elements: int | None = None,
) -> list[JobView]:
    """:func:`find_job`'s answer for a job last seen at ``position`` of ``state``, reading about ``window``
    members: a list index (the ``window`` members before it, as pops from the head move it towards index
    0, and a tenth of that after it, for jobs put back at the head) or a ZSET score (the members from the
    first with that score on). [] when it is not there (taken, moved, or further than the window)."""
    key, kind = _state_key(queue, name, state)
    if kind == "list":
        start = max(0, int(position) - window)
        end = max(0, int(position)) + window // 10
    else:  # ZCOUNT gives the rank of the first member with that score without reading any member
        start = int(queue.client.zcount(key, "-inf", f"({position!r}"))
        end = start + window - 1
    found = []
    for offset, excerpt in enumerate(queue.excerpts(key, kind, start, end)):
        view = _match(queue, name, state, excerpt, start + offset, ident, encrypter, max_elements)
        if view is not None:
            found.append(view)
    return found


def _match(queue: RedisQueue, name: str, state: str, excerpt: Excerpt, index: int, ident: str, encrypter: Any,
           max_elements: int | None) -> JobView | None:
    """The member ``excerpt`` was read from, decoded in full, when its payload ``id`` or ``uuid`` is ``ident``
    (members are only decoded when their bytes contain ``ident``)."""
    needle = ident.encode("utf-8")
    if needle not in excerpt.head and needle not in excerpt.tail:
        return None
    view = JobView.from_excerpt(name, state, excerpt, index, encrypter=encrypter, with_properties=False)
    if ident not in (view.id, view.uuid):
        return None
    member = excerpt.whole if excerpt.whole is not None else _read_whole(queue, name, state, excerpt, index)
    if member is None:  # it left its place since it was matched
        return None
    return JobView.from_member(name, state, member, excerpt.score, index, encrypter=encrypter,
                               max_elements=max_elements)


def _read_whole(queue: RedisQueue, name: str, state: str, excerpt: Excerpt, index: int) -> bytes | None:
    """The member at ``index`` in full, when it is still the one ``excerpt`` was read from."""
    key, kind = _state_key(queue, name, state)
    members = _members(queue.client, key, kind, index, index)
    if members and len(members[0][0]) == excerpt.length and members[0][0].startswith(excerpt.head):
        return members[0][0]
    return None


def _find_held(queue: RedisQueue, ident: str, needle: bytes, queues: list[str] | None, encrypter: Any,
               max_elements: int | None) -> list[JobView]:
    """Jobs held by an unfinished ``move`` (state ``held``), with the commands that finish or undo it."""
    out = []
    for held in find_held(queue.client, queue.prefix):
        name = held.source_queue(queue.prefix)
        if queues is not None and name not in queues:
            continue
        for state, score, member in journal_members(queue.client, held.key):
            if needle not in member:
                continue
            view = JobView.from_member(name, "held", member, score, encrypter=encrypter, max_elements=max_elements)
            if ident in (view.id, view.uuid):
                view.extra = {"held_in": held.key, "taken_from": state,
                              "destination": f"{held.dest_url() or 'unrecorded'} {held.meta.get('dest_base') or ''}",
                              "finish": held.finish_command(queue.prefix), "undo": held.undo_command(queue.prefix),
                              "note": "the destination may already have this job (a move cut between its two "
                                      "writes): finish does not write it twice, and undo reads the destination "
                                      "and leaves it there rather than put it back" + held.password_note()}
                out.append(view)
    return out


def find_failed(store: Any, ident: str, *, encrypter: Any = None, max_elements: int | None = None,
                scan_payloads: bool = True) -> list[JobView]:
    """Rows of a failed-job store whose id (what ``queue:failed`` shows), payload ``uuid`` or payload ``id``
    is ``ident``, as :class:`JobView` in state ``failed``.

    The store's own lookup (by its id) comes first; only when it finds nothing, and ``scan_payloads``,
    are the rows' payloads searched for the uuid or payload id (every row is read)."""
    rows = []
    hit = store.find(ident)
    if hit is not None:
        rows.append(hit)
    elif scan_payloads:
        for row in store.all():
            if ident not in row.payload:
                continue
            try:
                data = row.payload_data
            except ValueError:
                continue
            if isinstance(data, dict) and ident in (data.get("uuid"), data.get("id")):
                rows.append(row)
    out = []
    for row in rows:
        view = JobView.from_member(row.queue, "failed", row.payload.encode("utf-8"), encrypter=encrypter,
                                   max_elements=max_elements)
        view.extra = {"connection": row.connection, "failed_id": row.id, "failed_at": row.failed_at,
                      "exception": row.exception}
        out.append(view)
    return out
