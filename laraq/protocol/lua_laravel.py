"""The Lua texts that do what Laravel's own queue scripts do (``Illuminate\\Queue\\LuaScripts``).

One script per operation of Laravel's ``RedisQueue``: push, later, pop, release, migrate (both the
8.0-9.22 form and the 9.23+ form with a ``LIMIT``), size and clear (with and without ``:notify``).
Each leaves Redis in the state Laravel's script for the same operation leaves it in (see
``compat-docs/protocol.md``), with one deliberate difference in the pop, described below.
:data:`POP_MANY` is the pop run several times in one call; Laravel has no such script, but each job in
it is reserved exactly as :data:`POP` reserves one.

The pop. Laravel takes the head of the list off *before* it decodes it: a member that is not JSON, or
whose ``attempts`` is not a number, makes its script fail after the removal, and since Redis does not
undo a script's writes, the job is gone. laraq's reservation step (:data:`RESERVE_LIB`) decodes inside
``pcall`` first. A member it cannot reserve is moved unchanged to the dead-letter list
``queues:<name>:poison``, its ``:notify`` token is consumed, and the step carries on with the next
member, up to :data:`POISON_SKIPS_PER_CALL` members per call so that a long run of bad members never
holds Redis for long.

A member that can be reserved gets the bytes Laravel's pop would give it: Redis' bundled ``cjson``
decodes it, ``attempts`` is increased by one with Lua's number coercion (``"3"`` becomes ``4``), and
``cjson.encode`` writes what goes into ``:reserved``. Same server, same cjson: a PHP worker reads
exactly the kind of member Laravel itself would have written.

The reservation step and the migration step (:data:`MOVE_DUE_LIB`) are also the building blocks of
laraq's batch reserves (:mod:`laraq.protocol.lua_laraq`). The reservation step carries one hook for
laraq's unstarted record (``note_unstarted``, which does nothing in a pop); its size bound
:data:`RECORD_MAX_BYTES` is defined here because the step's text has it written in.
"""

from __future__ import annotations

#: How many unusable members one pop call moves to the poison list before it gives up for now.
POISON_SKIPS_PER_CALL = 100

#: How many members one ``RPUSH`` receives in the migrate script (Lua's ``unpack`` stack limit).
MIGRATE_CHUNK = 100

#: KEYS: 1 list, 2 notify. ARGV: 1 payload. Appends the job and one wake-up token.
PUSH = """\
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], 1)
"""

#: KEYS: 1 delayed. ARGV: 1 available-at (unix seconds), 2 payload. No wake-up token.
LATER = """\
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
"""

#: Laravel's migration step: remove the due members (the lowest ranks, exactly the ones read) and
#: append them unchanged to the list, with one wake-up token each, in chunks (Lua's unpack limit).
MOVE_DUE_LIB = """\
local function move_due(from, to, notify, due)
  local count = #due
  if count > 0 then
    redis.call('ZREMRANGEBYRANK', from, 0, count - 1)
    for first = 1, count, CHUNK do
      local last = math.min(first + CHUNK - 1, count)
      redis.call('RPUSH', to, unpack(due, first, last))
      for _ = first, last do
        redis.call('RPUSH', notify, 1)
      end
    end
  end
  return due
end
""".replace("CHUNK", str(MIGRATE_CHUNK))

#: Jobs whose body is larger than this (bytes) get no unstarted record (see :mod:`laraq.protocol.lua_laraq`):
#: their record would hold the job twice more and travel at its start; after a SIGKILL they come back as
#: Laravel's own do, after ``retry_after``.
RECORD_MAX_BYTES = 256 * 1024

