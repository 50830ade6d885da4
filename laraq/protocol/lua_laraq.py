"""laraq's own Lua scripts: the ones Laravel's queue has no counterpart for.

They serve the worker's batch reserves and its leases, and never change what a PHP worker on the same queue
sees of a job: whatever they reserve is reserved exactly as Laravel's pop reserves it (the reservation
and migration steps of :mod:`laraq.protocol.lua_laravel`), and whatever they hand back goes back
unchanged.

* :data:`RESERVE_BATCH`: acks, Laravel's migrate and several pops in one call.
* :data:`RESERVE_HANDLED`: the same, but selective, for a queue shared with PHP workers: it takes only
  the jobs Python has a handler for and leaves every other member in the list, in its order.
* :data:`RENEW`, :data:`GIVE_BACK`, :data:`REQUEUE`: keep a reservation alive, hand reserved jobs back
  untouched, put a job back as it was pushed.
* :data:`UNSTARTED`, :data:`RECLAIM` and :func:`unstarted_member`: the unstarted record.
* :data:`EXCERPTS`: the operator commands' read of a range of members, each cut to its two ends when
  long, so what crosses the network per member is bounded whatever a member holds.

The unstarted record is a ZSET ``<list>:laraq-unstarted`` beside ``:reserved`` that holds the jobs a
worker has reserved but not started yet. A member is ``<length of the reserved member>:<the reserved
member><the original body>``; its score is a short lease, Redis ``TIME`` plus the lease in seconds, so
every worker reads one clock whatever its host's clock says. A job leaves the record when it starts. A
reclaim gives back the jobs whose lease ran out (their worker died): a job still in ``:reserved`` is
removed from there and its original body, attempts not spent, goes back to the head of the list with one
``:notify`` token; a job already gone from ``:reserved`` (acked, released, or migrated back by Laravel's
pop) is only forgotten. The ``ZREM`` on ``:reserved`` decides, atomically, so a PHP migrate and a
reclaim never both give the same job back.
"""

from __future__ import annotations

from laraq.protocol.lua_laravel import MOVE_DUE_LIB, RESERVE_LIB

#: How many members one ``ZREM`` of the batch-reserve script receives.
ACK_CHUNK = 500

# laraq's unstarted record (see the module's docstring): the Lua functions the scripts that read it share.
_UNSTARTED_LIB = """\
if redis.replicate_commands then
  redis.replicate_commands()
end
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function split_unstarted(m)
  local colon = string.find(m, ':', 1, true)
  if not colon then
    return nil, nil
  end
  local n = tonumber(string.sub(m, 1, colon - 1))
  if not n then
    return nil, nil
  end
  return string.sub(m, colon + 1, colon + n), string.sub(m, colon + n + 1)
end

local function reclaim(list, reserved_key, notify, key, now, limit)
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, limit)
  local given = 0
  for i = #due, 1, -1 do
    local m = due[i]
    redis.call('ZREM', key, m)
    local reserved, body = split_unstarted(m)
    if reserved and redis.call('ZREM', reserved_key, reserved) == 1 then
      redis.call('LPUSH', list, body)
      redis.call('RPUSH', notify, 1)
      given = given + 1
    end
  end
  return {#due, given}
end
"""

#: How many members one deep look of :data:`RESERVE_HANDLED` reads (a page past the head window): about
#: 1 ms of Redis per call on a 2-core VM, whatever the list's length.
DEEP_PAGE = 500

#: How far from the nearer end of the list a job the deep look takes may sit: its removal walks that many
#: members (about 60 ns each), so one call stays a few ms at most. Farther ones are counted, not taken.
DEEP_REACH = 50_000

#: How many expired unstarted records one reserve call (or one ``reclaim``) gives back at most.
RECLAIM_CHUNK = 200

# The batch-reserve scripts' opening when KEYS[6] is given: reclaim expired unstarted records, then
# (when the lease, the last ARGV, in seconds, is not 0) record every job this call reserves.
_UNSTARTED_START = """\
if KEYS[6] then
  local now = redis_now()
  local lease = tonumber(ARGV[#ARGV])
  if lease > 0 then
    unstarted_key = KEYS[6]
    unstarted_until = now + lease
  end
  reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[6], now, RECLAIM_CHUNK)
end
""".replace("RECLAIM_CHUNK", str(RECLAIM_CHUNK))

