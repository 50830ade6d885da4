"""Unfinished transfers: the jobs a ``laraq move`` holds on the source, found, listed, finished or undone.

A move between two servers (or dbs) takes each job from the source into a journal hash on the
source, ``<source queue>:laraq-transfer:<id>:journal``, before the destination writes it (see
:mod:`laraq.ops.migrate`). While a job sits there no worker can run it, so a journal must never be
left where nobody looks. This module owns:

* :func:`destination_identity`: where a connection really points (host resolved, port, db, socket),
  so ``redis://localhost`` and ``redis://:pw@127.0.0.1:6379/0`` are one destination;
* the journal's ``#meta`` field (JSON: when the transfer started, its mode, the destination's
  redacted URL, identity, prefix, queue and Laravel version), written with the first job taken;
* :func:`find_held`: every journal with jobs in it, by SCAN (never KEYS), for ``status``, ``doctor``
  and ``move --recover``; :class:`HeldTransfer` says its age, its job count and the two commands
  that finish it (on to its destination) or undo it (back to the source);
* :func:`return_to_source` and :func:`deliver_held`: those two actions, one atomic script per job; the
  undo leaves at the destination the jobs its done-marker lists (:func:`written_at`), so a job the
  destination wrote just before a kill is not put back on the source too;
* the commands printed to finish or undo carry the destination URL without its password, read from
  :data:`PASSWORD_ENV` instead, so they can be pasted as they are;
* :func:`check_destination`: connect, AUTH, PING and a write probe (a scripted SET/DEL) before a
  move takes anything, so a wrong password or a read-only replica takes no job at all
  (:class:`DestinationError` names ``--to-url``, never the source's options, and carries the exit code the
  same fault at the source gives: :func:`destination_fault`).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from laraq.config.faults import AUTH_MARKERS, one_line
from laraq.exitcodes import EXIT_ERROR, EXIT_REDIS_AUTH, EXIT_REDIS_UNREACHABLE
from laraq.protocol.queue import RedisQueue

__all__ = ["META", "PASSWORD_ENV", "SEQ", "TRANSFER_MARK", "DestinationError", "HeldElsewhere", "HeldTransfer", "check_destination",
           "destination_fault", "held_findings", "journal_members",
           "deliver_held", "destination_identity", "find_held", "held_report", "forget_marker", "return_to_source", "written_at"]

#: Infix of laraq's transfer bookkeeping keys (skipped by queue discovery).
TRANSFER_MARK = ":laraq-transfer:"
#: The journal's own fields (not entries): the sequence counter and the transfer's description.
SEQ, META = b"#seq", b"#meta"

# KEYS: 1 journal, 2 source list or zset, 3 source notify. ARGV: 1 field, 2 kind, 3 score, 4 member.
# Puts one held job back where it was taken from, once: the entry is deleted in the same step.
_RETURN = """\
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[2] == 'list' then
  redis.call('LPUSH', KEYS[2], ARGV[4])
  redis.call('RPUSH', KEYS[3], 1)
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
end
return 1
"""

# KEYS: 1 probe key. A write the destination must accept (ACLs, read-only replicas, OOM, no scripting).
_PROBE = """\
redis.call('SET', KEYS[1], '1', 'PX', 10000)
redis.call('DEL', KEYS[1])
return 1
"""


#: The environment variable the printed ``--recover`` commands take the destination's password from.
PASSWORD_ENV = "LARAQ_TO_PASSWORD"


class DestinationError(Exception):
    """The destination refused or failed; the message names ``--to-url`` and what is held, if anything.

    ``exit_code`` is the one the same fault at the source gives (``compat-docs/migrate.md``, "Exit codes"):
    3 unreachable, 4 credentials, 1 anything else."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def destination_fault(exc: BaseException, where: str, option: str = "--to-url") -> tuple[str, int]:
    """What went wrong with the destination ``where`` (named by ``option``), in one clause, and its exit code."""
    text = one_line(exc)
    if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and any(m.lower() in text.lower() for m in AUTH_MARKERS)):
        if "NOAUTH" in text or "HELLO must be called" in text or "Authentication required" in text:
            return (f"the destination {where} ({option}) needs a password and none was sent: put it in {option} "
                    f"(redis://:PASSWORD@host:port/db) or set {PASSWORD_ENV}", EXIT_REDIS_AUTH)
        return (f"the destination {where} ({option}) refused the credentials (password or user name not "
                f"accepted): put the right user/password in {option} or {PASSWORD_ENV}", EXIT_REDIS_AUTH)
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return f"cannot reach the destination {where} ({option}): {text}", EXIT_REDIS_UNREACHABLE
    return f"the destination {where} ({option}) cannot take jobs: {type(exc).__name__}: {text}", EXIT_ERROR


