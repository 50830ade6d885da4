"""PHP ``serialize()`` / ``unserialize()`` codec for queued-job commands, safe on hostile input.

This module owns everything about PHP's native serialization format as Laravel writes it into
``data.command``:

* :func:`loads` reads the tokens ``N b i d s a O E r R`` into Python values. It is an iterative,
  bounded parser: it never executes or imports anything, never allocates from a declared length
  before checking the input actually holds that many bytes, and reports every malformed input as a
  :class:`PHPSerializeError` carrying the byte offset.
* :func:`dumps` writes Python values back with the exact bytes PHP 8's ``serialize()`` produces
  (``serialize_precision=-1`` float formatting, ``r:``/``R:`` back-reference numbering).
* :class:`PHPObject`, :class:`PHPEnum`, :class:`PHPReference` and :class:`PHPFloat` keep what is
  needed so that ``dumps(loads(x)) == x`` for anything PHP itself serialized.
* Views over well-known Laravel shapes: :func:`to_datetime` / :func:`from_datetime` (Carbon and
  the native DateTime classes) and :class:`ModelIdentifier` (``SerializesModels``).

The format, the reference numbering and the limits are described in ``compat-docs/serialization.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from reprlib import recursive_repr
from typing import Any, ClassVar, Final, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "DATE_CLASSES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "MODEL_IDENTIFIER_CLASS",
    "ModelIdentifier",
    "PHPEnum",
    "PHPFloat",
    "PHPObject",
    "PHPReference",
    "PHPSerializeError",
    "PropertyKey",
    "Visibility",
    "deref",
    "dumps",
    "format_float",
    "from_datetime",
    "is_model_identifier",
    "loads",
    "mangle",
    "to_datetime",
    "unmangle",
]

#: Largest input :func:`loads` accepts unless told otherwise (bytes).
DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024
#: Deepest nesting of arrays/objects :func:`loads` and :func:`dumps` accept unless told otherwise.
DEFAULT_MAX_DEPTH: Final = 512
#: Most values (array keys included) one :func:`loads` call builds unless told otherwise.
DEFAULT_MAX_ELEMENTS: Final = 1_000_000

PHP_INT_MIN: Final = -(2**63)
PHP_INT_MAX: Final = 2**63 - 1

MODEL_IDENTIFIER_CLASS: Final = "Illuminate\\Contracts\\Database\\ModelIdentifier"

Visibility: TypeAlias = Literal["public", "protected", "private"]
#: A property name as stored on the wire: the mangled name (``str``, or ``bytes`` if it is not
#: UTF-8), or an ``int`` for the rare integer property key.
PropertyKey: TypeAlias = str | bytes | int


class PHPSerializeError(ValueError):
    """Malformed, hostile or unsupported serialized data (or a value PHP cannot represent).

    ``offset`` is the byte offset in the input where the problem was found (``None`` for errors
    raised by :func:`dumps`).
    """

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.message = message
        self.offset = offset
        super().__init__(message if offset is None else f"{message} at offset {offset}")


# -- value types -------------------------------------------------------------------------------


class PHPFloat(float):
    """A float whose serialized text was not the one PHP would write for it (e.g. ``d:1e5;``).

    It behaves as a plain ``float``; :func:`dumps` writes ``lexeme`` back unchanged. :func:`loads`
    only produces it for such non-canonical input, never for what PHP's ``serialize()`` wrote.
    """

    __slots__ = ("lexeme",)
    lexeme: str

    def __new__(cls, value: float, lexeme: str) -> PHPFloat:
        self = super().__new__(cls, value)
        self.lexeme = lexeme
        return self

    def __repr__(self) -> str:
        return f"PHPFloat({float(self)!r}, {self.lexeme!r})"


@dataclass(frozen=True, slots=True)
class PHPEnum:
    """A PHP 8.1 enum case (``E:`` token): ``PHPEnum("App\\Enums\\Status", "Active")``.

    The stream holds only the class and the case name; the backing value is not serialized.
    Enum cases are singletons in PHP, so equal :class:`PHPEnum` values count as the same object
    for ``r:`` back-references when dumping.
    """

    class_name: str
    case: str

    def __str__(self) -> str:
        return f"{self.class_name}::{self.case}"


class PHPReference:
    """A PHP reference (``&$x``) shared by several positions: what ``R:n;`` stands for.

    Every position that shares the reference holds the *same* :class:`PHPReference` instance, the
    first (written inline by PHP) included; ``value`` is the shared value. :class:`PHPObject`
    accessors dereference it transparently; use :func:`deref` elsewhere.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, PHPReference):
            return bool(self.value == other.value)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @recursive_repr()
    def __repr__(self) -> str:
        return f"PHPReference({self.value!r})"


