"""A job's command has no size or element limit by default, as PHP's ``unserialize()`` has none.

The worker reads commands with :func:`laraq.protocol.phparray.loads_php_arrays`. A 40 MB command, or one
with more than a million values, is read (PHP's worker runs such jobs); limits are options
(``max_bytes``/``max_elements``, or ``LARAQ_MAX_COMMAND_BYTES``/``LARAQ_MAX_COMMAND_ELEMENTS``), and what
the reader allocates stays bounded by the input: a declared length or count the remaining bytes cannot
hold fails at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import pytest

from laraq.protocol.phparray import loads_php_arrays
from laraq.protocol.serializer import PHPSerializeError


def _in_a_child(code: str) -> str:
    """Run ``code`` in its own interpreter: a 40 MB or million-value decode grows a process's heap for good
    (the allocator keeps it), and the in-process workers later tests build check ``--memory`` against it."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_command_over_32_mb_is_read() -> None:
    out = _in_a_child(
        "from laraq.protocol.phparray import loads_php_arrays\n"
        "from laraq.protocol.serializer import PHPObject, PHPSerializeError, dumps\n"
        "blob = 'x' * (40 * 1024 * 1024)\n"
        "data = dumps(PHPObject('App\\\\Jobs\\\\Big', {'blob': blob, 'n': 1}))\n"
        "value = loads_php_arrays(data)\n"
        "assert value.n == 1 and len(value.blob) == len(blob)\n"
        "try:\n    loads_php_arrays(data, max_bytes=1000)\nexcept PHPSerializeError as e:\n    print(e)\n")
    assert "exceeds max_bytes=1000" in out


def test_a_command_with_more_than_a_million_values_is_read() -> None:
    out = _in_a_child(
        "from laraq.protocol.phparray import loads_php_arrays\n"
        "from laraq.protocol.serializer import PHPSerializeError, dumps\n"
        "data = dumps(list(range(1_200_000)))\n"
        "value = loads_php_arrays(data)\n"
        "assert len(value) == 1_200_000 and value[1_199_999] == 1_199_999\n"
        "try:\n    loads_php_arrays(data, max_elements=1000)\nexcept PHPSerializeError as e:\n    print(e)\n")
    assert "max_elements" in out


@pytest.mark.parametrize("data", [b"a:999999999999:{", b's:999999999999:"', b"a:1:{i:0;a:99999999999:{}}"])
def test_allocation_stays_bounded_by_the_input(data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(PHPSerializeError):
            loads_php_arrays(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_the_environment_sets_the_worker_limit() -> None:
    code = ("from laraq.protocol.phparray import loads_php_arrays\n"
            "try:\n    loads_php_arrays(b's:2000:\"' + b'x' * 2000 + b'\";')\nexcept ValueError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "LARAQ_MAX_COMMAND_BYTES": "1000"}).stdout
    assert "exceeds max_bytes=1000" in out
