"""Tests for :mod:`laraq.protocol.phpjson`: fixed expectations plus a differential run against real PHP."""

from __future__ import annotations

import base64
import json
import random
import struct
import subprocess

import pytest
from conftest import FIXTURES

from laraq.protocol.phpjson import PhpJsonError, php_float_repr, php_json_decode, php_json_encode

JSON_PHP = FIXTURES / "php" / "json.php"


# -- fixed expectations (what PHP 8.2 prints; the differential test below re-checks them) --------

@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"),
        (100.0, "100"),
        (-0.0, "-0"),
        (0.0, "0"),
        (0.1, "0.1"),
        (0.30000000000000004, "0.30000000000000004"),
        (1e25, "1.0e+25"),
        (1.5e25, "1.5e+25"),
        (1e-7, "1.0e-7"),
        (-1e-10, "-1.0e-10"),
        (0.0001, "0.0001"),
        (0.00001, "1.0e-5"),
        (1e15, "1000000000000000"),
        (1e16, "10000000000000000"),
        (1e17, "1.0e+17"),
        (123456789012345678.0, "1.2345678901234568e+17"),
        (2.0**63, "9.223372036854776e+18"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5.0e-324"),
        (12.5, "12.5"),
    ],
)
def test_float_repr(value: float, expected: str) -> None:
    assert php_float_repr(value) == expected
    assert php_json_encode(value) == expected


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_is_an_error(bad: float) -> None:
    with pytest.raises(PhpJsonError, match="Inf and NaN"):
        php_json_encode([bad])


def test_string_escapes() -> None:
    text = "a/b \"q\" \\ \b\f\n\r\t \x00\x01\x1f \x7f é ☃ 😀 \u2028\u2029"
    assert php_json_encode(text, unescaped_unicode=True) == (
        '"a\\/b \\"q\\" \\\\ \\b\\f\\n\\r\\t \\u0000\\u0001\\u001f \x7f é ☃ 😀 \\u2028\\u2029"'
    )
    assert php_json_encode(text, unescaped_unicode=False) == (
        '"a\\/b \\"q\\" \\\\ \\b\\f\\n\\r\\t \\u0000\\u0001\\u001f \x7f \\u00e9 \\u2603 \\ud83d\\ude00 '
        '\\u2028\\u2029"'
    )
    assert php_json_encode("a/b", unescaped_slashes=True) == '"a/b"'


def test_containers_and_scalars() -> None:
    assert php_json_encode({}) == "{}"
    assert php_json_encode([]) == "[]"
    assert php_json_encode({"a": [], "b": {}, "c": [[]], "d": (1, 2)}) == '{"a":[],"b":{},"c":[[]],"d":[1,2]}'
    assert php_json_encode({"z": 1, "a": 2}) == '{"z":1,"a":2}'  # insertion order
    assert php_json_encode({1: "x", "k": None, "t": True, "f": False}) == '{"1":"x","k":null,"t":true,"f":false}'
    assert php_json_encode(2**63 - 1) == "9223372036854775807"
    assert php_json_encode(-(2**63)) == "-9223372036854775808"


def test_php_array_semantics() -> None:
    assert php_json_encode({}, php_arrays=True) == "[]"
    assert php_json_encode({"0": "a", "1": "b"}, php_arrays=True) == '["a","b"]'
    assert php_json_encode({0: "a", 1: "b"}, php_arrays=True) == '["a","b"]'
    assert php_json_encode({"1": "b", "0": "a"}, php_arrays=True) == '{"1":"b","0":"a"}'
    assert php_json_encode({"00": "a"}, php_arrays=True) == '{"00":"a"}'
    assert php_json_encode(php_json_decode('{"a":{},"b":[]}'), php_arrays=True) == '{"a":[],"b":[]}'


def test_errors() -> None:
    with pytest.raises(PhpJsonError, match="Malformed UTF-8"):
        php_json_encode(b"\xff\xfe")
    with pytest.raises(PhpJsonError, match="Malformed UTF-8"):
        php_json_encode("\ud800")
    with pytest.raises(PhpJsonError, match="64-bit"):
        php_json_encode(2**64)
    with pytest.raises(PhpJsonError, match="not supported"):
        php_json_encode(object())
    assert php_json_encode(b"caf\xc3\xa9") == '"café"'


def test_decode() -> None:
    assert php_json_decode('{"a":1,"a":2,"b":3}') == {"a": 2, "b": 3}
    assert php_json_decode("12345678901234567890") == 1.2345678901234567e19
    assert isinstance(php_json_decode("9223372036854775807"), int)
    with pytest.raises(PhpJsonError):
        php_json_decode("NaN")
    with pytest.raises(PhpJsonError):
        php_json_decode("{")
    with pytest.raises(PhpJsonError):
        php_json_decode(b"\"\xff\"")


# -- differential test against real PHP ---------------------------------------------------------

