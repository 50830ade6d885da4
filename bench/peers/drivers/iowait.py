"""The I/O-bound job's wait, shared by the Python peers and laraq: one request to the bench's 5 ms server.

A new TCP connection to ``127.0.0.1:$PEERS_IO_PORT`` per call: write one line, read the one-line reply
the server sends 5 ms later, close. ``io_sync`` blocks its thread on the socket; ``io_async`` awaits the
same exchange on the running event loop.
"""

from __future__ import annotations

import asyncio
import os
import socket

PORT = int(os.environ.get("PEERS_IO_PORT") or 0)


def io_sync() -> None:
    """One request, blocking this thread until the reply."""
    with socket.create_connection(("127.0.0.1", PORT)) as s:
        s.sendall(b"x\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(16)
            if not chunk:
                raise ConnectionError("the I/O server closed before replying")
            buf += chunk


async def io_async() -> None:
    """One request, awaited on the running loop."""
    reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
    try:
        writer.write(b"x\n")
        if not (await reader.readline()).endswith(b"\n"):
            raise ConnectionError("the I/O server closed before replying")
    finally:
        writer.close()
