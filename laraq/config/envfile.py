"""Laravel's ``.env`` file and ``env()`` helper: the text the settings are read from.

:func:`parse_env_text` / :func:`parse_env_file` follow vlucas/phpdotenv (the parser Laravel's
``LoadEnvironmentVariables`` uses) for the common cases: comments, ``export``, single and double quotes,
``${VAR}`` interpolation, multi-line double-quoted values. :class:`Env` is Laravel's ``env()`` over the
merged values (``null``, ``(empty)``, ``true``/``false`` and their parenthesized forms).
:mod:`laraq.config.settings` builds :class:`~laraq.config.settings.LaravelSettings` on both.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Env", "EnvFileError", "parse_env_file", "parse_env_text"]


class EnvFileError(ValueError):
    """A ``.env`` line that phpdotenv would reject."""


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INTERP_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_DQ_ESCAPES = {"\\": "\\", '"': '"', "$": "$", "n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}


def parse_env_text(text: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Parse the text of a Laravel ``.env`` file into a dict (phpdotenv rules for common cases).

    ``environ`` is used to resolve ``${VAR}`` references to variables not defined in the file; as in
    Laravel, a real environment variable also wins over a same-named earlier definition in the file.
    """
    environ = environ or {}
    values: dict[str, str] = {}

    def lookup(name: str) -> str:
        if name in environ:
            return environ[name]
        return values.get(name, "")

    def interpolate(value: str) -> str:
        return _INTERP_RE.sub(lambda m: lookup(m.group(1)), value)

    i, n, lineno = 0, len(text), 1
    while i < n:
        # one logical entry starting at text[i]
        end = text.find("\n", i)
        line_end = n if end < 0 else end
        line = text[i:line_end].strip()
        if not line or line.startswith("#"):
            i = line_end + 1
            lineno += 1
            continue
        if line.startswith("export ") or line.startswith("export\t"):
            line = line[7:].lstrip()
            offset = text.find(line, i)
        else:
            offset = text.find(line, i)
        m = _NAME_RE.match(line)
        if not m:
            raise EnvFileError(f".env line {lineno}: invalid variable name in {line[:40]!r}")
        name = m.group(0)
        rest = line[m.end():].lstrip(" \t")
        if not rest.startswith("="):
            raise EnvFileError(f".env line {lineno}: expected '=' after {name}")
        # position in `text` right after '=' and the spaces following it
        pos = offset + line.index("=", m.end()) + 1
        while pos < n and text[pos] in " \t":
            pos += 1
        quote_ch = text[pos] if pos < n else ""
        if quote_ch in ("'", '"'):
            j = pos + 1
            buf: list[str] = []
            while True:
                if j >= n:
                    raise EnvFileError(f".env line {lineno}: unterminated quoted value for {name}")
                ch = text[j]
                if ch == "\\" and j + 1 < n:
                    nxt = text[j + 1]
                    if quote_ch == '"' and nxt in _DQ_ESCAPES:
                        buf.append("\x00ESC$\x00" if nxt == "$" else _DQ_ESCAPES[nxt])
                        j += 2
                        continue
                    if quote_ch == "'" and nxt in ("'", "\\"):
                        buf.append(nxt)
                        j += 2
                        continue
                if ch == quote_ch:
                    break
                buf.append(ch)
                j += 1
            raw = "".join(buf)
            value = interpolate(raw).replace("\x00ESC$\x00", "$") if quote_ch == '"' else raw
            lineno += text.count("\n", i, j)
            after = text.find("\n", j)
            tail = text[j + 1: n if after < 0 else after].strip()
            if tail and not tail.startswith("#"):
                raise EnvFileError(f".env line {lineno}: unexpected text after quoted value of {name}")
            i = n if after < 0 else after + 1
        else:
            raw = text[pos:line_end]
            # an unquoted value ends at " #" (an inline comment)
            cm = re.search(r"\s#", raw)
            if cm:
                raw = raw[: cm.start()]
            raw = raw.strip()
            if raw.startswith("#"):
                raw = ""
            value = interpolate(raw)
            i = line_end + 1
        lineno += 1
        if name in environ:
            # immutable repository: the real environment wins, and later references see that value
            continue
        if name not in values:
            values[name] = value
    return values


def parse_env_file(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read and parse a ``.env`` file (see :func:`parse_env_text`)."""
    return parse_env_text(Path(path).read_text(encoding="utf-8"), environ)


# -- env() ---------------------------------------------------------------------------------------

_UNSET = object()


class Env:
    """Laravel's ``env()`` over a merged mapping: ``null``/``(null)`` → None, ``(empty)`` → ''.

    (Its typed readers are named like the builtins they return, so their annotations say ``builtins.``.)
    """

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self.values:
            return default
        raw = self.values[name]
        low = raw.lower()
        if low in ("null", "(null)"):
            return None
        if low in ("empty", "(empty)"):
            return ""
        if low in ("true", "(true)"):
            return True
        if low in ("false", "(false)"):
            return False
        return raw

    def str(self, name: builtins.str, default: builtins.str | None = None) -> builtins.str | None:
        v = self.get(name, default)
        if v is None:
            return None
        if isinstance(v, bool):
            return "1" if v else ""
        return str(v)

    def int(self, name: builtins.str, default: builtins.int | None) -> builtins.int | None:
        v = self.get(name, _UNSET)
        if v is _UNSET or v is None or v == "":
            return default if v is _UNSET else (None if v is None else 0)
        if isinstance(v, bool):
            return int(v)
        m = re.match(r"\s*[+-]?\d+", str(v))
        return int(m.group(0)) if m else 0

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        v = self.get(name, _UNSET)
        if v is _UNSET:
            return default
        if isinstance(v, bool):
            return v
        return v not in (None, "", "0")
