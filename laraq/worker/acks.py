"""Acks written the moment a job finishes: ``Job::delete``'s ``ZREM :reserved``, sent without waiting
for the reply (issue 29 §3).

A finished job whose ``ZREM`` is still in this process when it is SIGKILLed runs again after
``retry_after``. artisan sends its ``ZREM`` before it takes the next job, so a kill re-runs at most the
job that was running. Deferring acks to batch them (as the fast path did, up to 50 ms) re-ran every
job that finished in those 50 ms. :class:`AckPipe` keeps the batching's cost low and the guarantee
artisan's: each ack is *written* on a connection of its own as soon as the job is done (one
``send()``; once the bytes are in the kernel, a SIGKILL of this process no longer stops Redis from
running the command), and the replies are read later, all at once (:meth:`AckPipe.collect`).

The same connection carries the removal of a job's unstarted record as the job starts
(:meth:`AckPipe.write_started`, see :mod:`laraq.worker.unstarted`): written before the handler runs,
its reply read later.

If the connection breaks, the acks whose replies were not read are handed back to be sent again
(``ZREM`` of a member that is already gone is harmless), and so are the unstarted removals
(:attr:`AckPipe.lost_starts`). Owned by the reservation source
(:class:`laraq.worker.reservation.Reservation`), which falls back to its pipelined ``ZREM``s when the
client cannot lend a connection (Redis Cluster).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import ssl
import threading
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue

__all__ = ["AckPipe"]


def _receive(sock: Any, wait: bool) -> bytes | None:
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


def _send_all(sock: Any, data: bytes) -> None:
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


def _zrem(key: bytes, members: list[bytes]) -> bytes:
    """``ZREM key member...`` in the Redis protocol (RESP), packed here: redis-py's packer costs more
    than the write itself."""
    parts = [b"*%d\r\n$4\r\nZREM\r\n$%d\r\n%s\r\n" % (len(members) + 2, len(key), key)]
    parts += [b"$%d\r\n%s\r\n" % (len(m), m) for m in members]
    return b"".join(parts)

#: ``ZREM key member`` in RESP, for ``%`` with (len(key), key, len(member), member)
_ZREM_ONE = b"*3\r\n$4\r\nZREM\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"

log = logging.getLogger("laraq.worker.worker")


class AckPipe:
    """``ZREM``s written at once on one held connection; replies read later."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue
        self._lock = threading.Lock()
        self._conn: Any = None
        #: (queue name, members, an unstarted removal?) per command written whose reply is not read yet
        self.unconfirmed: collections.deque[tuple[str, list[bytes], bool]] = collections.deque()
        #: unstarted removals whose replies were lost with a broken connection: to send again
        self.lost_starts: dict[str, list[bytes]] = {}
        self._unstarted_keys: dict[str, bytes] = {}
        #: the start of a reply line not complete yet
        self._partial = b""
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

    def write(self, acks: dict[str, list[bytes]]) -> None:
        """Write one ``ZREM`` per queue now (no reply read): acks that waited (sent again after a broken
        connection, or deferred while Redis was away). Raises what writing raised; nothing was then sent."""
        commands = [(name, members, False) for name, members in acks.items() if members]
        if not commands:
            return
        self._send(b"".join(_zrem(self._key(name), members) for name, members, _ in commands), commands)

    def write_one(self, name: str, member: bytes, started: tuple[str, bytes] | None = None) -> None:
        """The ack of one finished job (the loop's case), and with ``started`` (queue, record) the removal
        of the next job's unstarted record, in one write. Raises what writing raised; nothing was then sent."""
        key = self._key(name)
        packed = _ZREM_ONE % (len(key), key, len(member), member)
        commands = [(name, [member], False)]
        if started is not None:
            key = self._unstarted_key(started[0])
            packed += _ZREM_ONE % (len(key), key, len(started[1]), started[1])
            commands.append((started[0], [started[1]], True))
        self._send(packed, commands)

    def write_started(self, name: str, members: list[bytes]) -> None:
        """Write the ``ZREM`` of starting jobs' unstarted records on queue ``name`` now (no reply read).
        Raises what writing raised; nothing was then sent."""
        self._send(_zrem(self._unstarted_key(name), members), [(name, members, True)])

    def _unstarted_key(self, name: str) -> bytes:
        key = self._unstarted_keys.get(name)
        if key is None:
            key = self._unstarted_keys[name] = self.queue.keys(name).unstarted.encode("utf-8")
        return key

    def _send(self, packed: bytes, commands: list[tuple[str, list[bytes], bool]]) -> None:
        with self._lock:
            try:
                _send_all(self._socket(), packed)
            except BaseException:
                self._broken()
                raise
            self.unconfirmed.extend(commands)

    def _key(self, name: str) -> bytes:
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = self.queue.keys(name).reserved.encode("utf-8")
        return key

    def _socket(self) -> Any:
        """The raw socket of the held connection (connected, logged in, database selected by redis-py)."""
        conn = self._connection()
        if conn._sock is None:
            conn.connect()
        return conn._sock

    def collect(self, *, wait: bool = False) -> dict[str, list[bytes]]:
        """Read the replies that have come (``wait``: all of them). Returns the acks to send again: those
        whose replies were lost with a broken connection (empty when all is well).

        Each ``ZREM`` is answered by one line (``:1``/``:0``, or an ``-ERR`` line), so replies are counted
        by their line ends, straight from the socket: redis-py's parser never reads this connection
        after its log-in."""
        with self._lock:
            if not self.unconfirmed:
                return {}
            sock = None if self._conn is None else self._conn._sock
            if sock is None:  # written on a connection that broke since
                return self._lost()
            try:
                while self.unconfirmed:
                    data = _receive(sock, wait)
                    if data is None:
                        break
                    if not data:
                        raise ConnectionError("Redis closed the connection")
                    self._settle(data)
            except Exception as exc:
                log.debug("ack connection lost (%s): acks to send again", exc)
                lost = self._lost()
                self._broken()
                return lost
        return {}

    def _settle(self, data: bytes) -> None:
        """Count the reply lines in ``data`` (a partial line is kept for the next read)."""
        text = self._partial + data
        lines = text.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            name, members, started = self.unconfirmed.popleft()
            if line.startswith(b"-"):  # e.g. WRONGTYPE: sending it again would not help
                log.error("ZREM of %d %s job(s) on %s was refused: %s", len(members),
                          "starting" if started else "finished", name, line.decode("utf-8", "replace").strip())

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
            (self.lost_starts if started else lost).setdefault(name, []).extend(members)
        self.unconfirmed.clear()
        self._partial = b""
        return lost

    def _broken(self) -> None:
        """Drop the connection (a reply may be half read); the next write takes a fresh one."""
        conn, self._conn = self._conn, None
        self._partial = b""
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
