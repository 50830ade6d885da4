"""PHP ``serialize()``: :func:`dumps` writes Python values as the bytes PHP 8 writes for them.

Floats in PHP's ``serialize_precision=-1`` text (:func:`laraq.protocol.phpvalues.format_float`), a
:class:`PHPFloat` with its own text, ``r:``/``R:`` numbered as PHP numbers them (an object or enum met
again, a reference met again), mangled property names and their order kept from the :class:`PHPObject`.
The rules are in ``compat-docs/serialization.md``; the reader is :mod:`laraq.protocol.phpread`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from laraq.protocol.phpvalues import (
    CASE_RE,
    CLASS_RE,
    DEFAULT_MAX_DEPTH,
    PHP_INT_MAX,
    PHP_INT_MIN,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    PHPSerializeError,
    format_float,
)

__all__ = ["dumps"]

def _php_str(raw: bytes) -> bytes:
    return b"s:%d:\"%s\";" % (len(raw), raw)


def _encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PHPSerializeError(f"string is not encodable as UTF-8 ({exc.reason})") from None


def _dump_key(key: Any, out: list[bytes]) -> None:
    t = type(key)
    if t is str:
        out.append(_php_str(_encode_text(key)))
    elif t is int or t is bool:
        if not PHP_INT_MIN <= key <= PHP_INT_MAX:
            raise PHPSerializeError(f"array key {key} is out of PHP's 64-bit integer range")
        out.append(b"i:%d;" % key)
    elif t is bytes:
        out.append(_php_str(key))
    elif isinstance(key, str):
        out.append(_php_str(_encode_text(str(key))))
    elif isinstance(key, int):
        _dump_key(int(key), out)
    elif isinstance(key, bytes):
        out.append(_php_str(bytes(key)))
    else:
        raise TypeError(f"PHP array keys must be int, str or bytes, not {type(key).__name__}")


def dumps(value: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> bytes:
    """Serialize a Python value the way PHP 8's ``serialize()`` writes it.

    Accepts ``None``, ``bool``, ``int`` (64-bit), ``float``, ``str`` (UTF-8), ``bytes``,
    ``list``/``tuple`` (PHP lists), ``dict`` (``int``/``str``/``bytes`` keys), :class:`PHPObject`,
    :class:`PHPEnum` and :class:`PHPReference`. The same :class:`PHPObject` (or an equal
    :class:`PHPEnum`) met again is written as ``r:n;``, a :class:`PHPReference` met again as
    ``R:n;``, with PHP's numbering. Raises ``TypeError`` for other types and
    :class:`PHPSerializeError` for values PHP cannot hold (or nesting over ``max_depth``).
    """
    out: list[bytes] = []
    seen: dict[Any, int] = {}
    keep: list[Any] = []  # keeps id()-keyed values alive while dumping
    n = 0
    stack: list[Iterator[tuple[Any, Any]]] = []
    v: Any = value
    t: type[Any] | None
    while True:
        # ---- emit v ---------------------------------------------------------------------------
        n += 1
        t = type(v)
        if t is PHPReference:
            inner = v.value
            if type(inner) is PHPReference:
                raise PHPSerializeError("a PHPReference cannot hold another PHPReference")
            rkey: Any = (
                id(inner) if type(inner) is PHPObject else (inner if type(inner) is PHPEnum else id(v))
            )
            if rkey in seen:
                n -= 1
                out.append(b"R:%d;" % seen[rkey])
                v = None
                t = None
            else:
                seen[rkey] = n
                keep.append(v)
                v = inner
                t = type(v)
        elif t is PHPObject or t is PHPEnum:
            okey: Any = id(v) if t is PHPObject else v
            if okey in seen:
                out.append(b"r:%d;" % seen[okey])
                t = None
            else:
                seen[okey] = n
                keep.append(v)
        if t is None:
            pass
        elif v is None:
            out.append(b"N;")
        elif t is str:
            out.append(_php_str(_encode_text(v)))
        elif t is int:
            if not PHP_INT_MIN <= v <= PHP_INT_MAX:
                raise PHPSerializeError(f"integer {v} is out of PHP's 64-bit range")
            out.append(b"i:%d;" % v)
        elif t is bool:
            out.append(b"b:1;" if v else b"b:0;")
        elif t is list or t is tuple or t is dict or t is PHPObject:
            if len(stack) >= max_depth:
                raise PHPSerializeError(f"nesting deeper than max_depth={max_depth} (a cycle?)")
            if t is PHPObject:
                cls = _encode_text(v.class_name)
                if CLASS_RE.fullmatch(cls) is None:
                    raise PHPSerializeError(f"invalid PHP class name {v.class_name!r}")
                out.append(b'O:%d:"%s":%d:{' % (len(cls), cls, len(v._props)))
                stack.append(iter(v._props.items()))
            elif t is dict:
                out.append(b"a:%d:{" % len(v))
                stack.append(iter(v.items()))
            else:
                out.append(b"a:%d:{" % len(v))
                stack.append(enumerate(v))
        elif t is PHPEnum:
            cls = _encode_text(v.class_name)
            case = _encode_text(v.case)
            if CLASS_RE.fullmatch(cls) is None or CASE_RE.fullmatch(case) is None:
                raise PHPSerializeError(f"invalid enum {v.class_name!r}::{v.case!r}")
            out.append(b'E:%d:"%s:%s";' % (len(cls) + 1 + len(case), cls, case))
        elif t is float or t is PHPFloat:
            text = v.lexeme if t is PHPFloat else format_float(v)
            out.append(b"d:%s;" % text.encode("ascii"))
        elif t is bytes or t is bytearray or t is memoryview:
            out.append(_php_str(bytes(v)))
        elif isinstance(v, bool):
            out.append(b"b:1;" if v else b"b:0;")
        elif isinstance(v, int):
            v = int(v)
            n -= 1
            continue
        elif isinstance(v, float):
            v = float(v)
            n -= 1
            continue
        elif isinstance(v, str):
            v = str(v)
            n -= 1
            continue
        elif isinstance(v, bytes):
            v = bytes(v)
            n -= 1
            continue
        elif isinstance(v, Mapping):
            v = dict(v)
            n -= 1
            continue
        elif isinstance(v, list | tuple):
            v = list(v)
            n -= 1
            continue
        else:
            raise TypeError(f"cannot serialize {type(v).__name__} for PHP")

        # ---- next value -------------------------------------------------------------------------
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                out.append(b"}")
                continue
            _dump_key(item[0], out)
            v = item[1]
            break
        else:
            return b"".join(out)
