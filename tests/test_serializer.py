"""laraq.protocol.serializer: the Laravel wire corpus round-trips byte for byte, values read right, hostile input fails cleanly."""

from __future__ import annotations

import base64
import json
import math
import random
import re
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import phpserialize
import pytest
from conftest import corpus_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from laraq.protocol import phpread
from laraq.protocol.serializer import (
    MODEL_IDENTIFIER_CLASS,
    ModelIdentifier,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    PHPSerializeError,
    deref,
    dumps,
    format_float,
    from_datetime,
    is_model_identifier,
    loads,
    mangle,
    to_datetime,
    unmangle,
)

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("8.83.26", "9.52.22", "10.50.3", "11.56.0", "12.67.0", "13.x")


def _commands() -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for version in VERSIONS:
        for path in sorted((corpus_dir() / version).glob("*.json")):
            try:
                doc = json.loads(path.read_bytes())
            except ValueError:
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
                continue
            command = doc["data"].get("command")
            if isinstance(command, str) and command.startswith("O:"):
                found.append((f"{version}/{path.name}", command.encode("utf-8")))
    return found


COMMANDS = _commands()


def _command(version: str, kind: str) -> bytes:
    doc = json.loads((corpus_dir() / version / f"{kind}.pushed.json").read_bytes())
    return doc["data"]["command"].encode("utf-8")


@pytest.fixture(scope="module", autouse=True)
def _corpus_present() -> None:
    if not corpus_dir().is_dir():
        pytest.fail(f"wire corpus missing at {corpus_dir()} (set LARAQ_CORPUS)")


# -- the corpus ----------------------------------------------------------------------------------


def test_corpus_has_every_version() -> None:
    assert len(COMMANDS) >= 90
    assert {name.split("/")[0] for name, _ in COMMANDS} == set(VERSIONS)


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_corpus_command_round_trips(name: str, command: bytes) -> None:
    value = loads(command)
    assert isinstance(value, PHPObject)
    assert value.class_name.startswith(("App\\Jobs\\", "Illuminate\\"))
    assert dumps(value) == command
    # str input (what json.loads gives) is the same thing
    assert dumps(loads(command.decode("utf-8"))) == command


@pytest.mark.parametrize("version", VERSIONS)
def test_encrypted_command_is_serialized_twice(version: str) -> None:
    outer_bytes = (corpus_dir() / version / "encrypted.command-decrypted.bin").read_bytes()
    assert outer_bytes.startswith(b"s:")
    outer = loads(outer_bytes)
    assert isinstance(outer, str) and outer.startswith("O:")
    assert dumps(outer) == outer_bytes
    job = loads(outer)
    assert job.class_name == "App\\Jobs\\EncryptedJob"
    assert job["note"] == "é/☃ secret"
    assert job.visibility("note") == "protected"
    assert dumps(job) == outer.encode("utf-8")


@pytest.mark.parametrize("version", VERSIONS)
def test_plain_job_values(version: str) -> None:
    job = loads(_command(version, "plain"))
    assert job.class_name == "App\\Jobs\\PlainJob"
    assert job["title"] == "Héllo wörld ☃ 😀 \u2028 end"
    assert job.title == job["title"]
    assert job["path"] == 'dir/sub\\file "quoted"'
    assert job["secret"] == 's3/cr"et'
    assert job.get("secret") == 's3/cr"et'
    assert job.visibility("secret") == "private"
    assert job.declaring_class("secret") == "App\\Jobs\\PlainJob"
    assert job.key_of("secret") == "\0App\\Jobs\\PlainJob\0secret"
    assert job.visibility("nested") == "protected"
    assert job.declaring_class("nested") is None
    assert job["nested"] == {
        "level1": {"level2": {"x": 1, "list": [1, 2, 3]}},
        "tags": ["a", "b"],
        "map": {"k": None},
    }
    assert job["empty"] == []
    assert job["ratio"] == 0.1 and type(job["ratio"]) is float
    assert job["big"] == 9223372036854775807
    assert job["flag"] is True
    assert job["nothing"] is None and "nothing" in job
    assert "nope" not in job and job.get("nope", "dflt") == "dflt"
    props = job.properties()
    assert props["secret"] == 's3/cr"et' and props["middleware"] == [] and props["chained"] == []
    # Queueable's properties in this version's declaration order
    names = list(job)
    queueable = names[names.index("job") + 1 :]
    from laraq.protocol.versions import LaravelVersion

    expected = [n for n, _ in LaravelVersion.parse(version).queueable_properties()]
    assert queueable == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_enum_job(version: str) -> None:
    job = loads(_command(version, "enum"))
    assert job["status"] == PHPEnum("App\\Enums\\Status", "Active")
    assert job["priority"] == PHPEnum("App\\Enums\\Priority", "High")
    assert job["suit"] == PHPEnum("App\\Enums\\Suit", "Spades")
    assert job["list"] == [PHPEnum("App\\Enums\\Status", "Archived"), PHPEnum("App\\Enums\\Suit", "Hearts")]
    assert hash(job["status"]) == hash(PHPEnum("App\\Enums\\Status", "Active"))
    assert str(job["suit"]) == "App\\Enums\\Suit::Spades"