class HeldElsewhere(Exception):
    """Another unfinished move holds jobs of this source queue (for another destination): finish or
    undo it first, so no job is left in a journal nobody will replay."""

    def __init__(self, held: list[HeldTransfer], prefix: str) -> None:
        self.held, self.prefix = held, prefix
        lines = "\n  ".join(h.describe(prefix) for h in held)
        super().__init__(f"an unfinished move holds jobs of this queue; nothing was taken:\n  {lines}")


def destination_identity(queue: RedisQueue) -> str:
    """``host:port/db`` (host resolved to an address) or ``unix:path/db``: one string per real destination."""
    client = queue.client
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if not kwargs:
        return queue.redacted_url()
    db = kwargs.get("db", 0) or 0
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}/{db}"
    host = str(kwargs.get("host") or "localhost")
    with contextlib.suppress(OSError):
        host = socket.gethostbyname(host)
    return f"{host}:{kwargs.get('port', 6379)}/{db}"


def check_destination(dest: RedisQueue, base: str, option: str = "--to-url") -> None:
    """Connect, authenticate, PING and write a probe key (scripted, as the move writes); or raise."""
    try:
        dest.client.ping()
        dest.client.eval(_PROBE, 1, base + TRANSFER_MARK + "probe")
    except redis.RedisError as exc:
        text, code = destination_fault(exc, dest.redacted_url(), option)
        raise DestinationError(f"{text}; nothing was taken", code) from exc


