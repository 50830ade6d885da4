"""laraq's own Lua scripts for Laravel's Redis queue, loaded once and run by SHA.

Every script here has the same observable effect on Redis as the script Laravel's ``RedisQueue``
runs for the same operation (see ``compat-docs/protocol.md``), with two deliberate exceptions: the
pop scripts never destroy a member they cannot reserve, and the selective reserve
(:data:`RESERVE_HANDLED`, a queue shared with PHP workers) takes only jobs Python has a handler for and
leaves every other member in the list, in its order (what it takes is reserved exactly as a pop).

Laravel's pop removes the head of the list *before* it decodes it, so a member that is not JSON, or
whose ``attempts`` is not a number, makes the script fail after the removal and the job is lost
(Redis does not roll a script back). laraq's pop decodes inside ``pcall`` first. A member that cannot
be reserved is moved, byte for byte, to the dead-letter list ``queues:<name>:poison``, its ``:notify``
token is consumed, and the script goes on with the next member (at most :data:`POISON_SKIPS_PER_CALL`
per call, so a long run of bad members cannot stall Redis).

For a valid member the reserved string is produced exactly as Laravel's script produces it: Redis'
own ``cjson`` decodes the member, ``attempts`` gets ``+ 1`` (Lua's numeric coercion, so ``"3"``
becomes ``4``) and ``cjson.encode`` writes the member that goes into ``:reserved``. The same Redis,
the same cjson, so PHP workers see the same kind of bytes they would get from Laravel itself.

:class:`Scripts` wraps redis-py :class:`redis.commands.core.Script` objects: each call is an
``EVALSHA``; after a ``SCRIPT FLUSH`` or on a fresh server the ``NOSCRIPT`` reply makes redis-py
``SCRIPT LOAD`` the text once and retry. Inside a redis-py pipeline, the pipeline checks and loads
its scripts before it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

#: How many unusable members one pop call moves to the poison list before it gives up for now.
POISON_SKIPS_PER_CALL = 100

#: How many members one ``RPUSH`` receives in the migrate script (Lua's ``unpack`` stack limit).
MIGRATE_CHUNK = 100

#: How many members one ``ZREM`` of the batch-reserve script receives.
ACK_CHUNK = 500

# -- the scripts ---------------------------------------------------------------------------------

#: KEYS: 1 list, 2 notify. ARGV: 1 payload. Appends the job and one wake-up token.
PUSH = """\
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], 1)
"""

#: KEYS: 1 delayed. ARGV: 1 available-at (unix seconds), 2 payload. No wake-up token.
LATER = """\
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
"""

# Laravel's migration step: remove the due members (the lowest ranks, exactly the ones read) and
# append them unchanged to the list, with one wake-up token each, in chunks (Lua's unpack limit).
_MOVE_DUE_LIB = """\
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

#: Jobs whose body is larger than this (bytes) get no unstarted record (see :data:`_UNSTARTED_LIB`): their
#: record would hold the job twice more and travel at its start; after a SIGKILL they come back as
#: Laravel's own do, after ``retry_after``.
RECORD_MAX_BYTES = 256 * 1024