@pytest.mark.parametrize("version", VERSIONS)
def test_carbon_job(version: str) -> None:
    job = loads(_command(version, "carbon"))
    when = to_datetime(job["when"])
    assert job["when"].class_name == "Illuminate\\Support\\Carbon"
    assert when == datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert when.utcoffset() == timedelta(0)
    paris = to_datetime(job["paris"])
    assert job["paris"].class_name == "Carbon\\CarbonImmutable"
    assert paris.tzinfo == ZoneInfo("Europe/Paris")
    assert paris.utcoffset() == timedelta(hours=2)
    assert paris == datetime(2024, 6, 30, 21, 59, 59, tzinfo=UTC)
    native = to_datetime(job["native"])
    assert native.utcoffset() == timedelta(hours=5, minutes=30)
    assert native == datetime(2024, 2, 29, 6, 30, tzinfo=UTC)
    # and back: from_datetime writes what PHP wrote
    assert dumps(from_datetime(when)) == dumps(job["when"])
    assert dumps(from_datetime(paris, "Carbon\\CarbonImmutable")) == dumps(job["paris"])
    assert dumps(from_datetime(native, "DateTimeImmutable")) == dumps(job["native"])


@pytest.mark.parametrize("version", VERSIONS)
def test_model_identifier(version: str) -> None:
    job = loads(_command(version, "model"))
    assert is_model_identifier(job["widget"]) and not is_model_identifier(job)
    one = ModelIdentifier.from_php(job["widget"])
    many = ModelIdentifier.from_php(job["widgets"])
    assert one == ModelIdentifier("App\\Models\\Widget", 1, [], "sqlite", None)
    assert many.id == [1, 2] and many.is_collection and not one.is_collection
    has_cc = version != "8.83.26"
    assert ("collectionClass" in job["widget"]) is has_cc
    assert dumps(one.to_php(include_collection_class=has_cc)) == dumps(job["widget"])
    assert dumps(many.to_php(include_collection_class=has_cc)) == dumps(job["widgets"])
    with pytest.raises(PHPSerializeError):
        ModelIdentifier.from_php(job)


