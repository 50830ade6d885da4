"""How much of a message or an exception text a log line carries, and how its control characters show.

A handler that raises with a 10 MB message must not copy it into every log line (``failed_jobs`` keeps
the whole text, as PHP does). The worker's own log lines and ``laraq work``'s logging
(:mod:`laraq.production.logs`) cut texts with :func:`short`.

Class names, property values, exception texts and queue names come from payloads and from Redis: whoever
can push a job chooses them. :func:`visible` is what every terminal and text log line shows of such a
value: each character that is not printable (``str.isprintable``: C0 and C1 controls, DEL, the bidi
overrides and isolates and every other format character, line and paragraph separators, lone
surrogates) is written as its escape (``\\x1b``, ``\\n``, ``\\u202e``), so a job cannot clear a screen,
set a window title, plant a hyperlink, reorder what a reader sees, or forge a second log line. The stored
bytes are never changed: only what is displayed. This module imports nothing: any layer uses it.
"""

from __future__ import annotations

__all__ = ["MAX_LOGGED_TEXT", "short", "visible"]

#: Longest message and exception text a log line carries.
MAX_LOGGED_TEXT = 4000


def short(text: str, limit: int = MAX_LOGGED_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}

#: Characters above Latin-1 a table remembers (a hostile text with every code point must not grow it further).
_CACHED = 4096


class _Escapes(dict[int, str]):
    """A ``str.translate`` table: each character to itself, or to its escape when it is not printable.

    Latin-1 is filled in at once; other characters are worked out when first met (most texts never
    reach this table: :func:`visible` returns a printable text as is)."""

    def __init__(self, *, multiline: bool, json: bool) -> None:
        super().__init__()
        self.json = json
        for cp in range(0x100):
            self[cp] = self._escape(cp)
        if multiline:
            self[0x0A] = "\n"
        self.limit = len(self) + _CACHED

    def _escape(self, cp: int) -> str:
        char = chr(cp)
        if char.isprintable():
            return char
        if cp in _NAMED:
            return _NAMED[cp]
        if self.json:  # JSON's own escapes: the document stays valid and its values unchanged
            if cp > 0xFFFF:
                cp -= 0x10000
                return f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"
            return f"\\u{cp:04x}"
        if cp < 0x100:
            return f"\\x{cp:02x}"
        return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"

    def __missing__(self, cp: int) -> str:
        escaped = self._escape(cp)
        if len(self) < self.limit:
            self[cp] = escaped
        return escaped


_TABLES = {(multiline, json): _Escapes(multiline=multiline, json=json)
           for multiline in (False, True) for json in (False, True)}


def visible(text: str, *, multiline: bool = False, json: bool = False) -> str:
    """``text`` with every character that is not printable shown as its escape (see the module's docstring).

    ``multiline``: line breaks (``\\n``) stay line breaks (an exception trace, a JSON document printed with
    an indent); otherwise the text is one line. ``json``: ``text`` is a JSON document written with raw
    non-ASCII characters, and the escapes are JSON's (``\\u009b``), so it stays valid with the same values.
    A printable text (the usual case) comes back as is, after one ``str.isprintable`` scan."""
    if text.isprintable():
        return text
    return text.translate(_TABLES[multiline, json])