def deref(value: Any) -> Any:
    """``value.value`` for a :class:`PHPReference`, else ``value`` itself."""
    return value.value if type(value) is PHPReference else value


def mangle(name: str, visibility: Visibility = "public", declaring_class: str | None = None) -> str:
    """The on-the-wire property name: ``name``, ``\\0*\\0name`` or ``\\0Class\\0name``."""
    if visibility == "public":
        return name
    if visibility == "protected":
        return f"\0*\0{name}"
    if visibility == "private":
        if not declaring_class:
            raise ValueError("a private property needs its declaring class")
        return f"\0{declaring_class}\0{name}"
    raise ValueError(f"unknown visibility {visibility!r}")


def unmangle(key: PropertyKey) -> tuple[Visibility, str | None, str | bytes]:
    """Split a wire property name into ``(visibility, declaring class or None, plain name)``."""
    if isinstance(key, int):
        return "public", None, str(key)
    if isinstance(key, bytes):
        if key[:1] == b"\0":
            end = key.find(b"\0", 1)
            if end > 1:
                cls = key[1:end]
                name = key[end + 1 :]
                if cls == b"*":
                    return "protected", None, name
                return "private", cls.decode("utf-8", "replace"), name
        return "public", None, key
    if key[:1] == "\0":
        end = key.find("\0", 1)
        if end > 1:
            cls_s = key[1:end]
            if cls_s == "*":
                return "protected", None, key[end + 1 :]
            return "private", cls_s, key[end + 1 :]
    return "public", None, key


def _valid_mangled(key: bytes) -> bool:
    # Mirrors PHP's own rule: "\0" + non-empty class (or "*") + "\0" + non-empty name.
    if len(key) < 3 or key[1] == 0:
        return False
    end = key.find(b"\0", 1)
    return end != -1 and end < len(key) - 1