@pytest.mark.parametrize("version", VERSIONS)
def test_chain_nested_commands(version: str) -> None:
    job = loads(_command(version, "chain"))
    assert job["step"] == 1
    chained = job["chained"]
    assert isinstance(chained, list) and len(chained) == 2
    steps = [loads(link) for link in chained]
    assert [s["step"] for s in steps] == [2, 3]
    assert all(dumps(s) == link.encode() for s, link in zip(steps, chained, strict=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_serializes_models_default_skipping(version: str) -> None:
    job = loads(_command(version, "serializes-models-defaults"))
    assert job["userId"] == 42 and job["limit"] == 20 and job["subject"] == "Hi"
    assert job["items"] == ["x", "y"]
    if version == "8.83.26":
        assert len(job) == 18 and job["secret"] == "keep" and job["note"] == "default note"
    else:
        assert len(job) == 4 and "secret" not in job and "note" not in job


def test_closure_job_keeps_signed_source() -> None:
    doc = json.loads((corpus_dir() / "13.x" / "closure.pushed.json").read_bytes())
    job = loads(doc["data"]["command"])
    signed = job["closure"]["serializable"]
    assert signed.class_name == "Laravel\\SerializableClosure\\Serializers\\Signed"
    native = loads(signed["serializable"])
    assert "return $closureVar;" in native["function"]
    assert native["use"] == {"closureVar": "captured-by-use"}


def test_corpus_commands_and_a_megabyte_payload_round_trip() -> None:
    """Every corpus command parses; a 1 MB array round-trips byte for byte (speed: bench/serializer.py)."""
    assert COMMANDS
    for name, command in COMMANDS:
        assert loads(command) is not None, name
    big = dumps({"rows": [{"id": i, "name": f"row {i}", "ratio": i / 7, "tags": ["a", "b"]} for i in range(20000)]})
    assert len(big) > 1_000_000
    assert dumps(loads(big)) == big


def test_phpserialize_cross_check() -> None:
    """phpserialize 1.3 reads the subset it understands (no enums/references) the same way."""
    checked = 0
    for name, command in COMMANDS:
        if b"E:" in command or b"r:" in command or b"R:" in command or b"d:" in command:
            continue
        ours = loads(command)
        theirs = phpserialize.loads(command, decode_strings=True, object_hook=phpserialize.phpobject)
        assert theirs.__name__ == ours.class_name, name
        their_props = theirs.__php_vars__
        assert list(their_props) == list(ours.raw()), name

        def same(a: Any, b: Any) -> bool:
            if isinstance(a, list):
                return isinstance(b, dict) and list(b.keys()) == list(range(len(a))) and all(
                    same(x, b[i]) for i, x in enumerate(a)
                )
            if isinstance(a, dict):
                return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
            if isinstance(a, PHPObject):
                return getattr(b, "__name__", None) == a.class_name and all(
                    same(v, b.__php_vars__[k]) for k, v in a.raw().items()
                )
            return bool(a == b)

        assert all(same(v, their_props[k]) for k, v in ours.raw().items()), name
        # and phpserialize reads what we write for plain values
        plain = {"a": [1, 2, {"x": "é"}], 5: None, "t": True}
        assert phpserialize.loads(dumps(plain), decode_strings=True) == {
            "a": {0: 1, 1: 2, 2: {"x": "é"}}, 5: None, "t": True,
        }
        checked += 1
    assert checked >= 30


# -- scalars and floats --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"), (1e25, "1.0E+25"), (-0.0, "-0"), (0.0, "0"), (math.inf, "INF"), (-math.inf, "-INF"),
        (math.nan, "NAN"), (1e-7, "1.0E-7"), (1e15, "1000000000000000"), (1e16, "10000000000000000"),
        (1e17, "1.0E+17"), (1e-5, "1.0E-5"), (0.0001, "0.0001"), (1.0, "1"), (100.0, "100"),
        (1 / 3, "0.3333333333333333"), (5e-324, "5.0E-324"), (2.0**63, "9.223372036854776E+18"),
        (-1.5e300, "-1.5E+300"), (0.00012345, "0.00012345"), (123456789.125, "123456789.125"),
    ],
)
def test_format_float(value: float, text: str) -> None:
    assert format_float(value) == text
    assert dumps(value) == f"d:{text};".encode()
    back = loads(f"d:{text};")
    assert type(back) is float
    assert (math.isnan(back) and math.isnan(value)) or (back == value and math.copysign(1, back) == math.copysign(1, value))


@pytest.mark.parametrize("text", ["1e5", "1.", ".5", "+1.5", "1.0", "0.10", "1E+25", "-0.0", "007"])
def test_non_canonical_float_text_is_kept(text: str) -> None:
    value = loads(f"d:{text};")
    assert isinstance(value, PHPFloat) and value.lexeme == text and value == float(text)
    assert dumps(value) == f"d:{text};".encode()
    assert dumps([value, 2 * value]) == f"a:2:{{i:0;d:{text};i:1;d:{format_float(2 * float(text))};}}".encode()