#: The migrate step both batch reserves run before they pop: due ``:delayed`` jobs (ARGV 4 now, ARGV 5
#: the bound, negative for none), then expired ``:reserved`` ones when ARGV 6 is ``1``.
_MIGRATE_STEP = """\
local function migrate(from)
  local due
  if tonumber(ARGV[5]) < 0 then
    due = redis.call('ZRANGEBYSCORE', from, '-inf', ARGV[4])
  else
    due = redis.call('ZRANGEBYSCORE', from, '-inf', ARGV[4], 'LIMIT', 0, ARGV[5])
  end
  move_due(from, KEYS[1], KEYS[3], due)
end
migrate(KEYS[5])
if ARGV[6] == '1' then
  migrate(KEYS[2])
end
"""

#: laraq's batch reserve (a worker's reserve step with --batch above 1): one call = acks + Laravel's migrate + N pops.
#: KEYS: 1 list, 2 reserved, 3 notify, 4 poison, 5 delayed. ARGV: 1 reservation expiry, 2 poison
#: budget, 3 how many jobs at most, 4 now (unix seconds), 5 migrate LIMIT (-1 = all; 8.0-9.22 have
#: no LIMIT, which is the same), 6 migrate ``:reserved`` too (1) or not (0: ``retry_after`` null),
#: 7 how many acks follow, 8.. the reserved members of finished jobs (``ZREM``ed first).
#: Returns ``{poisoned, job1, reserved1, ...}`` like :data:`~laraq.protocol.lua_laravel.POP_MANY`. The effect equals the acks'
#: ``ZREM``s followed by N consecutive Laravel pops in the same second (one migrate pair suffices:
#: a second migrate in the same second would find nothing the first left behind).
#: With KEYS[6] (laraq's unstarted record) and the lease seconds as the last ARGV, expired records are
#: reclaimed first and every job reserved is recorded as unstarted.
RESERVE_BATCH = (_UNSTARTED_LIB + RESERVE_LIB + MOVE_DUE_LIB + _UNSTARTED_START + """\
local nacks = tonumber(ARGV[7]) or 0
for first = 8, 7 + nacks, ACK_CHUNK do
  redis.call('ZREM', KEYS[2], unpack(ARGV, first, math.min(first + ACK_CHUNK - 1, 7 + nacks)))
end
""" + _MIGRATE_STEP + """\
return take_many(tonumber(ARGV[3]) or 0)
""").replace("ACK_CHUNK", str(ACK_CHUNK))