class PHPObject:
    """A serialized PHP object (``O:`` token): class name plus properties in wire order.

    Properties are stored under their mangled names (see :func:`mangle`) so the object
    re-serializes byte-identically. Reading by plain name works whatever the visibility::

        obj["secret"], obj.get("secret", None), obj.secret, "secret" in obj
        obj.visibility("secret") -> "private"; obj.declaring_class("secret") -> "App\\Jobs\\X"

    When several properties share a plain name (a parent's private property next to the child's
    own property of the same name), lookup order is: the object's own class's private property,
    then the public one, then the protected one, then other classes' private properties in wire
    order. Use :meth:`raw` / :meth:`set` with an explicit visibility and declaring class to reach
    a specific one.

    Attribute access (``obj.title``) is read-only and only works for names that are not
    attributes or methods of this class (``get``, ``set``, ``properties``, ``class_name``...).
    """

    __slots__ = ("_index", "_props", "class_name")

    class_name: str
    _props: dict[PropertyKey, Any]
    _index: dict[str | bytes, list[PropertyKey]] | None

    def __init__(
        self,
        class_name: str,
        properties: Mapping[PropertyKey, Any] | Iterable[tuple[PropertyKey, Any]] | None = None,
    ) -> None:
        """``properties`` maps *mangled* names to values, in order (see :meth:`build`)."""
        self.class_name = class_name
        self._props = dict(properties) if properties is not None else {}
        self._index = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        class_name: str,
        public: Mapping[str, Any] | None = None,
        protected: Mapping[str, Any] | None = None,
        private: Mapping[str, Any] | None = None,
        *,
        private_class: str | None = None,
    ) -> PHPObject:
        """An object for PHP code to read: public, then protected, then private properties.

        Private properties are declared by ``private_class`` (default: ``class_name``). For a
        parent's private properties, or a different order, add them with :meth:`set`.
        """
        obj = cls(class_name)
        for name, value in (public or {}).items():
            obj.set(name, value, "public")
        for name, value in (protected or {}).items():
            obj.set(name, value, "protected")
        for name, value in (private or {}).items():
            obj.set(name, value, "private", private_class or class_name)
        return obj

    def set(
        self,
        name: str,
        value: Any,
        visibility: Visibility = "public",
        declaring_class: str | None = None,
    ) -> PHPObject:
        """Set one property with an explicit visibility (appended if new); returns ``self``."""
        if visibility == "private" and declaring_class is None:
            declaring_class = self.class_name
        key = mangle(name, visibility, declaring_class)
        self._props[key] = value
        self._index = None
        return self

    # -- lookup ------------------------------------------------------------------------------

    def _plain_index(self) -> dict[str | bytes, list[PropertyKey]]:
        index = self._index
        if index is None:
            index = {}
            for key in self._props:
                # a public str key is its own plain name: no unmangle() call for the common case
                plain = key if type(key) is str and key[:1] != "\0" else unmangle(key)[2]
                keys = index.get(plain)
                if keys is None:
                    index[plain] = [key]
                else:
                    keys.append(key)
            self._index = index
        return index

    def _find(self, name: str | bytes | int) -> PropertyKey | None:
        props = self._props
        if isinstance(name, int):
            return name if name in props else None
        if isinstance(name, str):
            own: str | bytes = f"\0{self.class_name}\0{name}"
            protected: str | bytes = f"\0*\0{name}"
        else:
            own = b"\0" + self.class_name.encode() + b"\0" + name
            protected = b"\0*\0" + name
        if own in props:
            return own
        if name in props:
            return name
        if protected in props:
            return protected
        if self._index is None and type(name) is str:
            # only another class's private property is left: scan for it instead of building the
            # whole plain-name index (a missing name, e.g. "uniqueId", is looked up once per job)
            suffix = "\0" + name
            try:  # every key ending with the suffix is followed by "\1" in this string
                certain_miss = suffix + "\1" not in "\1".join(props) + "\1"  # type: ignore[arg-type]
            except TypeError:  # int/bytes keys: the loop below handles them
                certain_miss = False
            for key in () if certain_miss else props:
                if type(key) is not str:  # int/bytes keys have plain names too: use the index
                    keys = self._plain_index().get(name)
                    if keys:
                        return keys[0]
                    break
                if key[:1] == "\0" and key.endswith(suffix) and unmangle(key)[2] == name:
                    return key
        else:
            keys = self._plain_index().get(name)
            if keys:
                return keys[0]
        if isinstance(name, str) and name.isdigit() and str(int(name)) == name and int(name) in props:
            return int(name)
        return None

    def key_of(self, name: str | bytes | int) -> PropertyKey | None:
        """The mangled wire name that plain ``name`` resolves to, or ``None``."""
        return self._find(name)

    def __getitem__(self, name: str | bytes | int) -> Any:
        key = self._find(name)
        if key is None:
            raise KeyError(name)
        return deref(self._props[key])

    def get(self, name: str | bytes | int, default: Any = None) -> Any:
        key = self._find(name)
        return default if key is None else deref(self._props[key])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str | bytes | int) and self._find(name) is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        key = self._find(name)
        if key is None:
            raise AttributeError(f"{self.class_name} object has no property {name!r}")
        return deref(self._props[key])

    def __setitem__(self, name: str | bytes | int, value: Any) -> None:
        """Set by plain name, keeping the existing property's visibility (new ones are public).

        If the property currently holds a :class:`PHPReference`, the shared value is changed (as
        an assignment does in PHP), unless ``value`` is itself a :class:`PHPReference`.
        """
        key = self._find(name)
        if key is None:
            self._props[name] = value
            self._index = None
            return
        current = self._props[key]
        if type(current) is PHPReference and type(value) is not PHPReference:
            current.value = value
        else:
            self._props[key] = value

    def __delitem__(self, name: str | bytes | int) -> None:
        key = self._find(name)
        if key is None:
            raise KeyError(name)
        del self._props[key]
        self._index = None

    def visibility(self, name: str | bytes | int) -> Visibility:
        """``"public"``, ``"protected"`` or ``"private"`` for the property ``name`` resolves to."""
        key = self._find(name)
        if key is None:
            raise KeyError(name)
        return unmangle(key)[0]

    def declaring_class(self, name: str | bytes | int) -> str | None:
        """The declaring class of a private property; ``None`` for public/protected ones."""
        key = self._find(name)
        if key is None:
            raise KeyError(name)
        return unmangle(key)[1]

    def properties(self) -> dict[str | bytes, Any]:
        """Plain name → (dereferenced) value; for shared names the lookup-order winner."""
        result: dict[str | bytes, Any] = {}
        for name in self._plain_index():
            key = self._find(name)
            if key is not None:
                result[name] = deref(self._props[key])
        return result

    def raw(self) -> dict[PropertyKey, Any]:
        """The wire view: mangled name → value, in order. Mutating it changes the object."""
        self._index = None
        return self._props

    def __iter__(self) -> Iterator[str | bytes]:
        """Plain property names, in wire order (a shared name once)."""
        return iter(self._plain_index())

    def __len__(self) -> int:
        return len(self._props)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PHPObject):
            return NotImplemented
        return self.class_name == other.class_name and list(self._props.items()) == list(
            other._props.items()
        )

    __hash__ = None  # type: ignore[assignment]

    @recursive_repr()
    def __repr__(self) -> str:
        return f"PHPObject({self.class_name!r}, {self._props!r})"


# -- float formatting --------------------------------------------------------------------------


