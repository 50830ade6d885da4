"""PHP arrays in handlers (:mod:`laraq.protocol.phparray`): one shape whatever PHP sent, and the same bytes back.

Every ``data.command`` of the Laravel 8-13 wire corpus is converted with :func:`php_arrays` and written
back with ``dumps()``: the bytes must be the ones Laravel wrote. The handler-facing behaviour (empty array,
list, map) is checked on values PHP serialized.
"""

from __future__ import annotations

import json

import pytest
from conftest import corpus_dir

from laraq.protocol.payload import Payload
from laraq.protocol.phparray import PHPArray, loads_php_arrays, php_arrays
from laraq.protocol.serializer import PHPObject, PHPReference, dumps, loads

CORPUS = corpus_dir()


def _commands() -> list[tuple[str, bytes]]:
    out = []
    for path in sorted(CORPUS.glob("*/*.json")):
        try:
            payload = Payload.parse(path.read_bytes())
            command = payload.command
        except Exception:
            continue
        if command and command.startswith("O:"):
            out.append((f"{path.parent.name}/{path.name}", command.encode()))
    return out


COMMANDS = _commands()


def test_the_corpus_has_commands() -> None:
    if not (CORPUS / "manifest.json").exists():
        pytest.skip(f"wire corpus not found at {CORPUS}")
    assert len(COMMANDS) > 50


@pytest.mark.parametrize("name, raw", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_converted_commands_reserialize_byte_for_byte(name: str, raw: bytes) -> None:
    value = php_arrays(loads(raw))
    assert dumps(value) == raw


def _shape(value: object, seen: set[int] | None = None) -> object:
    """Types and contents, recursively (objects by class and properties), to compare two decodings."""
    seen = set() if seen is None else seen
    if isinstance(value, PHPObject):
        if id(value) in seen:
            return ("cycle", value.class_name)
        seen.add(id(value))
        return ("O", value.class_name, _shape(value._props, seen))
    if isinstance(value, PHPReference):
        return ("R", _shape(value.value, seen))
    if isinstance(value, dict):
        return (type(value).__name__, [(type(k).__name__, k, _shape(v, seen)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(v, seen) for v in value])
    return (type(value).__name__, value)


@pytest.mark.parametrize("name, raw", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_one_pass_decoding_gives_the_same_objects(name: str, raw: bytes) -> None:
    # the worker's fast decode (PHPArray built while parsing) hands handlers what the two-step one does
    fast = loads_php_arrays(raw)
    assert _shape(fast) == _shape(php_arrays(loads(raw)))
    assert dumps(fast) == raw


@pytest.mark.parametrize("raw", [
    b'a:0:{}', b'a:2:{i:0;s:1:"a";i:1;a:0:{}}', b'a:2:{i:1;s:1:"a";i:0;N;}', b'a:1:{s:1:"k";a:1:{i:0;d:0.5;}}',
    b'O:8:"stdClass":2:{s:1:"a";a:1:{i:0;i:1;}s:1:"o";O:8:"stdClass":1:{s:1:"l";a:0:{}}}',
    b'a:2:{i:0;O:8:"stdClass":0:{}i:1;r:2;}', b'a:1:{i:0;s:3:"a"b";}', b'i:5;', b's:1:"x";',
])
def test_one_pass_decoding_of_edge_shapes(raw: bytes) -> None:
    assert _shape(loads_php_arrays(raw)) == _shape(php_arrays(loads(raw)))


def test_empty_list_and_map_read_the_same_way() -> None:
    # what PHP's serialize() writes for a job with array $options: [], ['a', 'b'], ['pages' => 12]
    for raw, pages, values in (
        (b'O:1:"J":1:{s:7:"options";a:0:{}}', None, []),
        (b'O:1:"J":1:{s:7:"options";a:2:{i:0;s:1:"a";i:1;s:1:"b";}}', None, ["a", "b"]),
        (b'O:1:"J":1:{s:7:"options";a:1:{s:5:"pages";i:12;}}', 12, [12]),
    ):
        command = php_arrays(loads(raw))
        options = command.options
        assert isinstance(options, PHPArray) and isinstance(options, dict)
        assert options.get("pages") == pages and options.list() == values
        assert dumps(command) == raw
    listed = php_arrays(loads(b'a:2:{i:0;s:1:"a";i:1;s:1:"b";}'))
    assert listed[0] == "a" and listed == ["a", "b"] and listed.is_list and list(listed.values()) == ["a", "b"]
    assert PHPArray() == [] and PHPArray().is_list and PHPArray({"k": 1}) == {"k": 1}
    assert PHPArray({1: "x"}) != ["x"]


def test_nested_shared_and_json_data() -> None:
    obj = PHPObject.build("N", public={"items": [[1], {"k": []}]})
    ref = PHPReference([1, 2])
    value = php_arrays([obj, obj, ref, ref])
    assert value[0] is value[1] and value[2] is value[3]
    assert isinstance(obj.items, PHPArray) and isinstance(obj.items[0], PHPArray)
    assert isinstance(obj.items[1]["k"], PHPArray) and isinstance(ref.value, PHPArray)
    data = php_arrays(json.loads('{"n": 1, "tags": [], "opts": {"x": [1]}}'))
    assert data["tags"].get("x") is None and data["opts"]["x"] == [1]
    deep: list = []
    cur = deep
    for _ in range(5000):
        cur.append([])
        cur = cur[0]
    assert isinstance(php_arrays(deep)[0][0], PHPArray)


def test_json_as_php_writes_it() -> None:
    from laraq.protocol.phparray import unwrap
    from laraq.protocol.phpjson import php_json_encode

    value = php_arrays(loads(b'a:2:{s:5:"pages";a:2:{i:0;i:1;i:1;i:2;}s:4:"tags";a:0:{}}'))
    assert php_json_encode(value) == '{"pages":[1,2],"tags":[]}'  # PHP: json_encode(unserialize(...))
    assert unwrap(value) == {"pages": [1, 2], "tags": []} and type(unwrap(value)["pages"]) is list