# The reservation step shared by both pop scripts. ``take`` returns job, reserved for the next
# usable member, or false, false when the list is empty (or the poison budget ran out).
_RESERVE_LIB = """\
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
POP = _RESERVE_LIB + """\
local job, reserved = take()
return {job, reserved, moved}
"""

#: KEYS as :data:`POP`. ARGV: 1 expiry, 2 poison budget, 3 how many jobs at most.
#: Returns ``{poisoned, job1, reserved1, job2, reserved2, ...}``.
POP_MANY = _RESERVE_LIB + """\
return take_many(tonumber(ARGV[3]) or 1)
"""

# laraq's record of reserved-but-unstarted jobs (issue 29 §3): a ZSET ``<list>:laraq-unstarted`` next to
# ``:reserved``, member = ``<length of the reserved member>:<reserved member><original body>``, score = a
# short lease (Redis ``TIME`` + the lease seconds; one clock for every worker, whatever the hosts' clocks
# say). A job leaves it when it starts. ``reclaim`` gives back the jobs whose lease ran out (their worker
# died): each one still in ``:reserved`` is removed from it and its original body (attempts not spent) goes
# back to the HEAD of the list with one ``:notify`` token; one that is no longer in ``:reserved`` (acked,
# released, or migrated back by Laravel's own pop) is only forgotten. The ``ZREM :reserved`` decides,
# atomically, so a PHP migrate and a reclaim never both give the same job back.
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

#: laraq's batch reserve (the worker's fast path): one call = acks + Laravel's migrate + N pops.
#: KEYS: 1 list, 2 reserved, 3 notify, 4 poison, 5 delayed. ARGV: 1 reservation expiry, 2 poison
#: budget, 3 how many jobs at most, 4 now (unix seconds), 5 migrate LIMIT (-1 = all; 8.0-9.22 have
#: no LIMIT, which is the same), 6 migrate ``:reserved`` too (1) or not (0: ``retry_after`` null),
#: 7 how many acks follow, 8.. the reserved members of finished jobs (``ZREM``ed first).
#: Returns ``{poisoned, job1, reserved1, ...}`` like :data:`POP_MANY`. The effect equals the acks'
#: ``ZREM``s followed by N consecutive Laravel pops in the same second (one migrate pair suffices:
#: a second migrate in the same second would find nothing the first left behind).
#: With KEYS[6] (laraq's unstarted record, see :data:`_UNSTARTED_LIB`) and the lease seconds as the
#: last ARGV, expired records are reclaimed first and every job reserved is recorded as unstarted.
RESERVE_BATCH = (_UNSTARTED_LIB + _RESERVE_LIB + _MOVE_DUE_LIB + _UNSTARTED_START + """\
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
# its class for a string job), with surrounding spaces and leading backslashes dropped.
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

local function handled(doc, names)
  local job = doc['job']
  local data = doc['data']
  local command = nil
  if type(data) == 'table' then
    command = data['commandName']
  end
  local cleaned_job = clean(job)
  if cleaned_job == 'Illuminate\\\\Queue\\\\CallQueuedHandler@call' or (command ~= nil and command ~= cjson.null) then
    local by_command = clean(command)
    local by_display = clean(doc['displayName'])
    if (by_command and names[by_command]) or (by_display and names[by_display]) then
      return true
    end
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
  local out = {0, 0}
  if wanted <= 0 then
    return out
  end
  local heads = {}
  local page = math.min(window, math.max(wanted, 16))
  local listed_all = false
  local used = {}
  local last = 0
  local skipped = 0
  local i = 0
  while (#out - 2) / 2 < wanted and moved < budget do
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
  return out
end
"""

#: laraq's selective batch reserve (a queue shared with PHP workers): :data:`RESERVE_BATCH`, except that
#: only members with a Python handler are reserved. KEYS as :data:`RESERVE_BATCH`. ARGV: 1 expiry,
#: 2 poison budget, 3 how many jobs at most, 4 now, 5 migrate LIMIT, 6 migrate ``:reserved`` (1/0),
#: 7 how many acks follow, 8 how many list heads to look at, 9 how many handler names follow, then the
#: acks, then the names. Looks at the first ARGV[8] members of the list; reserves each one a Python
#: handler runs (exactly as Laravel's pop reserves it: ``attempts + 1``, ``ZADD :reserved``, one
#: ``:notify`` token) and parks an unusable one in ``:poison`` as the pop does; every other member stays
#: in the list, in its order (the consumed prefix is trimmed and the members left alone are pushed back
#: in front, so PHP sees the same list minus the taken jobs). Returns ``{poisoned, left alone, job1,
#: reserved1, ...}``.
RESERVE_HANDLED = (_UNSTARTED_LIB + _RESERVE_LIB + _MOVE_DUE_LIB + _SELECT_LIB + _UNSTARTED_START + """\
local nacks = tonumber(ARGV[7]) or 0
for first = 10, 9 + nacks, ACK_CHUNK do
  redis.call('ZREM', KEYS[2], unpack(ARGV, first, math.min(first + ACK_CHUNK - 1, 9 + nacks)))
end
local names = {}
for i = 10 + nacks, 9 + nacks + (tonumber(ARGV[9]) or 0) do
  names[ARGV[i]] = true
end
""" + _MIGRATE_STEP + """\
return take_handled(tonumber(ARGV[3]) or 0, tonumber(ARGV[8]) or 100, names)
""").replace("ACK_CHUNK", str(ACK_CHUNK))

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
#: (reserved member, original body) in list order; their unstarted records are removed either way. Hands reserved-but-unstarted jobs back: for each pair whose reservation is still ours,
#: ``ZREM`` it and put the original body (attempts not burned) back at the HEAD of the list, with one
#: ``:notify`` token, keeping the pairs' order. Returns how many were given back.
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
#: Gives back the jobs whose unstarted lease ran out (see :data:`_UNSTARTED_LIB`). Returns
#: ``{records looked at, jobs given back}``.
RECLAIM = _UNSTARTED_LIB + """\
return reclaim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], redis_now(), tonumber(ARGV[1]))
"""

#: KEYS: 1 delayed, 2 reserved. ARGV: 1 reserved member, 2 available-at. The ZADD happens even if
#: the ZREM found nothing (Laravel does the same; see protocol.md). Returns 1.
RELEASE = """\
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
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