def format_float(value: float) -> str:
    """The text PHP 8's ``serialize()``/``var_export`` writes for a double (precision -1).

    Shortest round-trip digits, fixed notation while the decimal exponent is in [-4, 17),
    otherwise ``d.dddE+x`` (at least one fraction digit); ``-0``, ``INF``, ``-INF``, ``NAN``.
    """
    if value != value:
        return "NAN"
    if value in (math.inf, -math.inf):
        return "INF" if value > 0 else "-INF"
    if value == 0.0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    text = float.__repr__(float(value))
    sign = ""
    if text[0] == "-":
        sign = "-"
        text = text[1:]
    mantissa, _, exp_s = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    stripped = digits.lstrip("0")
    decpt = len(whole) + (int(exp_s) if exp_s else 0) - (len(digits) - len(stripped))
    digits = stripped.rstrip("0") or "0"
    if (decpt < -3) if decpt < 0 else (decpt > 17):
        exp = decpt - 1
        rest = digits[1:] or "0"
        return f"{sign}{digits[0]}.{rest}E{'-' if exp < 0 else '+'}{abs(exp)}"
    if decpt <= 0:
        return f"{sign}0.{'0' * -decpt}{digits}"
    if len(digits) <= decpt:
        return sign + digits + "0" * (decpt - len(digits))
    return f"{sign}{digits[:decpt]}.{digits[decpt:]}"


# -- unserialize -------------------------------------------------------------------------------

_UINT_RE = re.compile(rb"[0-9]{1,20}")
_INT_RE = re.compile(rb"[+-]?[0-9]{1,25}")
_FLOAT_RE = re.compile(
    rb"(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF)(?=;)", re.ASCII
)
_CLASS_RE = re.compile(rb"[A-Za-z0-9_\x80-\xff\\]+")
_CASE_RE = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")
_MAX_FLOAT_LEXEME = 1100


class _Frame:
    """One open (or finished) array or object while parsing."""

    __slots__ = ("closed", "data", "is_list", "key", "kind", "obj", "ref", "remaining", "slot", "value")

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
    """``pos`` is just after ``i:``; returns the value and the offset after ``;``."""
    m = _INT_RE.match(data, pos)
    if m is None:
        raise _err(f"expected an integer, found {_describe(data, pos)}", pos)
    end = m.end()
    if data[end : end + 1] != b";":
        if data[end : end + 1].isdigit():
            raise _err("integer has too many digits", pos)
        raise _err(f"expected ';' after integer, found {_describe(data, end)}", end)
    value = int(m.group())
    if value > PHP_INT_MAX or value < PHP_INT_MIN:
        raise _err("integer out of PHP's 64-bit range", pos)
    return value, end + 1


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
    m = _CLASS_RE.fullmatch(raw)
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


# -- unserialize: the fast path -------------------------------------------------------------------
#
# ``_token_loads`` reads the common shapes (strings, ints, null, bools, floats, enums, arrays, objects)
# with one precompiled pattern per token and no per-token function calls or slot bookkeeping. It is
# never the one that reports an error: on anything it does not handle (``r:``/``R:``/``C:``, a depth
# over ``max_depth``) and on anything malformed it returns ``_BAIL`` and :func:`loads` reruns the
# input through the full parser below, which produces the value or the precise error. Everything it
# accepts, it checks exactly as the full parser does (declared lengths against the remaining input
# before slicing, digit counts, integer range, mangled names, member counts, duplicate keys), so a
# value it returns is the value the full parser returns.

_BAIL: Final = object()

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


