"""PHP ``unserialize()``: :func:`loads` reads one serialized value, safe on hostile input.

One reader decides what a PHP string means: :func:`_reference_loads`, an iterative, bounded parser
of the tokens ``N b i d s a O E r R``. It never executes or imports anything, never allocates from
a declared length before checking the input holds that many bytes, and reports every malformed
input as a :class:`PHPSerializeError` carrying the byte offset. It builds PHP arrays either PHP's
exact way (``list`` when the keys are 0..n-1, else ``dict``) or, given an ``array`` type, as that
``dict`` subclass (:class:`laraq.protocol.phparray.PHPArray`, what handlers get).

Two faster readers take the common shapes and step aside (return :data:`BAIL`) on anything else,
so the reference decides every input they do not take, errors included:

* the C build (``laraq._speedups``, ``pairs_loads``), used by
  :func:`laraq.protocol.phparray.loads_php_arrays`;
* :func:`_token_loads`, the pure-Python one, for :func:`loads` and for the worker without the C
  build (the comment above it has the measurement that keeps it).

``tests/test_codec_differential.py`` holds both equal to the reference, value for value, on the
wire corpus, random PHP values and random damage to them. The grammar, slot numbering and limits
are in ``compat-docs/serialization.md``.
"""

from __future__ import annotations

import re
from typing import Any, Final

from laraq.protocol.phpvalues import (
    CASE_RE,
    CLASS_RE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ELEMENTS,
    PHP_INT_MAX,
    PHP_INT_MIN,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    PHPSerializeError,
    PropertyKey,
    format_float,
    valid_mangled,
)

__all__ = ["BAIL", "decode", "enum_token", "float_token", "loads", "object_token"]

#: What a fast reader returns for an input it leaves to the reference reader.
BAIL: Final = object()

_UINT_RE = re.compile(rb"[0-9]{1,20}")
_INT_RE = re.compile(rb"([+-]?)0*([0-9]+)")
_FLOAT_RE = re.compile(
    rb"(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF)(?=;)", re.ASCII
)
_MAX_FLOAT_LEXEME = 1100


class _Frame:
    """One open (or finished) array or object while parsing."""

    __slots__ = ("closed", "data", "deep", "is_list", "key", "kind", "obj", "ref", "remaining", "slot", "value")

    def __init__(self, kind: int, remaining: int, slot: int) -> None:
        self.kind = kind  # ord("a") or ord("O")
        self.remaining = remaining
        self.slot = slot
        self.data: Any = None
        self.key: Any = None
        self.is_list = True
        self.obj: PHPObject | None = None
        self.ref: PHPReference | None = None
        self.value: Any = None
        self.closed = False
        self.deep = False  # counted in PHP's unserialize depth: an object, or an array with members


def _describe(data: bytes, pos: int) -> str:
    if pos >= len(data):
        return "end of input"
    return repr(bytes(data[pos : pos + 1]))[1:]


def _err(message: str, pos: int) -> PHPSerializeError:
    return PHPSerializeError(message, pos)


def _expect(data: bytes, pos: int, char: bytes, after: str) -> None:
    if data[pos : pos + 1] != char:
        raise _err(f"expected {char.decode()!r} {after}, found {_describe(data, pos)}", pos)


def _read_uint(data: bytes, pos: int, what: str, term: bytes) -> tuple[int, int]:
    m = _UINT_RE.match(data, pos)
    if m is None:
        if data[pos : pos + 1] == b"-":
            raise _err(f"negative {what}", pos)
        raise _err(f"expected digits for {what}, found {_describe(data, pos)}", pos)
    end = m.end()
    if data[end : end + 1] != term:
        if data[end : end + 1].isdigit():
            raise _err(f"{what} has too many digits", pos)
        raise _err(f"expected {term.decode()!r} after {what}, found {_describe(data, end)}", end)
    return int(m.group()), end + 1