#: The reservation step shared by both pop scripts (and laraq's batch reserves). ``take`` returns job,
#: reserved for the next usable member, or false, false when the list is empty (or the poison budget ran
#: out). (The ``_UNSTARTED_LIB`` its comment names is in :mod:`laraq.protocol.lua_laraq`.)
RESERVE_LIB = """\
local budget = tonumber(ARGV[2]) or 100
local moved = 0

local function reservable(member, decoded)
  local decoded_ok, doc = true, decoded
  if doc == nil then
    decoded_ok, doc = pcall(cjson.decode, member)
  end
  if not decoded_ok or type(doc) ~= 'table' then
    return nil
  end
  local tries = tonumber(doc['attempts'])
  if tries == nil then
    return nil
  end
  doc['attempts'] = tries + 1
  local encoded_ok, text = pcall(cjson.encode, doc)
  if not encoded_ok then
    return nil
  end
  return text
end

-- laraq's unstarted record (see _UNSTARTED_LIB): set by the batch-reserve scripts, nil for a pop
local unstarted_key = nil
local unstarted_until = 0

local function note_unstarted(member, reserved)
  if unstarted_key and string.len(member) <= RECORD_MAX_BYTES then
    redis.call('ZADD', unstarted_key, unstarted_until, string.len(reserved) .. ':' .. reserved .. member)
  end
end

local function take()
  while true do
    local member = redis.call('LPOP', KEYS[1])
    if not member then
      return false, false
    end
    local reserved = reservable(member)
    if reserved then
      redis.call('ZADD', KEYS[2], ARGV[1], reserved)
      note_unstarted(member, reserved)
      redis.call('LPOP', KEYS[3])
      return member, reserved
    end
    redis.call('RPUSH', KEYS[4], member)
    redis.call('LPOP', KEYS[3])
    moved = moved + 1
    if moved >= budget then
      return false, false
    end
  end
end

local function take_many(wanted)
  local out = {0}
  while (#out - 1) / 2 < wanted do
    local job, reserved = take()
    if not job then
      break
    end
    out[#out + 1] = job
    out[#out + 1] = reserved
  end
  out[1] = moved
  return out
end
""".replace("RECORD_MAX_BYTES", str(RECORD_MAX_BYTES))

#: KEYS: 1 list, 2 reserved, 3 notify, 4 poison. ARGV: 1 reservation expiry (unix seconds),
#: 2 poison budget. Returns ``{job, reserved, poisoned}``; job/reserved are nil when nothing was
#: reserved.
POP = RESERVE_LIB + """\
local job, reserved = take()
return {job, reserved, moved}
"""

#: KEYS as :data:`POP`. ARGV: 1 expiry, 2 poison budget, 3 how many jobs at most.
#: Returns ``{poisoned, job1, reserved1, job2, reserved2, ...}``.
POP_MANY = RESERVE_LIB + """\
return take_many(tonumber(ARGV[3]) or 1)
"""

#: KEYS: 1 delayed, 2 reserved. ARGV: 1 reserved member, 2 available-at. The ZADD happens even if
#: the ZREM found nothing (Laravel does the same; see protocol.md). Returns 1.
RELEASE = """\
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
"""

#: Laravel 8.0–9.22. KEYS: 1 source ZSET, 2 destination list, 3 its notify. ARGV: 1 now.
#: Moves every member scored <= now, unchanged, to the tail of the list; returns them.
MIGRATE = MOVE_DUE_LIB + """\
return move_due(KEYS[1], KEYS[2], KEYS[3], redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1]))
"""

#: Laravel 9.23+. As :data:`MIGRATE` with ARGV 2 = the most members to move (-1 = all).
MIGRATE_LIMITED = MOVE_DUE_LIB + """\
return move_due(KEYS[1], KEYS[2], KEYS[3],
                redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2]))
"""

#: KEYS: 1 list, 2 delayed, 3 reserved. Returns LLEN + ZCARD + ZCARD (notify and poison not counted).
SIZE = """\
return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
"""

#: Laravel 8.4–8.8. KEYS: 1 list, 2 delayed, 3 reserved. Returns the size counted before deleting.
CLEAR = """\
local total = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return total
"""

#: Laravel 8.9+. As :data:`CLEAR` plus KEYS[4] notify (deleted, not counted).
CLEAR_WITH_NOTIFY = """\
local total = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return total
"""
