"""Horizon's job records written on a connection of their own, replies read later, many at once.

:class:`RecordPipe` holds one connection of the Horizon client's pool (not Redis Cluster: see
:meth:`RecordPipe.usable`) and sends the commands :class:`~laraq.horizon.records.HorizonRecords` packs in
the Redis protocol (RESP) with one ``send()`` per batch, without waiting for Redis' answers. Once the bytes
are in the kernel a SIGKILL of the worker no longer stops Redis from running them, as a PHP worker's
synchronous write would not be undone. The replies are read in bulk (:meth:`RecordPipe.collect`, every
:data:`READ_REPLIES_EVERY` batches, or all of them when a caller needs Redis to have run everything sent
so far: a synchronous write on another connection must not overtake them).

Replies are read with hiredis' reader. An error reply is logged; a ``NOSCRIPT`` answer to one of the
records' scripts (Redis lost its scripts: a restart, ``SCRIPT FLUSH``) is the one to act on: the scripts
are loaded again and that call sent again, so the metrics count every job once. A write that finds no
connection (Redis away) is logged and sends nothing, as the synchronous write would have failed; a send
that breaks part way and replies lost with a broken connection are logged: those commands may or may not
have run.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

import hiredis
import redis

from laraq.horizon.records import resp
from laraq.protocol.acks import read_replies, send_all

__all__ = ["READ_REPLIES_EVERY", "RecordPipe"]

log = logging.getLogger("laraq.horizon")

#: Batches written whose replies are read together (one ``recv`` per batch would cost more than packing it).
READ_REPLIES_EVERY = 64


#: a script call's ``EVALSHA`` arguments (its SHA1, the key count, the keys, the arguments)
Call = tuple[bytes, ...]
#: a batch's replies: how many, and per script call among them (reply index, its arguments) to send again
#: on ``NOSCRIPT``
Batch = tuple[int, tuple[tuple[int, Call], ...]]


def _refused(metrics: tuple[tuple[int, Call], ...], index: int, reply: Any,
             again: list[Call]) -> None:
    """Redis refused reply ``index`` of a batch: a script call answered ``NOSCRIPT`` goes into ``again``,
    anything else is logged."""
    call = next((args for at, args in metrics if at == index), None)
    if call is not None and str(reply).startswith("NOSCRIPT"):
        again.append(call)
    else:
        log.error("horizon records: Redis refused a command: %s", reply)


class RecordPipe:
    """Commands written at once on one held connection; replies read later (see the module)."""

    def __init__(self, client: Any, load_scripts: Callable[[], Any]) -> None:
        self.client = client
        #: loads the scripts of the packed calls into Redis again
        self._load_scripts = load_scripts
        self._lock = threading.Lock()
        self._conn: Any = None
        self._reader = hiredis.Reader()
        #: batches written whose replies are not all read, oldest first, and how many replies of the
        #: oldest were read already
        self.unconfirmed: collections.deque[Batch] = collections.deque()
        self._read = 0

    @staticmethod
    def usable(client: Any) -> bool:
        """Can this client lend one connection (not Redis Cluster)?"""
        return getattr(client, "connection_pool", None) is not None and not isinstance(client, redis.RedisCluster)

    def _socket(self) -> Any:
        conn = self._conn
        if conn is None:
            pool = self.client.connection_pool
            try:
                conn = pool.get_connection()
            except TypeError:  # redis-py before 5.3 wants the command name
                conn = pool.get_connection("HSET")
            self._conn = conn
            self._reader = hiredis.Reader()
            self._read = 0
        if conn._sock is None:
            conn.connect()
        return conn._sock

    def write(self, packed: bytes, batch: Batch) -> bool:
        """Send ``packed`` (``batch`` says what its replies are) now, without reading any reply. False when no
        connection could be had: nothing was sent and the caller writes another way. A send that fails part
        way is logged (what went may have run) and the connection dropped."""
        with self._lock:
            try:
                sock = self._socket()
            except Exception as exc:
                log.warning("horizon records: no connection to Redis (%s); records lost", exc)
                self._broken()
                return False
            try:
                send_all(sock, packed)
            except Exception as exc:  # part may have gone: its replies are lost with the connection
                log.warning("horizon records: a write failed (%s); some records may be missing", exc)
                self.unconfirmed.append(batch)
                self._lost()
                return True
            self.unconfirmed.append(batch)
            if len(self.unconfirmed) >= READ_REPLIES_EVERY:
                self._collect(wait=False)
        return True

    def collect(self, *, wait: bool = False) -> None:
        """Read the replies that have come (``wait``: all of them: Redis has then run everything sent)."""
        with self._lock:
            if self.unconfirmed:
                self._collect(wait=wait)

    def _collect(self, *, wait: bool) -> None:
        sock = None if self._conn is None else self._conn._sock
        if sock is None:
            self._lost()
            return
        again: list[Call] = []

        def feed(data: bytes) -> None:
            self._reader.feed(data)
            self._settle(again)

        try:
            read_replies(sock, wait, lambda: bool(self.unconfirmed), feed)
        except Exception as exc:
            log.warning("horizon records: the connection broke before Redis answered (%s); some records may "
                        "be missing", exc)
            self._lost()
        if again:
            self._send_again(again)
            if wait:
                self._collect(wait=True)

    def _settle(self, again: list[Call]) -> None:
        """Take the complete replies from the reader, batch by batch."""
        reader, unconfirmed = self._reader, self.unconfirmed
        while unconfirmed:
            count, metrics = unconfirmed[0]
            index = self._read
            while index < count:
                reply = reader.gets()
                if reply is False:
                    self._read = index
                    return
                if isinstance(reply, hiredis.ReplyError):
                    _refused(metrics, index, reply, again)
                index += 1
            unconfirmed.popleft()
            self._read = 0

    def answered(self, metrics: tuple[tuple[int, Call], ...], replies: list[Any]) -> None:
        """The replies of a batch written on another connection (riding on the acks' writes, see
        :class:`laraq.protocol.acks.Rider`): refusals logged, script calls answered ``NOSCRIPT`` sent again
        here."""
        again: list[Call] = []
        for index, reply in enumerate(replies):
            if isinstance(reply, hiredis.ReplyError):
                _refused(metrics, index, reply, again)
        if again:
            with self._lock:
                self._send_again(again)

    def _send_again(self, calls: list[Call]) -> None:
        """The script calls Redis answered ``NOSCRIPT``: the scripts loaded again, the calls sent again."""
        try:
            self._load_scripts()
        except Exception as exc:
            log.error("horizon records: could not load the records' scripts (%s): %d update(s) lost",
                      exc, len(calls))
            return
        packed = b"".join(resp(b"EVALSHA", *call) for call in calls)
        batch: Batch = (len(calls), tuple((i, c) for i, c in enumerate(calls)))
        try:
            send_all(self._socket(), packed)
        except Exception as exc:
            log.warning("horizon records: %d script call(s) lost (%s)", len(calls), exc)
            self._broken()
            return
        self.unconfirmed.append(batch)

    def _lost(self) -> None:
        if self.unconfirmed:
            log.debug("horizon records: replies of %d batch(es) lost", len(self.unconfirmed))
        self.unconfirmed.clear()
        self._broken()

    def _broken(self) -> None:
        """Drop the connection (a reply may be half read); the next write takes a fresh one."""
        conn, self._conn = self._conn, None
        self._read = 0
        self._reader = hiredis.Reader()
        if conn is not None:
            conn.disconnect()
            self.client.connection_pool.release(conn)

    def close(self) -> None:
        """Read every reply, then give the connection back to the pool."""
        with self._lock:
            if self.unconfirmed:
                self._collect(wait=True)
            conn, self._conn = self._conn, None
            if conn is not None:
                if self.unconfirmed:
                    conn.disconnect()
                self.client.connection_pool.release(conn)