# The selective reservation step (a queue shared with PHP workers): only jobs whose names have a
# Python handler are taken; every other member stays where it is, in order. ``names`` is the set of
# registered handler names; a member's candidate names are read as :meth:`laraq.app.App.candidates`
# reads them (``data.commandName`` and ``displayName`` for a queued command, the ``job`` string and
# its class for a string job, whose data is never read), with surrounding spaces and leading backslashes
# dropped. A member PHP's ``Job::fire`` fails before any handler (no ``job`` or ``data``) is taken, to be
# failed as PHP fails it.
_SELECT_LIB = """\
local function clean(value)
  if type(value) ~= 'string' then
    return nil
  end
  local text = (string.gsub(value, '^%s+', ''))
  text = (string.gsub(text, '%s+$', ''))
  text = (string.gsub(text, '^\\\\+', ''))
  if text == '' then
    return nil
  end
  return text
end

-- a class handler's name (a ``Class@method`` handler takes string jobs only)
local function class_handled(name, names)
  return name ~= nil and names[name] == true and string.find(name, '@', 1, true) == nil
end

local function handled(doc, names)
  local job = doc['job']
  if type(job) ~= 'string' or job == '' or string.sub(job, 1, 1) == '@' or doc['data'] == nil then
    return true  -- PHP's Job::fire fails it before any handler (Payload.unrunnable): laraq fails it alike
  end
  local cleaned_job = clean(job)
  if cleaned_job == 'Illuminate\\\\Queue\\\\CallQueuedHandler@call' then
    local data = doc['data']
    local by_command = nil
    if type(data) == 'table' then
      by_command = clean(data['commandName'])
    end
    local by_display = clean(doc['displayName'])
    return class_handled(by_command, names) or class_handled(by_display, names)
  end
  if cleaned_job then
    if names[cleaned_job] then
      return true
    end
    local at = string.find(cleaned_job, '@', 1, true)
    if at == nil then
      return false
    end
    local method = string.sub(cleaned_job, at + 1)
    if method == '' or method == 'fire' then
      local class = clean(string.sub(cleaned_job, 1, at - 1))
      return class ~= nil and names[class] == true
    end
  end
  return false
end

local function take_handled(wanted, window, names)
  local out = {0, 0, 0, 0, 0}
  local used_count = 0
  if wanted <= 0 then
    return out, used_count, true
  end
  local heads = {}
  local page = math.min(window, math.max(wanted, 16))
  local listed_all = false
  local used = {}
  local last = 0
  local skipped = 0
  local i = 0
  while (#out - 5) / 2 < wanted and moved < budget do
    i = i + 1
    if i > #heads then
      if listed_all or #heads >= window then
        break
      end
      local upto = math.min(window, #heads + page)
      local more = redis.call('LRANGE', KEYS[1], #heads, upto - 1)
      listed_all = #more < upto - #heads
      for k = 1, #more do
        heads[#heads + 1] = more[k]
      end
      page = page * 2
      if i > #heads then
        break
      end
    end
    local member = heads[i]
    local decoded_ok, doc = pcall(cjson.decode, member)
    local usable = decoded_ok and type(doc) == 'table' and tonumber(doc['attempts']) ~= nil
    if usable and not handled(doc, names) then
      skipped = skipped + 1
    else
      local reserved = usable and reservable(member, doc)  -- decoded once, above
      if reserved then
        redis.call('ZADD', KEYS[2], ARGV[1], reserved)
        note_unstarted(member, reserved)
        out[#out + 1] = member
        out[#out + 1] = reserved
      else
        redis.call('RPUSH', KEYS[4], member)
        moved = moved + 1
      end
      redis.call('LPOP', KEYS[3])
      used[i] = true
      used_count = used_count + 1
      last = i
    end
  end
  if last > 0 then
    redis.call('LTRIM', KEYS[1], last, -1)
    for i = last, 1, -1 do
      if not used[i] then
        redis.call('LPUSH', KEYS[1], heads[i])
      end
    end
  end
  out[1] = moved
  out[2] = skipped
  return out, used_count, listed_all
end

-- The deep look: one page of the list past the head window, from a cursor the worker keeps. Only
-- members whose name has a Python handler are taken (a member PHP fails is left for the head look or
-- PHP); each is reserved as Laravel's pop reserves it and taken out of the middle of the list by
-- LSET to a marker and one LREM of the markers, from the nearer end, so every other member keeps its
-- place and its :notify token. A member that cannot be JSON (the marker holds a 0xFF byte, never valid
-- UTF-8) cannot be mistaken for the marker. A member farther than ``reach`` from both ends is left
-- (counted as beyond reach): the LREM would walk too many members.
local DEEP_MARK = '\\255laraq-taken\\255'

local function needles_of(names)
  local list = {}
  for name, _ in pairs(names) do
    if string.find(name, '[^%w_\\\\@%. :%-]') then
      return nil  -- a name JSON may escape otherwise: every member is decoded
    end
    list[#list + 1] = (string.gsub(name, '\\\\', '\\\\\\\\'))
  end
  return list
end

local function mentions(member, needles)
  if needles == nil then
    return true
  end
  for j = 1, #needles do
    if string.find(member, needles[j], 1, true) then
      return true
    end
  end
  return false
end

local function runnable(doc)
  local job = doc['job']
  return type(job) == 'string' and job ~= '' and string.sub(job, 1, 1) ~= '@' and doc['data'] ~= nil
    and tonumber(doc['attempts']) ~= nil
end

local function take_deep(out, wanted, start, page, names, reach)
  local depth = redis.call('LLEN', KEYS[1])
  if page <= 0 or start >= depth then
    return 0, 0, 0
  end
  if (#out - 5) / 2 >= wanted then
    return start, 0, 0  -- the head gave what was asked for: the look goes on from here next time
  end
  if redis.acl_check_cmd and not (redis.acl_check_cmd('LSET', KEYS[1], '0', DEEP_MARK)
      and redis.acl_check_cmd('LREM', KEYS[1], '1', DEEP_MARK)) then
    return -1, 0, 0
  end
  local members = redis.call('LRANGE', KEYS[1], start, start + page - 1)
  local needles = needles_of(names)
  local taken = {}
  local skipped, beyond, seen = 0, 0, 0
  for i = 1, #members do
    if (#out - 5) / 2 >= wanted then
      break
    end
    seen = i
    local member = members[i]
    local doc = nil
    if mentions(member, needles) then
      local decoded_ok, decoded = pcall(cjson.decode, member)
      if decoded_ok and type(decoded) == 'table' and runnable(decoded) and handled(decoded, names) then
        doc = decoded
      end
    end
    local at = start + i - 1
    if doc == nil then
      skipped = skipped + 1
    elseif math.min(at, depth - 1 - at) > reach then
      beyond = beyond + 1
    else
      local reserved = reservable(member, doc)
      if reserved then
        redis.call('ZADD', KEYS[2], ARGV[1], reserved)
        note_unstarted(member, reserved)
        redis.call('LPOP', KEYS[3])
        out[#out + 1] = member
        out[#out + 1] = reserved
        taken[#taken + 1] = at
      else
        skipped = skipped + 1
      end
    end
  end
  if #taken > 0 then
    for k = 1, #taken do
      redis.call('LSET', KEYS[1], taken[k], DEEP_MARK)
    end
    if taken[#taken] + 1 <= depth - taken[1] then
      redis.call('LREM', KEYS[1], #taken, DEEP_MARK)
    else
      redis.call('LREM', KEYS[1], -#taken, DEEP_MARK)
    end
  end
  local next_at = start + seen - #taken
  if seen == #members and start + #members >= depth then
    next_at = 0
  end
  return next_at, skipped, beyond
end
"""

