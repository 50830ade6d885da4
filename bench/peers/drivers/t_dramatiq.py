"""dramatiq's side: the broker and actors (``dramatiq t_dramatiq``), and ``python t_dramatiq.py enqueue N KIND``
(each actor's ``send``). Retries off (``max_retries=0``): a failed job lands in the dead-letter queue.
"""

from __future__ import annotations

import os
import sys

import dramatiq
import iowait
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["PEERS_REDIS_URL"])
dramatiq.set_broker(broker)
QUEUE = os.environ["PEERS_QUEUE"]


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop() -> None:
    return None


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def io_sync() -> None:
    iowait.io_sync()


if __name__ == "__main__":
    actor = {"noop": noop, "io_sync": io_sync}[sys.argv[3]]
    for _ in range(int(sys.argv[2])):
        actor.send()
