"""Differential fuzzing of the PHP readers: every fast reader equals the reference, or steps aside.

:mod:`laraq.protocol.phpread` has one reader that decides (``_reference_loads``) and two that only go
faster: the C build (``laraq._speedups.pairs_loads``, what :func:`loads_php_arrays` runs per job) and the
pure-Python ``_token_loads``. On the same input a fast reader must give the reference's value exactly -
types included (``str``/``bytes``, ``PHPArray``/``dict``/``list``, ``PHPFloat`` and its text, a float's sign
and bits), keys in the same order, shared objects and references shared the same way - or return the
``BAIL`` marker. It must never return a value where the reference refuses. The public entry points
(``loads``, ``loads_php_arrays``) must give the reference's value or raise ``PHPSerializeError`` and
nothing else.

Inputs: edge cases of the grammar (integer and length overflow, signs, whitespace, huge counts, depth,
``r:``/``R:``, ``d:`` forms, ``E:``, odd class names, ``C:``), the wire corpus and random damage to it,
and random PHP values (hypothesis) written by ``dumps`` and damaged. Seeds are fixed; the whole file runs
in a few seconds. ``test_a_planted_difference_is_caught`` shows the comparison fails when a fast reader
changes a value.
"""

from __future__ import annotations

import math
import random
import re
import struct
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_phparray import COMMANDS

from laraq.protocol import phparray, phpread
from laraq.protocol.phparray import PHPArray, loads_php_arrays
from laraq.protocol.serializer import (
    DEFAULT_MAX_DEPTH,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    PHPSerializeError,
    dumps,
    loads,
)

BAIL = phpread.BAIL
DEPTH = DEFAULT_MAX_DEPTH
C_LOADS = phparray._c_pairs_loads  # None without the C build or with LARAQ_PURE_PYTHON=1

Reader = Callable[[bytes], Any]


@pytest.fixture(autouse=True)
def _deep_enough() -> Any:
    # exact() recurses: values nested up to max_depth (4096) need more than Python's default 1000 frames
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * DEPTH + 2000))
    yield
    sys.setrecursionlimit(old)


# -- the exact comparison ------------------------------------------------------------------------


def exact(value: Any) -> Any:
    """A description of ``value`` equal only for the same types, contents, order and sharing."""
    ids: dict[int, int] = {}

    def walk(v: Any) -> Any:
        t = type(v)
        if t is PHPObject or t is PHPReference:
            if id(v) in ids:
                return ("same", ids[id(v)])
            ids[id(v)] = len(ids)
            if t is PHPReference:
                return ("R", walk(v.value))
            return ("O", v.class_name, type(v._props).__name__, walk_items(v._props))
        if t is dict or t is PHPArray:
            return (t.__name__, walk_items(v))
        if t is list:
            return ("list", [walk(x) for x in v])
        if t is float or t is PHPFloat:
            return (t.__name__, struct.pack("<d", v).hex(), getattr(v, "lexeme", None))
        if t is PHPEnum:
            return ("E", v.class_name, v.case)
        assert v is None or t in (bool, int, str, bytes), f"unexpected type {t.__name__} in a decoded value"
        return (t.__name__, v)

    def walk_items(d: dict[Any, Any]) -> list[Any]:
        return [(type(k).__name__, k, walk(v)) for k, v in d.items()]

    return walk(value)


def reference(data: bytes, array: type[dict[Any, Any]] | None) -> Any:
    """The reference reader's answer: ``exact(value)``, or the ``PHPSerializeError`` class."""
    try:
        return exact(phpread.decode(data, array=array, fast=False))
    except PHPSerializeError:
        return PHPSerializeError


def fast_readers(c_loads: Reader | None) -> list[tuple[str, type[dict[Any, Any]] | None, Reader]]:
    out: list[tuple[str, type[dict[Any, Any]] | None, Reader]] = [
        ("token", None, lambda d: phpread._token_loads(d, len(d), DEPTH)),
        ("token/PHPArray", PHPArray, lambda d: phpread._token_loads(d, len(d), DEPTH, PHPArray)),
    ]
    if c_loads is not None:
        out.append(("C", PHPArray, lambda d: c_loads(d, DEPTH)))
    return out


