"""Fleet-wide concurrency per queue (``--max-per-queue N``): slot leases in Redis. Laravel has no
counterpart (``WithoutOverlapping`` limits one job key, not a queue).

A queue's slots are a ZSET ``<list key>:laraq-slots`` beside its ``:reserved`` (same hash tag, so the
same Cluster slot): a member is one holder's token, its score the lease's end on Redis' own clock
(``TIME``). A worker acquires slots just before it reserves (:data:`ACQUIRE`: expired leases dropped,
then at most ``N`` minus the live ones granted), gives back the ones its reserve did not use, renews the
ones whose jobs are still reserved while they run (:data:`RENEW`: a token whose job is no longer in
``:reserved`` goes), and removes a token when its job is settled. A worker killed with ``kill -9`` renews
nothing: its slots come back by themselves when their leases run out. The key expires with its last
lease, so an idle queue keeps no slot key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from laraq.protocol.queue import RedisQueue

__all__ = ["ACQUIRE", "RENEW", "RELEASE", "QueueSlots"]

_CLOCK = """\
if redis.replicate_commands then
  redis.replicate_commands()
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

#: KEYS: 1 the slots ZSET. ARGV: 1 the most slots held at once, 2 lease seconds, 3.. the tokens asked
#: for. Drops expired leases, then grants the first ``min(asked, limit - live)`` tokens. Returns how many.
ACQUIRE = _CLOCK + """\
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[2])
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
local granted = math.max(0, math.min(free, #ARGV - 2))
for i = 1, granted do
  redis.call('ZADD', KEYS[1], now + lease, ARGV[i + 2])
end
if granted > 0 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(lease * 1000) + 1000)
end
return granted
"""

#: KEYS: 1 the slots ZSET, 2 the queue's ``:reserved``. ARGV: 1 lease seconds, then pairs (token,
#: reserved member). A token still held whose job is still reserved gets a new lease (1); any other is
#: removed (0). Returns one 1/0 per pair.
RENEW = _CLOCK + """\
local lease = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV - 1, 2 do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) and redis.call('ZSCORE', KEYS[2], ARGV[i + 1]) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
    out[#out + 1] = 1
  else
    redis.call('ZREM', KEYS[1], ARGV[i])
    out[#out + 1] = 0
  end
end
if #out > 0 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(lease * 1000) + 1000)
end
return out
"""

#: KEYS: 1 the slots ZSET. ARGV: the tokens to give back. Returns how many were held.
RELEASE = """\
return redis.call('ZREM', KEYS[1], unpack(ARGV))
"""


class QueueSlots:
    """The slot leases of one connection's queues (see the module)."""

    def __init__(self, queue: RedisQueue, limit: int, lease: float) -> None:
        self.queue = queue
        self.limit = limit
        self.lease = lease
        client = queue.client
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)

    def key(self, name: str) -> str:
        """The slots ZSET of queue ``name``."""
        return self.queue.keys(name).base + ":laraq-slots"

    def acquire(self, wanted: dict[str, list[str]]) -> dict[str, int]:
        """Ask for slots, one token each, on several queues in one round trip: how many each granted (the
        first tokens of its list are held)."""
        names = [n for n, tokens in wanted.items() if tokens]
        if not names:
            return {}
        replies = self._each(names, lambda pipe, n: self._acquire(
            keys=[self.key(n)], args=[self.limit, self.lease, *wanted[n]], client=pipe))
        return {n: int(r) for n, r in zip(names, replies, strict=True)}

    def renew(self, held: dict[str, list[tuple[str, bytes]]]) -> dict[str, list[bool]]:
        """Renew the leases of (token, reserved member) pairs per queue: False = gone (job no longer reserved,
        or the lease lapsed)."""
        names = [n for n, pairs in held.items() if pairs]
        if not names:
            return {}
        replies = self._each(names, lambda pipe, n: self._renew(
            keys=[self.key(n), self.queue.keys(n).reserved],
            args=[self.lease, *[x for token, member in held[n] for x in (token, member)]], client=pipe))
        return {n: [bool(int(v)) for v in r] for n, r in zip(names, replies, strict=True)}

    def release(self, tokens: dict[str, list[str]]) -> None:
        """Give slots back (their tokens, per queue), in one round trip."""
        names = [n for n, t in tokens.items() if t]
        if names:
            self._each(names, lambda pipe, n: self._release(keys=[self.key(n)], args=list(tokens[n]), client=pipe))

    def held(self, name: str) -> int:
        """Live leases of a queue now (for status and tests)."""
        return int(self.queue.client.zcard(self.key(name)))

    def _each(self, names: Sequence[str], call: Any) -> list[Any]:
        """One script call per queue: pipelined, or one by one on a Redis Cluster (whose pipelines refuse
        scripts)."""
        if len(names) == 1 or isinstance(self.queue.client, redis.RedisCluster):
            return [call(None, name) for name in names]
        pipe = self.queue.client.pipeline(transaction=False)
        for name in names:
            call(pipe, name)
        return list(pipe.execute())