def _read_int(data: bytes, pos: int) -> tuple[int, int]:
    """``pos`` is just after ``i:``; returns the value and the offset after ``;``.

    Any number of digits, as PHP 8.2's ``unserialize()``; a value outside the 64-bit range is clamped
    to ``PHP_INT_MAX``/``PHP_INT_MIN`` as PHP does (with a warning there). Digits past the 19 that fit
    are never converted, so a 5,000-digit integer costs no more than its scan.
    """
    m = _INT_RE.match(data, pos)
    if m is None:
        raise _err(f"expected an integer, found {_describe(data, pos)}", pos)
    end = m.end()
    if data[end : end + 1] != b";":
        raise _err(f"expected ';' after integer, found {_describe(data, end)}", end)
    negative = m.group(1) == b"-"
    digits = m.group(2).lstrip(b"0") or b"0"
    if len(digits) > 19:
        return (PHP_INT_MIN if negative else PHP_INT_MAX), end + 1
    value = -int(digits) if negative else int(digits)
    return min(max(value, PHP_INT_MIN), PHP_INT_MAX), end + 1


def _read_str(data: bytes, pos: int, end_of_data: int, what: str = "string") -> tuple[bytes, int]:
    """``pos`` is just after ``s:``; returns the raw bytes and the offset after ``";``."""
    n, p = _read_uint(data, pos, f"{what} length", b":")
    if data[p : p + 1] != b'"':
        raise _err(f"expected '\"' to open {what}, found {_describe(data, p)}", p)
    p += 1
    if n + 2 > end_of_data - p:
        raise _err(f"{what} length {n} exceeds the remaining {max(end_of_data - p, 0)} bytes", pos)
    end = p + n
    raw = data[p:end]
    if data[end : end + 2] != b'";':
        raise _err(f"expected '\";' after {n}-byte {what}, found {_describe(data, end)}", end)
    return raw, end + 2


def _text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _read_class_name(data: bytes, pos: int, end_of_data: int) -> tuple[str, int]:
    """``pos`` is just after ``O:``/``C:``; returns the class and the offset after ``":``."""
    n, p = _read_uint(data, pos, "class name length", b":")
    _expect(data, p, b'"', "before class name")
    p += 1
    if n + 2 > end_of_data - p:
        raise _err(f"class name length {n} exceeds the remaining input", pos)
    raw = data[p : p + n]
    m = CLASS_RE.fullmatch(raw)
    if m is None:
        raise _err(f"invalid class name {bytes(raw)[:80]!r}", p)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _err("class name is not valid UTF-8", p) from None
    p += n
    if data[p : p + 2] != b'":':
        raise _err(f"expected '\":' after class name, found {_describe(data, p)}", p)
    return name, p + 2


# -- the value rules every reader shares -----------------------------------------------------------

#: The float lexemes PHP's reader accepts (``d:<lexeme>;``).
_FLOAT_LEXEME = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF")


def _float_value(lexeme: str) -> float:
    value = float(lexeme)
    return value if format_float(value) == lexeme else PHPFloat(value, lexeme)


def float_token(raw: bytes) -> Any:
    """A ``d:`` token's value from its text (the C reader calls it), or :data:`BAIL`."""
    if len(raw) >= _MAX_FLOAT_LEXEME or _FLOAT_LEXEME.fullmatch(raw) is None:
        return BAIL
    return _float_value(raw.decode("ascii"))


def enum_token(raw: bytes) -> Any:
    """An ``E:`` token's ``Class:Case`` as a :class:`PHPEnum`, or :data:`BAIL` when malformed."""
    cls_raw, sep, case_raw = raw.partition(b":")
    if not sep or CLASS_RE.fullmatch(cls_raw) is None or CASE_RE.fullmatch(case_raw) is None:
        return BAIL
    try:
        return PHPEnum(cls_raw.decode("utf-8"), case_raw.decode("utf-8"))
    except UnicodeDecodeError:
        return BAIL


def object_token(class_name: str, props: dict[PropertyKey, Any]) -> PHPObject:
    """A finished ``O:`` object over ``props`` (no copy; the C reader calls it)."""
    obj = PHPObject.__new__(PHPObject)
    obj.class_name = class_name
    obj._index = None
    obj._props = props
    return obj


# -- the entry points ------------------------------------------------------------------------------