def test_scalars() -> None:
    cases: list[tuple[Any, bytes]] = [
        (None, b"N;"), (True, b"b:1;"), (False, b"b:0;"), (0, b"i:0;"), (-7, b"i:-7;"),
        (2**63 - 1, b"i:9223372036854775807;"), (-(2**63), b"i:-9223372036854775808;"),
        ("", b's:0:"";'), ("é", b's:2:"\xc3\xa9";'), (b"\xff", b's:1:"\xff";'), ("a\0b", b's:3:"a\x00b";'),
        ([], b"a:0:{}"), ({}, b"a:0:{}"), ((1, 2), b"a:2:{i:0;i:1;i:1;i:2;}"),
        ({1: "a"}, b'a:1:{i:1;s:1:"a";}'), ({"k": [None]}, b'a:1:{s:1:"k";a:1:{i:0;N;}}'),
        (PHPEnum("A\\B", "C"), b'E:5:"A\\B:C";'),
    ]
    for value, wire in cases:
        assert dumps(value) == wire, value
    assert loads(b's:1:"\xff";') == b"\xff"
    assert loads(b'a:2:{i:1;s:1:"a";i:0;s:1:"b";}') == {1: "a", 0: "b"}
    assert loads(b'a:2:{i:0;s:1:"a";i:1;s:1:"b";}') == ["a", "b"]
    assert loads(b'a:1:{s:1:"0";N;}') == {"0": None}
    assert loads(b'a:1:{s:1:"\xff";N;}') == {b"\xff": None}
    assert loads(b"i:+5;") == 5
    with pytest.raises(PHPSerializeError):
        dumps(2**63)
    with pytest.raises(PHPSerializeError):
        dumps("\ud800")
    with pytest.raises(TypeError):
        dumps({1.5: 1})
    with pytest.raises(TypeError):
        dumps(object())


# -- objects ---------------------------------------------------------------------------------------


def test_visibility_mangling_and_lookup_order() -> None:
    # a parent's private "secret" next to the child's own private "secret" and a protected "x"
    wire = (
        b'O:5:"Child":4:{s:12:"\0Base\0secret";s:4:"base";s:13:"\0Child\0secret";s:5:"child";'
        b's:4:"\0*\0x";i:1;s:12:"\0Base\0hidden";i:2;}'
    )
    obj = loads(wire)
    assert obj["secret"] == "child"  # the object's own class first
    assert obj.declaring_class("secret") == "Child"
    assert obj["hidden"] == 2 and obj.declaring_class("hidden") == "Base"
    assert obj.visibility("x") == "protected"
    assert obj.raw()["\0Base\0secret"] == "base"
    obj["secret"] = "new"
    obj["x"] = 5
    obj["fresh"] = True
    assert obj.raw()["\0Child\0secret"] == "new" and obj.raw()["\0*\0x"] == 5
    assert obj.visibility("fresh") == "public"
    assert dumps(obj).startswith(b'O:5:"Child":5:{s:12:"\0Base\0secret";s:4:"base";s:13:"\0Child\0secret";s:3:"new";')
    del obj["fresh"]
    assert "fresh" not in obj
    with pytest.raises(AttributeError):
        _ = obj.missing
    with pytest.raises(KeyError):
        obj.visibility("missing")
    assert unmangle("\0*\0p") == ("protected", None, "p")
    assert unmangle("\0A\\B\0p") == ("private", "A\\B", "p")
    assert unmangle("p") == ("public", None, "p")
    assert mangle("p", "private", "A") == "\0A\0p"
    with pytest.raises(ValueError):
        mangle("p", "private")


def test_build() -> None:
    obj = PHPObject.build("App\\Jobs\\X", public={"a": 1}, protected={"b": "x"}, private={"c": [1, 2]})
    assert dumps(obj) == (
        b'O:10:"App\\Jobs\\X":3:{s:1:"a";i:1;s:4:"\0*\0b";s:1:"x";s:13:"\0App\\Jobs\\X\0c";a:2:{i:0;i:1;i:1;i:2;}}'
    )
    obj.set("c", "parent", "private", "App\\Base")
    assert obj["c"] == [1, 2] and obj.raw()["\0App\\Base\0c"] == "parent"
    assert loads(dumps(obj)) == obj
    assert obj != PHPObject("App\\Jobs\\Y", obj.raw())


# -- references --------------------------------------------------------------------------------------


