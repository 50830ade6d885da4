"""Acks written the moment a job finishes: ``Job::delete``'s ``ZREM :reserved``, sent without waiting
for the reply (issue 29 §3).

A finished job whose ``ZREM`` is still in this process when it is SIGKILLed runs again after
``retry_after``. artisan sends its ``ZREM`` before it takes the next job, so a kill re-runs at most the
job that was running. Deferring acks to batch them (as the fast path did, up to 50 ms) re-ran every
job that finished in those 50 ms. :class:`AckPipe` keeps the batching's cost low and the guarantee
artisan's: each ack is *written* on a connection of its own as soon as the job is done (one
``send()``; once the bytes are in the kernel, a SIGKILL of this process no longer stops Redis from
running the command), and the replies are read later, all at once (:meth:`AckPipe.collect`).

If the connection breaks, the acks whose replies were not read are handed back to be sent again
(``ZREM`` of a member that is already gone is harmless). Owned by the reservation source
(:class:`laraq.worker.reservation.Reservation`), which falls back to its pipelined ``ZREM``s when the
client cannot lend a connection (Redis Cluster).
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue

__all__ = ["AckPipe"]

log = logging.getLogger("laraq.worker.worker")


class AckPipe:
    """``ZREM``s written at once on one held connection; replies read later."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue
        self._lock = threading.Lock()
        self._conn: Any = None
        #: (queue name, members) per command written whose reply is not read yet, in order
        self.unconfirmed: collections.deque[tuple[str, list[bytes]]] = collections.deque()

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
        """Write one ``ZREM`` per queue now (no reply read). Raises what writing raised; nothing of
        ``acks`` is then counted as sent."""
        commands = [(name, members) for name, members in acks.items() if members]
        if not commands:
            return
        with self._lock:
            conn = self._connection()
            packed = conn.pack_commands([("ZREM", self.queue.keys(name).reserved, *members)
                                         for name, members in commands])
            try:
                conn.send_packed_command(packed, check_health=False)
            except BaseException:
                self._broken()
                raise
            self.unconfirmed.extend(commands)

    def collect(self, *, wait: bool = False) -> dict[str, list[bytes]]:
        """Read the replies that have come (``wait``: all of them). Returns the acks to send again: those
        whose replies were lost with a broken connection (empty when all is well)."""
        with self._lock:
            conn = self._conn
            if conn is None and self.unconfirmed:  # written on a connection that broke since
                lost: dict[str, list[bytes]] = {}
                for name, members in self.unconfirmed:
                    lost.setdefault(name, []).extend(members)
                self.unconfirmed.clear()
                return lost
            try:
                while self.unconfirmed and conn is not None and (wait or conn.can_read(timeout=0)):
                    try:
                        conn.read_response()
                    except redis.exceptions.ResponseError as exc:  # e.g. WRONGTYPE: sending again would not help
                        name, members = self.unconfirmed[0]
                        log.error("ZREM of %d finished job(s) on %s was refused: %s", len(members), name, exc)
                    self.unconfirmed.popleft()
            except Exception as exc:
                lost = {}
                for name, members in self.unconfirmed:
                    lost.setdefault(name, []).extend(members)
                self.unconfirmed.clear()
                self._broken()
                log.debug("ack connection lost (%s): %d ack(s) to send again", exc, sum(map(len, lost.values())))
                return lost
        return {}

    def _broken(self) -> None:
        """Drop the connection (a reply may be half read); the next write takes a fresh one."""
        conn, self._conn = self._conn, None
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
