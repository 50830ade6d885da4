"""The I/O workload's ceiling on this machine without a queue: ``python3 ioref.py async|uvloop|sync C N``
makes ``N`` requests to the 5 ms server (``PEERS_IO_PORT``) ``C`` at a time with :mod:`iowait` (tasks on
asyncio's own event loop, the same tasks on uvloop, or ``C`` threads) and prints JSON: requests/s and
this process' CPU µs per request. ``uvloop`` is the loop laraq runs ``async def`` handlers on by default,
so it is the ceiling of laraq's ``async def`` rows; it exits 3 where uvloop is not installed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import iowait


async def run_async(c: int, n: int) -> None:
    sem = asyncio.Semaphore(c)

    async def one() -> None:
        async with sem:
            await iowait.io_async()

    await asyncio.gather(*(one() for _ in range(n)))


def main() -> None:
    flavor, c, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    t, cpu = time.perf_counter(), time.process_time()
    if flavor == "async":
        asyncio.run(run_async(c, n))
    elif flavor == "uvloop":
        try:
            import uvloop
        except ImportError:
            sys.exit(3)
        uvloop.run(run_async(c, n))
    else:
        with ThreadPoolExecutor(c) as pool:
            list(pool.map(lambda _: iowait.io_sync(), range(n)))
    print(json.dumps({"flavor": flavor, "concurrency": c, "requests": n,
                      "per_s": round(n / (time.perf_counter() - t), 1),
                      "cpu_us": round((time.process_time() - cpu) / n * 1e6, 1)}))


if __name__ == "__main__":
    main()
