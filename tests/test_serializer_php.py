"""laraq.protocol.serializer against real PHP 8: PHP's serialize() output round-trips, and PHP reads laraq's dumps()."""

from __future__ import annotations

import base64
import json
import math
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from laraq.protocol.serializer import (
    ModelIdentifier,
    PHPEnum,
    PHPFloat,
    PHPObject,
    PHPReference,
    deref,
    dumps,
    from_datetime,
    loads,
    to_datetime,
)

pytestmark = pytest.mark.php

ROOT = Path(__file__).resolve().parent.parent
CODEC = ROOT / "fixtures" / "php" / "codec.php"
NS = "Laraq\\Fixture\\"


def _run(php: str, mode: str, stdin: str | None = None) -> Any:
    proc = subprocess.run(
        [php, "-d", "serialize_precision=-1", str(CODEC), mode],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def php_corpus(php: str) -> dict[str, tuple[bytes, Any]]:
    entries = _run(php, "corpus")
    return {e["name"]: (base64.b64decode(e["b64"]), e.get("expect")) for e in entries}


def test_php_corpus_round_trips_byte_identically(php_corpus: dict[str, tuple[bytes, Any]]) -> None:
    assert len(php_corpus) > 900
    for name, (wire, _) in php_corpus.items():
        value = loads(wire)
        assert dumps(value) == wire, name
        # PHP's own float text is always what format_float() writes: no PHPFloat wrapper needed
        if name.startswith("float:") and not name.endswith("list"):
            assert type(value) is float, (name, wire)


def test_php_values_read_right(php_corpus: dict[str, tuple[bytes, Any]]) -> None:
    def get(name: str) -> Any:
        return loads(php_corpus[name][0])

    assert get("int:9223372036854775807") == 2**63 - 1
    assert get("int:-9223372036854775808") == -(2**63)
    assert get("str:unicode") == "Héllo wörld ☃ 😀 \u2028 end"
    assert get("str:binary") == b"bin\xff\xfe\x00tail"
    assert get("str:surrogate-bytes") == b"\xed\xa0\x80"
    assert get("float:0") == 0.1 and get("float:1") == 1e25
    assert math.copysign(1, get("float:2")) == -1 and get("float:2") == 0
    assert math.isinf(get("float:4")) and math.isnan(get("float:6"))
    assert get("float:7") == 1 / 3
    assert get("arr:holes") == {1: "a", 2: "b"}
    assert get("arr:order") == {5: "x", 0: "y"}
    assert get("arr:assoc")[10] == "numeric-string-key" and get("arr:assoc")[-3] == "neg"
    deep = get("arr:deep")
    for _ in range(60):
        deep = deep[0]
    assert deep == "bottom"

    child = get("obj:child")
    assert child.class_name == NS + "Child"
    assert child["secret"] == "child-secret" and child.declaring_class("secret") == NS + "Child"
    assert child.raw()[f"\0{NS}Base\0secret"] == "base-secret"
    assert child["onlyBase"] == 1 and child.declaring_class("onlyBase") == NS + "Base"
    assert child["prot"] == "base-prot" and child.visibility("prot") == "protected"
    assert child["typed"] is None and "uninit" not in child
    assert child["items"] == {"x": 1, "list": [1, 2]}
    # plain serialize() writes the parent's properties first
    assert list(child.raw())[:4] == ["pub", "\0*\0prot", f"\0{NS}Base\0secret", f"\0{NS}Base\0onlyBase"]

    custom = get("obj:custom")  # __serialize() output looks like any O: object
    assert custom.properties() == {"alpha": "A", "beta": {"b": PHPEnum(NS + "Suit", "Hearts")}}
    std = get("obj:stdclass")
    assert std["dyn"] == "amic" and std["0"] == "zero"

    ident = ModelIdentifier.from_php(get("obj:model-identifier"))
    assert ident == ModelIdentifier("App\\Models\\Widget", 7, ["owner"], "mysql", None)
    assert ModelIdentifier.from_php(get("obj:model-identifier-collection")).id == [1, 2, 3]

    assert get("enum:string") == PHPEnum(NS + "Status", "Active")
    assert get("enum:int") == PHPEnum(NS + "Priority", "High")
    assert get("enum:pure") == PHPEnum(NS + "Suit", "Spades")
    assert get("enum:list")[2] == PHPEnum(NS + "Status", "Archived")


def test_php_references_read_right(php_corpus: dict[str, tuple[bytes, Any]]) -> None:
    def get(name: str) -> Any:
        return loads(php_corpus[name][0])

    pair = get("ref:obj-twice")
    assert pair[0] is pair[1]
    refs = get("ref:scalar-refs")
    assert refs[0] is refs[1] and deref(refs[0]) == 1
    node = get("ref:self")
    assert node["next"] is node
    props = get("ref:prop-ref")
    assert props.raw()["next"] is props.raw()["peer"] and props["peer"] == 5
    cycle = get("ref:cycle")
    a, b, again = cycle[0], cycle[1], cycle["again"]
    assert a["next"] is b and b["next"] is a and b["peer"] == [a, b] and again[0] is b
    mixed = get("ref:mixed")
    assert mixed[0] is mixed[2]
    shared = mixed[0].raw()["next"]
    assert isinstance(shared, PHPReference) and shared.value == "shared-string"
    assert mixed[0].raw()["peer"] is shared and mixed[1] is shared and mixed[3][0] is shared
    assert mixed[3][1] == "shared-string" and not isinstance(mixed[3][1], PHPReference)
    arr = get("ref:array-ref")
    assert arr["a"] is arr["b"][0] and isinstance(arr["a"], PHPReference)
    assert arr["c"] is arr["a"].value[0] and deref(arr["c"]) == 1
    carbons = get("ref:carbon-twice")
    assert carbons[0] is carbons[1] is carbons["x"][0]
    custom = get("ref:custom-shared")
    assert custom[1]["alpha"] is custom[0] and custom[1]["beta"][0] is custom[0]
    assert custom[2] is custom[1]["beta"][1]
    enums = get("ref:enum-refs")
    assert enums[0] is enums[1] and deref(enums[0]) == enums[2] == PHPEnum(NS + "Suit", "Hearts")


def test_php_dates(php_corpus: dict[str, tuple[bytes, Any]]) -> None:
    dates = {n: v for n, v in php_corpus.items() if n.startswith("date:")}
    assert len(dates) >= 10
    for name, (wire, expect) in dates.items():
        obj = loads(wire)
        dt = to_datetime(obj)
        assert Decimal(str(dt.timestamp())).quantize(Decimal("0.000001")) == Decimal(expect["ts"]), name
        assert dt.utcoffset() == timedelta(seconds=expect["offset"]), name
        if obj["timezone_type"] != 2:  # abbreviations are only read, never written
            assert dumps(from_datetime(dt, obj.class_name)) == wire, name
    paris = to_datetime(loads(dates["date:carbon-paris"][0]))
    assert paris.tzinfo == ZoneInfo("Europe/Paris")


def _python_values() -> list[tuple[str, Any]]:
    child = PHPObject(NS + "Child")
    child.set("pub", "py-pub")
    child.set("prot", "py-prot", "protected")
    child.set("secret", "py-base-secret", "private", NS + "Base")
    child.set("onlyBase", 99, "private", NS + "Base")
    child.set("secret", "py-child-secret", "private")
    child.set("items", {"k": [1, 2.5, None]})
    child.set("typed", "ünï", "protected")
    shared_node = PHPObject.build(NS + "Node", public={"name": "n", "next": None, "peer": None})
    ref = PHPReference("shared")
    node = PHPObject.build(NS + "Node", public={"name": "r", "next": ref, "peer": ref})
    self_node = PHPObject.build(NS + "Node", public={"name": "self", "next": None, "peer": None})
    self_node["next"] = self_node
    custom = PHPObject.build(NS + "Custom", public={"alpha": shared_node, "beta": [shared_node, PHPEnum(NS + "Suit", "Hearts")]})
    values: list[tuple[str, Any]] = [
        ("scalars", [None, True, False, 0, -1, 2**63 - 1, -(2**63), "", "é☃😀\u2028", b"\xff\x00"]),
        ("floats", [0.1, 1e25, -0.0, math.inf, -math.inf, math.nan, 1 / 3, 1e-7, 1e16, 1e17, 5e-324, 2.0**63]),
        ("float-lexeme", PHPFloat(100000.0, "1e5")),
        ("nested", {"a": {"b": [1, {"c": []}]}, 5: "five", -1: "neg", "ключ": "значение"}),
        ("child", child),
        ("enums", [PHPEnum(NS + "Status", "Active"), PHPEnum(NS + "Priority", "Low"), PHPEnum(NS + "Suit", "Spades"),
                   PHPEnum(NS + "Status", "Active")]),
        ("refs", [shared_node, {"again": shared_node}, node, ref, [ref, "shared"], PHPReference(shared_node)]),
        ("self", self_node),
        ("custom", custom),
        ("carbon-utc", from_datetime(datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC))),
        ("carbon-paris", from_datetime(datetime(2024, 6, 30, 23, 59, 59, tzinfo=ZoneInfo("Europe/Paris")), "Carbon\\Carbon")),
        ("immutable-offset", from_datetime(datetime(2024, 2, 29, 12, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
                                            "Carbon\\CarbonImmutable")),
        ("native", from_datetime(datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=ZoneInfo("America/New_York")),
                                  "DateTimeImmutable")),
        ("model", ModelIdentifier("App\\Models\\Widget", [1, 2], ["owner"], "sqlite").to_php(include_collection_class=False)),
    ]
    return values