def _token_loads(data: bytes, size: int, max_depth: int) -> Any:  # noqa: C901 - one flat loop on purpose
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
    while True:
        if d is not None:
            # ---- a key, or the closing brace
            m = match(data, pos)
            if m is None:
                if not rem:
                    return _BAIL
                h = str_head(data, pos)  # a key holding '"'
                if h is None:
                    return _BAIL
                ln = int(h[1])
                p = h.end()
                end = p + ln
                if end + 2 > size or data[end : end + 2] != b'";':
                    return _BAIL
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
                            return _BAIL
                        raw = data[p:end]
                        pos = end + 2
            if li == 10:
                # ---- close the container
                if rem or len(d) != n:
                    return _BAIL
                if obj is not None:
                    value = obj
                elif il:
                    value = list(d.values())
                else:
                    value = d
                outer = stack.pop()
                if outer is None:  # the top-level value
                    return value if pos == size else _BAIL
                d, n, rem, il, obj, key = outer
                d[key] = value
                continue
            if not rem:
                return _BAIL
            if li == 2:
                if obj is not None and raw[:1] == b"\0" and not _valid_mangled(raw):
                    return _BAIL
                try:
                    key = utf8(raw)
                except UnicodeDecodeError:
                    key = raw
                il = False
            elif li == 3:
                key = int(m[3])  # type: ignore[index]
                if key > PHP_INT_MAX or key < PHP_INT_MIN:
                    return _BAIL
                if key != n - rem:
                    il = False
            else:
                return _BAIL
            rem -= 1
        # ---- a value
        m = match(data, pos)
        if m is None:
            h = str_head(data, pos)  # a string holding '"'
            if h is None:
                return _BAIL
            ln = int(h[1])
            p = h.end()
            end = p + ln
            if end + 2 > size or data[end : end + 2] != b'";':
                return _BAIL
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
                        return _BAIL
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
                    return _BAIL
            elif li == 5:
                value = m[5] == b"1"
            elif li == 6 or li == 9:
                if len(stack) >= max_depth:
                    return _BAIL
                count = int(m[li])
                # every member needs at least 6 bytes ("i:0;N;"), plus the closing brace
                if count * 6 + 1 > size - pos:
                    return _BAIL
                if d is not None:
                    push((d, n, rem, il, obj, key))
                else:
                    push(None)
                d = {}
                n = rem = count
                il = True
                if li == 9:
                    cls = m[8]
                    if len(cls) != int(m[7]):
                        return _BAIL
                    try:
                        class_name = utf8(cls)
                    except UnicodeDecodeError:
                        return _BAIL
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
                    return _BAIL
                lexeme = lexeme_b.decode("ascii")
                value = float(lexeme)
                if format_float(value) != lexeme:
                    value = PHPFloat(value, lexeme)
            elif li == 13:
                raw = m[13]
                if len(raw) != int(m[12]):
                    return _BAIL
                cls_raw, sep, case_raw = raw.partition(b":")
                if not sep or _CLASS_RE.fullmatch(cls_raw) is None or _CASE_RE.fullmatch(case_raw) is None:
                    return _BAIL
                try:
                    value = PHPEnum(utf8(cls_raw), utf8(case_raw))
                except UnicodeDecodeError:
                    return _BAIL
            else:  # '}' where a value belongs
                return _BAIL
        if d is None:
            return value if pos == size else _BAIL
        d[key] = value


#: Inputs up to this size go through ``_pairs_loads`` first (it materialises every token at once).
_PAIRS_MAX_BYTES: Final = 64 * 1024

_OPEN = re.compile(rb'a:([0-9]{1,20}):\{|O:([0-9]{1,20}):"([A-Za-z0-9_\x80-\xff\\]+)":([0-9]{1,20}):\{')
# Inside an array or object every token is a key-value pair or a closing brace: one ``findall``
# tokenises a whole (small) input. The last alternative takes any other byte, so the tokens cover
# the input without gaps and anything unexpected shows up as such a token.
_PAIRS = re.compile(
    rb'(?:s:([0-9]{1,20}):"([^"]*)";|i:([+-]?[0-9]{1,25});)'  # key: 1, 2 | 3
    rb'(?:s:([0-9]{1,20}):"([^"]*)";'  # 4, 5
    rb"|(N);"  # 6
    rb"|i:([+-]?[0-9]{1,25});"  # 7
    rb"|b:([01]);"  # 8
    rb"|a:([0-9]{1,20}):\{"  # 9
    rb'|O:([0-9]{1,20}):"([A-Za-z0-9_\x80-\xff\\]+)":([0-9]{1,20}):\{'  # 10, 11, 12
    rb"|d:((?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF));"  # 13
    rb'|E:([0-9]{1,20}):"([^"]*)";)'  # 14, 15
    rb"|(\})"  # 16
    rb"|(.)",  # 17
    re.DOTALL,
)