#: laraq's selective batch reserve (a queue shared with PHP workers): :data:`RESERVE_BATCH`, except that
#: only members with a Python handler are reserved. KEYS as :data:`RESERVE_BATCH`. ARGV: 1 expiry,
#: 2 poison budget, 3 how many jobs at most, 4 now, 5 migrate LIMIT, 6 migrate ``:reserved`` (1/0),
#: 7 how many acks follow, 8 how many list heads to look at, 9 how many handler names follow, 10 where
#: the deep look starts (the cursor), 11 how many members it reads (0: none), then the acks, then the
#: names. The head look: the first ARGV[8] members of the list; reserves each one a Python handler runs
#: (exactly as Laravel's pop reserves it: ``attempts + 1``, ``ZADD :reserved``, one ``:notify`` token)
#: and parks an unusable one in ``:poison`` as the pop does; every other member stays in the list, in its
#: order (the consumed prefix is trimmed and the members left alone are pushed back in front, so PHP sees
#: the same list minus the taken jobs). When the list is longer than the window and jobs are still
#: wanted, the deep look reads ARGV[11] members from ARGV[10] (at least the window's end) and takes the
#: Python jobs among them the same way. A look is made of calls that each read one part: the call that
#: starts it (ARGV[10] 0) makes the head look and returns the window's end as the next cursor; each call
#: that goes on (ARGV[10] above 0) reads one page and skips the head look. Returns ``{poisoned, left alone, next cursor (0: the look reached
#: the end; -1: the ACL refuses LSET/LREM), list length, beyond reach, job1, reserved1, ...}``.
RESERVE_HANDLED = (_UNSTARTED_LIB + RESERVE_LIB + MOVE_DUE_LIB + _SELECT_LIB + _UNSTARTED_START + """\
local nacks = tonumber(ARGV[7]) or 0
for first = 12, 11 + nacks, ACK_CHUNK do
  redis.call('ZREM', KEYS[2], unpack(ARGV, first, math.min(first + ACK_CHUNK - 1, 11 + nacks)))
end
local names = {}
for i = 12 + nacks, 11 + nacks + (tonumber(ARGV[9]) or 0) do
  names[ARGV[i]] = true
end
""" + _MIGRATE_STEP + """\
local wanted, window, cursor = tonumber(ARGV[3]) or 0, tonumber(ARGV[8]) or 100, tonumber(ARGV[10]) or 0
-- a look under way (cursor past the window) goes on without the head look: the call that starts the
-- next look reads the head again
local out, used, listed_all = take_handled(wanted, cursor > 0 and 0 or window, names)
local page = tonumber(ARGV[11]) or 0
if not listed_all and page > 0 then
  local start = math.max(cursor, window - used)
  if cursor > 0 then
    local next_at, skipped, beyond = take_deep(out, wanted, start, page, names, DEEP_REACH)
    out[2] = out[2] + skipped
    out[3] = next_at
    out[5] = beyond
  elseif start > 0 and (#out - 5) / 2 < wanted and start < redis.call('LLEN', KEYS[1]) then
    out[3] = start  -- a call that made the head look leaves the first page to the next call: each stays short
  end
end
out[4] = redis.call('LLEN', KEYS[1])
return out
""").replace("ACK_CHUNK", str(ACK_CHUNK)).replace("DEEP_REACH", str(DEEP_REACH))

