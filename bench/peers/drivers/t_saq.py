"""saq's side: ``settings`` for saq's CLI (``saq t_saq.settings``), ``python t_saq.py enqueue N KIND``
(``Queue.enqueue``, 200 at a time). The worker writes its own counters (``complete``, ``failed``, ...) into
``saq:<queue>:worker_info:<id>`` every second (the ``worker_info`` timer, saq's default 10 s).

``PEERS_CONCURRENCY`` is saq's ``concurrency`` (default 10). A plain ``def`` job runs on the worker's
``ThreadPoolExecutor()`` (Python's default size: min(32, cores + 4)).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import iowait
from saq import Queue

QUEUE = os.environ["PEERS_QUEUE"]
queue = Queue.from_url(os.environ["PEERS_REDIS_URL"], name=QUEUE)


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def io_async(ctx: dict[str, Any]) -> None:
    await iowait.io_async()


def io_sync(ctx: dict[str, Any]) -> None:
    iowait.io_sync()


settings = {"queue": queue, "functions": [noop, io_async, io_sync],
            "concurrency": int(os.environ.get("PEERS_CONCURRENCY") or 10), "timers": {"worker_info": 1}}


async def enqueue(n: int, kind: str) -> None:
    await queue.connect()
    for start in range(0, n, 200):
        await asyncio.gather(*(queue.enqueue(kind, retries=1) for _ in range(min(200, n - start))))
    await queue.disconnect()


if __name__ == "__main__":
    asyncio.run(enqueue(int(sys.argv[2]), sys.argv[3]))