def public(data: bytes, entry: Reader) -> Any:
    try:
        return exact(entry(data))
    except PHPSerializeError:
        return PHPSerializeError


def check(data: bytes, c_loads: Reader | None = C_LOADS) -> None:
    """Every reader of ``data`` agrees with the reference (or steps aside); AssertionError if not."""
    truth = {None: reference(data, None), PHPArray: reference(data, PHPArray)}
    for name, array, read in fast_readers(c_loads):
        if not data:
            continue
        got = read(data)
        if got is BAIL:
            continue
        assert truth[array] is not PHPSerializeError, f"{name} accepted what the reference refuses: {data[:200]!r}"
        assert exact(got) == truth[array], f"{name} read a different value from {data[:200]!r}"
    assert public(data, loads) == truth[None], f"loads() differs from the reference on {data[:200]!r}"
    if c_loads is C_LOADS:  # loads_php_arrays() runs the module's own C reader
        assert public(data, loads_php_arrays) == truth[PHPArray], f"loads_php_arrays() differs on {data[:200]!r}"


# -- edge cases of the grammar -------------------------------------------------------------------

EDGES: list[bytes] = [
    # integers: the two known C divergences, the 64-bit bounds, signs, digit counts
    b"a:1:{i:0;i:39223372036854775807;}", b'O:1:"A":1:{s:1:"x";i:92233720368547758089;}',
    b"a:1:{i:0;i:9223372036854775807;}", b"a:1:{i:0;i:9223372036854775808;}",
    b"a:1:{i:0;i:-9223372036854775808;}", b"a:1:{i:0;i:-9223372036854775809;}",
    b"a:1:{i:0;i:18446744073709551615;}", b"a:1:{i:0;i:18446744073709551616;}",
    b"a:1:{i:0;i:36893488147419103232;}", b"a:1:{i:0;i:99999999999999999999999;}",
    b"a:1:{i:0;i:0000000000000000000000001;}", b"a:1:{i:0;i:00000000000000000000000001;}",
    b"a:1:{i:0;i:-0;}", b"a:1:{i:0;i:+0;}", b"a:1:{i:0;i:+5;}", b"a:1:{i:0;i:--5;}", b"a:1:{i:0;i:+-5;}",
    b"a:1:{i:0;i: 5;}", b"a:1:{i:0;i:5 ;}", b"a:1:{i:0;i:;}", b"a:1:{i:0;i:0x10;}", b"a:1:{i:0;i:1e3;}",
    b"a:1:{i:9223372036854775808;N;}", b"a:1:{i:39223372036854775807;N;}", b"a:1:{i:-0;N;}",
    b"a:1:{i:+0;N;}", b"a:2:{i:0;N;i:-0;N;}", b"a:2:{i:1;N;i:+1;N;}",
    # lengths
    b'a:1:{i:0;s:01:"a";}', b'a:1:{i:0;s:-1:"";}', b'a:1:{i:0;s:+1:"a";}', b'a:1:{i:0;s: 1:"a";}',
    b'a:1:{i:0;s:18446744073709551617:"a";}', b'a:1:{i:0;s:99999999999999999999:"a";}',
    b'a:1:{i:0;s:999999999999999999999:"a";}', b'a:1:{i:0;s:9223372036854775807:"a";}',
    b'a:1:{i:0;s:2:"a";}', b'a:1:{i:0;s:0:"";}', b'a:1:{i:0;s:3:"a"b";}', b'a:1:{i:0;s:1:""";}',
    b'a:1:{s:3:"a"b";N;}', b'a:1:{i:0;s:2:"\xff\xfe";}', b'a:1:{s:2:"\xc3\xa9";N;}',
    # counts against the input and against overflow of 6*n
    b"a:-1:{}", b"a:+0:{}", b"a:00:{}", b"a: 0:{}", b"a:0 :{}", b"a:9999999999999999999:{",
    b"a:1537228672809129302:{}", b"a:3074457345618258603:{}", b"a:18446744073709551615:{}",
    b"a:1:{i:0;a:1537228672809129302:{}}", b"a:2:{i:0;N;}", b"a:1:{i:0;N;i:1;N;}", b"a:0:{}",
    b'O:1:"A":1537228672809129302:{}', b'a:1:{i:0;O:1:"A":3074457345618258603:{}}',
    # duplicate keys, key types
    b"a:2:{i:0;N;i:0;N;}", b'a:2:{s:1:"a";N;s:1:"a";N;}', b'a:2:{i:1;N;s:1:"1";N;}',
    b"a:1:{N;N;}", b"a:1:{b:1;N;}", b"a:1:{d:1;N;}", b"a:1:{a:0:{}N;}",
    # whitespace, trailing bytes, truncation
    b" a:0:{}", b"a:0:{} ", b"a:0:{}\n", b"a:1:{i:0; N;}", b"a:0:{}N;", b"a:1:{i:0;N;", b"a:1:{i:0;", b"a:",
    # bools, null
    b"a:1:{i:0;b:2;}", b"a:1:{i:0;b:01;}", b"a:1:{i:0;b:-1;}", b"a:1:{i:0;b:1;}", b"a:1:{i:0;N:;}",
    # floats
    *(b"a:1:{i:0;d:%s;}" % f for f in (
        b"INF", b"-INF", b"+INF", b"NAN", b"-NAN", b"+NAN", b"nan", b"inf", b"Infinity", b"-0", b"+0", b"0",
        b"-0.0", b"0.0", b"1e5", b"1E5", b"1e+5", b"1e-5", b"1e999", b"-1e999", b"1e-999", b".5", b"5.", b".",
        b"e5", b"1e", b"0x1p3", b"1_0", b" 1", b"1 ", b"", b"1.7976931348623157E+308", b"4.9E-324", b"5.0E-324",
        b"0.1", b"0.30000000000000004", b"100", b"1.0", b"1.0E+25", b"9.223372036854776E+18", b"00.5",
        b"1" * 1099, b"1" * 1100, b"1" * 1101,
    )),
    # enums
    b'a:1:{i:0;E:3:"A:B";}', b'a:1:{i:0;E:2:"A:";}', b'a:1:{i:0;E:3:":AB";}', b'a:1:{i:0;E:5:"A\\B:C";}',
    b'a:1:{i:0;E:5:"A:B:C";}', b'a:1:{i:0;E:5:"A"B:C";}', b'a:1:{i:0;E:3:"\xff:B";}', b'a:1:{i:0;E:4:"A:\xc3\xa9";}',
    b'a:1:{i:0;E:4:"A:B";}', b'a:1:{i:0;E:3:"A:B"}', b'a:1:{i:0;E:1:"A";}', b'a:1:{i:0;E:3:"A B";}',
    b'E:3:"A:B";',
    # objects: class names, mangled names
    b'O:0:"":0:{}', b'O:1:"1":0:{}', b'O:3:"A B":0:{}', b'O:2:"\\A":0:{}', b'O:1:"\xff":0:{}',
    b'O:2:"\xc3\xa9":0:{}', b'O:8:"stdClass":1:{i:0;N;}', b'O:1:"A":0:{}', b'O:2:"A":0:{}', b'O:1:"AB":0:{}',
    b'O:1:"A":1:{s:3:"\x00A\x00";N;}', b'O:1:"A":1:{s:4:"\x00*\x00x";N;}', b'O:1:"A":1:{s:3:"\x00\x00x";N;}',
    b'O:1:"A":1:{s:3:"\x00ab";N;}', b'O:1:"A":1:{s:1:"\x00";N;}', b'O:1:"A":1:{s:4:"\x00A\x00b";N;}',
    b'a:1:{s:3:"\x00ab";N;}', b'O:1:"A":1:{s:0:"";N;}', b'O:1:"A":2:{s:1:"x";N;s:1:"x";N;}',
    b'O:1:"A":1:{s:1:"x";O:1:"B":1:{s:1:"y";a:0:{}}}', b'O:-1:"A":0:{}', b'O:1:"A":-1:{}',
    # C:, references
    b'C:11:"ArrayObject":0:{}', b'a:1:{i:0;C:11:"ArrayObject":0:{}}',
    b"a:2:{i:0;i:1;i:1;R:2;}", b"a:2:{i:0;i:1;i:1;r:2;}", b'a:2:{i:0;O:1:"A":0:{}i:1;r:3;}',
    b'a:2:{i:0;O:1:"A":0:{}i:1;R:3;}', b"R:1;", b"r:1;", b"a:1:{i:0;R:1;}", b"a:1:{i:0;r:1;}",
    b"a:1:{i:0;R:2;}", b"a:1:{i:0;R:0;}", b'a:2:{i:0;E:3:"A:B";i:1;r:3;}',
    b'a:4:{i:0;a:1:{i:0;a:1:{i:0;O:1:"N":0:{}}}i:1;a:3:{s:1:"k";r:4;s:1:"r";i:1;s:1:"s";R:7;}i:2;r:4;i:3;R:7;}',
    # top-level scalars
    b"N;", b"i:5;", b"b:1;", b"d:0.5;", b's:1:"x";', b"", b"x", b"}", b"{",
]
for _levels in (1, 16, 17, DEPTH - 1, DEPTH, DEPTH + 1):
    EDGES.append(b"a:1:{i:0;" * _levels + b"N;" + b"}" * _levels)
    EDGES.append(b'O:1:"A":1:{s:1:"a";' * _levels + b"N;" + b"}" * _levels)
    EDGES.append(b"a:1:{i:0;" * _levels + b"a:0:{}" + b"}" * _levels)  # PHP: an empty array is no level


