"""rq's side: the job functions, and ``python t_rq.py enqueue N KIND`` (rq's ``Queue.enqueue_many``).

The worker is rq's own CLI (``rq worker --burst``), which imports this module as ``t_rq``.
"""

from __future__ import annotations

import os
import sys

import iowait


def noop() -> None:
    return None


def io_sync() -> None:
    iowait.io_sync()


def enqueue(n: int, kind: str) -> None:
    import t_rq
    from redis import Redis
    from rq import Queue

    q = Queue(os.environ["PEERS_QUEUE"], connection=Redis.from_url(os.environ["PEERS_REDIS_URL"]))
    func = getattr(t_rq, kind)
    for start in range(0, n, 1000):
        with q.connection.pipeline() as pipe:
            q.enqueue_many([Queue.prepare_data(func) for _ in range(min(1000, n - start))], pipeline=pipe)
            pipe.execute()


if __name__ == "__main__":
    enqueue(int(sys.argv[2]), sys.argv[3])