def _as_bytes(data: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PHPSerializeError(f"input text is not encodable as UTF-8 ({exc.reason})", exc.start) from None
    if isinstance(data, bytes):
        return data
    if not isinstance(data, bytearray | memoryview):
        raise TypeError(f"loads() needs bytes or str, not {type(data).__name__}")
    return bytes(data)


def decode(
    data: bytes | bytearray | memoryview | str,
    *,
    array: type[dict[Any, Any]] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    fast: bool = True,
) -> Any:
    """:func:`loads` with the choices it does not offer: ``array``, a ``dict`` subclass every PHP
    array is built as (keyed as PHP keyed it); ``fast=False`` skips :func:`_token_loads` (after the C
    reader stepped aside, or to get the reference reader's own answer in tests)."""
    data = _as_bytes(data)
    size = len(data)
    if size > max_bytes:
        raise PHPSerializeError(f"input of {size} bytes exceeds max_bytes={max_bytes}", 0)
    if size == 0:
        raise PHPSerializeError("empty input", 0)
    if fast and max_elements >= size:  # then no element limit can be hit: the fast reader applies
        value = _token_loads(data, size, max_depth, array)
        if value is not BAIL:
            return value
    return _reference_loads(data, size, max_depth, max_elements, array)


def loads(
    data: bytes | bytearray | memoryview | str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> Any:
    """Parse one PHP-serialized value (the whole input, nothing may follow it).

    Returns ``None``, ``bool``, ``int``, ``float`` (:class:`PHPFloat` for non-canonical text),
    ``str`` (or ``bytes`` when not valid UTF-8), ``list`` (PHP lists), ``dict``,
    :class:`PHPObject`, :class:`PHPEnum` and :class:`PHPReference`. ``r:`` back-references give
    the very same Python object. A ``str`` argument is encoded as UTF-8 first.

    Raises :class:`PHPSerializeError` for anything malformed, over a limit or unsupported (the
    ``C:`` format of legacy ``Serializable`` classes).
    """
    return decode(data, max_bytes=max_bytes, max_depth=max_depth, max_elements=max_elements)


# -- the reference reader --------------------------------------------------------------------------


def _reference_loads(data: bytes, size: int, max_depth: int, max_elements: int,  # noqa: C901 - one flat loop
                     array: type[dict[Any, Any]] | None) -> Any:
    """The value of ``data``, or :class:`PHPSerializeError`: the reader that decides (see the module)."""
    stack: list[_Frame] = []
    slot_vals: list[Any] = []
    slot_owner: list[_Frame | None] = []
    slot_key: list[Any] = []
    count = 0
    depth = 0  # open levels as PHP counts them (see _Frame.deep)
    pos = 0
    top: _Frame | None = None
    result: Any = None
    key: PropertyKey

    while True:
        # ---- inside a container: close it or read the next key --------------------------------
        if top is not None:
            if top.remaining == 0:
                if data[pos : pos + 1] != b"}":
                    kind = "array" if top.kind == 97 else "object"
                    raise _err(f"expected '}}' to close {kind}, found {_describe(data, pos)}", pos)
                pos += 1
                frame = stack.pop()
                depth -= frame.deep
                if frame.kind == 97:
                    d = frame.data
                    final: Any = d if array is not None or not frame.is_list else list(d.values())
                    frame.data = final
                else:
                    final = frame.obj
                frame.value = final
                frame.closed = True
                placed: Any = final
                if frame.ref is not None:
                    frame.ref.value = final
                    placed = frame.ref
                top = stack[-1] if stack else None
                if top is None:
                    result = placed
                    break
                top.data[top.key] = placed
                continue
            # key
            c = data[pos] if pos < size else -1
            if c == 105 and data[pos + 1 : pos + 2] == b":":  # i:
                key, pos = _read_int(data, pos + 2)
            elif c == 115 and data[pos + 1 : pos + 2] == b":":  # s:
                kpos = pos
                raw, pos = _read_str(data, pos + 2, size, "key")
                if top.kind == 79 and raw[:1] == b"\0" and not valid_mangled(raw):
                    raise _err(f"malformed mangled property name {raw[:80]!r}", kpos)
                key = _text(raw)
            else:
                what = "array key" if top.kind == 97 else "property name"
                raise _err(f"expected an integer or string {what}, found {_describe(data, pos)}", pos)
            d = top.data
            if key in d:
                raise _err(f"duplicate key {key!r}", pos)
            if top.is_list and (type(key) is not int or key != len(d)):
                top.is_list = False
            top.key = key
            top.remaining -= 1
            count += 1

        # ---- a value ----------------------------------------------------------------------------
        count += 1
        if count > max_elements:
            raise _err(f"more than max_elements={max_elements} values", pos)
        start = pos
        c = data[pos] if pos < size else -1
        if c != -1 and c != 78 and data[pos + 1 : pos + 2] != b":":  # every token but N; is "X:"
            raise _err(f"expected ':' after type {chr(c)!r}", pos + 1)
        value: Any
        if c == 115:  # s
            raw, pos = _read_str(data, pos + 2, size)
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = raw
        elif c == 105:  # i
            value, pos = _read_int(data, pos + 2)
        elif c == 78:  # N
            if data[pos + 1 : pos + 2] != b";":
                raise _err(f"expected ';' after 'N', found {_describe(data, pos + 1)}", pos + 1)
            value = None
            pos += 2
        elif c == 98:  # b
            flag = data[pos + 2 : pos + 4]
            if flag == b"1;":
                value = True
            elif flag == b"0;":
                value = False
            else:
                raise _err("expected 'b:0;' or 'b:1;'", pos)
            pos += 4
        elif c == 100:  # d
            m = _FLOAT_RE.match(data, pos + 2, min(size, pos + 2 + _MAX_FLOAT_LEXEME))
            if m is None:
                raise _err(f"expected a float followed by ';', found {_describe(data, pos + 2)}", pos + 2)
            pos = m.end() + 1
            value = _float_value(m.group().decode("ascii"))
        elif c == 97 or c == 79:  # a, O
            if c == 97:
                n, pos = _read_uint(data, pos + 2, "array element count", b":")
                obj = None
            else:
                class_name, pos = _read_class_name(data, pos + 2, size)
                n, pos = _read_uint(data, pos, "property count", b":")
                obj = PHPObject.__new__(PHPObject)
                obj.class_name = class_name
                obj._index = None
            if data[pos : pos + 1] != b"{":
                raise _err(f"expected '{{', found {_describe(data, pos)}", pos)
            pos += 1
            # every member needs at least 6 bytes ("i:0;N;"), plus the closing brace
            if n * 6 + 1 > size - pos:
                raise _err(f"declared count {n} exceeds what the remaining {size - pos} bytes can hold", start)
            if count + 2 * n > max_elements:
                raise _err(f"declared count {n} exceeds max_elements={max_elements}", start)
            # PHP's unserialize_max_depth counts objects and arrays with members (an empty array is not
            # a level): at most max_depth of them open at once, as PHP (4096 by default)
            deep = obj is not None or n > 0
            if deep:
                if depth >= max_depth:
                    raise _err(f"nesting deeper than max_depth={max_depth} (PHP's unserialize_max_depth)", start)
                depth += 1
            frame = _Frame(c, n, len(slot_vals))
            frame.deep = deep
            frame.data = {} if array is None or obj is not None else array()
            if obj is not None:
                obj._props = frame.data
                frame.obj = obj
                frame.value = obj
            slot_vals.append(frame)
            slot_owner.append(top)
            slot_key.append(top.key if top is not None else None)
            stack.append(frame)
            top = frame
            continue
        elif c == 69:  # E
            raw, pos = _read_str(data, pos + 2, size, "enum name")
            value = enum_token(raw)
            if value is BAIL:
                cls_raw, sep, case_raw = raw.partition(b":")
                if not sep or CLASS_RE.fullmatch(cls_raw) is None or CASE_RE.fullmatch(case_raw) is None:
                    raise _err(f"malformed enum {raw[:80]!r} (expected \"Class:Case\")", start)
                raise _err("enum name is not valid UTF-8", start)
        elif c == 114 or c == 82:  # r, R
            n, pos = _read_uint(data, pos + 2, "reference number", b";")
            if n < 1 or n > len(slot_vals):
                raise _err(f"reference to undefined value #{n}", start)
            idx = n - 1
            target = slot_vals[idx]
            if c == 82:
                if top is None:
                    raise _err("a reference cannot be the whole value", start)
                if type(target) is _Frame:
                    if target.ref is None:
                        target.ref = PHPReference(target.value)
                        if target.closed:
                            owner = slot_owner[idx]
                            if owner is not None:
                                owner.data[slot_key[idx]] = target.ref
                    value = target.ref
                elif type(target) is PHPReference:
                    value = target
                else:
                    value = PHPReference(target)
                    slot_vals[idx] = value
                    owner = slot_owner[idx]
                    if owner is not None:
                        owner.data[slot_key[idx]] = value
                # R: takes no slot of its own
                top.data[top.key] = value
                continue
            value = target.value if type(target) is _Frame or type(target) is PHPReference else target
            if not isinstance(value, PHPObject | PHPEnum):
                raise _err(f"r:{n} does not refer to an object", start)
        elif c == 67:  # C
            try:
                class_name, _ = _read_class_name(data, pos + 2, size)
            except PHPSerializeError:
                class_name = "?"
            raise _err(
                f"class {class_name!r} uses the legacy Serializable format (C:), which laraq cannot read",
                start,
            )
        elif c == -1:
            raise _err("unexpected end of input, expected a value", pos)
        else:
            raise _err(f"unknown type {chr(c)!r}", pos)

        # scalar / enum / r: -- record its slot and place it
        slot_vals.append(value)
        slot_owner.append(top)
        if top is None:
            slot_key.append(None)
            result = value
            break
        slot_key.append(top.key)
        top.data[top.key] = value

    if pos != size:
        raise _err(f"unexpected trailing data {_describe(data, pos)}", pos)
    return result


# -- the pure-Python fast reader -------------------------------------------------------------------
#
# ``_token_loads`` reads the common shapes (strings, ints, null, bools, floats, enums, arrays, objects)
# with one precompiled pattern per token and no per-token function calls or slot bookkeeping. It never
# reports an error: on anything it does not take (``r:``/``R:``/``C:``, a depth over ``max_depth``)
# and on anything malformed it returns ``BAIL``, and the reference reader reads the input again and
# gives the value or the precise error. Whatever it accepts it checks as the reference does (declared
# lengths against the remaining input before slicing, digit counts, integer range, mangled names,
# member counts, duplicate keys), so a value it returns is the reference's value.
#
# What it buys (bench/serializer.py, the 93 corpus commands of 338 bytes on average, three interleaved
# rounds on a busy 2-core host, µs per command): with ``PHPArray``s, as the worker decodes without the C
# build, 20.1 / 40.3 / 26.1 with it against 37.3 / 67.8 / 45.4 for the reference alone (1.7-1.9x);
# ``loads``, which has no C path, runs it too (22.5-35.8). The C reader takes 2.4. One reader for every
# shape rather than a ``findall`` reader in front of it: chained that way (``findall``, then this one,
# then the reference) ``loads`` measured 31.7-49.8, because a ``findall`` reader steps aside on every
# command with a ``"`` in a string (30 of the 93).

_TOKEN = re.compile(
    rb's:([0-9]{1,20}):"([^"]*)";'  # 1, 2: a string without '"' (length checked by the caller)
    rb"|i:([+-]?[0-9]{1,25});"  # 3
    rb"|N;()"  # 4
    rb"|b:([01]);"  # 5
    rb"|a:([0-9]{1,20}):\{"  # 6
    rb'|O:([0-9]{1,20}):"([A-Za-z0-9_\x80-\xff\\]+)":([0-9]{1,20}):\{'  # 7, 8, 9
    rb"|(\})"  # 10
    rb"|d:((?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF));"  # 11
    rb'|E:([0-9]{1,20}):"([^"]*)";'  # 12, 13
)
_STR_HEAD = re.compile(rb's:([0-9]{1,20}):"')


def _token_loads(data: bytes, size: int, max_depth: int,  # noqa: C901 - one flat loop on purpose
                 array: type[dict[Any, Any]] | None = None) -> Any:
    """The value, read one precompiled token at a time, or :data:`BAIL` (see the comment above)."""
    match = _TOKEN.match
    str_head = _STR_HEAD.match
    utf8 = bytes.decode
    stack: list[Any] = []
    push = stack.append
    d: Any = None  # the open container's dict (None: reading the top-level value)
    n = rem = 0  # its declared member count, members still to read
    il = True  # an array whose keys so far are 0, 1, 2, ...
    obj: Any = None  # the PHPObject being filled (None for an array)
    key: Any = None
    pos = 0
    li: int | None
    while True:
        if d is not None:
            # ---- a key, or the closing brace
            m = match(data, pos)
            if m is None:
                if not rem:
                    return BAIL
                h = str_head(data, pos)  # a key holding '"'
                if h is None:
                    return BAIL
                ln = int(h[1])
                p = h.end()
                end = p + ln
                if end + 2 > size or data[end : end + 2] != b'";':
                    return BAIL
                raw = data[p:end]
                pos = end + 2
                li = 2
            else:
                li = m.lastindex
                pos = m.end()
                if li == 2:
                    raw = m[2]
                    if len(raw) != int(m[1]):
                        ln = int(m[1])
                        p = m.start(2)
                        end = p + ln
                        if end + 2 > size or data[end : end + 2] != b'";':
                            return BAIL
                        raw = data[p:end]
                        pos = end + 2
            if li == 10:
                # ---- close the container
                if rem or len(d) != n:
                    return BAIL
                if obj is not None:
                    value = obj
                elif array is not None:
                    value = d
                elif il:
                    value = list(d.values())
                else:
                    value = d
                outer = stack.pop()
                if outer is None:  # the top-level value
                    return value if pos == size else BAIL
                d, n, rem, il, obj, key = outer
                d[key] = value
                continue
            if not rem:
                return BAIL
            if li == 2:
                if obj is not None and raw[:1] == b"\0" and not valid_mangled(raw):
                    return BAIL
                try:
                    key = utf8(raw)
                except UnicodeDecodeError:
                    key = raw
                il = False
            elif li == 3:
                key = int(m[3])  # type: ignore[index]
                if key > PHP_INT_MAX or key < PHP_INT_MIN:
                    return BAIL
                if key != n - rem:
                    il = False
            else:
                return BAIL
            rem -= 1
        # ---- a value
        m = match(data, pos)
        if m is None:
            h = str_head(data, pos)  # a string holding '"'
            if h is None:
                return BAIL
            ln = int(h[1])
            p = h.end()
            end = p + ln
            if end + 2 > size or data[end : end + 2] != b'";':
                return BAIL
            try:
                value = utf8(data[p:end])
            except UnicodeDecodeError:
                value = data[p:end]
            pos = end + 2
        else:
            li = m.lastindex
            pos = m.end()
            if li == 2:
                raw = m[2]
                if len(raw) != int(m[1]):
                    ln = int(m[1])
                    p = m.start(2)
                    end = p + ln
                    if end + 2 > size or data[end : end + 2] != b'";':
                        return BAIL
                    raw = data[p:end]
                    pos = end + 2
                try:
                    value = utf8(raw)
                except UnicodeDecodeError:
                    value = raw
            elif li == 4:
                value = None
            elif li == 3:
                value = int(m[3])
                if value > PHP_INT_MAX or value < PHP_INT_MIN:
                    return BAIL
            elif li == 5:
                value = m[5] == b"1"
            elif li == 6 or li == 9:
                if len(stack) >= max_depth:
                    return BAIL
                count = int(m[li])
                # every member needs at least 6 bytes ("i:0;N;"), plus the closing brace
                if count * 6 + 1 > size - pos:
                    return BAIL
                if d is not None:
                    push((d, n, rem, il, obj, key))
                else:
                    push(None)
                d = {} if array is None or li == 9 else array()
                n = rem = count
                il = True
                if li == 9:
                    cls = m[8]
                    if len(cls) != int(m[7]):
                        return BAIL
                    try:
                        class_name = utf8(cls)
                    except UnicodeDecodeError:
                        return BAIL
                    obj = PHPObject.__new__(PHPObject)
                    obj.class_name = class_name
                    obj._index = None
                    obj._props = d
                else:
                    obj = None
                continue
            elif li == 11:
                lexeme_b = m[11]
                if len(lexeme_b) >= _MAX_FLOAT_LEXEME:
                    return BAIL
                value = _float_value(lexeme_b.decode("ascii"))
            elif li == 13:
                raw = m[13]
                if len(raw) != int(m[12]):
                    return BAIL
                value = enum_token(raw)
                if value is BAIL:
                    return BAIL
            else:  # '}' where a value belongs
                return BAIL
        if d is None:
            return value if pos == size else BAIL
        d[key] = value