@dataclass
class HeldTransfer:
    """One journal with jobs in it: a move that did not finish."""

    key: str
    source_base: str
    transfer_id: str
    jobs: int
    meta: dict[str, Any] = field(default_factory=dict)
    #: seconds since the transfer took its first job (None: a journal without a ``#meta`` field)
    age: float | None = None

    def source_queue(self, prefix: str) -> str:
        head = prefix + "queues:"
        return self.source_base[len(head):] if self.source_base.startswith(head) else self.source_base

    @property
    def needs_password(self) -> bool:
        """Whether the destination was reached with a password (the printed commands read it from
        :data:`PASSWORD_ENV`, so they can be pasted as they are)."""
        return bool(self.meta.get("dest_auth")) or ":***@" in str(self.meta.get("dest_url") or "")

    def dest_url(self) -> str | None:
        """The destination's recorded URL without its password (see :attr:`needs_password`)."""
        url = self.meta.get("dest_url")
        return None if not url else str(url).replace(":***@", "@").replace("//@", "//")

    def _dest_options(self, prefix: str) -> list[str]:
        parts = ["--to-url", self.dest_url() or "DEST_URL"]
        if self.meta.get("dest_prefix") is not None:
            parts += ["--to-prefix", str(self.meta["dest_prefix"])]
        return parts

    def password_note(self) -> str:
        """What to set before pasting the commands, when the destination needs a password ('' when not)."""
        return (f" (set {PASSWORD_ENV} to the destination's password first: the commands read it from there)"
                if self.needs_password else "")

    def finish_command(self, prefix: str) -> str:
        """The command that delivers the held jobs on to their destination, as it can be pasted: the
        destination's password, if it needs one, is read from :data:`PASSWORD_ENV` (:meth:`password_note`)."""
        parts = ["laraq", "move", "--recover", self.source_queue(prefix), "--prefix", prefix,
                 *self._dest_options(prefix)]
        if self.meta.get("dest_queue") and self.meta.get("dest_queue") != self.source_queue(prefix):
            parts.insert(4, str(self.meta["dest_queue"]))
        if self.meta.get("dest_version"):
            parts += ["--to-laravel", str(self.meta["dest_version"])]
        if self.meta.get("dest_cluster"):
            parts.append("--to-cluster")
        return shlex.join(parts)

    def undo_command(self, prefix: str) -> str:
        """The command that puts the held jobs back in the source; it names the destination so that a job
        the destination already wrote (a run killed between its two steps) is left there, not put back."""
        parts = ["laraq", "move", "--recover", self.source_queue(prefix), "--prefix", prefix, "--to-source"]
        if self.meta.get("dest_url"):
            parts += self._dest_options(prefix)
        return shlex.join(parts)

    def describe(self, prefix: str) -> str:
        age = "unknown age" if self.age is None else f"started {int(self.age)} s ago"
        dest = (f"{self.meta.get('dest_url')} {self.meta.get('dest_base')}" if self.meta.get("dest_url")
                else "an unrecorded destination")
        return (f"{self.jobs} job(s) of queue {self.source_queue(prefix)!r} held by an unfinished move to {dest} "
                f"({age}, journal {self.key}); finish: {self.finish_command(prefix)}  or undo: "
                f"{self.undo_command(prefix)}{self.password_note()}")

    def to_dict(self, prefix: str) -> dict[str, Any]:
        return {"journal": self.key, "queue": self.source_queue(prefix), "jobs": self.jobs,
                "age_seconds": None if self.age is None else round(self.age, 1),
                "destination": self.meta.get("dest_url"), "destination_base": self.meta.get("dest_base"),
                "finish": self.finish_command(prefix), "undo": self.undo_command(prefix),
                "password_env": PASSWORD_ENV if self.needs_password else None}


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def read_held(client: Any, key: str, now: float | None = None) -> HeldTransfer | None:
    """The journal at ``key`` as a :class:`HeldTransfer`, or None when it holds no job."""
    entries = cast(dict[bytes, bytes], client.hgetall(key))
    raw_meta = entries.pop(META, None)
    entries.pop(SEQ, None)
    if not entries:
        return None
    base, _, rest = key.partition(TRANSFER_MARK)
    meta: dict[str, Any] = {}
    if raw_meta:
        try:
            meta = json.loads(raw_meta)
        except ValueError:
            meta = {}
    created = meta.get("created")
    age = None
    if isinstance(created, int | float):
        age = max(0.0, (time.time() if now is None else now) - created)
    return HeldTransfer(key, base, rest.split(":", 1)[0], len(entries), meta, age)


def find_held(client: Any, prefix: str | None = None, *, source_base: str | None = None) -> list[HeldTransfer]:
    """Every journal with jobs under ``prefix`` (or of the one queue ``source_base``), oldest first."""
    if source_base is not None:
        pattern = _glob_escape(source_base) + TRANSFER_MARK + "*:journal"
    else:
        pattern = _glob_escape(prefix or "") + "*" + TRANSFER_MARK + "*:journal"
    out = []
    for raw in client.scan_iter(match=pattern, count=1000):
        held = read_held(client, _text(raw))
        if held is not None:
            out.append(held)
    return sorted(out, key=lambda h: -(h.age or 0.0))


def held_report(client: Any, prefix: str) -> list[dict[str, Any]]:
    """What ``status`` and ``doctor`` list: one dict per unfinished transfer (see :meth:`HeldTransfer.to_dict`)."""
    return [h.to_dict(prefix) for h in find_held(client, prefix)]


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _entries(client: Any, key: str) -> dict[bytes, bytes]:
    entries = cast(dict[bytes, bytes], client.hgetall(key))
    entries.pop(SEQ, None)
    entries.pop(META, None)
    return entries


def journal_members(client: Any, key: str) -> list[tuple[str, float | None, bytes]]:
    """``(state it was taken from, score, member)`` of every job held in the journal at ``key``."""
    out = []
    for entry in _entries(client, key).values():
        state_b, score_b, member = entry.split(b"\n", 2)
        state = state_b.decode()
        out.append((state, None if state == "pending" else float(score_b or 0), member))
    return out


def _drop_if_empty(client: Any, key: str) -> None:
    if not _entries(client, key):
        client.delete(key)


