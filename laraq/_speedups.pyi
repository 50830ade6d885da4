"""Types of the C build (``laraq/_speedups.c`` and ``laraq/_lines.c``); see those files."""

from collections.abc import Callable
from typing import Any

def pairs_loads(data: bytes, max_depth: int, /) -> Any: ...
def configure(
    array_type: type[dict[Any, Any]],
    new_object: Callable[[str, dict[Any, Any]], Any],
    make_float: Callable[[bytes], Any],
    make_enum: Callable[[bytes], Any],
    bail: object,
    /,
) -> None: ...
def json_too_deep(data: bytes, limit: int, /) -> bool: ...
def value_too_deep(value: Any, limit: int, /) -> bool: ...
def release_free_memory() -> bool: ...
def __getattr__(name: str) -> Any: ...  # the console-line sink of _lines.c (LineSink)