def _json_cases() -> list[object]:
    rng = random.Random(20240102)
    random_floats = [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(400)]
    random_floats = [f for f in random_floats if f == f and abs(f) != float("inf")]
    scaled = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(400)]
    return [
        "plain ascii",
        "unicode é ü ☃ 日本語",
        "emoji 😀 🎉 𝄞",
        "line sep \u2028 para \u2029",
        "slashes / \\ // https://example.com/a/b?c=d",
        "quotes \" ' <tag> & amp",
        "controls \x00\x01\x02\x07\b\t\n\x0b\f\r\x0e\x1b\x1f",
        "del \x7f and \x80 \x9f \u00a0 \u00ff \u0100 \u07ff \u0800 \uffff \U00010000 \U0010ffff",
        "",
        0, 1, -1, 42, 2**31, 2**53, 2**53 + 1, 12345678901234567, 2**63 - 1, -(2**63),
        0.1, 1e25, 1e-7, 0.30000000000000004, -0.0, 0.0, 100.0, 1.0, -1.0, 1e15, 1e16, 1e17, 1e-4, 1e-5,
        1.5e-323, 1.7976931348623157e308, 2.2250738585072014e-308, 123456.789, 3.14159, 0.5, 1 / 3,
        True, False, None,
        [], {}, [[]], [{}], {"a": {}}, {"a": []}, [[], {}, [[[]]]],
        {"0": "a", "1": "b"}, {"1": "b", "0": "a"}, {"0": "a", "2": "b"}, {"": "empty key"},
        {"nested": {"list": [1, 2.5, "x", None, True], "obj": {"k/ey": "v\u2028"}}},
        {"uuid": "b7553fd4-1a34", "data": {"command": 'O:8:"stdClass":0:{}', "x": "\x00*\x00p"}},
        [1, "two", 3.0, [4, [5, {"six": 6}]]],
        *random_floats,
        *scaled,
    ]


def _byte_cases() -> list[bytes]:
    return [b"ok \xc3\xa9", b"\xff", b"abc\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x7f"]


def _run_php(php: str, cases: list[dict[str, str]]) -> list[list[str]]:
    out = subprocess.run(
        [php, str(JSON_PHP)], input=json.dumps(cases).encode(), capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [line.split(" ") for line in out.splitlines()]


def _py(value: object, **flags: bool) -> str:
    try:
        return base64.b64encode(php_json_encode(value, **flags).encode()).decode()
    except PhpJsonError:
        return "ERR"


def _norm(php_field: str) -> str:
    return "ERR" if php_field.startswith("ERR:") else php_field


@pytest.mark.php
def test_differential_against_php(php: str) -> None:
    values = _json_cases()
    texts = [json.dumps(v) for v in values]
    results = _run_php(php, [{"json": t} for t in texts])
    assert len(results) == len(texts)
    flag_sets = [(False, False), (True, False), (False, True), (True, True)]
    mismatches = []
    for text, fields in zip(texts, results, strict=True):
        value = php_json_decode(text)
        ours = [
            _py(value, unescaped_unicode=u, unescaped_slashes=s) for u, s in flag_sets
        ]
        ours += [
            _py(value, unescaped_unicode=u, php_arrays=True) for u in (False, True)
        ]
        theirs = [_norm(f) for f in fields]
        if ours != theirs:
            mismatches.append((text, [base64.b64decode(f) if f != "ERR" else f for f in theirs]))
    assert not mismatches, mismatches[:5]


@pytest.mark.php
def test_differential_bytes_against_php(php: str) -> None:
    cases = _byte_cases()
    results = _run_php(php, [{"bytes_b64": base64.b64encode(c).decode()} for c in cases])
    for raw, fields in zip(cases, results, strict=True):
        ours = [_py(raw, unescaped_unicode=u) for u in (False, True)]
        assert ours == [_norm(f) for f in fields], raw


def _slow(value: object, **flags: bool) -> str:
    import laraq.protocol.phpjson as phpjson

    safe = phpjson._orjson_safe
    phpjson._orjson_safe = lambda _v: False  # type: ignore[assignment]
    try:
        return php_json_encode(value, **flags)
    finally:
        phpjson._orjson_safe = safe  # type: ignore[assignment]


def test_the_orjson_fast_path_writes_the_same_text() -> None:
    from conftest import corpus_dir

    rng = random.Random(7)
    samples: list[object] = []
    for path in sorted(corpus_dir().glob("*/*.json"))[:400]:
        try:
            samples.append(json.loads(path.read_bytes()))
        except ValueError:
            continue
    alphabet = [chr(i) for i in range(128)] + ["é", "\u2028", "😀", "/"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        samples.append({"k/" + text: [text, rng.randrange(-2**63, 2**63), None, True, {"n": [text]}]})
    samples += [2**63, -2**63 - 1, [1.5], {"a": (1, 2)}, {1: "x"}, b"bytes", "a/b"]
    for sample in samples:
        for flags in ({}, {"unescaped_unicode": False}, {"unescaped_slashes": True}):
            try:
                expected = _slow(sample, **flags)
            except PhpJsonError:
                with pytest.raises(PhpJsonError):
                    php_json_encode(sample, **flags)
                continue
            assert php_json_encode(sample, **flags) == expected
