"""The I/O-bound workload's server: answers each request line 5 ms after it arrives.

``python3 iosrv.py PORT [DELAY_S]``: a plain asyncio ``Protocol`` (no streams, no HTTP) on 127.0.0.1.
Each line received gets ``ok\\n`` after the delay (a timer on the loop, so any number of requests wait at
once); the client closes the connection, so its TIME_WAIT stays on the client side, where Linux reuses
loopback ports. Prints ``ready`` once listening.
"""

from __future__ import annotations

import asyncio
import sys


class Delayed(asyncio.Protocol):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(data.count(b"\n")):
            loop.call_later(self.delay, self._reply)

    def _reply(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"ok\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def main(port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Delayed(delay), "127.0.0.1", port, backlog=4096, reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.005))
