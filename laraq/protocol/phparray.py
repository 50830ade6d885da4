"""The one shape a PHP array has in a handler: :class:`PHPArray`, an ordered mapping.

PHP has a single array type: an ordered map whose keys are ints or strings. ``[]``, ``['a', 'b']`` and
``['pages' => 12]`` are all the same type, and a job property declared ``array $options = []`` can hold
any of them. The codec (:func:`laraq.protocol.serializer.loads`) keeps PHP's exact shape as ``list`` or ``dict``;
that is right for byte-exact work, but a handler written for ``$options['pages'] ?? 1`` must not break
because this time PHP's array was empty (a ``list``). So every array a handler receives - in a command
object, nested, or a string job's ``data`` - is a :class:`PHPArray`:

* it **is a** ``dict`` (keys ``int``/``str`` in PHP's order): ``options.get("pages", 1)``, ``options["pages"]``,
  ``"pages" in options``, ``len(options)``, ``options.items()`` work whether PHP sent ``[]``, a list or a map;
* list-style reading works on lists: ``tags[0]``, ``tags.list()`` (the values, like ``array_values``),
  ``tags.is_list`` (``array_is_list``); iterating gives the keys, like any ``dict`` (``.values()`` gives
  what PHP's ``foreach ($a as $v)`` gives);
* it compares equal to the ``list`` of its values when it is a list, and to a ``dict`` with the same items;
* ``json.dumps`` sees a ``dict`` (keys ``"0"``, ``"1"``...): for JSON as PHP's ``json_encode`` writes it use
  :func:`laraq.protocol.phpjson.php_json_encode`, or :func:`unwrap` first (lists become ``list`` again);
* ``dumps()`` writes it back byte for byte: a list-shaped ``PHPArray`` is written with keys ``0..n-1``,
  exactly the bytes PHP wrote.

:func:`php_arrays` converts a decoded value in place (objects and references keep their identity), which is
what the worker does before calling a handler. ``compat-docs/serialization.md`` ("Arrays in handlers") says
the same for users.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from laraq.protocol.phpread import BAIL, decode, enum_token, float_token, object_token
from laraq.protocol.phpvalues import (
    DEFAULT_MAX_DEPTH,
    PHPObject,
    PHPReference,
)

try:  # the C build of the hot path (setup.py, optional): without it the pure-Python codec does the same
    import laraq._speedups as _speedups
except ImportError:  # pragma: no cover - no compiler when installed
    _speedups = None  # type: ignore[assignment]

__all__ = ["PHPArray", "loads_php_arrays", "php_arrays", "set_command_limits", "unwrap"]


class PHPArray(dict[Any, Any]):
    """A PHP array: an ordered ``dict`` of ``int``/``str`` keys with list-style helpers."""

    __slots__ = ()
    #: :func:`laraq.protocol.phpjson.php_json_encode` writes a list-shaped PHPArray as a JSON array, like PHP
    is_php_array = True

    @property
    def is_list(self) -> bool:
        """PHP's ``array_is_list``: keys are exactly 0, 1, ... in order (an empty array is a list)."""
        return all(k == i and type(k) is int for i, k in enumerate(self))

    def list(self) -> list[Any]:
        """The values in order (PHP's ``array_values``)."""
        return list(self.values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list | tuple):
            return self.is_list and list(self.values()) == list(other)
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"PHPArray({dict.__repr__(self)})"


def _convert_container(value: Any) -> Any:
    if type(value) is list:
        return PHPArray(enumerate(value))
    if type(value) is dict:
        return PHPArray(value)
    return value


def _convert_members(members: dict[Any, Any], stack: list[Any]) -> None:
    """Convert the values of an array or an object's properties in place; queue the containers met."""
    for k, v in members.items():
        new = _convert_container(v)
        if new is not v:
            members[k] = new
        if isinstance(new, PHPArray | PHPObject | PHPReference):
            stack.append(new)


def php_arrays(value: Any) -> Any:
    """``value`` with every ``list``/``dict`` (at any depth) turned into a :class:`PHPArray`.

    Objects (:class:`PHPObject`) and references (:class:`PHPReference`) are updated in place, so shared
    objects stay shared; a top-level list or dict is returned as a new :class:`PHPArray`. Iterative: deep or
    cyclic (``r:``) values are fine.
    """
    root = _convert_container(value)
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, PHPArray):
            _convert_members(node, stack)
        elif isinstance(node, PHPObject):
            _convert_members(node._props, stack)
        elif isinstance(node, PHPReference):
            new = _convert_container(node.value)
            if new is not node.value:
                node.value = new
            if isinstance(new, PHPArray | PHPObject | PHPReference):
                stack.append(new)
    return root