@pytest.mark.parametrize("data", EDGES, ids=[repr(e[:40]) for e in EDGES])
def test_edge_cases_read_the_same(data: bytes) -> None:
    check(data)


def test_the_known_c_divergences_read_as_php_reads_them() -> None:
    # the C reader wrapped these into other integers (2329883889435672575 and 9); PHP 8.2 clamps them to
    # PHP_INT_MAX (with a warning), and so do both paths now: C steps aside, the reference clamps
    for data in (b"a:1:{i:0;i:39223372036854775807;}", b'O:1:"A":1:{s:1:"x";i:92233720368547758089;}'):
        if C_LOADS is not None:
            assert C_LOADS(data, DEPTH) is BAIL
        for value in (loads_php_arrays(data), loads(data)):
            assert (value[0] if data[:1] == b"a" else value.x) == 2**63 - 1


# -- random damage to the wire corpus ------------------------------------------------------------

PIECES = [b"}", b"{", b";", b":", b'"', b"\x00", b"\xff", b"9", b"0", b"-", b"+", b" ", b"i:1;", b"N;", b"r:1;",
          b"R:2;", b"a:1:{", b"s:1:", b"99999999999999999999", b"9223372036854775808", b"d:1.5;", b"d:-0;",
          b"d:NAN;", b"b:2;", b'O:1:"A":0:{}', b'E:3:"A:B";', b'C:1:"A":0:{}', b"i:-0;", b""]

