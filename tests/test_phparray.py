"""PHP arrays in handlers (:mod:`laraq.phparray`): one shape whatever PHP sent, and the same bytes back.

Every ``data.command`` of the Laravel 8-13 wire corpus is converted with :func:`php_arrays` and written
back with ``dumps()``: the bytes must be the ones Laravel wrote. The handler-facing behaviour (empty array,
list, map) is checked on values PHP serialized.
"""

from __future__ import annotations

import json

import pytest
from conftest import corpus_dir

from laraq.payload import Payload
from laraq.phparray import PHPArray, php_arrays
from laraq.serializer import PHPObject, PHPReference, dumps, loads

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
    from laraq.phparray import unwrap
    from laraq.phpjson import php_json_encode

    value = php_arrays(loads(b'a:2:{s:5:"pages";a:2:{i:0;i:1;i:1;i:2;}s:4:"tags";a:0:{}}'))
    assert php_json_encode(value) == '{"pages":[1,2],"tags":[]}'  # PHP: json_encode(unserialize(...))
    assert unwrap(value) == {"pages": [1, 2], "tags": []} and type(unwrap(value)["pages"]) is list