REFERENCE_CASES = [
    b'a:2:{i:0;O:4:"Node":2:{s:1:"a";N;s:1:"b";N;}i:1;r:2;}',
    b"a:2:{i:0;i:1;i:1;R:2;}",
    b'a:2:{i:0;O:4:"Node":2:{s:1:"a";N;s:1:"b";N;}i:1;R:2;}',
    b'O:4:"Node":2:{s:1:"a";r:1;s:1:"b";N;}',
    b'O:4:"Node":2:{s:1:"a";i:5;s:1:"b";R:2;}',
    b"a:2:{i:0;i:1;i:1;a:2:{i:0;i:1;i:1;R:3;}}",
    b'a:3:{i:0;E:3:"S:H";i:1;R:2;i:2;r:2;}',
    b'a:3:{s:1:"a";a:2:{i:0;i:1;i:1;i:2;}s:1:"b";a:2:{i:0;R:2;i:1;a:2:{i:0;i:1;i:1;i:2;}}s:1:"c";R:3;}',
    b'a:4:{i:0;a:1:{i:0;a:1:{i:0;O:1:"N":0:{}}}i:1;a:3:{s:1:"k";r:4;s:1:"r";i:1;s:1:"s";R:7;}i:2;r:4;i:3;R:7;}',
    b'a:4:{i:0;O:1:"N":2:{s:1:"n";s:1:"x";s:1:"p";R:3;}i:1;R:3;i:2;r:2;i:3;a:2:{i:0;R:3;i:1;s:1:"x";}}',
]


@pytest.mark.parametrize("wire", REFERENCE_CASES)
def test_reference_round_trip(wire: bytes) -> None:
    assert dumps(loads(wire)) == wire


def test_reference_semantics() -> None:
    twice = loads(REFERENCE_CASES[0])
    assert twice[0] is twice[1]
    refs = loads(REFERENCE_CASES[1])
    assert refs[0] is refs[1] and isinstance(refs[0], PHPReference) and deref(refs[0]) == 1
    self_ref = loads(REFERENCE_CASES[3])
    assert self_ref["a"] is self_ref
    prop_ref = loads(REFERENCE_CASES[4])
    assert prop_ref["a"] == 5 and prop_ref["b"] == 5  # accessors dereference
    prop_ref["a"] = 6  # assignment through a reference changes both, as in PHP
    assert prop_ref["b"] == 6
    assert dumps(prop_ref) == b'O:4:"Node":2:{s:1:"a";i:6;s:1:"b";R:2;}'
    nested = loads(REFERENCE_CASES[8])
    node = nested[0][0][0]
    assert nested[1]["k"] is node and nested[2] is node
    assert nested[1]["s"] is nested[3] and deref(nested[3]) == 1
    assert nested[1]["r"] is nested[1]["s"]  # R:7 names the slot of "r" (keys take no slot)


def test_python_built_references_use_php_numbering() -> None:
    node = PHPObject("N", {"v": 1})
    shared = PHPReference("s")
    value = [node, {"x": node, "r": shared}, shared, PHPEnum("E", "A"), PHPEnum("E", "A"), PHPReference(node)]
    wire = dumps(value)
    assert wire == (
        b'a:6:{i:0;O:1:"N":1:{s:1:"v";i:1;}i:1;a:2:{s:1:"x";r:2;s:1:"r";s:1:"s";}i:2;R:6;'
        b'i:3;E:3:"E:A";i:4;r:7;i:5;R:2;}'
    )
    back = loads(wire)
    assert dumps(back) == wire
    # R:2 made position 0 part of a PHP reference too: both positions share one PHPReference
    assert back[0] is back[5] and deref(back[0]) is back[1]["x"] and back[1]["r"] is back[2]


# -- hostile input -------------------------------------------------------------------------------------


