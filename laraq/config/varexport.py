"""Read a PHP ``var_export`` file without running PHP: the app's cached configuration.

``php artisan config:cache`` (``Illuminate\\Foundation\\Console\\ConfigCacheCommand``) writes
``bootstrap/cache/config.php`` as ``<?php return `` + ``var_export($config, true)`` + ``;``. This module
parses exactly that subset: ``array ( key => value, ... )``, single-quoted strings (with ``\\\\`` and
``\\'``, and the ``'' . "\\0" . ''`` form ``var_export`` uses for NUL bytes), integers, floats (including
``INF``/``NAN``), ``true``/``false``/``NULL``. Anything else (objects, ``__set_state``, enums, constants,
function calls) is refused with :class:`VarExportError` naming the file, the line and the offset. The
input is untrusted: its size and nesting depth are bounded and nothing in it is executed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

__all__ = ["MAX_BYTES", "MAX_DEPTH", "VarExportError", "parse_var_export", "read_var_export_file"]

#: The largest file read (a real app's cached config is well under 1 MiB).
MAX_BYTES = 16 * 1024 * 1024
#: The deepest array nesting accepted.
MAX_DEPTH = 64

_WS = re.compile(r"\s*")
_NUMBER = re.compile(r"-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)")
_WORD = re.compile(r"-?[A-Za-z_\\][A-Za-z0-9_\\]*")
_HEAD = re.compile(r"\A\ufeff?\s*<\?php\s+return\s+", re.IGNORECASE)
_DQ_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "$": "$", "v": "\v",
               "f": "\f", "e": "\x1b"}


class VarExportError(ValueError):
    """The file is not the ``var_export`` subset laraq reads (the message names the file and the offset)."""


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.pos = 0

    def fail(self, what: str, at: int | None = None) -> VarExportError:
        at = self.pos if at is None else at
        line = self.text.count("\n", 0, at) + 1
        near = self.text[at:at + 40]
        return VarExportError(f"{self.name}: {what} at offset {at} (line {line}) near {near!r}; laraq reads "
                              "only var_export's arrays, strings, numbers, booleans and null")

    def ws(self) -> None:
        m = _WS.match(self.text, self.pos)
        self.pos = m.end() if m else self.pos

    def expect(self, token: str) -> None:
        self.ws()
        if not self.text.startswith(token, self.pos):
            raise self.fail(f"expected {token!r}")
        self.pos += len(token)

    def value(self, depth: int) -> Any:
        self.ws()
        text, pos = self.text, self.pos
        if pos >= len(text):
            raise self.fail("unexpected end of file")
        ch = text[pos]
        if ch == "'":
            return self.string()
        if ch == "\\" and text.startswith("\\(object)", pos) or ch == "(":
            raise self.fail("an object cast is not configuration laraq can read")
        if text.startswith("array", pos) and not (text[pos + 5:pos + 6].isalnum() or text[pos + 5:pos + 6] == "_"):
            return self.array(depth + 1)
        m = _NUMBER.match(text, pos)
        if m and not (m.end() < len(text) and (text[m.end()].isalpha() or text[m.end()] in "_\\")):
            self.pos = m.end()
            raw = m.group(0)
            if any(c in raw for c in ".eE"):
                return float(raw)
            return int(raw)
        m = _WORD.match(text, pos)
        if m:
            word = m.group(0)
            lowered = word.lower()
            constants: dict[str, Any] = {"true": True, "false": False, "null": None, "inf": math.inf,
                                         "-inf": -math.inf, "nan": math.nan}
            if lowered in constants and not text.startswith("::", m.end()) and not text.startswith("(", m.end()):
                self.pos = m.end()
                return constants[lowered]
            raise self.fail(f"{word!r} (an object, enum, constant or call) is not a plain value")
        raise self.fail("unexpected character")

    def string(self) -> str:
        parts = [self.single_quoted()]
        # var_export writes a NUL byte as '' . "\0" . ''
        while True:
            save = self.pos
            self.ws()
            if not self.text.startswith(".", self.pos):
                self.pos = save
                return "".join(parts)
            self.pos += 1
            self.ws()
            if self.text.startswith("'", self.pos):
                parts.append(self.single_quoted())
            elif self.text.startswith('"', self.pos):
                parts.append(self.double_quoted())
            else:
                raise self.fail("expected a string after '.'")

    def single_quoted(self) -> str:
        text, start = self.text, self.pos + 1
        out: list[str] = []
        i = start
        while True:
            j = text.find("'", i)
            k = text.find("\\", i)
            if j < 0:
                raise self.fail("unterminated string", self.pos)
            if 0 <= k < j:
                out.append(text[i:k])
                nxt = text[k + 1:k + 2]
                if nxt in ("\\", "'"):
                    out.append(nxt)
                    i = k + 2
                else:
                    out.append("\\")
                    i = k + 1
                continue
            out.append(text[i:j])
            self.pos = j + 1
            return "".join(out)

    def double_quoted(self) -> str:
        # only the escapes var_export itself writes between concatenations ("\0"), plus the simple ones
        text, i = self.text, self.pos + 1
        out: list[str] = []
        while i < len(text):
            ch = text[i]
            if ch == '"':
                self.pos = i + 1
                return "".join(out)
            if ch == "$":
                raise self.fail("a double-quoted string with a variable is not a plain value", i)
            if ch == "\\":
                nxt = text[i + 1:i + 2]
                if nxt not in _DQ_ESCAPES:
                    raise self.fail("an escape var_export does not write", i)
                out.append(_DQ_ESCAPES[nxt])
                i += 2
                continue
            out.append(ch)
            i += 1
        raise self.fail("unterminated string", self.pos)

    def array(self, depth: int) -> dict[Any, Any] | list[Any]:
        if depth > MAX_DEPTH:
            raise self.fail(f"arrays nested deeper than {MAX_DEPTH}")
        self.pos += len("array")
        self.expect("(")
        items: dict[Any, Any] = {}
        while True:
            self.ws()
            if self.text.startswith(")", self.pos):
                self.pos += 1
                break
            key_at = self.pos
            key = self.value(depth)
            if isinstance(key, bool) or key is None or isinstance(key, (float, dict, list)):
                raise self.fail("an array key must be an integer or a string", key_at)
            self.expect("=>")
            items[key] = self.value(depth)
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith(")", self.pos):
                raise self.fail("expected ',' or ')'")
        # a PHP list (keys 0..n-1 in order) becomes a Python list
        if all(isinstance(k, int) for k in items) and list(items) == list(range(len(items))):
            return list(items.values())
        return items


def parse_var_export(text: str, name: str = "<string>") -> Any:
    """The value of ``<?php return <var_export>;`` (or of a bare ``var_export`` text)."""
    if len(text) > MAX_BYTES:
        raise VarExportError(f"{name}: larger than {MAX_BYTES} bytes; not a cached config laraq reads")
    parser = _Parser(text, name)
    head = _HEAD.match(text)
    if head:
        parser.pos = head.end()
    value = parser.value(0)
    parser.ws()
    if parser.text.startswith(";", parser.pos):
        parser.pos += 1
        parser.ws()
    if parser.pos != len(text):
        raise parser.fail("unexpected text after the value")
    return value


def read_var_export_file(path: str | Path) -> Any:
    """Read and parse a ``var_export`` PHP file (e.g. ``bootstrap/cache/config.php``)."""
    p = Path(path)
    size = p.stat().st_size
    if size > MAX_BYTES:
        raise VarExportError(f"{p}: {size} bytes, larger than {MAX_BYTES}; not a cached config laraq reads")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # PHP strings are bytes; keep every byte
    return parse_var_export(text, str(p))
