"""PHP ``json_encode`` / ``json_decode`` byte rules, so Python writes the same bytes PHP writes.

Laravel builds every queue payload with PHP's ``json_encode`` (no flags up to 8.81, then
``JSON_UNESCAPED_UNICODE``), and ``queue:retry`` re-encodes payloads after a ``json_decode($x, true)``.
This module reproduces both byte for byte (checked against real PHP 8 in ``tests/test_phpjson.py``):

* strings: ``"`` and ``\\`` escaped, ``/`` written ``\\/`` unless ``unescaped_slashes``, control characters
  as ``\\b \\f \\n \\r \\t`` or ``\\u00xx`` (lowercase hex), DEL (0x7f) raw, non-ASCII raw with
  ``unescaped_unicode`` else ``\\uxxxx`` (surrogate pairs for astral characters), and U+2028/U+2029
  always escaped (PHP's ``JSON_UNESCAPED_LINE_TERMINATORS`` is never used by Laravel);
* integers in decimal (PHP integers are 64-bit; larger Python ints are rejected);
* floats as PHP prints them with ``serialize_precision = -1``: the shortest round-trip digits, no
  fraction for integral values (``1.0`` → ``1``, ``-0.0`` → ``-0``), exponent form ``1.0e+25`` when the
  decimal point would sit more than 17 places right or more than 3 places left of the digits;
  NaN and infinities are an error, as in PHP;
* ``dict`` → JSON object in insertion order (``{}`` → ``{}``), ``list``/``tuple`` → JSON array.

PHP itself has no empty-object/empty-array distinction for arrays: with ``php_arrays=True`` a ``dict``
is treated like a PHP array, so an empty dict or one keyed exactly ``0..n-1`` in order becomes a JSON
array, which is what ``json_encode(json_decode($x, true))`` does. :func:`php_json_decode` is the
matching ``json_decode($x, true)``.

Decoding text from a queue (anyone who can write the queue's keys chooses it) goes through
:func:`check_json_depth` first: PHP's ``json_decode`` refuses arrays and objects nested deeper than 512
levels (its default ``$depth``, which counts the value inside the innermost array as one level: 511
nested arrays decode, 512 do not), and so does every decode here, before a parser recurses into them.
:func:`json_loads` is ``json.loads`` with that check, whose only failure is a ``ValueError``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import orjson

try:  # the C build (setup.py, optional): the depth checks in one pass; without it, the scan below
    from laraq._speedups import json_too_deep as _c_too_deep
    from laraq._speedups import value_too_deep as _c_value_too_deep
except ImportError:  # pragma: no cover - no compiler when installed
    _c_too_deep = None  # type: ignore[assignment]
    _c_value_too_deep = None  # type: ignore[assignment]

__all__ = ["JSON_MAX_DEPTH", "PhpJsonError", "check_json_depth", "json_loads", "php_json_decode",
           "php_json_encode", "php_float_repr"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_SHORT_ESCAPES = {
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x22: '\\"',
    0x5C: "\\\\",
}

# Characters that may need escaping: everything except plain printable ASCII other than " \ /. Written as
# the complement of the safe set: a class that spells out the range up to U+10FFFF takes ~4 ms to compile,
# paid by every command that imports this module.
_encode_ascii = json.encoder.encode_basestring_ascii
_NEEDS_WORK = re.compile(r'[^\x20\x21\x23-\x2e\x30-\x5b\x5d-\x7f]')


class PhpJsonError(ValueError):
    """The value cannot be JSON-encoded by PHP (invalid UTF-8, NaN/INF, unsupported type...).

    This is the condition under which Laravel throws ``InvalidPayloadException``.
    """


def php_float_repr(value: float) -> str:
    """A float the way PHP 8 ``json_encode``/``var_export`` write it with ``serialize_precision=-1``."""
    if math.isnan(value) or math.isinf(value):
        raise PhpJsonError("Inf and NaN cannot be JSON encoded")
    negative = math.copysign(1.0, value) < 0
    if value == 0.0:
        return "-0" if negative else "0"
    # Python's repr is the shortest round-trip representation, like zend_dtoa mode 0.
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # Position of the decimal point relative to the start of ``digits`` (zend_dtoa's ``decpt``).
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    decpt = len(int_part) - lead_zeros + exponent
    digits = digits.rstrip("0") or "0"
    sign = "-" if negative else ""
    if (decpt < -3) if decpt < 0 else (decpt > 17):
        exp = decpt - 1
        rest = digits[1:] or "0"
        exp_sign = "-" if exp < 0 else "+"
        return f"{sign}{digits[0]}.{rest}e{exp_sign}{abs(exp)}"
    if decpt <= 0:
        return f"{sign}0.{'0' * (-decpt)}{digits}"
    if len(digits) <= decpt:
        return f"{sign}{digits}{'0' * (decpt - len(digits))}"
    return f"{sign}{digits[:decpt]}.{digits[decpt:]}"


def _encode_string(text: str, unescaped_unicode: bool, unescaped_slashes: bool) -> str:
    if text.isascii() and "\x7f" not in text:
        # Fast path: for ASCII text without DEL (which the C encoder escapes and PHP does not) PHP's
        # escapes are exactly the C encoder's (the short escapes, ``\u00XX`` in lowercase hex for the
        # other control characters) plus ``\/``.
        quoted = _encode_ascii(text)
        return quoted if unescaped_slashes or "/" not in text else quoted.replace("/", "\\/")

    def replace(match: re.Match[str]) -> str:
        ch = match.group(0)
        code = ord(ch)
        short = _SHORT_ESCAPES.get(code)
        if short is not None:
            return short
        if code < 0x20:
            return f"\\u{code:04x}"
        if ch == "/":
            return "/" if unescaped_slashes else "\\/"
        if 0xD800 <= code <= 0xDFFF:
            raise PhpJsonError("Malformed UTF-8 characters, possibly incorrectly encoded")
        if code in (0x2028, 0x2029):
            return f"\\u{code:04x}"
        if unescaped_unicode:
            return ch
        if code > 0xFFFF:
            code -= 0x10000
            return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"
        return f"\\u{code:04x}"

    return '"' + _NEEDS_WORK.sub(replace, text) + '"'


def _as_text(value: str | bytes) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise PhpJsonError("Malformed UTF-8 characters, possibly incorrectly encoded") from None
    return value


def _is_php_list(mapping: Mapping[Any, Any]) -> bool:
    for index, key in enumerate(mapping):
        if isinstance(key, bool):
            return False
        if isinstance(key, int):
            if key != index:
                return False
        elif not (isinstance(key, str) and key == str(index)):
            return False
    return True


def _orjson_safe(value: Any) -> bool:
    """True if ``value`` holds only what orjson writes exactly as PHP does: ``dict`` (str keys), ``list``,
    ``str``, ``bool``, ``None`` and 64-bit ``int`` - no floats (PHP's float text differs), no bytes,
    tuples, PHP arrays or other mappings. Checked before the fast path, which then only checks ASCII."""
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if not _INT64_MIN <= item <= _INT64_MAX:
                return False
        elif kind is dict:
            if len(stack) > 512:
                return False
            for key, sub in item.items():
                if type(key) is not str:
                    return False
                push(sub)
        elif kind is list:
            if len(stack) > 512:
                return False
            stack.extend(item)
        else:
            return False
    return True


def _orjson_dumps(value: Any) -> bytes | None:
    """``orjson.dumps``, or None when orjson refuses the value (the standard path then decides)."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return None


def php_json_encode(
    value: Any,
    *,
    unescaped_unicode: bool = True,
    unescaped_slashes: bool = False,
    php_arrays: bool = False,
) -> str:
    """Encode ``value`` exactly like PHP 8 ``json_encode``.

    ``unescaped_unicode`` / ``unescaped_slashes`` are ``JSON_UNESCAPED_UNICODE`` /
    ``JSON_UNESCAPED_SLASHES``. ``str`` and UTF-8 ``bytes`` are both accepted as strings.
    With ``php_arrays`` every ``dict`` is a PHP array (see the module docstring).
    Raises :class:`PhpJsonError` where PHP's ``json_encode`` fails.
    """
    if not php_arrays and _orjson_safe(value):
        out = _orjson_dumps(value)
        if out is not None and out.isascii():
            # for ASCII text orjson writes PHP's bytes (control characters as PHP escapes them,
            # ``"`` and ``\\`` alike); only PHP's ``\/`` differs, and ``/`` appears only inside strings
            text = out.decode("ascii")
            return text if unescaped_slashes else text.replace("/", "\\/")
    parts: list[str] = []

    def emit(item: Any, depth: int) -> None:
        if depth > 512:
            raise PhpJsonError("Maximum stack depth exceeded")
        if item is None:
            parts.append("null")
        elif item is True:
            parts.append("true")
        elif item is False:
            parts.append("false")
        elif isinstance(item, int):
            if not _INT64_MIN <= item <= _INT64_MAX:
                raise PhpJsonError(f"integer {item} does not fit a PHP (64-bit) int")
            parts.append(str(int(item)))
        elif isinstance(item, float):
            parts.append(php_float_repr(item))
        elif isinstance(item, (str, bytes)):
            parts.append(_encode_string(_as_text(item), unescaped_unicode, unescaped_slashes))
        elif isinstance(item, Mapping):
            if (php_arrays or getattr(item, "is_php_array", False)) and _is_php_list(item):
                emit(list(item.values()), depth)
                return
            parts.append("{")
            first = True
            for key, sub in item.items():
                if not first:
                    parts.append(",")
                first = False
                if isinstance(key, bool) or not isinstance(key, (str, bytes, int)):
                    raise PhpJsonError(f"object keys must be str or int, not {type(key).__name__}")
                key_text = str(key) if isinstance(key, int) else _as_text(key)
                parts.append(_encode_string(key_text, unescaped_unicode, unescaped_slashes))
                parts.append(":")
                emit(sub, depth + 1)
            parts.append("}")
        elif isinstance(item, (list, tuple)):
            parts.append("[")
            for index, sub in enumerate(item):
                if index:
                    parts.append(",")
                emit(sub, depth + 1)
            parts.append("]")
        else:
            raise PhpJsonError(f"Type is not supported: {type(item).__name__}")

    emit(value, 0)
    return "".join(parts)


#: ``json_decode``'s default ``$depth``: arrays and objects nested this many levels deep are an error (the
#: innermost value is a level too: 511 nested arrays decode).
JSON_MAX_DEPTH = 512

_PURE_PYTHON = os.environ.get("LARAQ_PURE_PYTHON", "") not in ("", "0")
_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def scan_too_deep(data: bytes, max_depth: int) -> bool:
    """True when ``data`` nests arrays and objects ``max_depth`` levels deep or more: its strings removed,
    its brackets followed, stopping at the first level too deep (the pure-Python twin of the C
    ``json_too_deep``)."""
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") < max_depth:
        return False
    depth = 0
    for byte in brackets:
        if byte == 0x5B or byte == 0x7B:  # [ {
            depth += 1
            if depth >= max_depth:
                return True
        else:
            depth -= 1
    return False


#: The scan :func:`check_json_depth` uses: C with the build (``LARAQ_PURE_PYTHON=1`` aside), else Python.
too_deep = scan_too_deep if _c_too_deep is None or _PURE_PYTHON else _c_too_deep

#: With the C build, the same rule asked of a document already parsed (``value_too_deep(value, limit)``:
#: its lists and dicts nest ``limit`` levels deep or more), a walk of its containers only: the worker's
#: parse asks it after orjson (whose own limit, 1024 levels, keeps a deeper body from recursing) instead
#: of counting the body's brackets. None without the build.
value_too_deep = None if _PURE_PYTHON else _c_value_too_deep


def check_json_depth(raw: str | bytes, max_depth: int = JSON_MAX_DEPTH) -> None:
    """Raise :class:`PhpJsonError` (``Maximum stack depth exceeded``, PHP's message) when ``raw`` nests
    arrays and objects ``max_depth`` levels deep or more: what ``json_decode($raw, true, $max_depth)``
    refuses (checked against PHP in ``tests/test_deep_payloads.py``).

    Two counts of ``[`` and ``{`` settle every usual document (no more openers than levels allowed); only
    a document with more is scanned (:data:`too_deep`). Linear in the size, with no recursion whatever
    the nesting.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") >= max_depth and too_deep(data, max_depth):
        raise PhpJsonError(f"Maximum stack depth exceeded (arrays and objects nested {max_depth} "
                           "levels deep or more)")


def json_loads(raw: str | bytes) -> Any:
    """``json.loads`` of text read from a queue: PHP's depth limit first (:func:`check_json_depth`), and
    every failure a ``ValueError`` (:class:`PhpJsonError` for the depth, ``json.JSONDecodeError``,
    ``UnicodeDecodeError``, a number too long to convert), never a ``RecursionError``."""
    check_json_depth(raw)
    try:
        return json.loads(raw)
    except RecursionError:  # a deep stack at the call: the depth allowed did not fit in what is left
        raise PhpJsonError("Maximum stack depth exceeded") from None


def _parse_int(text: str) -> int | float:
    number = int(text)
    if _INT64_MIN <= number <= _INT64_MAX:
        return number
    return float(text)  # PHP turns integers that overflow int64 into floats


def _reject_constant(name: str) -> Any:
    raise PhpJsonError(f"Syntax error: {name} is not valid JSON")


def php_json_decode(raw: str | bytes) -> Any:
    """``json_decode($raw, true)``: objects become ``dict`` (insertion order, last duplicate wins in
    the first position), big integers become floats; errors raise :class:`PhpJsonError`."""
    check_json_depth(raw)
    text = _as_text(raw)
    try:
        return json.loads(text, parse_int=_parse_int, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise PhpJsonError(f"Syntax error: {exc}") from None
    except RecursionError:
        raise PhpJsonError("Maximum stack depth exceeded") from None
    except ValueError as exc:  # a number longer than Python converts (sys.get_int_max_str_digits)
        raise PhpJsonError(f"Syntax error: {exc}") from None
