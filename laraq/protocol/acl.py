"""Redis ACL denials told in words: which command (or key) the user may not use, and what to grant.

Redis checks an ACL user's permissions on every command a Lua script runs, not only on ``EVALSHA``.
Redis 7.0 reports a denial inside a script without naming the command ("The user executing the script
can't run this command or subcommand script: <sha>, on @user_script:<line>."), so :func:`denied` finds
it: the sha names one of laraq's scripts (:data:`laraq.protocol.lua.SCRIPT_TEXTS`, or one registered with
:func:`register_script`) and the line names its ``redis.call``. A denial outside a script names the
command itself ("this user has no permissions to run the 'ping' command"). The ACL a worker needs is in
``compat-docs/protocol.md`` ("ACL").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from laraq.protocol.lua import SCRIPT_TEXTS

__all__ = ["Denial", "denied", "register_script"]

_SCRIPTS: dict[str, str] = {}


def register_script(text: str) -> None:
    """Make the commands of another Lua script (middleware, cache, rate limiter) nameable in denials."""
    _SCRIPTS[hashlib.sha1(text.encode()).hexdigest()] = text


for _text in SCRIPT_TEXTS.values():
    register_script(_text)

_DIRECT = re.compile(r"no permissions to run the '([^']+)' command", re.I)
_IN_SCRIPT = re.compile(r"can't run this command or subcommand\s+script: ([0-9a-f]{40}), on @user_script:(\d+)", re.I)
_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z|]+)['\"]")
_KEY = re.compile(r"no permissions to access (?:a|one of the) key|can't access at least one of the keys", re.I)
_CHANNEL = re.compile(r"no permissions to access (?:a|one of the) channel", re.I)


@dataclass(frozen=True)
class Denial:
    """What the ACL refused: ``kind`` is ``command``, ``key`` or ``channel``; ``command`` when known."""

    kind: str
    command: str | None = None
    in_script: bool = False

    def grant(self, user: str | None, prefix_hint: str = "<prefix>") -> str:
        """The ``ACL SETUSER`` that grants it."""
        who = user or "<user>"
        if self.kind == "key":
            return f"ACL SETUSER {who} ~{prefix_hint}*"
        if self.kind == "channel":
            return f"ACL SETUSER {who} &*"
        return f"ACL SETUSER {who} +{self.command or '<command>'}"


def denied(text: str) -> Denial | None:
    """The ACL denial an error message reports, or ``None`` if it is not one."""
    m = _DIRECT.search(text)
    if m:
        return Denial("command", m[1].lower())
    m = _IN_SCRIPT.search(text)
    if m:
        return Denial("command", _script_command(m[1], int(m[2])), in_script=True)
    if _KEY.search(text):
        return Denial("key", in_script="script" in text.lower())
    if _CHANNEL.search(text):
        return Denial("channel")
    if text.startswith("NOPERM") or " NOPERM " in text:
        return Denial("command")
    return None


def _script_command(sha: str, line: int) -> str | None:
    text = _SCRIPTS.get(sha.lower())
    if text is None:
        return None
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    m = _CALL.search(lines[line - 1])
    return m[1].lower() if m else None