HOSTILE = {
    "huge-array-count": b"a:999999999:{",
    "huge-array-count-digits": b"a:99999999999999999999999999:{",
    "huge-string": b's:1000000000:"',
    "huge-object-count": b'O:1:"A":999999999:{',
    "huge-class-len": b'O:999999999:"A":0:{}',
    "negative-count": b"a:-1:{}",
    "negative-object-count": b'O:1:"A":-1:{}',
    "negative-string-len": b's:-1:"";',
    "legacy-serializable": b'C:11:"ArrayObject":21:{x:i:0;a:0:{};m:a:0:{}}',
    "undefined-ref": b"a:1:{i:0;R:5;}",
    "undefined-obj-ref": b"a:1:{i:0;r:9;}",
    "ref-zero": b"a:1:{i:0;r:0;}",
    "r-to-scalar": b"a:2:{i:0;i:5;i:1;r:2;}",
    "top-level-ref": b"R:1;",
    "bad-bool": b"b:2;",
    "bad-int": b"i:12x;",
    "bad-float": b"d:1.2.3;",
    "neg-nan": b"d:-NAN;",
    "float-too-long": b"d:" + b"1" * 5000 + b";",
    "short-string": b's:5:"abc";',
    "string-missing-quote": b's:3:"abc;',
    "unknown-type": b"x:1;",
    "trailing": b"i:1;junk",
    "empty": b"",
    "array-float-key": b"a:1:{d:1.5;i:1;}",
    "array-null-key": b"a:1:{N;i:1;}",
    "duplicate-key": b"a:2:{i:0;i:1;i:0;i:2;}",
    "missing-close": b"a:1:{i:0;i:1;",
    "extra-element": b"a:1:{i:0;i:1;i:1;i:2;}",
    "bad-class-name": b'O:3:"A;B":0:{}',
    "bad-mangled-name": b'O:1:"A":1:{s:3:"\x00ab";i:1;}',
    "bad-enum": b'E:3:"ABC";',
    "enum-no-case": b'E:2:"A:";',
    "uppercase-S": b's:1:"a";'.upper(),
    "lone-N": b"N",
    "nested-error": b'a:1:{i:0;O:1:"A":1:{s:1:"p";a:1:{i:0;b:7;}}}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_inputs_raise_php_serialize_error(name: str) -> None:
    with pytest.raises(PHPSerializeError) as info:
        loads(HOSTILE[name])
    assert " at offset " in str(info.value)
    assert isinstance(info.value, ValueError)


def test_integers_out_of_range_clamp_as_php_82() -> None:
    # PHP 8.2 clamps (with a warning) instead of failing; tests/test_codec_php_ints.py checks against php
    assert loads(b"i:9223372036854775808;") == 2**63 - 1
    assert loads(b"i:" + b"9" * 5000 + b";") == 2**63 - 1
    assert loads(b"i:-" + b"9" * 5000 + b";") == -(2**63)


def test_error_messages_name_the_problem() -> None:
    with pytest.raises(PHPSerializeError, match=r"expected ';' after integer, found 'x' at offset 5"):
        loads(b"i:123x")
    with pytest.raises(PHPSerializeError, match=r"ArrayObject.*legacy Serializable"):
        loads(HOSTILE["legacy-serializable"])
    with pytest.raises(PHPSerializeError, match="exceeds the remaining"):
        loads(HOSTILE["huge-string"])
    with pytest.raises(PHPSerializeError, match="negative"):
        loads(HOSTILE["negative-object-count"])
    with pytest.raises(PHPSerializeError, match="undefined value #5"):
        loads(HOSTILE["undefined-ref"])


def test_huge_declared_sizes_fail_fast_without_allocating() -> None:
    tracemalloc.start()
    try:
        for wire in (b"a:999999999:{" + b"i:0;N;" * 10, b's:1000000000:"' + b"x" * 100, b"a:2000000000:{}"):
            with pytest.raises(PHPSerializeError):
                loads(wire)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # the declared size was never trusted for an allocation


def test_deep_nesting_is_bounded() -> None:
    deep = b"a:1:{i:0;" * 100_000 + b"N;" + b"}" * 100_000
    tracemalloc.start()
    try:
        with pytest.raises(PHPSerializeError, match="max_depth=4096"):
            loads(deep)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000  # stopped at depth 4097, long before building 100 000 nested arrays
    ok = b"a:1:{i:0;" * 5000 + b"N;" + b"}" * 5000
    with pytest.raises(PHPSerializeError):
        loads(ok)
    value = loads(ok, max_depth=6000)  # the parser itself is iterative
    assert dumps(value, max_depth=6000) == ok
    with pytest.raises(PHPSerializeError, match="max_depth"):
        dumps(value)
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(PHPSerializeError):
        dumps(cyclic)


def test_limits_are_configurable() -> None:
    wire = dumps(list(range(100)))
    assert loads(wire, max_elements=1000) == list(range(100))
    with pytest.raises(PHPSerializeError, match="max_elements"):
        loads(wire, max_elements=50)
    with pytest.raises(PHPSerializeError, match="max_bytes"):
        loads(wire, max_bytes=100)
    with pytest.raises(PHPSerializeError, match="max_depth"):
        loads(b"a:1:{i:0;a:1:{i:0;N;}}", max_depth=1)
    assert loads(b"a:1:{i:0;a:0:{}}", max_depth=1) == [[]]  # as PHP counts: an empty array is no level


@pytest.mark.parametrize("version", ["8.83.26", "13.x"])
def test_every_truncation_raises_cleanly(version: str) -> None:
    for kind in ("plain", "enum", "carbon", "model", "chain"):
        command = _command(version, kind)
        for cut in range(len(command)):
            with pytest.raises(PHPSerializeError):
                loads(command[:cut])


def test_every_single_byte_corruption_raises_cleanly_or_parses() -> None:
    command = _command("13.x", "plain")
    for i in range(0, len(command), 3):
        for replacement in (b"\x00", b"}", b"9", b":", b";"):
            corrupt = command[:i] + replacement + command[i + 1 :]
            try:
                value = loads(corrupt)
            except PHPSerializeError:
                continue
            # an integer pushed past 64 bits reads clamped, as PHP 8.2 reads it
            clamped = re.sub(rb"i:([0-9]{19,});", lambda m: b"i:%d;" % min(int(m[1]), 2**63 - 1), corrupt)
            assert dumps(value) == clamped


def test_bad_utf8_strings_stay_bytes() -> None:
    wire = b'a:3:{i:0;s:2:"\xc3\x28";i:1;s:3:"\xed\xa0\x80";i:2;s:4:"\xf0\x9f\x98\x80";}'
    value = loads(wire)
    assert value == [b"\xc3\x28", b"\xed\xa0\x80", "😀"]
    assert dumps(value) == wire
    with pytest.raises(PHPSerializeError):
        loads('O:1:"\udcff":0:{}')


# -- dates ---------------------------------------------------------------------------------------------


def test_to_datetime_timezone_types() -> None:
    def date(tz_type: int, tz: str, text: str = "2024-01-01 12:00:00.000000") -> PHPObject:
        return PHPObject("DateTime", {"date": text, "timezone_type": tz_type, "timezone": tz})

    est = to_datetime(date(2, "EST"))
    assert est.utcoffset() == timedelta(hours=-5) and est.tzname() == "EST"
    assert to_datetime(date(2, "Z")).utcoffset() == timedelta(0)
    assert to_datetime(date(1, "-03:00")).utcoffset() == timedelta(hours=-3)
    assert to_datetime(date(3, "America/New_York")).tzinfo == ZoneInfo("America/New_York")
    with pytest.raises(ValueError):
        to_datetime(date(2, "XYZT"))
    with pytest.raises(ValueError):
        to_datetime(date(3, "Mars/Olympus"))
    with pytest.raises(ValueError):
        to_datetime(PHPObject("DateTime", {"date": "x"}))
    with pytest.raises(ValueError):
        from_datetime(datetime(2024, 1, 1))
    fixed = datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=timezone(timedelta(hours=-9, minutes=-30)))
    obj = from_datetime(fixed, "DateTime")
    assert obj.properties() == {"date": "2024-05-06 07:08:09.000010", "timezone_type": 1, "timezone": "-09:30"}
    assert to_datetime(obj) == fixed