#: numbers at and past the limits of 64-bit integers and of 6 * count
NUMBERS = [0, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 5, 39223372036854775807,
           92233720368547758089, 10**20 - 1, 10**20, 10**25 - 1, 10**25, 1537228672809129302, 3074457345618258603]


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(out) + 1)
        op = rng.random()
        if op < 0.3:
            out[i : i + 1] = rng.choice(PIECES)
        elif op < 0.55:
            out[i:i] = rng.choice(PIECES)
        elif op < 0.7:
            del out[i : i + rng.randint(1, 8)]
        elif op < 0.85 and i < len(out):
            out[i] = rng.randrange(256)
        else:  # a number changed: one off, or replaced by a boundary or an overflowing one
            runs = list(re.finditer(rb"[0-9]+", out))
            if runs:
                m = rng.choice(runs)
                number = int(m.group()) + rng.choice((-1, 1)) if rng.random() < 0.4 else rng.choice(NUMBERS)
                out[m.start() : m.end()] = str(max(number, 0)).encode()
    return bytes(out)


def test_corpus_commands_read_the_same() -> None:
    for _, raw in COMMANDS:
        check(raw)


@pytest.mark.parametrize("seed", range(4))
def test_damaged_corpus_commands_read_the_same(seed: int) -> None:
    rng = random.Random(seed)
    sources = [c for _, c in COMMANDS] or [b'O:1:"A":1:{s:1:"a";a:1:{i:0;d:0.5;}}']
    for _ in range(2500):
        check(mutate(rng, rng.choice(sources)))


