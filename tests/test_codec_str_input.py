"""``loads_php_arrays`` given the ``str`` of ``data.command``: the same value as from its UTF-8 bytes, and an
ASCII command is read in place by the C reader (no ``.encode()`` copy of a big command at the decode's
peak). Both paths: the C reader and, with ``LARAQ_PURE_PYTHON=1``, the pure-Python one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import pytest
from test_codec_differential import COMMANDS, exact

from laraq.protocol import phparray
from laraq.protocol.phparray import loads_php_arrays
from laraq.protocol.serializer import PHPObject, PHPSerializeError, dumps

MB = 1024 * 1024


@pytest.mark.parametrize("name, wire", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_str_reads_as_its_bytes(name: str, wire: bytes) -> None:
    try:
        text = wire.decode("utf-8")
    except UnicodeDecodeError:
        pytest.skip("not UTF-8: a JSON payload cannot carry it as a str")
    try:
        expected = exact(loads_php_arrays(wire))
    except PHPSerializeError as exc:
        with pytest.raises(PHPSerializeError) as got:
            loads_php_arrays(text)
        assert str(got.value) == str(exc)
        return
    assert exact(loads_php_arrays(text)) == expected


def test_non_ascii_and_malformed_str() -> None:
    wire = dumps(PHPObject("App\\Jobs\\J", {"name": "Ünïcode ☃", "n": [1, 2]}))
    assert exact(loads_php_arrays(wire.decode())) == exact(loads_php_arrays(wire))
    with pytest.raises(PHPSerializeError):
        loads_php_arrays('O:1:"J":1:{s:1:"a";i:1;')


def test_a_big_ascii_command_is_not_copied() -> None:
    if phparray._c_pairs_loads is None:
        pytest.skip("no C build (or LARAQ_PURE_PYTHON=1): the pure-Python reader works on bytes")
    text = dumps(PHPObject("App\\Jobs\\Big", {"blob": "x" * (20 * MB)})).decode()
    tracemalloc.start()
    try:
        value = loads_php_arrays(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(value.blob) == 20 * MB
    assert peak < 30 * MB  # the 20 MB value itself, not a 20 MB copy of the input too


def test_the_pure_python_path_reads_str_too() -> None:
    code = ("from laraq.protocol.phparray import loads_php_arrays, _c_pairs_loads\n"
            "assert _c_pairs_loads is None\n"
            "v = loads_php_arrays('O:1:\"J\":1:{s:1:\"a\";a:1:{i:0;s:2:\"\\u00e9\";}}')\n"
            "print(v.a[0])\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, LARAQ_PURE_PYTHON="1"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "é"
