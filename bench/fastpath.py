"""A *prototype* of the fast path recommended in compat-docs/performance-history.md, measured by bench/run.py.

It is not laraq's worker and does not replace it: no timeouts, no failures/retries, no output, no
signals. It exists to put a number on what the recommended changes buy, with laraq's own payload
parsing, ``unserialize`` and :class:`laraq.bus.job.Job` objects in the loop, so the estimate includes
the Python work a real worker cannot skip.

Per batch, ONE round trip (:data:`RESERVE`):

1. ``ZREM :reserved`` of the jobs finished since the last call (acks ride on the next reserve);
2. Laravel's migrate of ``:delayed`` then ``:reserved`` (the same effect as ``migrateExpiredJobs``);
3. up to ``count`` pops, each exactly Laravel's pop (``attempts + 1`` by cjson, ``ZADD :reserved``,
   one ``:notify`` token consumed).

Plus the ``queue:restart`` GET once per batch instead of once per job. Handlers run in this one
thread: sync handlers inline, async handlers of a batch gathered on one event loop run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis

#: KEYS: 1 list, 2 delayed, 3 reserved, 4 notify. ARGV: 1 now, 2 reservation expiry, 3 how many to
#: reserve, 4 how many acks follow, 5.. the reserved members to ZREM. Returns job1, reserved1, ...
RESERVE = """\
local now, expiry = ARGV[1], ARGV[2]
local want, nacks = tonumber(ARGV[3]), tonumber(ARGV[4])
if nacks > 0 then
  redis.call('ZREM', KEYS[3], unpack(ARGV, 5, 4 + nacks))
end
local function migrate(from)
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', now)
  if #due > 0 then
    redis.call('ZREMRANGEBYRANK', from, 0, #due - 1)
    for i = 1, #due, 100 do
      local last = math.min(i + 99, #due)
      redis.call('RPUSH', KEYS[1], unpack(due, i, last))
      for _ = i, last do
        redis.call('RPUSH', KEYS[4], 1)
      end
    end
  end
end
migrate(KEYS[2])
migrate(KEYS[3])
local out = {}
for _ = 1, want do
  local job = redis.call('LPOP', KEYS[1])
  if not job then
    break
  end
  local doc = cjson.decode(job)
  doc['attempts'] = doc['attempts'] + 1
  local reserved = cjson.encode(doc)
  redis.call('ZADD', KEYS[3], expiry, reserved)
  redis.call('LPOP', KEYS[4])
  out[#out + 1] = job
  out[#out + 1] = reserved
end
return out
"""


async def _gather(coros: list[Any]) -> None:
    await asyncio.gather(*coros)


def run_fast_path(client: redis.Redis, app: Any, *, prefix: str, queue: str, version: str, batch: int,
                  retry_after: int = 90, cache_client: redis.Redis | None = None,
                  restart_key: str = "laravel_cache:illuminate:queue:restart") -> tuple[int, int]:
    """Drain ``queue`` with the batched loop; returns (jobs run, Redis commands sent)."""
    from laraq.bus.job import Job
    from laraq.protocol.payload import Payload
    from laraq.protocol.queue import RedisQueue, ReservedJob
    from laraq.protocol.serializer import loads

    rq = RedisQueue(client, prefix=prefix, version=version, retry_after=retry_after)
    keys = rq.keys(queue)
    script = client.register_script(RESERVE)
    cache = cache_client or client
    loop = asyncio.new_event_loop()
    acks: list[bytes] = []
    done = 0
    sent = 0
    try:
        while True:
            now = int(time.time())
            sent += 1
            raw = script(keys=[keys.list, keys.delayed, keys.reserved, keys.notify],
                         args=[now, now + retry_after, batch, len(acks), *acks])
            acks = []
            if not raw:
                break
            cache.get(restart_key)  # queue:restart, once per batch
            sent += 1
            coros = []
            for i in range(0, len(raw), 2):
                reserved = ReservedJob(queue, raw[i], raw[i + 1])
                payload = Payload.parse(reserved.body, version=version)
                job = Job(rq, reserved, payload)
                handler = app.resolve(payload)
                job.command = loads(payload.command.encode("utf-8"))
                if handler.is_async:
                    coros.append(handler.func(job.command, job))
                else:
                    handler.func(job.command, job)
                acks.append(reserved.reserved)
            if coros:
                loop.run_until_complete(_gather(coros))
            done += len(raw) // 2
    finally:
        if acks:
            client.zrem(keys.reserved, *acks)
            sent += 1
        loop.close()
    return done, sent