#: Laravel 8.0–9.22. KEYS: 1 source ZSET, 2 destination list, 3 its notify. ARGV: 1 now.
#: Moves every member scored <= now, unchanged, to the tail of the list; returns them.
MIGRATE = _MOVE_DUE_LIB + """\
return move_due(KEYS[1], KEYS[2], KEYS[3], redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1]))
"""

#: Laravel 9.23+. As :data:`MIGRATE` with ARGV 2 = the most members to move (-1 = all).
MIGRATE_LIMITED = _MOVE_DUE_LIB + """\
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

SCRIPT_TEXTS: dict[str, str] = {
    "push": PUSH,
    "later": LATER,
    "pop": POP,
    "pop_many": POP_MANY,
    "reserve_batch": RESERVE_BATCH,
    "reserve_handled": RESERVE_HANDLED,
    "renew": RENEW,
    "give_back": GIVE_BACK,
    "unstarted": UNSTARTED,
    "reclaim": RECLAIM,
    "release": RELEASE,
    "requeue": REQUEUE,
    "migrate": MIGRATE,
    "migrate_limited": MIGRATE_LIMITED,
    "size": SIZE,
    "clear": CLEAR,
    "clear_with_notify": CLEAR_WITH_NOTIFY,
}


def unstarted_member(reserved: bytes, body: bytes) -> bytes:
    """A job's member in laraq's unstarted record (see :data:`_UNSTARTED_LIB`)."""
    return b"%d:%b%b" % (len(reserved), reserved, body)


# -- results -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PopResult:
    """What one pop call did: the reserved job (if any) and how many members went to ``:poison``."""

    job: bytes | None
    reserved: bytes | None
    poisoned: int = 0


@dataclass(frozen=True)
class PopManyResult:
    """What one batch pop did: ``(job, reserved)`` pairs in list order, and the poison count."""

    jobs: list[tuple[bytes, bytes]]
    poisoned: int = 0
    #: members a selective reserve looked at and left in the list (no Python handler)
    skipped: int = 0


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("ascii")


# -- the runner ----------------------------------------------------------------------------------

def blocking(client: redis.Redis, command: Sequence[Any], wait: float) -> Any:
    """Run one blocking command (``BLPOP``) on a connection of ``client``'s pool, its read timeout
    lengthened by ``wait`` (the command's own timeout, 0 for none) so that a socket timeout shorter than
    the wait (redis-py's default is 5 s) never cuts it short."""
    pool = client.connection_pool
    conn = _connection(pool, command[0])
    try:
        conn.send_command(*command)
        with patient(conn, wait):
            reply = conn.read_response()
    except BaseException:
        conn.disconnect()  # the reply may be half read: never hand this connection out again as is
        pool.release(conn)
        raise
    pool.release(conn)
    return reply


def _connection(pool: Any, command: str) -> Any:
    """A connection of ``pool`` for the caller alone until it releases it."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants the command name
        return pool.get_connection(command)


@contextlib.contextmanager
def patient(conn: Any, wait: float | None) -> Iterator[None]:
    """While a blocking command waits on ``conn``: its socket's read timeout plus ``wait`` seconds (none
    at all for ``wait`` 0), restored afterwards. ``None``: the timeout is left alone, as it is on a
    socket without one."""
    sock = getattr(conn, "_sock", None)
    before = None if sock is None else sock.gettimeout()
    if sock is None or wait is None or before is None:
        yield
        return
    sock.settimeout(None if wait == 0 else before + float(wait))
    try:
        yield
    finally:
        current = getattr(conn, "_sock", None)
        if current is sock:  # not after a disconnect
            current.settimeout(before)


@dataclass(eq=False)
class PendingCall:
    """A script call sent with :meth:`Scripts.send` whose reply has not been read yet (``first``: the
    command sent ahead of it on the same connection still has its reply to read, see
    :meth:`Scripts.receive_first`)."""

    name: str
    keys: tuple[Any, ...]
    args: tuple[Any, ...]
    conn: Any
    pool: Any
    first: bool = False


class Scripts:
    """laraq's queue scripts bound to one redis-py client.

    Each method takes the full (prefixed) key names, like the ``KEYS`` of Laravel's ``EVAL`` calls,
    and an optional ``client`` (a pipeline of the same connection) to queue the call there instead.
    The script text is sent at most once per server (``SCRIPT LOAD`` on ``NOSCRIPT``); every other
    call is a single ``EVALSHA`` round trip.
    """

    def __init__(self, client: redis.Redis | Any) -> None:
        self.client = client
        self._scripts: dict[str, Script] = {
            name: client.register_script(text) for name, text in SCRIPT_TEXTS.items()
        }

    # -- plumbing ---------------------------------------------------------------------------------

    def sha(self, name: str) -> str:
        """The SHA1 of one script (what ``EVALSHA`` and ``SCRIPT EXISTS`` use)."""
        return self._scripts[name].sha

    def text(self, name: str) -> str:
        """The Lua source of one script."""
        return SCRIPT_TEXTS[name]

    def load(self) -> None:
        """``SCRIPT LOAD`` every script now (optional; calls load lazily on ``NOSCRIPT``)."""
        for name, text in SCRIPT_TEXTS.items():
            sha = self.client.script_load(text)
            if isinstance(sha, bytes):
                sha = sha.decode()
            self._scripts[name].sha = sha

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any] = ()) -> Any:
        """Run one script with a bare ``EVALSHA`` (no redis-py ``Script`` wrapper: the hot path).

        On ``NOSCRIPT`` (fresh server, ``SCRIPT FLUSH``) the text is loaded once and the call retried.
        """
        script = self._scripts[name]
        try:
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            sha = self.client.script_load(SCRIPT_TEXTS[name])
            script.sha = sha.decode() if isinstance(sha, bytes) else sha
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)

    def send(self, name: str, keys: Sequence[Any], args: Sequence[Any] = (), *,
             first: Sequence[Any] | None = None) -> PendingCall | None:
        """Send one script call now and read its reply later (:meth:`receive`), on a connection of its
        own taken from the pool: Redis runs it while the caller does other work. None when the client
        cannot do that (a cluster client has no single pool): the caller then uses :meth:`call`.

        ``first``: one command written just before the call on the same connection (a ``BLPOP``).
        Redis serves a connection's commands in order, so it runs the script the moment that command
        is answered, with no round trip in between; its reply is read with :meth:`receive_first`."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is None or isinstance(self.client, redis.RedisCluster):
            return None
        script = self._scripts[name]
        conn = _connection(pool, "EVALSHA")
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        try:
            if first is None:
                conn.send_command(*call)
            else:
                conn.send_packed_command(conn.pack_commands([tuple(first), call]))
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        return PendingCall(name, tuple(keys), tuple(args), conn, pool, first is not None)

    def receive_first(self, pending: PendingCall, wait: float | None = None) -> Any:
        """The reply of the command :meth:`send` wrote ahead of the script (this blocks while that
        command blocks: ``wait``, its own timeout in seconds, 0 for none, is added to the socket's read
        timeout meanwhile). An error reply is raised, and the script's reply stays readable with
        :meth:`receive`; a lost connection is raised too, and the call is then over."""
        assert pending.first
        try:
            with patient(pending.conn, wait):
                reply = pending.conn.read_response()
        except redis.exceptions.ResponseError:
            pending.first = False
            raise
        except BaseException:
            pending.first = False
            self._drop(pending)
            raise
        pending.first = False
        return reply

    @staticmethod
    def _drop(pending: PendingCall) -> None:
        """Give up a sent call: its reply may be half read, so its connection is never handed out as is."""
        pending.conn.disconnect()
        pending.pool.release(pending.conn)

    def receive(self, pending: PendingCall) -> Any:
        """The reply of a :meth:`send` (``NOSCRIPT``: loaded and run again, as :meth:`call` does)."""
        if pending.first:  # its reply (or error reply) is not what the caller asked for
            with contextlib.suppress(redis.exceptions.ResponseError):
                self.receive_first(pending)
        conn, pool = pending.conn, pending.pool
        try:
            reply = conn.read_response()
        except redis.exceptions.NoScriptError:
            pool.release(conn)
            return self.call(pending.name, pending.keys, pending.args)
        except BaseException:
            self._drop(pending)
            raise
        pool.release(conn)
        return reply

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any] = (), client: Any = None) -> Any:
        """Run one script by name; ``client`` may be a pipeline (the call is queued there)."""
        target = self.client if client is None else client
        return self._scripts[name](keys=list(keys), args=list(args), client=target)

    # -- operations -------------------------------------------------------------------------------

    def push(self, list_key: str, notify_key: str, payload: bytes | str, client: Any = None) -> Any:
        """``RPUSH list payload`` + ``RPUSH notify 1``."""
        return self.run("push", [list_key, notify_key], [payload], client)

    def later(self, delayed_key: str, available_at: int, payload: bytes | str, client: Any = None) -> Any:
        """``ZADD delayed available_at payload`` (Laravel 12.45+ runs this as a script)."""
        return self.run("later", [delayed_key], [int(available_at), payload], client)

    def pop(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        expires_at: int,
        *,
        poison_budget: int = POISON_SKIPS_PER_CALL,
    ) -> PopResult:
        """Reserve the next usable job; park unusable members in ``poison_key``."""
        raw = self.run(
            "pop", [list_key, reserved_key, notify_key, poison_key], [int(expires_at), int(poison_budget)]
        )
        job, reserved = _as_bytes(raw[0]), _as_bytes(raw[1])
        poisoned = int(raw[2]) if len(raw) > 2 and raw[2] is not None else 0
        return PopResult(job, reserved, poisoned)

    def pop_many(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        expires_at: int,
        count: int,
        *,
        poison_budget: int = POISON_SKIPS_PER_CALL,
    ) -> PopManyResult:
        """Reserve up to ``count`` jobs in one call (each exactly as :meth:`pop` would)."""
        if count < 1:
            return PopManyResult([], 0)
        raw = self.run(
            "pop_many",
            [list_key, reserved_key, notify_key, poison_key],
            [int(expires_at), int(poison_budget), int(count)],
        )
        poisoned = int(raw[0])
        members = [_as_bytes(v) for v in raw[1:]]
        pairs = [(members[i], members[i + 1]) for i in range(0, len(members) - 1, 2)]
        return PopManyResult([(j, r) for j, r in pairs if j is not None and r is not None], poisoned)

    def release(
        self, delayed_key: str, reserved_key: str, reserved: bytes | str, available_at: int, client: Any = None
    ) -> Any:
        """``ZREM reserved <reserved>`` then ``ZADD delayed available_at <reserved>``."""
        return self.run("release", [delayed_key, reserved_key], [reserved, int(available_at)], client)

    def requeue(
        self, reserved_key: str, delayed_key: str, reserved: bytes | str, available_at: int, body: bytes | str,
        client: Any = None,
    ) -> Any:
        """Swap a reservation for the untouched ``body`` on ``:delayed``; 0 (no change) if not reserved."""
        return self.run("requeue", [reserved_key, delayed_key], [reserved, int(available_at), body], client)

    def migrate(
        self,
        from_key: str,
        to_key: str,
        notify_key: str,
        now: int,
        limit: int | None = None,
        client: Any = None,
    ) -> list[bytes]:
        """Move members of ``from_key`` scored <= ``now`` to the tail of ``to_key``.

        ``limit=None`` runs the 8.0–9.22 script (no ``LIMIT``); an int runs the 9.23+ script with
        ``LIMIT 0 limit`` (-1 = all). Returns the moved members in the order they were appended.
        """
        if limit is None:
            result = self.run("migrate", [from_key, to_key, notify_key], [int(now)], client)
        else:
            result = self.run("migrate_limited", [from_key, to_key, notify_key], [int(now), int(limit)], client)
        if client is not None and client is not self.client:
            return result
        return [m for m in (_as_bytes(v) for v in result or []) if m is not None]

    def size(self, list_key: str, delayed_key: str, reserved_key: str, client: Any = None) -> Any:
        """``LLEN list + ZCARD delayed + ZCARD reserved``."""
        return self.run("size", [list_key, delayed_key, reserved_key], [], client)

    def clear(
        self,
        list_key: str,
        delayed_key: str,
        reserved_key: str,
        notify_key: str | None = None,
        client: Any = None,
    ) -> Any:
        """Delete the queue's keys and return how many jobs they held.

        Without ``notify_key`` this is the 8.4–8.8 script (the notify list survives); with it, the
        8.9+ script that deletes it too.
        """
        if notify_key is None:
            return self.run("clear", [list_key, delayed_key, reserved_key], [], client)
        return self.run("clear_with_notify", [list_key, delayed_key, reserved_key, notify_key], [], client)

    def reserve_batch(
        self,
        list_key: str,
        reserved_key: str,
        notify_key: str,
        poison_key: str,
        delayed_key: str,
        *,
        expires_at: int,
        count: int,
        now: int,
        migrate_limit: int = -1,
        migrate_reserved: bool = True,
        acks: Sequence[bytes] = (),
        poison_budget: int = POISON_SKIPS_PER_CALL,
        handled: Sequence[str] | None = None,
        window: int = 100,
        unstarted_key: str | None = None,
        unstarted_lease: float = 0.0,
    ) -> PopManyResult:
        """``ZREM`` the ``acks``, migrate due ``:delayed`` (and expired ``:reserved``) jobs, then
        reserve up to ``count`` jobs, each exactly as :meth:`pop` would: one round trip.

        ``handled``: the names Python has handlers for. Only jobs with one of them are reserved, among
        the first ``window`` members of the list; the others stay where they are (:data:`RESERVE_HANDLED`).
        None: the head jobs, whatever they are (:data:`RESERVE_BATCH`).

        ``unstarted_key``: laraq's unstarted record (see :data:`_UNSTARTED_LIB`): expired records are
        reclaimed first, and each job reserved is recorded with a lease of ``unstarted_lease`` seconds."""
        name, keys, args = self._reserve_batch_args(list_key, reserved_key, notify_key, poison_key, delayed_key,
                                                    expires_at, count, now, migrate_limit, migrate_reserved,
                                                    acks, poison_budget, handled, window, unstarted_key,
                                                    unstarted_lease)
        return self.reserve_batch_result(self.call(name, keys, args), selective=handled is not None)

    def reserve_batch_send(self, list_key: str, reserved_key: str, notify_key: str, poison_key: str,
                           delayed_key: str, *, expires_at: int, count: int, now: int, migrate_limit: int = -1,
                           migrate_reserved: bool = True, acks: Sequence[bytes] = (),
                           poison_budget: int = POISON_SKIPS_PER_CALL,
                           first: Sequence[Any] | None = None, handled: Sequence[str] | None = None,
                           window: int = 100, unstarted_key: str | None = None,
                           unstarted_lease: float = 0.0) -> PendingCall | None:
        """:meth:`reserve_batch`, sent now (after ``first``, see :meth:`send`); :meth:`receive` +
        :meth:`reserve_batch_result` read it later."""
        name, keys, args = self._reserve_batch_args(list_key, reserved_key, notify_key, poison_key, delayed_key,
                                                    expires_at, count, now, migrate_limit, migrate_reserved,
                                                    acks, poison_budget, handled, window, unstarted_key,
                                                    unstarted_lease)
        return self.send(name, keys, args, first=first)

    @staticmethod
    def _reserve_batch_args(list_key: str, reserved_key: str, notify_key: str, poison_key: str, delayed_key: str,
                            expires_at: int, count: int, now: int, migrate_limit: int, migrate_reserved: bool,
                            acks: Sequence[bytes], poison_budget: int, handled: Sequence[str] | None = None,
                            window: int = 100, unstarted_key: str | None = None, unstarted_lease: float = 0.0
                            ) -> tuple[str, tuple[Any, ...], tuple[Any, ...]]:
        keys: tuple[Any, ...] = (list_key, reserved_key, notify_key, poison_key, delayed_key)
        head = (int(expires_at), int(poison_budget), max(0, int(count)), int(now), int(migrate_limit),
                1 if migrate_reserved else 0, len(acks))
        tail: tuple[Any, ...] = ()
        if unstarted_key is not None:
            keys, tail = (*keys, unstarted_key), (repr(float(unstarted_lease)),)
        if handled is None:
            return "reserve_batch", keys, (*head, *acks, *tail)
        return "reserve_handled", keys, (*head, max(1, int(window)), len(handled), *acks, *handled, *tail)

    @staticmethod
    def reserve_batch_result(raw: Any, *, selective: bool = False) -> PopManyResult:
        """The reply of the ``reserve_batch`` (or, ``selective``, ``reserve_handled``) script: (job,
        reserved) pairs, the poisoned count and the members left alone."""
        poisoned = int(raw[0])
        skipped, first = (int(raw[1]), 2) if selective else (0, 1)
        pairs = [(raw[i], raw[i + 1]) for i in range(first, len(raw) - 1, 2)]
        return PopManyResult([(_as_bytes(j), _as_bytes(r)) for j, r in pairs], poisoned,  # type: ignore[misc]
                             skipped)

    def renew(self, reserved_key: str, members: Sequence[bytes], expires_at: int) -> list[bool]:
        """Push the reservation expiry of ``members`` to ``expires_at``; False for a member that is gone."""
        if not members:
            return []
        return self.renew_result(self.call("renew", (reserved_key,), (int(expires_at), *members)))

    def renew_send(self, reserved_key: str, members: Sequence[bytes], expires_at: int) -> PendingCall | None:
        """:meth:`renew`, sent now; :meth:`receive` + :meth:`renew_result` read it later."""
        return self.send("renew", (reserved_key,), (int(expires_at), *members))

    @staticmethod
    def renew_result(raw: Any) -> list[bool]:
        """The reply of the ``renew`` script: True for each member still reserved (now renewed)."""
        return [bool(int(v)) for v in raw]

    def give_back(self, list_key: str, reserved_key: str, notify_key: str,
                  jobs: Sequence[tuple[bytes, bytes]], unstarted_key: str | None = None) -> int:
        """Hand reserved-but-unstarted ``(reserved, body)`` jobs back to the head of the list, in order
        (and forget their unstarted records in ``unstarted_key``)."""
        if not jobs:
            return 0
        args: list[bytes] = []
        for reserved, body in jobs:
            args += (reserved, body)
        keys = (list_key, reserved_key, notify_key) + (() if unstarted_key is None else (unstarted_key,))
        return int(self.call("give_back", keys, args))

    def unstarted(self, unstarted_key: str, lease: float, starting: Sequence[bytes],
                  buffered: Sequence[bytes] = ()) -> list[bool]:
        """Remove the unstarted records of the ``starting`` jobs and renew those of the ``buffered``
        ones: per member, in that order, True if its record was still there."""
        if not starting and not buffered:
            return []
        raw = self.call("unstarted", (unstarted_key,), (repr(float(lease)), len(starting), *starting, *buffered))
        return [bool(int(v)) for v in raw]

    def reclaim(self, list_key: str, reserved_key: str, notify_key: str, unstarted_key: str,
                limit: int = RECLAIM_CHUNK) -> tuple[int, int]:
        """Give back the jobs whose unstarted lease ran out: (records looked at, jobs given back)."""
        raw = self.call("reclaim", (list_key, reserved_key, notify_key, unstarted_key), (int(limit),))
        return int(raw[0]), int(raw[1])