# -- hypothesis ------------------------------------------------------------------------------------------

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
_classes = st.lists(_names, min_size=1, max_size=3).map("\\".join)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.builds(PHPEnum, _classes, _names)
)


def _objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[PHPObject]:
    def make(cls: str, props: list[tuple[str, str, Any]]) -> PHPObject:
        obj = PHPObject(cls)
        for vis, name, value in props:
            obj.set(name, value, vis, "Parent" if vis == "private" else None)  # type: ignore[arg-type]
        return obj

    prop = st.tuples(st.sampled_from(["public", "protected", "private"]), _names, children)
    return st.builds(make, _classes, st.lists(prop, max_size=4))


_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.integers(-5, 5) | st.text(max_size=4), children, max_size=4)
    | _objects(children),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_hypothesis_round_trip(value: Any) -> None:
    wire = dumps(value)
    back = loads(wire)
    assert dumps(back) == wire
    assert loads(dumps(back)) == back


@settings(max_examples=300, deadline=None)
@given(st.floats())
def test_hypothesis_float_text(value: float) -> None:
    text = format_float(value)
    back = float(text)
    assert (math.isnan(back) and math.isnan(value)) or back == value
    assert type(loads(dumps(value))) is float


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_hypothesis_garbage_never_crashes(data: bytes) -> None:
    try:
        value = loads(data)
    except PHPSerializeError:
        return
    wire = dumps(value)  # non-canonical integer/length text is normalised, the rest is kept
    assert dumps(loads(wire)) == wire