def _pairs_loads(data: bytes, size: int, max_depth: int,  # noqa: C901 - one flat loop on purpose
                 array: type[dict[Any, Any]] | None = None) -> Any:
    """An array or object holding no ``r:``/``R:`` and no string with a ``"`` in it, tokenised in
    one ``findall``; ``_BAIL`` for anything else (see ``_token_loads``). With ``array`` (a ``dict``
    subclass: :class:`laraq.protocol.phparray.PHPArray`) every PHP array, list-shaped or not, comes back as
    that type, keyed as PHP keyed it."""
    m = _OPEN.match(data)
    if m is None or max_depth < 1:
        return _BAIL
    utf8 = bytes.decode
    n = rem = int(m[1] or m[4])
    if n * 6 + 1 > size - m.end():
        return _BAIL
    d: Any = {} if array is None or m[3] is not None else array()
    il = True
    obj: Any = None
    if m[3] is not None:
        cls = m[3]
        if len(cls) != int(m[2]):
            return _BAIL
        try:
            class_name = utf8(cls)
        except UnicodeDecodeError:
            return _BAIL
        obj = PHPObject.__new__(PHPObject)
        obj.class_name = class_name
        obj._index = None
        obj._props = d
    stack: list[Any] = []
    push = stack.append
    pop = stack.pop
    result: Any = _BAIL
    value: Any
    for ksl, ksb, ki, vsl, vsb, vn, vi, vb, va, vol, voc, von, vd, vel, veb, close, _ in _PAIRS.findall(data, m.end()):
        if close:
            if d is None or rem or len(d) != n:
                return _BAIL
            if obj is not None:
                value = obj
            elif array is not None:
                value = d
            elif il:
                value = list(d.values())
            else:
                value = d
            if not stack:
                result = value
                d = None
                continue
            d, n, rem, il, obj, key = pop()
            d[key] = value
            continue
        if not rem or d is None:  # a member too many, after the end, or an unexpected byte
            return _BAIL
        # ---- the key
        if ksl:
            if len(ksb) != int(ksl):
                return _BAIL
            if obj is not None and ksb[:1] == b"\0" and not _valid_mangled(ksb):
                return _BAIL
            try:
                key = utf8(ksb)
            except UnicodeDecodeError:
                key = ksb
            il = False
        elif ki:
            key = int(ki)
            if key > PHP_INT_MAX or key < PHP_INT_MIN:
                return _BAIL
            if key != n - rem:
                il = False
        else:
            return _BAIL
        rem -= 1
        # ---- the value
        if vsl:
            if len(vsb) != int(vsl):
                return _BAIL
            try:
                value = utf8(vsb)
            except UnicodeDecodeError:
                value = vsb
        elif vn:
            value = None
        elif vi:
            value = int(vi)
            if value > PHP_INT_MAX or value < PHP_INT_MIN:
                return _BAIL
        elif vb:
            value = vb == b"1"
        elif va or vol:
            if len(stack) + 1 >= max_depth:
                return _BAIL
            push((d, n, rem, il, obj, key))
            count = int(va or von)
            # the smallest member ("i:0;N;") is 6 bytes; the end of this token is not known here,
            # so the byte check is the whole input's: a count it lets through is caught at '}'
            if count * 6 + 1 > size:
                return _BAIL
            d = {} if array is None or vol else array()
            n = rem = count
            il = True
            if vol:
                if len(voc) != int(vol):
                    return _BAIL
                try:
                    class_name = utf8(voc)
                except UnicodeDecodeError:
                    return _BAIL
                obj = PHPObject.__new__(PHPObject)
                obj.class_name = class_name
                obj._index = None
                obj._props = d
            else:
                obj = None
            continue
        elif vd:
            if len(vd) >= _MAX_FLOAT_LEXEME:
                return _BAIL
            lexeme = vd.decode("ascii")
            value = float(lexeme)
            if format_float(value) != lexeme:
                value = PHPFloat(value, lexeme)
        elif vel:
            if len(veb) != int(vel):
                return _BAIL
            cls_raw, sep, case_raw = veb.partition(b":")
            if not sep or _CLASS_RE.fullmatch(cls_raw) is None or _CASE_RE.fullmatch(case_raw) is None:
                return _BAIL
            try:
                value = PHPEnum(utf8(cls_raw), utf8(case_raw))
            except UnicodeDecodeError:
                return _BAIL
        else:
            return _BAIL
        d[key] = value
    return result


#: The float lexemes the tokenizers accept (``d:<lexeme>;``).
_FLOAT_LEXEME = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NAN|-?INF")


def _float_token(raw: bytes) -> Any:
    """A ``d:`` token's value for the C fast path (``laraq._speedups``): as ``_pairs_loads`` reads it."""
    if len(raw) >= _MAX_FLOAT_LEXEME or _FLOAT_LEXEME.fullmatch(raw) is None:
        return _BAIL
    lexeme = raw.decode("ascii")
    value = float(lexeme)
    return value if format_float(value) == lexeme else PHPFloat(value, lexeme)


def _enum_token(raw: bytes) -> Any:
    """An ``E:`` token's ``Class:Case`` for the C fast path: as ``_pairs_loads`` reads it."""
    cls_raw, sep, case_raw = raw.partition(b":")
    if not sep or _CLASS_RE.fullmatch(cls_raw) is None or _CASE_RE.fullmatch(case_raw) is None:
        return _BAIL
    try:
        return PHPEnum(cls_raw.decode("utf-8"), case_raw.decode("utf-8"))
    except UnicodeDecodeError:
        return _BAIL


