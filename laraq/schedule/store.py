"""The scheduler's Redis state and the Lua scripts that change it atomically.

Keys (under the Laravel connection's prefix, e.g. ``laravel_database_``)::

    laraq:schedule:due              ZSET   entry name -> next due time (unix seconds)
    laraq:schedule:entry:<name>     HASH   hash (definition), meta (JSON), paused, last_due, last_fired_at,
                                           last_by, last_job, last_queue, fires, skipped, overlapped, ...
    laraq:schedule:running:<name>   STRING the uuid and queue of the last job of an overlap-protected
                                           entry; set by the claim, cleared when that job is gone; TTL
    laraq:schedule:history          LIST   one line per fired due time: name, due, uuid, instance, now

:data:`CLAIM` is the heart of the exactly-once guarantee. In ONE script it checks that the entry's
score is still the due time the caller read and that the stored definition is the caller's; then it
pushes the job payload(s) the caller built (``RPUSH queues:<q>`` + ``RPUSH :notify``, or ``ZADD
:delayed``), moves the score to the next due time and records who fired. Redis runs a script without
interleaving, so exactly one of any number of racing instances changes the score and only that one
pushes; a process killed before or after the script leaves either nothing done or everything done.

:data:`SYNC` installs a definition (compare-and-set on the stored definition hash), :data:`FORGET`
removes an entry nobody declares any more (compare-and-set on its score), :data:`RELEASE_IF` clears an
overlap marker whose job has left the queue (checked in the same script, so a job moving between the
list, ``:delayed`` and ``:reserved`` is never missed).

On Redis Cluster every key of a claim must live in one slot; the scheduler is for a single Redis,
Sentinel or a cluster whose queues and ``laraq:schedule`` keys share a hash tag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redis.commands.core import Script

__all__ = ["ScheduleKeys", "ScheduleStore", "CLAIM", "SYNC", "FORGET", "RELEASE_IF"]

#: KEYS: 1 due, 2 entry, 3 marker, 4 list, 5 notify, 6 delayed, 7 history.
#: ARGV: 1 name, 2 expected score ('' = manual run: score untouched), 3 next score, 4 definition hash,
#: 5 now, 6 instance, 7 fire times (space separated), 8 available-at ('' = push now), 9 overlap ttl
#: (0 = no overlap protection), 10 marker value, 11 skipped count, 12 history cap, 13 uuids (space
#: separated), 14.. payloads (one per fire time).
CLAIM = """\
local name = ARGV[1]
local manual = ARGV[2] == ''
local stored = redis.call('HGET', KEYS[2], 'hash')
if not stored then return {'gone'} end
if stored ~= ARGV[4] then return {'changed', stored} end
if not manual then
  local current = redis.call('ZSCORE', KEYS[1], name)
  if not current then return {'gone'} end
  if tonumber(current) ~= tonumber(ARGV[2]) then return {'lost', current} end
end
local ttl = tonumber(ARGV[9])
local advance = function(reason, count)
  if not manual then redis.call('ZADD', KEYS[1], 'XX', ARGV[3], name) end
  if count > 0 then redis.call('HINCRBY', KEYS[2], reason, count) end