#: laraq's own. KEYS: 1 reserved. ARGV: 1 new expiry, 2.. reserved members. Pushes the expiry of
#: each member that is still reserved forward (``ZADD XX``: never re-creates a member someone else's
#: migrate already took back) and returns one 1/0 per member: still ours, or gone.
RENEW = """\
local out = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

#: laraq's own. KEYS: 1 list, 2 reserved, 3 notify, 4 (optional) the unstarted record. ARGV: pairs
#: (reserved member, original body) in list order. Hands reserved-but-unstarted jobs back: for each
#: pair whose reservation is still ours, ``ZREM`` it and put the original body (attempts not burned)
#: back at the HEAD of the list, with one ``:notify`` token, keeping the pairs' order; the pairs'
#: unstarted records are removed either way. Returns how many were given back.
GIVE_BACK = """\
local given = 0
for i = #ARGV - 1, 1, -2 do
  if KEYS[4] then
    redis.call('ZREM', KEYS[4], string.len(ARGV[i]) .. ':' .. ARGV[i] .. ARGV[i + 1])
  end
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('LPUSH', KEYS[1], ARGV[i + 1])
    redis.call('RPUSH', KEYS[3], 1)
    given = given + 1
  end
end
return given
"""

#: laraq's own. KEYS: 1 the unstarted record. ARGV: 1 lease seconds, 2 how many of the members that
#: follow are starting (removed), 3.. unstarted members. Removes the starting ones and pushes the lease
#: of the others forward (``ZADD XX``: a record reclaimed meanwhile stays gone). Returns one 1/0 per
#: member: it was still there (a starting job may run; a buffered one is still ours), or gone.
UNSTARTED = _UNSTARTED_LIB + """\
local until_ = redis_now() + tonumber(ARGV[1])
local starting = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  if i - 2 <= starting then
    out[#out + 1] = redis.call('ZREM', KEYS[1], ARGV[i])
  elseif redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

#: laraq's own. KEYS: 1 list, 2 reserved, 3 notify, 4 the unstarted record. ARGV: 1 how many at most.
#: Gives back the jobs whose unstarted lease ran out (see the module's docstring). Returns
#: ``{records looked at, jobs given back}``.
RECLAIM = _UNSTARTED_LIB + """\
return reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], redis_now(), tonumber(ARGV[1]))
"""

#: laraq's own (no Laravel counterpart). KEYS: 1 reserved, 2 delayed. ARGV: 1 reserved member,
#: 2 available-at, 3 the original (as-pushed) body. Puts a job back exactly as it was pushed, attempts
#: not burned, but only while the reservation is still ours. Returns 1, or 0 if it was not reserved.
REQUEUE = """\
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
"""


#: How many bytes of members :data:`EXCERPTS` holds at once (it reads fewer members at a time after big ones).
EXCERPTS_BUDGET = 1 << 20

#: laraq's own, read-only. KEYS: 1 a list or a ZSET. ARGV: 1 ``list`` or ``zset``, 2 start, 3 stop
#: (indexes >= 0, inclusive), 4 side (bytes). For each member of the range, four values: its length;
#: the member when it is at most 2 * side bytes long, else its first side bytes; '' for a whole member,
#: else its last side bytes; its score (a ZSET) or nil. The members are fetched a few at a time, as many
#: as EXCERPTS_BUDGET bytes of the last ones would hold (1 to 64), so a range of huge members is never
#: held at once.
EXCERPTS = f"""\
local key, zset = KEYS[1], ARGV[1] == 'zset'
local i, stop, side = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local width = zset and 2 or 1
local out, step = {{}}, 1
while i <= stop do
  local last = math.min(stop, i + step - 1)
  local got
  if zset then
    got = redis.call('ZRANGE', key, i, last, 'WITHSCORES')
  else
    got = redis.call('LRANGE', key, i, last)
  end
  local n = #got / width
  local biggest = 1
  for j = 0, n - 1 do
    local m = got[j * width + 1]
    local len = #m
    if len > biggest then biggest = len end
    out[#out + 1] = len
    if len > 2 * side then
      out[#out + 1] = string.sub(m, 1, side)
      out[#out + 1] = string.sub(m, len - side + 1)
    else
      out[#out + 1] = m
      out[#out + 1] = ''
    end
    out[#out + 1] = zset and got[j * width + 2] or false
  end
  got = nil
  if n < last - i + 1 then break end
  i = last + 1
  step = math.max(1, math.min(64, math.floor({EXCERPTS_BUDGET} / biggest)))
end
return out
"""


def unstarted_member(reserved: bytes, body: bytes) -> bytes:
    """A job's member in laraq's unstarted record (see the module's docstring)."""
    return b"%d:%b%b" % (len(reserved), reserved, body)