def _object_token(class_name: str, props: dict[PropertyKey, Any]) -> PHPObject:
    """A finished ``O:`` token for the C fast path: as ``_pairs_loads`` builds it."""
    obj = PHPObject.__new__(PHPObject)
    obj.class_name = class_name
    obj._index = None
    obj._props = props
    return obj


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
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PHPSerializeError(f"input text is not encodable as UTF-8 ({exc.reason})", exc.start) from None
    elif not isinstance(data, bytes):
        if not isinstance(data, bytearray | memoryview):
            raise TypeError(f"loads() needs bytes or str, not {type(data).__name__}")
        data = bytes(data)
    size = len(data)
    if size > max_bytes:
        raise PHPSerializeError(f"input of {size} bytes exceeds max_bytes={max_bytes}", 0)
    if size == 0:
        raise PHPSerializeError("empty input", 0)
    if max_elements >= size:  # then no element limit can be hit: the fast paths apply
        value = _pairs_loads(data, size, max_depth) if size <= _PAIRS_MAX_BYTES else _BAIL
        if value is _BAIL:
            value = _token_loads(data, size, max_depth)
        if value is not _BAIL:
            return value

    stack: list[_Frame] = []
    slot_vals: list[Any] = []
    slot_owner: list[_Frame | None] = []
    slot_key: list[Any] = []
    count = 0
    pos = 0
    top: _Frame | None = None
    result: Any = None

    while True:
        # ---- inside a container: close it or read the next key --------------------------------
        if top is not None:
            if top.remaining == 0:
                if data[pos : pos + 1] != b"}":
                    kind = "array" if top.kind == 97 else "object"
                    raise _err(f"expected '}}' to close {kind}, found {_describe(data, pos)}", pos)
                pos += 1
                frame = stack.pop()
                if frame.kind == 97:
                    d = frame.data
                    final: Any = list(d.values()) if frame.is_list else d
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
                if top.kind == 79 and raw[:1] == b"\0" and not _valid_mangled(raw):
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
            lexeme = m.group().decode("ascii")
            pos = m.end() + 1
            value = float(lexeme)
            if format_float(value) != lexeme:
                value = PHPFloat(value, lexeme)
        elif c == 97 or c == 79:  # a, O
            if len(stack) >= max_depth:
                raise _err(f"nesting deeper than max_depth={max_depth}", pos)
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
            frame = _Frame(c, n, len(slot_vals))
            frame.data = {}
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
            cls_raw, sep, case_raw = raw.partition(b":")
            if not sep or _CLASS_RE.fullmatch(cls_raw) is None or _CASE_RE.fullmatch(case_raw) is None:
                raise _err(f"malformed enum {raw[:80]!r} (expected \"Class:Case\")", start)
            try:
                value = PHPEnum(cls_raw.decode("utf-8"), case_raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise _err("enum name is not valid UTF-8", start) from None
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


# -- serialize ---------------------------------------------------------------------------------


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
                if _CLASS_RE.fullmatch(cls) is None:
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
            if _CLASS_RE.fullmatch(cls) is None or _CASE_RE.fullmatch(case) is None:
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


# -- dates ---------------------------------------------------------------------------------------

#: Classes whose serialized form is ``{date, timezone_type, timezone}``.
DATE_CLASSES: Final = frozenset(
    {
        "DateTime",
        "DateTimeImmutable",
        "Carbon\\Carbon",
        "Carbon\\CarbonImmutable",
        "Illuminate\\Support\\Carbon",
    }
)

# Offsets (minutes east of UTC) of the abbreviations PHP commonly writes as timezone_type 2.
_ABBREVIATIONS: Final[dict[str, int]] = {
    "utc": 0, "gmt": 0, "z": 0, "ut": 0, "wet": 0, "west": 60, "bst": 60, "ist": 60,
    "cet": 60, "cest": 120, "met": 60, "mest": 120, "eet": 120, "eest": 180, "msk": 180,
    "est": -300, "edt": -240, "cst": -360, "cdt": -300, "mst": -420, "mdt": -360,
    "pst": -480, "pdt": -420, "akst": -540, "akdt": -480, "hst": -600, "ast": -240, "adt": -180,
    "nst": -210, "ndt": -150, "jst": 540, "kst": 540, "hkt": 480, "sgt": 480, "awst": 480,
    "acst": 570, "acdt": 630, "aest": 600, "aedt": 660, "nzst": 720, "nzdt": 780,
}

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")
_OFFSET_RE = re.compile(r"([+-])(\d{2}):?(\d{2})(?::?(\d{2}))?")


def _offset_tz(text: str) -> timezone:
    m = _OFFSET_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a UTC offset: {text!r}")
    seconds = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4) or 0)
    delta = timedelta(seconds=seconds if m.group(1) == "+" else -seconds)
    if abs(delta) >= timedelta(days=1):
        raise ValueError(f"UTC offset out of range: {text!r}")
    return timezone(delta)


