#!/usr/bin/env python3
r"""The default's Redis traffic from a bare Python loop: what the wire alone costs a Python process.

``laraq work``'s default (``--acks at-once``, ``--concurrency 1``) sends Redis, per job, one write: the
previous job's ``ZREM :reserved`` and this job's ``ZREM :laraq-unstarted``; per 32 jobs, one batch
reserve sent ahead while the jobs run (laraq's selective reserve under the default ``--unhandled
leave``: only jobs with a Python handler, each recorded as unstarted). This loop sends the same
commands through the same :class:`~laraq.protocol.reserve.Reserving` calls, parses each payload's JSON,
and does nothing else: no job model, no handler, no events, no output, no timeouts. Redis does the same
work per job as for the worker; the difference in the client's CPU is what the job model costs.
``bench/drain.py`` runs it as its ``floor`` variant, beside the worker, in the same rounds.

    python3 bench/floor.py redis://127.0.0.1:6379/0 laravel_database_ drain 8.83.27 'App\Jobs\EchoJob'

(the Redis URL, the key prefix, the queue, the Laravel version whose rules the reserve follows, and the
job names a handler is registered for)

Exits 0 when the queue is drained and every reply was read; prints ``<jobs> jobs``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import hiredis
import orjson
import redis

from laraq.protocol.acks import _zrem  # the worker's own packer of its ack writes
from laraq.protocol.lua_laraq import unstarted_member
from laraq.protocol.queue import RedisQueue
from laraq.protocol.reserve import PendingReserve

BATCH = 32


def drain(queue: RedisQueue, name: str, handled: list[str]) -> int:
    """Drain queue ``name`` as the default worker's wire does; the number of jobs taken."""
    keys = queue.keys(name)
    reserved_key, unstarted_key = keys.reserved.encode(), keys.unstarted.encode()
    client: Any = queue.client
    conn = client.connection_pool.get_connection()
    conn.connect()
    raw: Any = conn._sock
    reader = hiredis.Reader()
    owed = done = 0
    previous: bytes | None = None

    def send() -> PendingReserve | None:
        return queue.reserving.reserve_batch_send(name, BATCH, handled=handled, record=True)

    pending = send()
    while pending is not None:
        jobs = queue.reserving.reserve_batch_receive(pending).jobs
        pending = send() if len(jobs) == BATCH else None
        for job in jobs:
            orjson.loads(job.body)
            data = _zrem(unstarted_key, [unstarted_member(job.reserved, job.body)])
            if previous is not None:
                data = _zrem(reserved_key, [previous]) + data
                owed += 1
            raw.sendall(data)
            owed += 1
            previous = job.reserved
            done += 1
        while owed:  # the replies of this batch's writes, read once per batch
            reader.feed(raw.recv(65536))
            while owed and reader.gets() is not False:
                owed -= 1
    if previous is not None:
        queue.client.zrem(keys.reserved, previous)
    return done


def main() -> int:
    url, prefix, name, version, *handled = sys.argv[1:]
    queue = RedisQueue(redis.Redis.from_url(url), prefix=prefix, version=version)
    print(f"{drain(queue, name, handled)} jobs", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
