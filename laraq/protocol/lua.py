"""The runner of laraq's Lua scripts: each one loaded once per server and then run by its SHA.

The texts live in two modules: :mod:`laraq.protocol.lua_laravel` (what Laravel's own queue scripts do)
and :mod:`laraq.protocol.lua_laraq` (laraq's scripts with no Laravel counterpart). :data:`SCRIPT_TEXTS`
names every one of them; :class:`Scripts` runs them.

:class:`Scripts` holds one redis-py :class:`redis.commands.core.Script` per text. A call is an
``EVALSHA``; on a fresh server or after ``SCRIPT FLUSH`` the ``NOSCRIPT`` reply makes redis-py send the
text once with ``SCRIPT LOAD`` and try again. A redis-py pipeline checks and loads its scripts itself
before it runs. The worker's hot calls can also be sent now and read later (:meth:`Scripts.send`,
:class:`PendingCall`), on a connection of the pool held for that one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

from laraq.protocol import lua_laraq, lua_laravel
from laraq.protocol.lua_laraq import RECLAIM_CHUNK
from laraq.protocol.lua_laravel import POISON_SKIPS_PER_CALL
from laraq.protocol.pooled import patient, pooled_connection

SCRIPT_TEXTS: dict[str, str] = {
    "push": lua_laravel.PUSH,
    "later": lua_laravel.LATER,
    "pop": lua_laravel.POP,
    "pop_many": lua_laravel.POP_MANY,
    "reserve_batch": lua_laraq.RESERVE_BATCH,
    "reserve_handled": lua_laraq.RESERVE_HANDLED,
    "renew": lua_laraq.RENEW,
    "give_back": lua_laraq.GIVE_BACK,
    "unstarted": lua_laraq.UNSTARTED,
    "reclaim": lua_laraq.RECLAIM,
    "release": lua_laravel.RELEASE,
    "requeue": lua_laraq.REQUEUE,
    "migrate": lua_laravel.MIGRATE,
    "migrate_limited": lua_laravel.MIGRATE_LIMITED,
    "size": lua_laravel.SIZE,
    "clear": lua_laravel.CLEAR,
    "clear_with_notify": lua_laravel.CLEAR_WITH_NOTIFY,
    "excerpts": lua_laraq.EXCERPTS,
}

#: How much of one member :meth:`Scripts.excerpts` hands back: a member up to twice this long whole, a
#: longer one as its first and its last this many bytes.
EXCERPT_SIDE = 32 * 1024


# -- results -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PopResult:
    """What one pop call did: the reserved job (if any) and how many members went to ``:poison``."""

    job: bytes | None
    reserved: bytes | None
    poisoned: int = 0


@dataclass(frozen=True)
class PopManyResult:
    """What one batch pop did: ``(job, reserved)`` pairs in list order, and the poison count."""

    jobs: list[tuple[bytes, bytes]]
    poisoned: int = 0
    #: members a selective reserve looked at and left in the list (no Python handler)
    skipped: int = 0
    #: a selective reserve's next deep look starts here (0: from the window's end; -1: refused by the ACL)
    cursor: int = 0
    #: the list's length after a selective reserve
    depth: int = 0
    #: Python jobs a selective reserve's deep look saw too far from both ends of the list to take
    beyond: int = 0


@dataclass(frozen=True)
class Excerpt:
    """One member as :data:`~laraq.protocol.lua_laraq.EXCERPTS` read it: its length in bytes, and either
    all of it (``head``, with ``tail`` empty) or its first and its last bytes; its score in a ZSET."""

    length: int
    head: bytes
    tail: bytes
    score: float | None = None

    @property
    def whole(self) -> bytes | None:
        """The member itself when it was read whole, else None."""
        return self.head if len(self.head) == self.length else None


def excerpts_from(reply: Any) -> list[Excerpt]:
    """The :class:`Excerpt` list of one ``excerpts`` script reply."""
    return [Excerpt(int(reply[i]), _as_bytes(reply[i + 1]) or b"", _as_bytes(reply[i + 2]) or b"",
                    None if reply[i + 3] is None else float(reply[i + 3]))
            for i in range(0, len(reply), 4)]


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("ascii")


# -- the runner ----------------------------------------------------------------------------------

@dataclass(eq=False)
class PendingCall:
    """A script call sent with :meth:`Scripts.send` whose reply has not been read yet (``first``: the
    command sent ahead of it on the same connection still has its reply to read, see
    :meth:`Scripts.receive_first`)."""

    name: str
    keys: tuple[Any, ...]
    args: tuple[Any, ...]
    conn: Any
    pool: Any
    first: bool = False


class Scripts:
    """laraq's queue scripts bound to one redis-py client.

    Each method takes the full (prefixed) key names, like the ``KEYS`` of Laravel's ``EVAL`` calls,
    and an optional ``client`` (a pipeline of the same connection) to queue the call there instead.
    The script text is sent at most once per server (``SCRIPT LOAD`` on ``NOSCRIPT``); every other
    call is a single ``EVALSHA`` round trip.
    """

    def __init__(self, client: redis.Redis | Any) -> None:
        self.client = client
        #: a Redis Cluster client (no single pool to split a call on); asked once: the check is costly
        self._cluster = isinstance(client, redis.RedisCluster)
        self._scripts: dict[str, Script] = {
            name: client.register_script(text) for name, text in SCRIPT_TEXTS.items()
        }

    # -- plumbing ---------------------------------------------------------------------------------

    def sha(self, name: str) -> str:
        """The SHA1 of one script (what ``EVALSHA`` and ``SCRIPT EXISTS`` use)."""
        return self._scripts[name].sha

    def text(self, name: str) -> str:
        """The Lua source of one script."""
        return SCRIPT_TEXTS[name]

    def load(self) -> None:
        """``SCRIPT LOAD`` every script now (optional; calls load lazily on ``NOSCRIPT``)."""
        for name, text in SCRIPT_TEXTS.items():
            sha = self.client.script_load(text)
            if isinstance(sha, bytes):
                sha = sha.decode()
            self._scripts[name].sha = sha

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any] = ()) -> Any:
        """Run one script with a bare ``EVALSHA`` (no redis-py ``Script`` wrapper: the hot path).

        On ``NOSCRIPT`` (fresh server, ``SCRIPT FLUSH``) the text is loaded once and the call retried.
        """
        script = self._scripts[name]
        try:
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            sha = self.client.script_load(SCRIPT_TEXTS[name])
            script.sha = sha.decode() if isinstance(sha, bytes) else sha
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def send(self, name: str, keys: Sequence[Any], args: Sequence[Any] = (), *,
             first: Sequence[Any] | None = None) -> PendingCall | None:
        """Send one script call now and read its reply later (:meth:`receive`), on a connection of its
        own taken from the pool: Redis runs it while the caller does other work. None when the client
        cannot do that (a cluster client has no single pool): the caller then uses :meth:`call`.

        ``first``: one command written just before the call on the same connection (a ``BLPOP``).
        Redis serves a connection's commands in order, so it runs the script the moment that command
        is answered, with no round trip in between; its reply is read with :meth:`receive_first`."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is None or self._cluster:
            return None
        script = self._scripts[name]
        conn = pooled_connection(pool, "EVALSHA")
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            if first is None:
                conn.send_command(*call)
            else:
                conn.send_packed_command(conn.pack_commands([tuple(first), call]))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return PendingCall(name, tuple(keys), tuple(args), conn, pool, first is not None)

    def receive_first(self, pending: PendingCall, wait: float | None = None) -> Any:
        """The reply of the command :meth:`send` wrote ahead of the script (this blocks while that
        command blocks: ``wait``, its own timeout in seconds, 0 for none, is added to the socket's read
        timeout meanwhile). An error reply is raised, and the script's reply stays readable with
        :meth:`receive`; a lost connection is raised too, and the call is then over."""
        assert pending.first
        try:
            with patient(pending.conn, wait):
                reply = pending.conn.read_response()
        except redis.exceptions.ResponseError:
            pending.first = False
            raise
        except BaseException:
            pending.first = False
            self._drop(pending)
            raise
        pending.first = False
        return reply

    @staticmethod
    def _drop(pending: PendingCall) -> None:
        """Give up a sent call: its reply may be half read, so its connection is never handed out as is."""
        pending.conn.disconnect()
        pending.pool.release(pending.conn)

    def receive(self, pending: PendingCall) -> Any:
        """The reply of a :meth:`send` (``NOSCRIPT``: loaded and run again, as :meth:`call` does)."""
        if pending.first:  # its reply (or error reply) is not what the caller asked for
            with contextlib.suppress(redis.exceptions.ResponseError):
                self.receive_first(pending)
        conn, pool = pending.conn, pending.pool
        try:
            reply = conn.read_response()
        except redis.exceptions.NoScriptError:
            pool.release(conn)
            return self.call(pending.name, pending.keys, pending.args)
        except BaseException:
            self._drop(pending)
            raise
        pool.release(conn)
        return reply

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any] = (), client: Any = None) -> Any:
        """Run one script by name; ``client`` may be a pipeline (the call is queued there)."""
        target = self.client if client is None else client
        return self._scripts[name](keys=list(keys), args=list(args), client=target)

    # -- operations -------------------------------------------------------------------------------

    def excerpts(self, key: str, kind: str, start: int, stop: int, *, side: int = EXCERPT_SIDE,
                 client: Any = None) -> Any:
        """Members ``start``..``stop`` (inclusive, >= 0) of the list or ZSET ``key`` (``kind``: ``list`` or
        ``zset``), each whole or cut to its two ends (:data:`~laraq.protocol.lua_laraq.EXCERPTS`): a list of
        :class:`Excerpt`, or the queued call when ``client`` is a pipeline (read its reply with
        :func:`excerpts_from`)."""
        reply = self.run("excerpts", [key], [kind, int(start), int(stop), int(side)], client)
        return reply if client is not None else excerpts_from(reply)

    def push(self, list_key: str, notify_key: str, payload: bytes | str, client: Any = None) -> Any:
        """``RPUSH list payload`` + ``RPUSH notify 1``."""
        return self.run("push", [list_key, notify_key], [payload], client)

    def later(self, delayed_key: str, available_at: int, payload: bytes | str, client: Any = None) -> Any:
        """``ZADD delayed available_at payload`` (Laravel 12.45+ runs this as a script)."""
        return self.run("later", [delayed_key], [int(available_at), payload], client)

    def pop(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        expires_at: int,
        *,
        poison_budget: int = POISON_SKIPS_PER_CALL,
    ) -> PopResult:
        """Reserve the next usable job; park unusable members in ``poison_key``."""
        raw = self.run(
            "pop", [list_key, reserved_key, notify_key, poison_key], [int(expires_at), int(poison_budget)]
        )
        job, reserved = _as_bytes(raw[0]), _as_bytes(raw[1])
        poisoned = int(raw[2]) if len(raw) > 2 and raw[2] is not None else 0
        return PopResult(job, reserved, poisoned)

    def pop_many(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        expires_at: int,
        count: int,
        *,
        poison_budget: int = POISON_SKIPS_PER_CALL,
    ) -> PopManyResult:
        """Reserve up to ``count`` jobs in one call (each exactly as :meth:`pop` would)."""
        if count < 1:
            return PopManyResult([], 0)
        raw = self.run(
            "pop_many",
            [list_key, reserved_key, notify_key, poison_key],
            [int(expires_at), int(poison_budget), int(count)],
        )
        poisoned = int(raw[0])
        members = [_as_bytes(v) for v in raw[1:]]
        pairs = [(members[i], members[i + 1]) for i in range(0, len(members) - 1, 2)]
        return PopManyResult([(j, r) for j, r in pairs if j is not None and r is not None], poisoned)

    def release(
        self, delayed_key: str, reserved_key: str, reserved: bytes | str, available_at: int, client: Any = None
    ) -> Any:
        """``ZREM reserved <reserved>`` then ``ZADD delayed available_at <reserved>``."""
        return self.run("release", [delayed_key, reserved_key], [reserved, int(available_at)], client)

    def requeue(
        self, reserved_key: str, delayed_key: str, reserved: bytes | str, available_at: int, body: bytes | str,
        client: Any = None,
    ) -> Any:
        """Swap a reservation for the untouched ``body`` on ``:delayed``; 0 (no change) if not reserved."""
        return self.run("requeue", [reserved_key, delayed_key], [reserved, int(available_at), body], client)

    def migrate(
        self,
        from_key: str,
        to_key: str,
        notify_key: str,
        now: int,
        limit: int | None = None,
        client: Any = None,
    ) -> list[bytes]:
        """Move members of ``from_key`` scored <= ``now`` to the tail of ``to_key``.

        ``limit=None`` runs the 8.0–9.22 script (no ``LIMIT``); an int runs the 9.23+ script with
        ``LIMIT 0 limit`` (-1 = all). Returns the moved members in the order they were appended.
        """
        if limit is None:
            result = self.run("migrate", [from_key, to_key, notify_key], [int(now)], client)
        else:
            result = self.run("migrate_limited", [from_key, to_key, notify_key], [int(now), int(limit)], client)
        if client is not None and client is not self.client:
            return result
        return [m for m in (_as_bytes(v) for v in result or []) if m is not None]

    def size(self, list_key: str, delayed_key: str, reserved_key: str, client: Any = None) -> Any:
        """``LLEN list + ZCARD delayed + ZCARD reserved``."""
        return self.run("size", [list_key, delayed_key, reserved_key], [], client)

    def clear(
        self,
        list_key: str,
        delayed_key: str,
        reserved_key: str,
        notify_key: str | None = None,
        client: Any = None,
    ) -> Any:
        """Delete the queue's keys and return how many jobs they held.

        Without ``notify_key`` this is the 8.4–8.8 script (the notify list survives); with it, the
        8.9+ script that deletes it too.
        """
        if notify_key is None:
            return self.run("clear", [list_key, delayed_key, reserved_key], [], client)
        return self.run("clear_with_notify", [list_key, delayed_key, reserved_key, notify_key], [], client)

    def reserve_batch(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        delayed_key: str,
        *,
        expires_at: int,
        count: int,
        now: int,
        migrate_limit: int = -1,
        migrate_reserved: bool = True,
        acks: Sequence[bytes] = (),
        poison_budget: int = POISON_SKIPS_PER_CALL,
        handled: Sequence[str] | None = None,
        window: int = 100,
        deep: int | None = None,
        unstarted_key: str | None = None,
        unstarted_lease: float = 0.0,
    ) -> PopManyResult:
        """``ZREM`` the ``acks``, migrate due ``:delayed`` (and expired ``:reserved``) jobs, then
        reserve up to ``count`` jobs, each exactly as :meth:`pop` would: one round trip.

        ``handled``: the names Python has handlers for. Only jobs with one of them are reserved, among
        the first ``window`` members of the list; the others stay where they are
        (:data:`~laraq.protocol.lua_laraq.RESERVE_HANDLED`). None: the head jobs, whatever they are
        (:data:`~laraq.protocol.lua_laraq.RESERVE_BATCH`). ``deep`` (with ``handled``): the cursor of the deep
        look past the window (one page of :data:`~laraq.protocol.lua_laraq.DEEP_PAGE` members from there,
        the reply's ``cursor`` says where the next starts); None: no deep look.

        ``unstarted_key``: laraq's unstarted record (see :mod:`laraq.protocol.lua_laraq`): expired records
        are reclaimed first, and each job reserved is recorded with a lease of ``unstarted_lease`` seconds."""
        name, keys, args = self._reserve_batch_args(list_key, reserved_key, notify_key, poison_key, delayed_key,
                                                    expires_at, count, now, migrate_limit, migrate_reserved,
                                                    acks, poison_budget, handled, window, deep, unstarted_key,
                                                    unstarted_lease)
        return self.reserve_batch_result(self.call(name, keys, args), selective=handled is not None)

    def reserve_batch_send(self, list_key: str, reserved_key: str, notify_key: str, poison_key: str,
                           delayed_key: str, *, expires_at: int, count: int, now: int, migrate_limit: int = -1,
                           migrate_reserved: bool = True, acks: Sequence[bytes] = (),
                           poison_budget: int = POISON_SKIPS_PER_CALL,
                           first: Sequence[Any] | None = None, handled: Sequence[str] | None = None,
                           window: int = 100, deep: int | None = None, unstarted_key: str | None = None,
                           unstarted_lease: float = 0.0) -> PendingCall | None:
        """:meth:`reserve_batch`, sent now (after ``first``, see :meth:`send`); :meth:`receive` +
        :meth:`reserve_batch_result` read it later."""
        name, keys, args = self._reserve_batch_args(list_key, reserved_key, notify_key, poison_key, delayed_key,
                                                    expires_at, count, now, migrate_limit, migrate_reserved,
                                                    acks, poison_budget, handled, window, deep, unstarted_key,
                                                    unstarted_lease)
        return self.send(name, keys, args, first=first)

    def reserve_batch_many(self, calls: Sequence[dict[str, Any]]) -> list[PopManyResult | Exception]:
        """Several :meth:`reserve_batch` calls (each a dict of its arguments) in one pipelined round trip on
        one connection: Redis runs them back to back, each the script it would be alone. A call that failed
        is its exception in the answer. A Redis Cluster client runs them one by one."""
        built = [self._reserve_batch_args(c["list_key"], c["reserved_key"], c["notify_key"], c["poison_key"],
                                          c["delayed_key"], c["expires_at"], c["count"], c["now"],
                                          c.get("migrate_limit", -1), c.get("migrate_reserved", True),
                                          c.get("acks", ()), c.get("poison_budget", POISON_SKIPS_PER_CALL),
                                          c.get("handled"), c.get("window", 100), c.get("deep"), c.get("unstarted_key"),
                                          c.get("unstarted_lease", 0.0)) for c in calls]
        raws: list[Any]
        if self._cluster or len(built) == 1:
            raws = []
            for name, keys, args in built:
                try:
                    raws.append(self.call(name, keys, args))
                except Exception as exc:
                    raws.append(exc)
        else:
            pipe = self.client.pipeline(transaction=False)
            for name, keys, args in built:
                pipe.execute_command("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)
            raws = list(pipe.execute(raise_on_error=False))
            for i, (name, keys, args) in enumerate(built):
                if isinstance(raws[i], redis.exceptions.NoScriptError):  # not run: loaded, and run alone
                    try:
                        raws[i] = self.call(name, keys, args)
                    except Exception as exc:
                        raws[i] = exc
        return [raw if isinstance(raw, Exception)
                else self.reserve_batch_result(raw, selective=calls[i].get("handled") is not None)
                for i, raw in enumerate(raws)]

    @staticmethod
    def _reserve_batch_args(list_key: str, reserved_key: str, notify_key: str, poison_key: str, delayed_key: str,
                            expires_at: int, count: int, now: int, migrate_limit: int, migrate_reserved: bool,
                            acks: Sequence[bytes], poison_budget: int, handled: Sequence[str] | None = None,
                            window: int = 100, deep: int | None = None, unstarted_key: str | None = None,
                            unstarted_lease: float = 0.0) -> tuple[str, tuple[Any, ...], tuple[Any, ...]]:
        keys: tuple[Any, ...] = (list_key, reserved_key, notify_key, poison_key, delayed_key)
        head = (int(expires_at), int(poison_budget), max(0, int(count)), int(now), int(migrate_limit),
                1 if migrate_reserved else 0, len(acks))
        tail: tuple[Any, ...] = ()
        if unstarted_key is not None:
            keys, tail = (*keys, unstarted_key), (repr(float(unstarted_lease)),)
        if handled is None:
            return "reserve_batch", keys, (*head, *acks, *tail)
        look = (0, 0) if deep is None else (max(0, int(deep)), lua_laraq.DEEP_PAGE)
        return "reserve_handled", keys, (*head, max(1, int(window)), len(handled), *look, *acks, *handled, *tail)

    @staticmethod
    def reserve_batch_result(raw: Any, *, selective: bool = False) -> PopManyResult:
        """The reply of the ``reserve_batch`` (or, ``selective``, ``reserve_handled``) script: (job,
        reserved) pairs, the poisoned count, and for a selective one the members left alone, the deep
        look's next cursor, the list's length and the Python jobs beyond reach."""
        poisoned = int(raw[0])
        first = 5 if selective else 1
        pairs = [(raw[i], raw[i + 1]) for i in range(first, len(raw) - 1, 2)]
        jobs = [(_as_bytes(j), _as_bytes(r)) for j, r in pairs]
        if not selective:
            return PopManyResult(jobs, poisoned)  # type: ignore[arg-type]
        return PopManyResult(jobs, poisoned, int(raw[1]), int(raw[2]), int(raw[3]),  # type: ignore[arg-type]
                             int(raw[4]))

    def renew(self, reserved_key: str, members: Sequence[bytes], expires_at: int) -> list[bool]:
        """Push the reservation expiry of ``members`` to ``expires_at``; False for a member that is gone."""
        if not members:
            return []
        return self.renew_result(self.call("renew", (reserved_key,), (int(expires_at), *members)))

    def renew_send(self, reserved_key: str, members: Sequence[bytes], expires_at: int) -> PendingCall | None:
        """:meth:`renew`, sent now; :meth:`receive` + :meth:`renew_result` read it later."""
        return self.send("renew", (reserved_key,), (int(expires_at), *members))

    @staticmethod
    def renew_result(raw: Any) -> list[bool]:
        """The reply of the ``renew`` script: True for each member still reserved (now renewed)."""
        return [bool(int(v)) for v in raw]

    def give_back(self, list_key: str, reserved_key: str, notify_key: str,
                  jobs: Sequence[tuple[bytes, bytes]], unstarted_key: str | None = None) -> int:
        """Hand reserved-but-unstarted ``(reserved, body)`` jobs back to the head of the list, in order
        (and forget their unstarted records in ``unstarted_key``)."""
        if not jobs:
            return 0
        args: list[bytes] = []
        for reserved, body in jobs:
            args += (reserved, body)
        keys = (list_key, reserved_key, notify_key) + (() if unstarted_key is None else (unstarted_key,))
        return int(self.call("give_back", keys, args))

    def unstarted(self, unstarted_key: str, lease: float, starting: Sequence[bytes],
                  buffered: Sequence[bytes] = ()) -> list[bool]:
        """Remove the unstarted records of the ``starting`` jobs and renew those of the ``buffered``
        ones: per member, in that order, True if its record was still there."""
        if not starting and not buffered:
            return []
        raw = self.call("unstarted", (unstarted_key,), (repr(float(lease)), len(starting), *starting, *buffered))
        return [bool(int(v)) for v in raw]

    def reclaim(self, list_key: str, reserved_key: str, notify_key: str, unstarted_key: str,
                limit: int = RECLAIM_CHUNK) -> tuple[int, int]:
        """Give back the jobs whose unstarted lease ran out: (records looked at, jobs given back)."""
        raw = self.call("reclaim", (list_key, reserved_key, notify_key, unstarted_key), (int(limit),))
        return int(raw[0]), int(raw[1])