def test_php_reads_laraq_output(php: str) -> None:
    values = _python_values()
    payload = json.dumps([{"name": n, "b64": base64.b64encode(dumps(v)).decode()} for n, v in values])
    results = {r["name"]: r for r in _run(php, "check", payload)}
    for name, value in values:
        result = results[name]
        assert result["ok"], (name, result.get("error"))
        assert result["incomplete"] is False, name
        # PHP writes a non-canonical float text back in its own form; everything else is identical
        expected = dumps(float(value)) if isinstance(value, PHPFloat) else dumps(value)
        assert base64.b64decode(result["b64"]) == expected, name

    child = results["child"]
    assert child["methods"] == {"baseSecret": "py-base-secret", "childSecret": "py-child-secret"}
    seen = {(p["class"], p["name"]): (p["visibility"], p["value"]) for p in child["describe"]["props"]}
    assert seen[(NS + "Child", "secret")] == ("private", "py-child-secret")
    assert seen[(NS + "Base", "secret")] == ("private", "py-base-secret")
    assert seen[(NS + "Base", "onlyBase")] == ("private", 99)
    assert seen[(NS + "Base", "prot")] == ("protected", "py-prot")
    assert seen[(NS + "Base", "pub")] == ("public", "py-pub")
    assert seen[(NS + "Child", "typed")] == ("protected", "ünï")
    assert seen[(NS + "Child", "uninit")] == ("public", {"uninitialized": True})

    for name in ("carbon-utc", "carbon-paris", "immutable-offset", "native"):
        expected = to_datetime(dict(values)[name])
        date = results[name]["date"]
        assert Decimal(date["ts"]) == Decimal(str(expected.timestamp())).quantize(Decimal("0.000001")), name
        assert date["offset"] == expected.utcoffset().total_seconds(), name
    assert results["model"]["describe"]["object"] == "Illuminate\\Contracts\\Database\\ModelIdentifier"
    assert results["enums"]["describe"]["array"][0][1] == {"enum": NS + "Status::Active"}


def test_php_rejects_what_laraq_rejects_for_typed_properties(php: str) -> None:
    # a wrongly typed value for a typed property: PHP refuses it, which proves PHP maps names to real properties
    bad = PHPObject.build(NS + "Child", protected={"typed": [1]})
    results = _run(php, "check", json.dumps([{"name": "bad", "b64": base64.b64encode(dumps(bad)).decode()}]))
    assert results[0]["ok"] is False and "typed" in results[0]["error"]
