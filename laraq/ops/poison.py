"""laraq's dead-letter lists, ``queues:NAME:poison`` (compat-docs/protocol.md §5): why a member is there,
putting it back on its queue, deleting it.

laraq's pop script parks a member it cannot reserve (not JSON, no numeric ``attempts``, a number Redis'
cjson cannot encode again) instead of losing it as Laravel's pop does. :func:`requeue_poison` and
:func:`drop_poison` act on each member by its exact bytes in one Lua step (``LREM`` + ``RPUSH`` +
``:notify`` for a requeue), so a concurrent pop parking more members never shifts what is acted on.
A requeue refuses what the pop would park again, unless forced; Redis' own cjson decides
(:func:`poison_readable`), the same test as the pop script's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from laraq.protocol.queue import RedisQueue

__all__ = ["PoisonOutcome", "drop_poison", "poison_readable", "poison_reason", "requeue_poison"]

# The pop script's own test of a member (protocol/lua_laravel.py): JSON object, numeric attempts, re-encodable.
_RESERVABLE = """\
local function reservable(member)
  local decoded_ok, doc = pcall(cjson.decode, member)
  if not decoded_ok or type(doc) ~= 'table' then return false end
  local tries = tonumber(doc['attempts'])
  if tries == nil then return false end
  doc['attempts'] = tries + 1
  local encoded_ok = pcall(cjson.encode, doc)
  return encoded_ok
end
"""

# KEYS: 1 poison, 2 list, 3 notify. ARGV: 1 member, 2 force (1|0).
# Returns 1 requeued, 0 no longer in the poison list, -1 still unreadable (not moved).
_REQUEUE = _RESERVABLE + """\
if ARGV[2] ~= '1' and not reservable(ARGV[1]) then return -1 end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[3], 1)
return 1
"""

# KEYS: 1 poison. ARGV: 1 member. Returns 1 when the member was still there.
_DROP = "return redis.call('LREM', KEYS[1], 1, ARGV[1])"

# ARGV: 1 member. Returns 1 when the pop script would reserve it.
_CHECK = _RESERVABLE + "return reservable(ARGV[1]) and 1 or 0"


def poison_reason(member: bytes) -> str:
    """Why the pop script parked ``member`` (read again in Python; see protocol.md §5)."""
    try:
        doc = json.loads(member)
    except (ValueError, RecursionError):
        head = member[:12]
        hint = " (phpredis serializer/compression?)" if head[:2] in (b"a:", b"O:", b"s:", b"i:") or not head.isascii() \
            else ""
        return "not JSON" + hint
    if not isinstance(doc, dict):
        return "not a JSON object"
    attempts = doc.get("attempts")
    if attempts is None:
        return "no attempts field"
    if isinstance(attempts, bool) or not isinstance(attempts, int | float | str):
        return f"attempts is not a number ({attempts!r})"
    try:
        number = float(attempts)
    except ValueError:
        return f"attempts is not a number ({attempts!r})"
    if number != number or number in (float("inf"), float("-inf")):
        return f"attempts is not finite ({attempts!r})"
    return "a number Redis' cjson cannot encode again (e.g. 1e400 or inf)"


@dataclass
class PoisonOutcome:
    """What happened to one selected poison member."""

    index: int
    status: str  # requeued | dropped | unreadable | gone
    reason: str = ""


def _select(members: list[bytes], indexes: Iterable[int] | None) -> list[tuple[int, bytes]]:
    if indexes is None:
        return list(enumerate(members))
    chosen = []
    for index in dict.fromkeys(indexes):
        if not 0 <= index < len(members):
            raise ValueError(f"no poison member #{index} (the list has {len(members)})")
        chosen.append((index, members[index]))
    return chosen


def poison_readable(queue: RedisQueue, members: Iterable[bytes]) -> list[bool]:
    """Whether the pop script would now reserve each member (Redis' own cjson decides)."""
    check = queue.client.register_script(_CHECK)
    return [bool(check(keys=[], args=[m])) for m in members]


def requeue_poison(queue: RedisQueue, name: str | None, indexes: Iterable[int] | None = None, *,
                   force: bool = False) -> list[PoisonOutcome]:
    """Put poison members (all, or those at ``indexes``) back at the tail of the queue, each atomically
    (``LREM`` from ``:poison`` + ``RPUSH`` + ``:notify``). A member the pop script would park again is
    left where it is (``unreadable``) unless ``force``."""
    keys = queue.keys(name)
    script = queue.client.register_script(_REQUEUE)
    out = []
    for index, member in _select(queue.poison_members(name), indexes):
        result = int(script(keys=[keys.poison, keys.list, keys.notify], args=[member, "1" if force else "0"]))
        status = {1: "requeued", 0: "gone", -1: "unreadable"}[result]
        out.append(PoisonOutcome(index, status, poison_reason(member) if result == -1 else ""))
    return out


def drop_poison(queue: RedisQueue, name: str | None, indexes: Iterable[int] | None = None) -> list[PoisonOutcome]:
    """Delete poison members (all, or those at ``indexes``), each by its exact bytes."""
    keys = queue.keys(name)
    script = queue.client.register_script(_DROP)
    return [PoisonOutcome(index, "dropped" if int(script(keys=[keys.poison], args=[member])) else "gone")
            for index, member in _select(queue.poison_members(name), indexes)]