def loads_php_arrays(data: bytes | str, *, max_bytes: int | None = None, max_elements: int | None = None) -> Any:
    """``php_arrays(loads(data))`` in one pass: every PHP array is built as a :class:`PHPArray` while
    parsing instead of converted afterwards; the same value either way.

    This is how the worker reads a job's command. PHP's ``unserialize()`` has no size or element limit,
    so by default neither has this (``None``); what it allocates stays bounded by the input anyway:
    declared lengths and counts are checked against the bytes that remain before anything is built.
    ``max_bytes``/``max_elements`` set limits (the environment variables ``LARAQ_MAX_COMMAND_BYTES`` /
    ``LARAQ_MAX_COMMAND_ELEMENTS`` give the worker's defaults); over one, ``PHPSerializeError``.

    ``data`` may be the ``str`` of ``data.command`` itself: an ASCII one (PHP's ``serialize()`` of ASCII
    text, the usual command) is then read in place, without the copy ``.encode()`` makes of a big command
    (a 50 MB command: 50 MB less at the decode's peak); any other is encoded first.

    With the C build (``laraq._speedups``) the usual command (no references) is read in C; whatever it
    steps aside from (references, ``C:`` objects, anything malformed) goes to the reference reader,
    which decides and reports exactly as without the C build. Without it, the pure-Python readers of
    :mod:`laraq.protocol.phpread` do the same work.
    """
    max_bytes = COMMAND_MAX_BYTES if max_bytes is None else max_bytes
    max_elements = COMMAND_MAX_ELEMENTS if max_elements is None else max_elements
    if type(data) is str and not data.isascii():
        data = data.encode("utf-8")  # an ASCII str is read in place by C (its characters are its bytes)
    size = len(data)
    if _c_pairs_loads is not None and type(data) in (bytes, str) and 0 < size <= max_bytes and size <= max_elements:
        value = _c_pairs_loads(data, DEFAULT_MAX_DEPTH)
        if value is not BAIL:
            return value
        return decode(data, array=PHPArray, fast=False, max_bytes=max_bytes, max_elements=max_elements)
    return decode(data, array=PHPArray, max_bytes=max_bytes, max_elements=max_elements)


def _limit(name: str) -> int:
    """A positive integer from the environment, else no limit (PHP has none)."""
    raw = os.environ.get(name, "").strip().replace("_", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else sys.maxsize


#: the worker's limits on a job's command (bytes, values): none unless set in the environment
COMMAND_MAX_BYTES: int = _limit("LARAQ_MAX_COMMAND_BYTES")
COMMAND_MAX_ELEMENTS: int = _limit("LARAQ_MAX_COMMAND_ELEMENTS")


def set_command_limits(max_bytes: int | None = None, max_elements: int | None = None) -> None:
    """Set the worker's limits on a job's command (``laraq work --max-command-bytes/--max-command-elements``);
    ``None`` keeps the current one (the environment's, else none)."""
    global COMMAND_MAX_BYTES, COMMAND_MAX_ELEMENTS
    if max_bytes is not None:
        COMMAND_MAX_BYTES = max_bytes
    if max_elements is not None:
        COMMAND_MAX_ELEMENTS = max_elements


def _c_build() -> Any:
    """The C ``pairs_loads``, configured with this module's pieces; None without the build or with
    ``LARAQ_PURE_PYTHON=1`` (for comparing both paths)."""
    if _speedups is None or os.environ.get("LARAQ_PURE_PYTHON", "") not in ("", "0"):
        return None
    _speedups.configure(PHPArray, object_token, float_token, enum_token, BAIL)
    return _speedups.pairs_loads


_c_pairs_loads = _c_build()


def unwrap(value: Any) -> Any:
    """Plain ``list``/``dict`` again, as PHP's ``json_encode`` sees arrays: a list-shaped array becomes a
    ``list``, any other a ``dict`` (recursively; objects and scalars are returned as they are)."""
    if isinstance(value, PHPArray):
        if value.is_list:
            return [unwrap(v) for v in value.values()]
        return {k: unwrap(v) for k, v in value.items()}
    if type(value) is list:
        return [unwrap(v) for v in value]
    if type(value) is dict:
        return {k: unwrap(v) for k, v in value.items()}
    return value
