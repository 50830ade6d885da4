"""arq's side: ``python t_arq.py enqueue N KIND`` (``ArqRedis.enqueue_job``, 200 at a time) and
``python t_arq.py work`` (arq's ``Worker`` in burst mode: it exits when the queue is empty and prints its
own counters ``jobs_complete``/``jobs_failed``/``jobs_retried`` as the last line, JSON).

Worker settings from the environment: ``PEERS_CONCURRENCY`` (``max_jobs``), ``PEERS_ARQ_POLL_DELAY``
(``poll_delay``, arq's default 0.5 s), ``PEERS_ARQ_KEEP_RESULT`` (``keep_result`` seconds, arq's default 3600).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import iowait
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker

SETTINGS = RedisSettings.from_dsn(os.environ["PEERS_REDIS_URL"])
QUEUE = os.environ["PEERS_QUEUE"]


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def io_async(ctx: dict[str, Any]) -> None:
    await iowait.io_async()


async def enqueue(n: int, kind: str) -> None:
    pool = await create_pool(SETTINGS)
    for start in range(0, n, 200):
        await asyncio.gather(*(pool.enqueue_job(kind, _queue_name=QUEUE) for _ in range(min(200, n - start))))
    await pool.aclose()


def work() -> None:
    kw: dict[str, Any] = {}
    if os.environ.get("PEERS_ARQ_POLL_DELAY"):
        kw["poll_delay"] = float(os.environ["PEERS_ARQ_POLL_DELAY"])
    if os.environ.get("PEERS_ARQ_KEEP_RESULT"):
        kw["keep_result"] = float(os.environ["PEERS_ARQ_KEEP_RESULT"])
    worker = Worker(functions=[noop, io_async], redis_settings=SETTINGS, queue_name=QUEUE, burst=True,
                    max_jobs=int(os.environ.get("PEERS_CONCURRENCY") or 10), max_tries=1, **kw)
    worker.run()
    print(json.dumps({"complete": worker.jobs_complete, "failed": worker.jobs_failed,
                      "retried": worker.jobs_retried}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "work":
        work()
    else:
        asyncio.run(enqueue(int(sys.argv[2]), sys.argv[3]))