def to_datetime(obj: PHPObject) -> datetime:
    """An aware ``datetime`` from a serialized Carbon / ``DateTime`` / ``DateTimeImmutable``.

    ``timezone_type`` 3 (an identifier such as ``Europe/Paris``) gives a ``ZoneInfo``, 1 (an
    offset such as ``+05:30``) a fixed ``timezone``, 2 (an abbreviation such as ``EST``) a fixed
    ``timezone`` named after it when laraq knows the abbreviation. Raises ``ValueError``
    (:class:`PHPSerializeError` for a wrong shape) otherwise.
    """
    if not isinstance(obj, PHPObject):
        raise PHPSerializeError(f"expected a serialized date object, got {type(obj).__name__}")
    date = obj.get("date")
    tz_type = obj.get("timezone_type")
    tz_name = obj.get("timezone")
    if not isinstance(date, str) or type(tz_type) is not int or not isinstance(tz_name, str):
        raise PHPSerializeError(f"{obj.class_name} object has no date/timezone_type/timezone properties")
    m = _DATE_RE.fullmatch(date)
    if m is None:
        raise ValueError(f"unsupported date text {date!r} (years 1-9999 only)")
    micro = int((m.group(7) or "0").ljust(6, "0"))
    tz: tzinfo
    if tz_type == 3:
        try:
            tz = ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError):
            if tz_name.upper() == "UTC":
                tz = UTC
            else:
                raise ValueError(f"unknown time zone {tz_name!r}") from None
    elif tz_type == 1:
        tz = _offset_tz(tz_name)
    elif tz_type == 2:
        minutes = _ABBREVIATIONS.get(tz_name.lower())
        if minutes is None:
            raise ValueError(f"unknown time zone abbreviation {tz_name!r}")
        tz = timezone(timedelta(minutes=minutes), tz_name)
    else:
        raise ValueError(f"unknown timezone_type {tz_type}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def from_datetime(dt: datetime, class_name: str = "Illuminate\\Support\\Carbon") -> PHPObject:
    """The object PHP serializes for this moment: ``{date, timezone_type, timezone}``.

    A ``ZoneInfo`` zone (and ``timezone.utc``, written ``UTC``) gives ``timezone_type`` 3, any
    other fixed offset gives type 1 (``+05:30``). Naive datetimes are refused.
    """
    tz = dt.tzinfo
    if tz is None or dt.utcoffset() is None:
        raise ValueError("from_datetime() needs an aware datetime")
    if isinstance(tz, ZoneInfo):
        tz_type, tz_name = 3, tz.key
    elif tz is UTC:
        tz_type, tz_name = 3, "UTC"
    else:
        offset = dt.utcoffset()
        assert offset is not None
        total = int(offset.total_seconds())
        if total % 60:
            raise ValueError("PHP cannot hold a UTC offset with seconds")
        sign = "-" if total < 0 else "+"
        hours, minutes = divmod(abs(total) // 60, 60)
        tz_type, tz_name = 1, f"{sign}{hours:02d}:{minutes:02d}"
    date = (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d} "
        f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}.{dt.microsecond:06d}"
    )
    return PHPObject(class_name, {"date": date, "timezone_type": tz_type, "timezone": tz_name})


# -- ModelIdentifier -----------------------------------------------------------------------------


def is_model_identifier(obj: Any) -> bool:
    """True for a serialized ``Illuminate\\Contracts\\Database\\ModelIdentifier``."""
    return isinstance(obj, PHPObject) and obj.class_name == MODEL_IDENTIFIER_CLASS


@dataclass
class ModelIdentifier:
    """What ``SerializesModels`` writes in place of an Eloquent model or collection.

    ``id`` is the key (a list of keys for a collection); ``collection_class`` exists from
    Laravel 9.26 (``None`` when absent or null).
    """

    CLASS: ClassVar[str] = MODEL_IDENTIFIER_CLASS

    class_name: str
    id: Any
    relations: list[Any] = field(default_factory=list)
    connection: str | None = None
    collection_class: str | None = None

    @classmethod
    def from_php(cls, obj: PHPObject) -> ModelIdentifier:
        if not is_model_identifier(obj):
            name = obj.class_name if isinstance(obj, PHPObject) else type(obj).__name__
            raise PHPSerializeError(f"not a ModelIdentifier: {name}")
        class_name = obj.get("class")
        if not isinstance(class_name, str):
            raise PHPSerializeError("ModelIdentifier has no model class")
        relations = obj.get("relations")
        return cls(
            class_name=class_name,
            id=obj.get("id"),
            relations=list(relations.values()) if isinstance(relations, dict) else list(relations or []),
            connection=obj.get("connection"),
            collection_class=obj.get("collectionClass"),
        )

    @property
    def is_collection(self) -> bool:
        return isinstance(self.id, list)

    def to_php(self, *, include_collection_class: bool = True) -> PHPObject:
        """The wire object (``include_collection_class=False`` for Laravel before 9.26)."""
        props: dict[PropertyKey, Any] = {
            "class": self.class_name,
            "id": self.id,
            "relations": list(self.relations),
            "connection": self.connection,
        }
        if include_collection_class:
            props["collectionClass"] = self.collection_class
        return PHPObject(MODEL_IDENTIFIER_CLASS, props)