def test_base64_helpers_unused_guard() -> None:
    # model identifiers written by Python are read back by the same view
    ident = ModelIdentifier("App\\Models\\W", [1, 2], ["owner"], "mysql", "Illuminate\\Database\\Eloquent\\Collection")
    obj = loads(dumps(ident.to_php()))
    assert obj.class_name == MODEL_IDENTIFIER_CLASS
    assert ModelIdentifier.from_php(obj) == ident
    assert base64.b64decode(base64.b64encode(dumps(obj))) == dumps(obj)


# -- the fast paths agree with the full parser -----------------------------------------------------


def _full(data: bytes) -> Any:
    # an element limit below the input size disables the fast paths (see loads()); for inputs of 4+
    # bytes it is still above anything the input can hold, so the full parser decides alone
    return loads(data, max_elements=len(data) - 1)


def _fast_tiers(data: bytes) -> list[Any]:
    return [phpread._token_loads(data, len(data), 512)]


def _agree(data: bytes) -> None:
    try:
        expected = repr(_full(data))
    except PHPSerializeError:
        expected = None
    for got in _fast_tiers(data):
        if got is phpread.BAIL:
            continue
        assert expected is not None, f"a fast path accepted what the full parser rejects: {data[:120]!r}"
        assert repr(got) == expected


def test_fast_paths_match_the_full_parser_on_the_corpus() -> None:
    extra = [
        b'a:3:{i:0;d:0.1;i:1;d:1e5;i:2;E:13:"App\\Status:On";}',
        b'a:2:{i:1;N;i:0;N;}', b'a:2:{s:1:"a";s:3:"x"y";s:1:"b";s:2:"\xff\xfe";}',
        b'O:1:"A":1:{s:4:"\x00A\x00b";i:-9223372036854775808;}', b'a:1:{i:0;a:1:{i:0;a:0:{}}}',
        b'a:1:{i:0;O:8:"stdClass":0:{}}', b's:3:"a"b";', b'i:5;', b'N;', b'b:1;', b'd:-0;',
    ]
    for data in [c for _, c in COMMANDS] + extra:
        _agree(data)
        assert repr(loads(data)) == repr(_full(data))
    simple = b'O:1:"A":2:{s:1:"a";a:1:{i:0;d:0.5;}s:4:"\x00*\x00b";E:3:"E:C";}'
    assert repr(phpread._token_loads(simple, len(simple), 512)) == repr(_full(simple))


def test_fast_paths_match_the_full_parser_on_mutations() -> None:
    rng = random.Random(5)
    pieces = [b"}", b"{", b";", b":", b'"', b"\x00", b"9", b"0", b"-", b"i:1;", b"N;", b"r:1;", b"R:2;",
              b"a:1:{", b"s:1:", b"99999999999999999999", b"d:1.5;", b"b:2;", b"O:1:\"A\":0:{}", b""]
    sources = [c for _, c in COMMANDS]
    for _ in range(4000):
        data = bytearray(rng.choice(sources))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(data) + 1)
            op = rng.random()
            if op < 0.4:
                data[i : i + 1] = rng.choice(pieces)
            elif op < 0.7:
                data[i:i] = rng.choice(pieces)
            else:
                del data[i : i + rng.randint(1, 6)]
        if len(data) >= 4:
            _agree(bytes(data))
