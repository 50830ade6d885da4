"""The ack pipe's write (``laraq.protocol.acks.send_all``): one ``write()`` when the kernel takes the
bytes, ``sendall`` for the rest when it does not, and never a byte lost or sent twice."""

from __future__ import annotations

import socket
import threading

from laraq.protocol import acks


def _pair(timeout: float | None) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    a.settimeout(timeout)
    return a, b


def _read_all(sock: socket.socket, n: int, out: bytearray) -> None:
    while len(out) < n:
        chunk = sock.recv(65536)
        if not chunk:
            return
        out += chunk


def test_small_write_is_whole_in_one_call() -> None:
    a, b = _pair(2.0)
    with a, b:
        acks.send_all(a, b"*2\r\n$4\r\nPING\r\n")
        assert b.recv(100) == b"*2\r\n$4\r\nPING\r\n"


def test_a_full_buffer_falls_back_to_sendall_and_keeps_every_byte() -> None:
    """More than the socket buffers hold: the first write() takes part (or none), sendall waits for the
    reader and sends the rest, in order."""
    data = bytes(range(256)) * 4096  # 1 MiB, far over both buffers
    for timeout in (2.0, None):
        a, b = _pair(timeout)
        got = bytearray()
        reader = threading.Thread(target=_read_all, args=(b, len(data), got))
        with a, b:
            reader.start()
            acks.send_all(a, data)
            reader.join(10)
        assert bytes(got) == data


def test_a_closed_peer_raises() -> None:
    a, b = _pair(2.0)
    b.close()
    with a:
        try:
            for _ in range(100):
                acks.send_all(a, b"x" * 1024)
        except OSError:
            return
    raise AssertionError("writing to a closed peer never failed")
