"""The C unserialize path (``laraq._speedups``, built by ``setup.py``) against the pure-Python codec.

The worker decodes every command through it (:func:`laraq.protocol.phparray.loads_php_arrays`), so it must hand
handlers exactly what the pure-Python path gives, or step aside (the ``_BAIL`` marker) and let that path
decide. Checked on the Laravel 8-13 wire corpus, on random PHP values, and on random damage to valid
bytes: whatever C returns equals ``php_arrays(loads(...))`` type for type, and nothing ``loads`` rejects
ever comes back as a value. Without a C compiler the build is skipped and laraq runs the Python codec;
under CI (``.ci/run`` installs a compiler) the build must be there.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest
from conftest import require
from hypothesis import given, settings
from hypothesis import strategies as st
from test_phparray import COMMANDS, _shape

from laraq.protocol import phparray, phpread, serializer
from laraq.protocol.phparray import PHPArray, loads_php_arrays, php_arrays
from laraq.protocol.serializer import PHPEnum, PHPFloat, PHPObject, PHPSerializeError, dumps, loads

BAIL = phpread.BAIL
DEPTH = serializer.DEFAULT_MAX_DEPTH


@pytest.fixture(scope="module")
def c_loads():
    require(phparray._speedups is not None, "laraq._speedups is not built (no C compiler at install time)")
    require(phparray._c_pairs_loads is not None, "LARAQ_PURE_PYTHON is set: the C path is off")
    return phparray._c_pairs_loads


def _truth(raw: bytes) -> object:
    try:
        return php_arrays(loads(raw))
    except PHPSerializeError:
        return PHPSerializeError


def _agrees(c_loads, raw: bytes) -> object:
    """C's answer is the bail marker, or the pure path's value type for type (never for a rejected input)."""
    got = c_loads(raw, DEPTH)
    if got is BAIL:
        return got
    truth = _truth(raw)
    assert truth is not PHPSerializeError, f"C accepted what loads() rejects: {raw!r}"
    assert _shape(got) == _shape(truth), raw
    return got


@pytest.mark.parametrize("name, raw", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_corpus_commands_decode_the_same_in_c(c_loads, name: str, raw: bytes) -> None:
    got = _agrees(c_loads, raw)
    if b"r:" not in raw and b"R:" not in raw and b"C:" not in raw:
        assert got is not BAIL, "a plain Laravel command must take the C path"
    if got is not BAIL:
        assert dumps(got) == raw


@pytest.mark.parametrize("raw, expected", [
    (b'a:1:{i:0;i:-9223372036854775808;}', [-(2**63)]),
    (b'a:1:{i:0;i:9223372036854775807;}', [2**63 - 1]),
    (b'a:1:{i:0;i:+0007;}', [7]),
    (b'a:1:{i:-9223372036854775808;b:1;}', {-(2**63): True}),
    (b'a:2:{i:0;s:5:"a"b;c";i:1;s:0:"";}', ['a"b;c', ""]),
    (b'a:1:{s:2:"\xff\xfe";s:2:"\xc3\xa9";}', {b"\xff\xfe": "\u00e9"}),
    (b'a:3:{i:0;d:0.5;i:1;d:-INF;i:2;d:1e5;}', [0.5, float("-inf"), 100000.0]),
    (b'O:8:"stdClass":2:{s:4:"\x00*\x00p";N;s:9:"\x00A\\B\x00priv";a:0:{}}', None),
    (b'a:1:{i:0;E:19:"App\\Enums\\Status:On";}', [PHPEnum("App\\Enums\\Status", "On")]),
])
def test_edge_values(c_loads, raw: bytes, expected: object) -> None:
    got = _agrees(c_loads, raw)
    assert got is not BAIL
    if expected is not None:
        assert got == expected
    assert dumps(got) == dumps(php_arrays(loads(raw)))  # non-canonical input (+0007, 1e5) is kept as read


def test_shapes_handlers_rely_on(c_loads) -> None:
    got = c_loads(b'O:1:"J":3:{s:4:"list";a:2:{i:0;s:1:"a";i:1;s:1:"b";}s:3:"map";a:0:{}s:1:"f";d:1e5;}', DEPTH)
    assert type(got) is PHPObject and got.class_name == "J" and type(got._props) is dict
    assert type(got.list) is PHPArray and got.list.is_list and got.list == ["a", "b"]
    assert type(got.map) is PHPArray and got.map.get("pages", 1) == 1
    assert type(got.f) is PHPFloat and got.f.lexeme == "1e5"


@pytest.mark.parametrize("raw", [
    b'a:1:{i:0;i:9223372036854775808;}',  # past PHP_INT_MAX
    b'a:1:{i:0;i:-9223372036854775809;}',
    b'a:1:{i:0;i:00000000000000000000000001;}',  # 26 digits
    b'a:2:{i:0;N;i:0;N;}',  # a key twice
    b'a:2:{i:0;N;}', b'a:1:{i:0;N;i:1;N;}',  # fewer / more members than declared
    b'a:1:{i:0;N;}x',  # bytes after the end
    b'a:1:{i:0;N;', b'a:1:{i:0;s:5:"abc";}', b'a:1:{i:0;s:3:"abc"}',  # cut short, wrong length
    b'a:1:{i:0;a:1:{i:0;r:1;}}', b'a:1:{i:0;C:3:"Foo":0:{}}',  # references, Serializable: the Python path's
    b'O:3:"Foo":1:{s:3:"\x00ab";N;}',  # a broken mangled name
    b'O:4:"Foo":0:{}', b'O:3:"F o":0:{}', b'O:2:"\xff\xfe":0:{}',  # class name length, characters, UTF-8
    b'a:99999999999999999999:{}', b'a:1000:{i:0;N;}',  # counts the bytes cannot hold
    b'a:1:{i:0;d:1.2.3;}', b'a:1:{i:0;d:;}', b'a:1:{i:0;b:2;}', b'a:1:{i:0;E:3:"Foo";}',
    b'i:5;', b's:1:"x";', b'', b'a', b'a:1:{',
])
def test_everything_else_steps_aside(c_loads, raw: bytes) -> None:
    assert c_loads(raw, DEPTH) is BAIL
    # and the public path still decides it as the pure-Python codec does
    try:
        expected = _shape(php_arrays(loads(raw)))
    except PHPSerializeError:
        with pytest.raises(PHPSerializeError):
            loads_php_arrays(raw)
    else:
        assert _shape(loads_php_arrays(raw)) == expected


def test_depth_is_bounded(c_loads) -> None:
    deep = b"a:1:{i:0;" * (DEPTH + 88) + b"N;" + b"}" * (DEPTH + 88)
    assert c_loads(deep, DEPTH) is BAIL
    shallow = b"a:1:{i:0;" * 10 + b"N;" + b"}" * 10
    # ten containers: allowed at max_depth 10, not at 9 - the pure path's rule
    assert c_loads(shallow, 10) is not BAIL
    assert phpread._token_loads(shallow, len(shallow), 10, PHPArray) is not BAIL
    assert c_loads(shallow, 9) is BAIL
    assert phpread._token_loads(shallow, len(shallow), 9, PHPArray) is BAIL


@pytest.mark.parametrize("levels", [1, 15, 16, 17, 32, 33, 200])
def test_nesting_past_the_inline_frames(c_loads, levels: int) -> None:
    # the first 16 frames live on the C stack, deeper ones on the heap, grown as the depth is reached
    objects = b"".join(b'O:1:"K":2:{s:1:"n";i:%d;s:1:"c";' % i if i % 2 else b"a:2:{i:0;i:%d;i:1;" % i
                       for i in range(levels))
    closers = b"".join(b"}" for _ in range(levels))
    raw = objects + b"N;" + closers
    value = c_loads(raw, DEPTH)
    assert value is not BAIL
    assert _shape(value) == _shape(php_arrays(loads(raw)))
    assert c_loads(raw, levels - 1) is BAIL if levels > 1 else True
    assert c_loads(raw[:-1], DEPTH) is BAIL  # the input ends inside the outermost container
    assert c_loads(raw + b"}", DEPTH) is BAIL


def test_nesting_up_to_max_depth(c_loads) -> None:
    exactly = b"a:1:{i:0;" * DEPTH + b"N;" + b"}" * DEPTH
    value = c_loads(exactly, DEPTH)
    for _ in range(DEPTH):
        assert isinstance(value, PHPArray) and list(value) == [0]
        value = value[0]
    assert value is None
    assert c_loads(b"a:1:{i:0;" + exactly + b"}", DEPTH) is BAIL


_keys = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=8))
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=12),
    st.binary(max_size=6), st.floats(allow_nan=False), st.sampled_from([PHPEnum("App\\E", "A"), PHPEnum("B", "c_1")]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(_keys, inner, max_size=5),
        st.builds(lambda props: PHPObject("App\\Jobs\\J", props), st.dictionaries(st.text(min_size=1, max_size=6),
                                                                                  inner, max_size=5)),
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.lists(_values, max_size=6), st.dictionaries(_keys, _values, max_size=6),
                 st.builds(lambda p: PHPObject("App\\Jobs\\EchoJob", p),
                           st.dictionaries(st.text(min_size=1, max_size=8), _values, max_size=8))))
def test_random_values_decode_the_same(c_loads, value: object) -> None:
    raw = dumps(value)
    got = _agrees(c_loads, raw)
    # only references and property names starting with NUL that are not PHP's mangling step aside
    assert got is not BAIL or b"r:" in raw or b"R:" in raw or b':"\x00' in raw
    if got is not BAIL:
        assert dumps(got) == raw


def test_damaged_bytes_never_decode_differently(c_loads) -> None:
    rng = random.Random(1313)
    seeds = [raw for _, raw in COMMANDS[:40]] or [
        b'O:16:"App\\Jobs\\EchoJob":3:{s:4:"args";a:1:{i:0;s:3:"x;y";}s:4:"mode";s:2:"ok";s:1:"d";d:0.25;}']
    alphabet = b'aOsiNbdE:;{}"0123456789-+.\x00\\'
    taken = 0
    for _ in range(6000):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(raw) + 1)
            kind = rng.random()
            if kind < 0.4 and pos < len(raw):
                raw[pos] = rng.choice(alphabet)
            elif kind < 0.7:
                raw[pos:pos] = bytes([rng.choice(alphabet)])
            elif pos < len(raw):
                del raw[pos:pos + rng.randint(1, 4)]
        if _agrees(c_loads, bytes(raw)) is not BAIL:
            taken += 1
    assert taken > 100  # the damage left many inputs valid: C decided those, equal to the pure path


def test_no_memory_kept_on_any_path(c_loads) -> None:
    inputs = [(raw, DEPTH) for _, raw in COMMANDS[:10]] + [(raw, DEPTH) for raw in (
        b'a:2:{i:0;N;i:0;N;}', b'a:1:{i:0;a:1:{i:0;a:1:{i:0;N;}}}x', b'a:1:{i:0;d:1.2.3;}', b'a:1:{i:0;E:3:"Foo";}',
        b'O:1:"J":2:{s:1:"a";a:1:{i:0;s:2:"\xff\xfe";}s:1:"b";O:1:"K":1:{s:1:"c";d:0.5;}}',
        # past the frames on the C stack: valid, cut short deep down
        b"a:1:{i:0;" * 40 + b"N;" + b"}" * 40, b"a:1:{i:0;" * 40 + b"N;" + b"}" * 39,
    )] + [
        # over the depth limit past the frames on the C stack (a limit of 40: the default limit's path)
        (b"a:1:{i:0;" * 41 + b"N;" + b"}" * 41, 40),
    ]
    # over the default limit, the heap frames grown many times on the way: thousands of levels a call, so
    # a leak per level or per growth shows within a few calls
    deepest = b"a:1:{i:0;" * (DEPTH + 1) + b"N;" + b"}" * (DEPTH + 1)
    for raw, depth in inputs * 50:  # warm up caches and interned objects
        c_loads(raw, depth)
    c_loads(deepest, DEPTH)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for raw, depth in inputs * 2000:
            c_loads(raw, depth)
        for _ in range(100):
            c_loads(deepest, DEPTH)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after {len(inputs) * 2000 + 100} decodes"


def test_pure_python_switch(monkeypatch) -> None:
    monkeypatch.setenv("LARAQ_PURE_PYTHON", "1")
    assert phparray._c_build() is None
    raw = b'O:1:"J":1:{s:1:"a";a:0:{}}'
    monkeypatch.setattr(phparray, "_c_pairs_loads", None)
    assert _shape(loads_php_arrays(raw)) == _shape(php_arrays(loads(raw)))


def test_loads_rejects_stay_errors_with_c(c_loads) -> None:
    with pytest.raises(PHPSerializeError):
        loads_php_arrays(b'a:1:{i:0;s:5:"abc";}')


def test_repeated_short_strings_are_shared_and_never_mixed_up(c_loads) -> None:
    """The C path hands back the same str for a short ASCII string it has met before (a class's property
    names, its name): equal to what the bytes say whatever else came in between, never bytes or non-ASCII
    text mistaken for a cached name, and a payload full of new names keeps the table's size."""
    rng = random.Random(7)

    def command(names: list[str], values: list[bytes]) -> bytes:
        members = b"".join(b's:%d:"%s";s:%d:"%s";' % (len(n), n.encode(), len(v), v) for n, v in zip(names, values, strict=True))
        return b'O:10:"App\\Jobs\\X":%d:{%s}' % (len(names), members)

    names = ["\0*\0queue", "connection", "chainQueue", "a" * 64, "b" * 65]
    first = c_loads(command(names, [b"default", b"redis", b"x", b"y", b"z"]), DEPTH)
    again = c_loads(command(names, [b"default", b"redis", b"x", b"y", b"z"]), DEPTH)
    assert list(first.raw()) == list(again.raw()) == names
    assert all(a is b for a, b in zip(list(first.raw())[:4], list(again.raw())[:4], strict=True))
    assert list(again.raw().values()) == ["default", "redis", "x", "y", "z"]
    assert first.class_name is again.class_name
    # same length, one byte apart; the same bytes as invalid UTF-8 or as non-ASCII text
    for a, b in ((b"queue", b"queuf"), (b"\xff\xfe", b"ab"), ("é".encode(), b"ab")):
        got = c_loads(b'a:2:{i:0;s:%d:"%s";i:1;s:%d:"%s";}' % (len(a), a, len(b), b), DEPTH)
        assert _shape(got) == _shape(_truth(b'a:2:{i:0;s:%d:"%s";i:1;s:%d:"%s";}' % (len(a), a, len(b), b)))
    # thousands of names never met before: every one decodes as itself, and the memory stays put
    for _ in range(200):  # warm up
        c_loads(command([f"p{rng.getrandbits(40)}"], [b"v"]), DEPTH)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5000):
            name = f"p{rng.getrandbits(40)}"
            value = f"v{rng.getrandbits(40)}".encode()
            got = c_loads(command([name], [value]), DEPTH)
            assert got.raw() == {name: value.decode()}
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after 5,000 commands of new names"
