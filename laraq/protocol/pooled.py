"""A connection of a redis-py pool held for one call, and blocking commands that wait longer than the
socket's read timeout.

redis-py gives every connection one read timeout (5 s by default). A ``BLPOP`` told to wait longer would
be cut short by it, so :func:`blocking` runs the command on a connection of its own with the timeout
lengthened by the wait (:func:`patient`). The script runner's calls sent now and read later
(:meth:`laraq.protocol.lua.Scripts.send`) hold a connection the same way (:func:`pooled_connection`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import redis


def blocking(client: redis.Redis, command: Sequence[Any], wait: float) -> Any:
    """Run one blocking command (``BLPOP``) on a connection of ``client``'s pool, its read timeout
    lengthened by ``wait`` (the command's own timeout, 0 for none) so that a socket timeout shorter than
    the wait (redis-py's default is 5 s) never cuts it short."""
    pool = client.connection_pool
    conn = pooled_connection(pool, command[0])
    try:
        conn.send_command(*command)
        with patient(conn, wait):
            reply = conn.read_response()
    except BaseException:
        conn.disconnect()  # the reply may be half read: never hand this connection out again as is
        pool.release(conn)
        raise
    pool.release(conn)
    return reply


def pooled_connection(pool: Any, command: str) -> Any:
    """A connection of ``pool`` for the caller alone until it releases it."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants the command name
        return pool.get_connection(command)


@contextlib.contextmanager
def patient(conn: Any, wait: float | None) -> Iterator[None]:
    """While a blocking command waits on ``conn``: its socket's read timeout plus ``wait`` seconds (none
    at all for ``wait`` 0), restored afterwards. ``None``: the timeout is left alone, as it is on a
    socket without one."""
    sock = getattr(conn, "_sock", None)
    before = None if sock is None else sock.gettimeout()
    if sock is None or wait is None or before is None:
        yield
        return
    sock.settimeout(None if wait == 0 else before + float(wait))
    try:
        yield
    finally:
        current = getattr(conn, "_sock", None)
        if current is sock:  # not after a disconnect
            current.settimeout(before)