# -- random PHP values ---------------------------------------------------------------------------

_ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**63 - 1, -(2**63)]))
_text = st.one_of(st.text(max_size=8), st.sampled_from(['a"b', '";', "", "\x00", "é", "s:1:\"x\";"]))
_scalars = st.one_of(
    st.none(), st.booleans(), _ints, st.floats(allow_nan=True), _text, st.binary(max_size=6),
    st.builds(PHPEnum, st.sampled_from(["A", "App\\E", "É"]), st.sampled_from(["B", "On", "_1"])),
)
_keys = st.one_of(_ints, _text)
_names = st.one_of(st.text(max_size=4), st.sampled_from(["\x00*\x00p", "\x00A\x00q", "x"]))


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_keys, children, max_size=4),
        st.builds(PHPObject, st.sampled_from(["A", "App\\Jobs\\J", "stdClass", "\u00e9"]),
                  st.dictionaries(_names, children, max_size=4)),
    )


_values = st.recursive(_scalars, _containers, max_leaves=12)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_values, st.randoms(use_true_random=False))
def test_random_values_and_their_damage_read_the_same(value: Any, rng: random.Random) -> None:
    data = dumps(value)
    check(data)
    for _ in range(5):
        check(mutate(rng, data))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=40))
def test_random_bytes_read_the_same(data: bytes) -> None:
    check(b"a:1:{i:0;" + data + b"}")
    check(data)


# -- the check can fail --------------------------------------------------------------------------


def _wrapping_reader(data: bytes, depth: int) -> Any:
    """The reference with a planted difference: an integer past 32 bits wraps, as C's did past 64."""
    try:
        value = phpread.decode(data, array=PHPArray, fast=False)
    except PHPSerializeError:
        return BAIL

    def wrap(v: Any) -> Any:
        if type(v) is int and abs(v) >= 2**31:
            return v % 2**31
        if type(v) is PHPArray:
            for k in list(v):
                v[k] = wrap(v[k])
        elif type(v) is PHPObject:
            for k in list(v._props):
                v._props[k] = wrap(v._props[k])
        return v

    return wrap(value)


def _accepting_reader(data: bytes, depth: int) -> Any:
    """A planted difference of the other kind: a value where the reference refuses."""
    try:
        return phpread.decode(data, array=PHPArray, fast=False)
    except PHPSerializeError:
        return PHPArray()


def test_a_planted_difference_is_caught() -> None:
    with pytest.raises(AssertionError, match="different value"):
        check(b"a:1:{i:0;i:4294967296;}", c_loads=_wrapping_reader)
    with pytest.raises(AssertionError, match="refuses"):
        check(b"a:1:{i:0;i:0x10;}", c_loads=_accepting_reader)
    # a float's sign and a PHPFloat's text count
    assert exact(-0.0) != exact(0.0) and exact(PHPFloat(1e5, "1e5")) != exact(PHPFloat(1e5, "1E5"))
    assert exact(math.nan) == exact(math.nan) and exact(PHPArray({0: 1})) != exact([1]) != exact({0: 1})
    # sharing counts: one object twice is not two equal objects
    a = PHPObject("A")
    assert exact([a, a]) != exact([PHPObject("A"), PHPObject("A")])


def test_the_long_fuzz_script_runs_a_seeded_slice() -> None:
    # scripts/fuzz_codec.py (the long run) over 3,000 inputs with a fixed seed: same comparison, 0 differences
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, str(root / "scripts" / "fuzz_codec.py"), "--inputs", "3000", "--seed", "5"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "done: 3000 inputs (seed 5), 0 differences" in run.stdout
