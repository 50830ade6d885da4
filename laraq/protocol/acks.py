"""A worker's acks: ``Job::delete``'s ``ZREM :reserved``, written the moment a job is done, or deferred to
ride on the next reserve call.

A finished job whose ``ZREM`` is still in the worker process when it is SIGKILLed runs again after
``retry_after``. artisan sends its ``ZREM`` before it takes the next job, so a kill re-runs at most the
job that was running. :class:`Acks` keeps that bound at a low cost per job, by mode:

* ``sync`` (``--batch 1``): the ``ZREM`` is one round trip, answered before the next pop, as artisan's;
* ``at-once`` (the default): the ``ZREM`` is *written* on a connection of its own (:class:`AckPipe`: one
  ``send()``; once the bytes are in the kernel, a SIGKILL of the worker no longer stops Redis from running
  the command), and the replies are read later, many at once. A finished job's ack is held
  (:meth:`Acks.ack` with ``hold``: on the loop's thread, or on a slot thread, whose job's end wakes the
  loop) until the loop starts its next job or waits, whichever comes first: it then goes in the same
  write as the removal of the starting jobs' unstarted records (:meth:`Acks.send_held`). A job's slot is
  free for the next start only once its ack is held, and every start sends what is held first, so the
  finished-and-unacked jobs plus the running ones never outnumber ``--concurrency``: what a SIGKILL
  re-runs is what as many artisan processes would re-run, plus at most the one job whose ack was being
  written;
* ``batched``: acks wait (at most :data:`ACK_MAX_AGE`) and ride on the next reserve call, which runs
  them in its own script: fewer system calls per job, and a SIGKILL may re-run the jobs finished in
  those 50 ms.

While Redis is away every mode keeps its acks and sends them again (``ZREM`` of a member already gone
is harmless). The pipe also carries the removal of buffered jobs' unstarted records as they start, with
the held acks (see :mod:`laraq.worker.unstarted`), and a :class:`Rider`'s commands held by the same rule
(Horizon's job records when they go to the queue's Redis: :mod:`laraq.horizon.listener`). Redis Cluster cannot lend one connection: there
``at-once`` acks are pipelined ``ZREM``s within :data:`ACK_MAX_AGE`.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import hiredis
import redis

from laraq.protocol.redis_retry import retrying
from laraq.repeated import Repeated

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue

__all__ = ["ACK_MAX_AGE", "AckPipe", "Acks", "Ride", "Rider"]


def receive(sock: Any, wait: bool) -> bytes | None:
    """What the socket has (``wait``: block for it, within the connection's own timeout); None when
    nothing has come yet. One system call when not waiting (TLS sockets take no flags: a zero timeout).

    A socket with a timeout has a non-blocking descriptor, and Python ``poll()``s it before each
    ``recv``, for up to the timeout, whatever the flags: a "don't wait" ``recv`` would wait for the
    reply of the ack just written. A plain ``read()`` of the descriptor does not wait."""
    if wait:
        return bytes(sock.recv(65536))
    if not isinstance(sock, ssl.SSLSocket):
        try:
            if sock.gettimeout():
                return os.read(sock.fileno(), 65536)
            return bytes(sock.recv(65536, socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            return None
    before = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        return bytes(sock.recv(65536))
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
        return None
    finally:
        sock.settimeout(before)


def send_all(sock: Any, data: bytes) -> None:
    """``sock.sendall(data)`` in one system call when the kernel takes it all, as it does unless Redis
    has stopped reading. A socket with a timeout makes ``sendall`` ``poll()`` before every ``send()``
    (a second system call per ack); its descriptor is non-blocking, so a plain ``write()`` is tried
    first and ``sendall`` finishes whatever it did not take, within the timeout. TLS sockets and
    blocking ones (no timeout: ``sendall`` is already one call) go straight to ``sendall``."""
    if sock.gettimeout() and not isinstance(sock, ssl.SSLSocket):
        try:
            sent = os.write(sock.fileno(), data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    sock.sendall(data)


def read_replies(sock: Any, wait: bool, pending: Callable[[], bool], feed: Callable[[bytes], None]) -> None:
    """Hand what has come on ``sock`` to ``feed`` while ``pending()`` says replies are owed (``wait``: until
    none is). Raises ``ConnectionError`` when Redis closed the connection."""
    while pending():
        data = receive(sock, wait)
        if data is None:
            return
        if not data:
            raise ConnectionError("Redis closed the connection")
        feed(data)


def _zrem(key: bytes, members: list[bytes]) -> bytes:
    """``ZREM key member...`` in the Redis protocol (RESP), packed here: redis-py's packer costs more
    than the write itself."""
    if len(members) == 1:  # the loop's case: one finished job, one starting job
        member = members[0]
        return _ZREM_ONE % (len(key), key, len(member), member)
    parts = [b"*%d\r\n$4\r\nZREM\r\n$%d\r\n%s\r\n" % (len(members) + 2, len(key), key)]
    parts += [b"$%d\r\n%s\r\n" % (len(m), m) for m in members]
    return b"".join(parts)


#: ``ZREM key member`` in RESP, for ``%`` with (len(key), key, len(member), member)
_ZREM_ONE = b"*3\r\n$4\r\nZREM\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"

log = logging.getLogger("laraq.worker.worker")

#: a rider's held commands: the rider, their RESP bytes, how many replies they get, and what the rider
#: wants back with those replies
Ride = tuple["Rider", bytes, int, Any]


class Rider(Protocol):
    """Commands held on the loop's thread by the acks' rule (sent with the next start or before a wait) that
    ride in the acks' write: one ``send()`` for both. Its methods are called with no lock of the acks held."""

    @property
    def holding(self) -> bool:
        """Are commands held?"""

    def take(self) -> Ride | None:
        """The held commands, taken (None: none)."""

    def replies(self, token: Any, replies: list[Any]) -> None:
        """Redis answered a ride (hiredis replies; an error is a ``hiredis.ReplyError``)."""

    def unsent(self, ride: Ride) -> None:
        """The write of ``ride`` failed: nothing of it was sent."""

    def lost(self, token: Any) -> None:
        """The connection broke before Redis answered: the commands may or may not have run."""


class AckPipe:
    """``ZREM``s written at once on one held connection; replies read later."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue
        self._lock = threading.Lock()
        self._conn: Any = None
        #: (queue name, members, an unstarted removal?) per command written whose reply is not read yet; a
        #: rider's commands as (None, (rider, reply count, token), False)
        self.unconfirmed: collections.deque[tuple[Any, Any, bool]] = collections.deque()
        #: the replies to the rider's commands at the head of ``unconfirmed`` read so far
        self._ride_replies: list[Any] = []
        self._reader = hiredis.Reader()
        #: unstarted removals whose replies were lost with a broken connection: to send again
        self.lost_starts: dict[str, list[bytes]] = {}
        self._unstarted_keys: dict[str, bytes] = {}
        self._keys: dict[str, bytes] = {}

    @staticmethod
    def usable(queue: RedisQueue) -> bool:
        """Can this client lend one connection for acks (not Redis Cluster)?"""
        client = queue.client
        return getattr(client, "connection_pool", None) is not None and not isinstance(client, redis.RedisCluster)

    def _connection(self) -> Any:
        if self._conn is None:
            pool = self._pool()
            try:
                self._conn = pool.get_connection()
            except TypeError:  # redis-py before 5.3 wants the command name
                self._conn = pool.get_connection("ZREM")
        return self._conn

    def _pool(self) -> Any:
        return getattr(self.queue.client, "connection_pool", None)

    def write(self, acks: dict[str, list[bytes]], starts: dict[str, list[bytes]] | None = None,
              ride: Ride | None = None) -> None:
        """Write one ``ZREM`` per queue now (no reply read): finished jobs' ``acks`` on ``:reserved``, then the
        unstarted records of the jobs about to start (``starts``), then a rider's commands (``ride``). Raises
        what writing raised; nothing was then sent."""
        commands: list[tuple[Any, Any, bool]] = []
        packed = b""
        keys = self._keys
        for name, members in acks.items():
            if members:
                commands.append((name, members, False))
                packed += _zrem(keys.get(name) or self._key(name), members)
        if starts:
            keys = self._unstarted_keys
            for name, members in starts.items():
                if members:
                    commands.append((name, members, True))
                    packed += _zrem(keys.get(name) or self._unstarted_key(name), members)
        if ride is not None:
            rider, more, count, token = ride
            commands.append((None, (rider, count, token), False))
            packed += more
        if commands:
            self._send(packed, commands)

    def _unstarted_key(self, name: str) -> bytes:
        """Queue ``name``'s unstarted record key, as bytes, kept in ``_unstarted_keys`` (looked up there first)."""
        key = self._unstarted_keys[name] = self.queue.keys(name).unstarted.encode("utf-8")
        return key

    def _key(self, name: str) -> bytes:
        """Queue ``name``'s ``:reserved`` key, as bytes, kept in ``_keys`` (looked up there first)."""
        key = self._keys[name] = self.queue.keys(name).reserved.encode("utf-8")
        return key

    def _send(self, packed: bytes, commands: list[tuple[Any, Any, bool]]) -> None:
        """Write ``packed`` on the held connection (connected, logged in, database selected by redis-py)."""
        with self._lock:
            try:
                conn = self._conn if self._conn is not None else self._connection()
                if conn._sock is None:
                    conn.connect()
                send_all(conn._sock, packed)
            except BaseException:
                self._broken()
                raise
            self.unconfirmed.extend(commands)

    def collect(self, *, wait: bool = False) -> dict[str, list[bytes]]:
        """Read the replies that have come (``wait``: all of them). Returns the acks to send again: those
        whose replies were lost with a broken connection (empty when all is well).

        The replies are read straight from the socket by hiredis' reader: redis-py's parser never reads
        this connection after its log-in."""
        with self._lock:
            if not self.unconfirmed:
                return {}
            sock = None if self._conn is None else self._conn._sock
            if sock is None:  # written on a connection that broke since
                return self._lost()
            try:
                read_replies(sock, wait, lambda: bool(self.unconfirmed), self._settle)
            except Exception as exc:
                log.debug("ack connection lost (%s): acks to send again", exc)
                lost = self._lost()
                self._broken()
                return lost
        return {}

    def _settle(self, data: bytes) -> None:
        """Take the complete replies in ``data`` (a partial one stays in the reader for the next read)."""
        reader, unconfirmed = self._reader, self.unconfirmed
        reader.feed(data)
        while unconfirmed:
            reply = reader.gets()
            if reply is False:
                return
            name, members, started = unconfirmed[0]
            if name is None:  # a rider's commands: its replies go back to it once all have come
                rider, count, token = members
                got = self._ride_replies
                got.append(reply)
                if len(got) < count:
                    continue
                unconfirmed.popleft()
                self._ride_replies = []
                try:
                    rider.replies(token, got)
                except Exception:
                    log.exception("a rider of the acks failed on its replies")
                continue
            unconfirmed.popleft()
            if isinstance(reply, hiredis.ReplyError):  # e.g. WRONGTYPE: sending it again would not help
                log.error("ZREM of %d %s job(s) on %s was refused: %s", len(members),
                          "starting" if started else "finished", name, reply)

    def take_lost_starts(self) -> dict[str, list[bytes]]:
        """The unstarted removals to send again (see :attr:`lost_starts`), taken."""
        with self._lock:
            lost, self.lost_starts = self.lost_starts, {}
        return lost

    def keep_lost_starts(self, name: str, members: list[bytes]) -> None:
        """Unstarted removals that could not be sent again yet: kept for the next try."""
        with self._lock:
            self.lost_starts.setdefault(name, []).extend(members)

    def _lost(self) -> dict[str, list[bytes]]:
        lost: dict[str, list[bytes]] = {}
        for name, members, started in self.unconfirmed:
            if name is None:
                rider, _, token = members
                try:
                    rider.lost(token)
                except Exception:
                    log.exception("a rider of the acks failed on its lost replies")
                continue
            (self.lost_starts if started else lost).setdefault(name, []).extend(members)
        self.unconfirmed.clear()
        self._ride_replies = []
        self._reader = hiredis.Reader()
        return lost

    def _broken(self) -> None:
        """Drop the connection (a reply may be half read); the next write takes a fresh one."""
        conn, self._conn = self._conn, None
        self._ride_replies = []
        self._reader = hiredis.Reader()
        if conn is not None:
            conn.disconnect()
            self._pool().release(conn)

    def close(self) -> None:
        """Give the connection back to the pool (after :meth:`collect` with ``wait``)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                if self.unconfirmed:
                    conn.disconnect()
                self._pool().release(conn)


#: Deferred acks are sent at the latest this many seconds after the oldest one.
ACK_MAX_AGE = 0.05
#: Written acks whose replies are read together (a reply is 4 bytes; the socket holds thousands): one
#: ``recv`` per job cost more than the job on a VM's loopback. A forced flush reads them all.
READ_REPLIES_EVERY = 64


_NO_STARTS: dict[str, list[bytes]] = {}


class Acks:
    """One worker's acks (see the module): ``ack`` a finished job; ``take`` what may ride on a reserve call;
    ``flush`` what waits."""

    def __init__(self, queue: RedisQueue, mode: str = "at-once") -> None:
        self.queue = queue
        self.mode = mode
        #: acks written the moment a job is done (None: sync or batched mode, or Redis Cluster)
        self.pipe = AckPipe(queue) if mode == "at-once" and AckPipe.usable(queue) else None
        self._deferred: dict[str, list[bytes]] = {}
        self._lock = threading.Lock()
        #: held by whoever is sending acks it took from the deferred ones (the loop, or the watchdog for
        #: stale ones): a forced flush waits on it, so a stop never returns with an ack on its way
        self._sending = threading.Lock()
        #: when the oldest deferred ack was made (None: none waits)
        self.since: float | None = None
        #: finished jobs' acks held for the loop's next start or wait (see the module)
        self._held: dict[str, list[bytes]] = {}
        #: when the oldest held ack was made (None: none is held)
        self._held_since: float | None = None
        self._unsent = Repeated(log, "could not send %d ack(s) (%s): retrying")
        #: commands that ride in the writes of the held acks (see :class:`Rider`; at-once mode only)
        self.rider: Rider | None = None

    def ack(self, name: str, member: bytes, *, hold: bool = False) -> None:
        """``ZREM`` the finished job ``member`` of queue ``name``, by this worker's mode. ``hold`` (the loop's
        thread, at-once mode): kept for :meth:`send_held`, which the loop calls before it starts a job or
        waits. A sync ack is retried while Redis is away."""
        if self.mode == "sync":
            key = self.queue.keys(name).reserved
            retrying(lambda: self.queue.client.zrem(key, member))
            return
        with self._lock:
            if self.pipe is not None and not self._deferred:
                if hold:
                    self._held.setdefault(name, []).append(member)
                    if self._held_since is None:
                        self._held_since = time.monotonic()
                    return
                try:
                    self.pipe.write({name: [member]})
                    return
                except Exception:  # deferred below; the next flush meets the fault and reports it
                    pass
            self._deferred.setdefault(name, []).append(member)
            if self.since is None:
                self.since = time.monotonic()

    def send_held(self, starts: dict[str, list[bytes]] | None = None) -> bool:
        """Write the held acks now, and with them the removal of the unstarted records ``starts`` (queue ->
        members) of the jobs about to start: one ``send()``. False when the write failed: the acks then
        wait among the deferred ones (the next flush sends them again) and ``starts`` were not sent (the
        caller removes them with a round trip)."""
        with self._sending:  # a forced flush waits for this write (see flush)
            with self._lock:
                held, self._held, self._held_since = self._held, {}, None
            rider = self.rider
            ride = rider.take() if rider is not None and rider.holding else None
            if not held and not starts and ride is None:
                return True
            pipe = self.pipe
            if pipe is not None:
                try:
                    pipe.write(held, starts, ride)
                    return True
                except Exception:  # reported by the flush that sends the acks again
                    pass
            self.restore(held)
            if ride is not None:
                ride[0].unsent(ride)
            return False

    @property
    def holding(self) -> bool:
        """Are finished jobs' acks, or a rider's commands, held (see :meth:`send_held`)?"""
        if self._held_since is not None:
            return True
        rider = self.rider
        return rider is not None and rider.holding

    def deferred(self, name: str, member: bytes) -> bool:
        """Is ``member``'s ``ZREM`` still among the deferred or held acks (not sent yet)?"""
        with self._lock:
            return member in self._deferred.get(name, ()) or member in self._held.get(name, ())

    def take(self) -> dict[str, list[bytes]]:
        """The deferred and held acks, to send now (a reserve call carries them, ahead of its migrate: a job
        this worker finished is never migrated back by its own reserve); :meth:`restore` what was not sent."""
        with self._lock:
            acks, self._deferred, self.since = self._deferred, {}, None
            if self._held:
                for name, members in self._held.items():
                    acks.setdefault(name, []).extend(members)
                self._held, self._held_since = {}, None
        return acks

    def restore(self, acks: dict[str, list[bytes]]) -> None:
        """Acks taken and not sent (their call failed): they wait again."""
        if not any(acks.values()):
            return
        with self._lock:
            for name, members in acks.items():
                self._deferred.setdefault(name, []).extend(members)
            if self.since is None:
                self.since = time.monotonic()

    def flush(self, *, force: bool = False) -> None:
        """Send the deferred ``ZREM``s now if forced or if the oldest is :data:`ACK_MAX_AGE` old; read the
        pipe's replies when enough have come (all of them when forced).

        A forced flush first waits for acks another thread took and is still sending: the stop's last
        flush must not return while the watchdog's ``ZREM`` of a finished job is on its way (the process
        would exit with that job left in ``:reserved``, to run again after ``retry_after``). An unforced
        one leaves the sending to whoever is at it."""
        if force:  # held acks otherwise go with the loop's next start or wait, or from the watchdog
            self.send_held()  # (which also waits for a send under way on another thread)
        pipe = self.pipe
        if pipe is not None and pipe.unconfirmed and (force or len(pipe.unconfirmed) >= READ_REPLIES_EVERY):
            self.restore(pipe.collect(wait=force))
        since = self.since
        if not force and (since is None or time.monotonic() - since < ACK_MAX_AGE):
            return
        if not self._sending.acquire(blocking=force):
            return
        try:
            if self.since is None:
                return
            acks = self.take()
            try:
                if pipe is None:
                    self.send(acks)
                    lost = {}
                else:
                    pipe.write(acks)  # when it raises, nothing of acks was sent
                    lost = pipe.collect(wait=force)
            except Exception as exc:
                self._unsent.warn(sum(map(len, acks.values())), exc)
                self.restore(acks)
                return
            if lost:
                self._unsent.warn(sum(map(len, lost.values())), "the connection broke before Redis answered")
                self.restore(lost)
            else:
                self._unsent.clear("deferred acks sent again")
        finally:
            self._sending.release()

    def drain(self, tries: int = 4, pause: float = 0.5) -> None:
        """A stop's last flush: every written ack answered and every deferred one sent, tried ``tries`` times
        ``pause`` seconds apart while Redis is away (then they wait in :attr:`pending`, and their jobs come
        back after ``retry_after``)."""
        for attempt in range(tries):
            self.flush(force=True)
            if self.since is None or attempt == tries - 1:
                return
            time.sleep(pause)

    def flush_stale(self) -> None:
        """From the watchdog thread: send the deferred or held acks the loop did not send in time (it is busy
        running a synchronous job inline, say), so a SIGKILL re-runs at most ~:data:`ACK_MAX_AGE` of finished work
        besides the running job, however long that one takes."""
        held_since = self._held_since
        if held_since is not None and time.monotonic() - held_since >= ACK_MAX_AGE:
            self.send_held()
        since = self.since
        if since is not None and time.monotonic() - since >= ACK_MAX_AGE:
            self.flush()

    @property
    def pending(self) -> bool:
        """Are acks still waiting to be sent?"""
        return self.since is not None or self._held_since is not None

    def send(self, acks: dict[str, list[bytes]]) -> None:
        """``ZREM :reserved`` many finished jobs, one command per queue, in one pipeline."""
        if not any(acks.values()):
            return
        pipe = self.queue.client.pipeline(transaction=False)
        for name, members in acks.items():
            if members:
                pipe.zrem(self.queue.keys(name).reserved, *members)
        pipe.execute()

    def lost_starts(self) -> dict[str, list[bytes]]:
        """Unstarted removals whose replies a broken pipe lost, taken (to send again)."""
        pipe = self.pipe
        return pipe.take_lost_starts() if pipe is not None and pipe.lost_starts else _NO_STARTS

    def keep_lost_starts(self, name: str, members: list[bytes]) -> None:
        """Removals that could not be sent again yet: kept for the next try."""
        if self.pipe is not None:
            self.pipe.keep_lost_starts(name, members)

    def close(self) -> None:
        """Read what is left and give the pipe's connection back to the pool."""
        if self.pipe is not None:
            self.pipe.close()
