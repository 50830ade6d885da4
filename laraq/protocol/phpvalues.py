"""The Python values of PHP's serialization format, shared by the reader and the writer.

:class:`PHPObject` (an ``O:`` object: class name and mangled property names in wire order),
:class:`PHPEnum` (``E:``), :class:`PHPReference` (what ``R:`` shares), :class:`PHPFloat` (a double
whose text was not PHP's own), :class:`PHPSerializeError`, the property-name mangling rules
(:func:`mangle`, :func:`unmangle`), PHP 8's float text (:func:`format_float`) and the limits both
directions apply. :mod:`laraq.protocol.phpread` builds these values, :mod:`laraq.protocol.phpwrite`
writes them; :mod:`laraq.protocol.serializer` is the public face of all three.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from reprlib import recursive_repr
from typing import Any, Final, Literal, TypeAlias

__all__ = [
    "CASE_RE",
    "CLASS_RE",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "PHP_INT_MAX",
    "PHP_INT_MIN",
    "PHPEnum",
    "PHPFloat",
    "PHPObject",
    "PHPReference",
    "PHPSerializeError",
    "PropertyKey",
    "Visibility",
    "deref",
    "format_float",
    "mangle",
    "unmangle",
    "valid_mangled",
]

#: Largest input :func:`loads` accepts unless told otherwise (bytes).
DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024
#: Deepest nesting of arrays/objects :func:`loads` and :func:`dumps` accept unless told otherwise: PHP's
#: ``unserialize_max_depth`` default (objects and non-empty arrays count, as PHP counts them).
DEFAULT_MAX_DEPTH: Final = 4096
#: Most values (array keys included) one :func:`loads` call builds unless told otherwise.
DEFAULT_MAX_ELEMENTS: Final = 1_000_000

PHP_INT_MIN: Final = -(2**63)
PHP_INT_MAX: Final = 2**63 - 1

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


#: A PHP class name as the reader and the writer accept it (PHP's character set; UTF-8 checked apart).
CLASS_RE: Final = re.compile(rb"[A-Za-z0-9_\x80-\xff\\]+")
#: An enum case name.
CASE_RE: Final = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")


def valid_mangled(key: bytes) -> bool:
    """PHP's rule for a mangled property name (``key`` starts with NUL)."""
    # "\0" + non-empty class (or "*") + "\0" + non-empty name
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