end
if redis.call('HGET', KEYS[2], 'paused') == '1' and not manual then
  advance('skipped', tonumber(ARGV[11]) + (#ARGV - 13))
  return {'paused'}
end
if ttl > 0 then
  local holder = redis.call('GET', KEYS[3])
  if holder then
    if not manual then advance('overlapped', tonumber(ARGV[11]) + (#ARGV - 13)) end
    return {'overlap', holder}
  end
end
for i = 14, #ARGV do
  if ARGV[8] == '' then
    redis.call('RPUSH', KEYS[4], ARGV[i])
    redis.call('RPUSH', KEYS[5], 1)
  else
    redis.call('ZADD', KEYS[6], ARGV[8], ARGV[i])
  end
end
local fired = #ARGV - 13
if fired > 0 and ttl > 0 then
  redis.call('SET', KEYS[3], ARGV[10], 'EX', ttl)
end
advance('skipped', tonumber(ARGV[11]))
if fired > 0 then
  local times, uuids, i = {}, {}, 0
  for t in string.gmatch(ARGV[7], '%S+') do times[#times + 1] = t end
  for u in string.gmatch(ARGV[13], '%S+') do uuids[#uuids + 1] = u end
  redis.call('HINCRBY', KEYS[2], manual and 'manual' or 'fires', fired)
  redis.call('HSET', KEYS[2], 'last_due', times[#times], 'last_fired_at', ARGV[5], 'last_by', ARGV[6],
    'last_job', uuids[#uuids] or '', 'last_manual', manual and '1' or '0')
  local cap = tonumber(ARGV[12])
  if cap > 0 then
    for i = 1, #times do
      redis.call('RPUSH', KEYS[7], name .. ' ' .. times[i] .. ' ' .. (uuids[i] or '-') .. ' ' .. ARGV[6]
        .. ' ' .. ARGV[5] .. (manual and ' manual' or ''))
    end
    redis.call('LTRIM', KEYS[7], -cap, -1)
  end
end
return {'fired', tostring(fired)}
"""

#: KEYS: 1 due, 2 entry. ARGV: 1 name, 2 new hash, 3 expected stored hash ('' = none), 4 first due,
#: 5 meta JSON, 6 now. Returns same / added / changed / retry / repaired.
SYNC = """\
local stored = redis.call('HGET', KEYS[2], 'hash') or ''
if stored == ARGV[2] then
  redis.call('HSET', KEYS[2], 'meta', ARGV[5])
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
    return 'repaired'
  end
  return 'same'
end
if stored ~= ARGV[3] then return 'retry' end
redis.call('HSET', KEYS[2], 'hash', ARGV[2], 'meta', ARGV[5], 'defined_at', ARGV[6])
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
if stored == '' then return 'added' end
redis.call('HINCRBY', KEYS[2], 'redefined', 1)
return 'changed'
"""

#: KEYS: 1 due, 2 entry, 3 marker. ARGV: 1 name, 2 expected score ('' = unconditional). 1 if removed.
FORGET = """\
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[2] ~= '' and (not current or tonumber(current) ~= tonumber(ARGV[2])) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return 1
"""

#: KEYS: 1 marker, 2 list, 3 delayed, 4 reserved. ARGV: 1 marker value, 2 needle (the uuid as JSON
#: writes it). Deletes the marker if it still holds the value and no member holds the needle.
RELEASE_IF = """\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local needle = ARGV[2]
local function holds(members)
  for _, m in ipairs(members) do
    if string.find(m, needle, 1, true) then return true end
  end
  return false
end
if holds(redis.call('LRANGE', KEYS[2], 0, -1)) or holds(redis.call('ZRANGE', KEYS[3], 0, -1))
  or holds(redis.call('ZRANGE', KEYS[4], 0, -1)) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


@dataclass(frozen=True)
class ScheduleKeys:
    """The scheduler's key names under a Redis key prefix."""

    prefix: str = ""

    @property
    def base(self) -> str:
        return f"{self.prefix}laraq:schedule:"

    @property
    def due(self) -> str:
        return self.base + "due"

    @property
    def history(self) -> str:
        return self.base + "history"

    def entry(self, name: str) -> str:
        return f"{self.base}entry:{name}"

    def marker(self, name: str) -> str:
        return f"{self.base}running:{name}"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class ScheduleStore:
    """Reads and writes the scheduler's keys; every write that must be atomic is one script."""

    def __init__(self, client: Any, prefix: str = "") -> None:
        self.client = client
        self.keys = ScheduleKeys(prefix)
        self._claim = Script(client, CLAIM)
        self._sync = Script(client, SYNC)
        self._forget = Script(client, FORGET)
        self._release_if = Script(client, RELEASE_IF)

    # -- scripts ---------------------------------------------------------------------------------------

    def claim(self, name: str, *, expected: int | None, next_due: int, definition: str, now: float,
              instance: str, times: list[int], payloads: list[bytes], uuids: list[str], queue_keys: Any,
              available_at: int | None, overlap_ttl: int, marker: str, skipped: int,
              history: int) -> tuple[str, str | None]:
        k = self.keys
        result = self._claim(
            keys=[k.due, k.entry(name), k.marker(name), queue_keys.list, queue_keys.notify, queue_keys.delayed,
                  k.history],
            args=[name, "" if expected is None else str(expected), str(next_due), definition, repr(float(now)),
                  instance, " ".join(map(str, times)), "" if available_at is None else str(available_at),
                  str(overlap_ttl), marker, str(skipped), str(history), " ".join(uuids), *payloads],
        )
        status = _text(result[0])
        return status, (_text(result[1]) if len(result) > 1 else None)

    def sync(self, name: str, definition: str, expected: str, first_due: int, meta: dict[str, Any],
             now: float) -> str:
        k = self.keys
        return _text(self._sync(keys=[k.due, k.entry(name)],
                                args=[name, definition, expected, str(first_due),
                                      json.dumps(meta, sort_keys=True, default=repr), repr(float(now))]))

    def forget(self, name: str, expected: float | None = None) -> bool:
        k = self.keys
        return bool(self._forget(keys=[k.due, k.entry(name), k.marker(name)],
                                 args=[name, "" if expected is None else repr(float(expected))]))

    def release_if_done(self, name: str, marker: str, queue_keys: Any, uuid: str) -> bool:
        needle = json.dumps(uuid)
        return bool(self._release_if(
            keys=[self.keys.marker(name), queue_keys.list, queue_keys.delayed, queue_keys.reserved],
            args=[marker, f'"uuid":{needle}']))

    # -- plain reads and flags -------------------------------------------------------------------------

    def due_now(self, now: float, count: int = 100) -> list[tuple[str, int]]:
        rows = self.client.zrangebyscore(self.keys.due, "-inf", repr(float(now)), start=0, num=count,
                                         withscores=True)
        return [(_text(m), int(s)) for m, s in rows]

    def next_due(self) -> int | None:
        rows = self.client.zrange(self.keys.due, 0, 0, withscores=True)
        return int(rows[0][1]) if rows else None

    def score(self, name: str) -> int | None:
        value = self.client.zscore(self.keys.due, name)
        return None if value is None else int(value)

    def entry(self, name: str) -> dict[str, str]:
        return {_text(k): _text(v) for k, v in self.client.hgetall(self.keys.entry(name)).items()}

    def marker(self, name: str) -> str | None:
        value = self.client.get(self.keys.marker(name))
        return None if value is None else _text(value)

    def names(self) -> list[str]:
        return [_text(m) for m in self.client.zrange(self.keys.due, 0, -1)]

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume ``name``; False when no such entry is stored."""
        key = self.keys.entry(name)
        if not self.client.exists(key):
            return False
        if paused:
            self.client.hset(key, "paused", "1")
        else:
            self.client.hdel(key, "paused")
        return True

    def history(self, start: int = 0, end: int = -1) -> list[dict[str, Any]]:
        """Fired due times, oldest first: ``name``, ``due``, ``uuid``, ``by``, ``at``, ``manual``."""
        out = []
        for line in self.client.lrange(self.keys.history, start, end):
            parts = _text(line).split(" ")
            out.append({"name": parts[0], "due": int(parts[1]), "uuid": parts[2], "by": parts[3],
                        "at": float(parts[4]), "manual": len(parts) > 5})
        return out

    def status(self) -> list[dict[str, Any]]:
        """Every stored entry with its next due time and its bookkeeping (for ``laraq schedule list``)."""
        rows = []
        for name, score in self.client.zrange(self.keys.due, 0, -1, withscores=True):
            name = _text(name)
            data = self.entry(name)
            try:
                meta = json.loads(data.get("meta") or "{}")
            except ValueError:
                meta = {}
            rows.append({
                "name": name, "next_due": int(score), **meta,
                "paused": data.get("paused") == "1",
                "last_due": int(data["last_due"]) if data.get("last_due") else None,
                "last_fired_at": float(data["last_fired_at"]) if data.get("last_fired_at") else None,
                "last_by": data.get("last_by"), "last_job": data.get("last_job") or None,
                "fires": int(data.get("fires", 0)), "manual": int(data.get("manual", 0)),
                "skipped": int(data.get("skipped", 0)), "overlapped": int(data.get("overlapped", 0)),
                "running": self.marker(name),
            })
        return rows