def _marker(held: HeldTransfer) -> str:
    return str(held.meta.get("dest_base") or "") + TRANSFER_MARK + held.transfer_id + ":done"


def written_at(dest: Any, held: HeldTransfer) -> set[str]:
    """The journal tokens the destination (a client of the journal's own destination) has written: its
    done-marker set. A job whose token is there was delivered; only its journal entry was left."""
    return {_text(t) for t in dest.smembers(_marker(held))}


def forget_marker(source: Any, dest: Any, held: HeldTransfer) -> None:
    """Once the journal is gone from ``source``, delete its done-marker at ``dest``."""
    if not source.exists(held.key):
        dest.delete(_marker(held))


def return_to_source(source: RedisQueue, held: HeldTransfer,
                     written: set[str] | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Put every held job back in its source state (ready jobs at the head, with their wake-up token),
    except those whose token is in ``written`` (:func:`written_at`: the destination has them, so putting
    them back would leave the job on both sides): their entries are dropped. Returns the counts put
    back and the counts left at the destination, per state."""
    client = source.client
    script = client.register_script(_RETURN)
    keys = _base_keys(held.source_base)
    counts: dict[str, int] = {}
    there: dict[str, int] = {}
    for token, entry in _entries(client, held.key).items():
        state_b, score_b, member = entry.split(b"\n", 2)
        state = state_b.decode()
        if written is not None and _text(token) in written:
            if client.hdel(held.key, token):
                there[state] = there.get(state, 0) + 1
            continue
        kind = "list" if state == "pending" else "zset"
        target = {"pending": keys[0], "delayed": keys[1], "reserved": keys[2]}.get(state, keys[0])
        if script(keys=[held.key, target, keys[3]], args=[token, kind, score_b.decode() or "0", member]):
            counts[state] = counts.get(state, 0) + 1
    _drop_if_empty(client, held.key)
    return counts, there


def _base_keys(base: str) -> tuple[str, str, str, str]:
    return base, base + ":delayed", base + ":reserved", base + ":notify"


def deliver_held(source: RedisQueue, held: HeldTransfer, dest: RedisQueue, dest_base: str,
                 give: Any, already: Callable[[bytes], bool] | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """Deliver every held job on to ``dest`` under the journal's own done-marker (so a job the
    destination already wrote is not written twice), then clear the entries and the marker.

    A job for which ``already(member)`` is true (its uuid/id is at the destination, see
    :func:`laraq.ops.inspect.identities_at`) is not written: it is there. Returns the counts delivered
    and the counts found there, per state."""
    client = source.client
    marker = dest_base + TRANSFER_MARK + held.transfer_id + ":done"
    keys = _base_keys(dest_base)
    counts: dict[str, int] = {}
    there: dict[str, int] = {}
    for token, entry in _entries(client, held.key).items():
        state_b, score_b, member = entry.split(b"\n", 2)
        state = state_b.decode()
        if already is not None and already(member):
            there[state] = there.get(state, 0) + 1
            client.hdel(held.key, token)
            continue
        kind = "list" if state == "pending" else "zset"
        target = {"pending": keys[0], "delayed": keys[1], "reserved": keys[2]}.get(state, keys[0])
        if give(keys=[target, keys[3], marker], args=[kind, member, score_b.decode() or "0", token.decode()]):
            counts[state] = counts.get(state, 0) + 1
        client.hdel(held.key, token)
    if not _entries(client, held.key):
        client.delete(held.key)
        dest.client.delete(marker)
    return counts, there


def held_findings(client: Any, prefix: str) -> list[tuple[str, str, str, str]]:
    """``(level, title, detail, fix)`` per unfinished transfer, for ``laraq doctor``."""
    out = []
    for held in find_held(client, prefix):
        age = "unknown age" if held.age is None else f"started {int(held.age)} s ago"
        out.append(("error", f"unfinished move holds {held.jobs} job(s) of queue {held.source_queue(prefix)!r}",
                    f"{held.key} ({age}); no worker runs a held job",
                    f"finish: {held.finish_command(prefix)}  or undo: {held.undo_command(prefix)}"
                    f"{held.password_note()}"))
    return out
