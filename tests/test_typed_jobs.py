"""Typed job classes (:mod:`laraq.bus.typed`) without PHP: mypy catches a wrong property name in code
using a generated class, and a command that does not fit its class fails with one clear error. (The
byte-for-byte dispatch and the handler's instance are proven against live Laravel in
``test_typed_jobs_php.py``.)
"""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laraq.bus.typed import UNSET, TypedJobError, from_command, generate_module, typed_class_of
from laraq.protocol.serializer import PHPEnum, PHPObject, dumps


def _prop(name: str, types: list[str], *, nullable: bool = False, promoted: bool = True, default: Any = None,
          initialized: bool = False, visibility: str = "public", framework: bool = False) -> dict[str, Any]:
    raw = dumps(default)
    encoded = base64.b64encode(raw if isinstance(raw, bytes) else raw.encode()).decode()
    return {"name": name, "visibility": visibility, "class": "App\\Jobs\\ShipOrder", "type": None,
            "initialized": initialized, "default": encoded if initialized else None, "types": types,
            "nullable": nullable, "promoted": promoted, "ctor_default": None, "framework": framework}


SCHEMA = {
    "laravel": "13.26.1",
    "jobs": {"App\\Jobs\\ShipOrder": {
        "interfaces": ["Illuminate\\Contracts\\Queue\\ShouldQueue"], "traits": [], "methods": [], "attributes": [],
        "properties": [
            _prop("order", ["App\\Models\\Order"]), _prop("carrier", ["App\\Enums\\Carrier"]),
            _prop("quantity", ["int"]), _prop("note", ["string"], nullable=True),
            _prop("ref", ["string", "int"]), _prop("lines", ["array"]),
            _prop("tries", ["int"], promoted=False, initialized=True, default=3),
            _prop("count", ["int"], nullable=True, promoted=False),
            _prop("queue", [], promoted=False, initialized=True, framework=True),
        ],
        "reflection_order": []}},
    "enums": {"App\\Enums\\Carrier": {"Ups": "ups", "Dhl": "dhl"}},
    "kinds": {"App\\Models\\Order": "model", "App\\Enums\\Carrier": "enum"},
    "sources": {},
}


@pytest.fixture
def module(tmp_path: Path) -> Any:
    path = tmp_path / "shipjobs.py"
    path.write_text(generate_module(SCHEMA, source="/nowhere"))
    spec = importlib.util.spec_from_file_location("shipjobs", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["shipjobs"] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("shipjobs", None)


def test_mypy_catches_a_wrong_property_name(tmp_path: Path, module: Any) -> None:
    (tmp_path / "handlers.py").write_text(
        "from typing import Any\n"
        "from shipjobs import Carrier, OrderRef, ShipOrder\n\n"
        "def ship(order: ShipOrder, job: Any) -> None:\n"
        "    print(order.quantty)\n\n"
        "def good(order: ShipOrder, job: Any) -> int:\n"
        "    return order.quantity + order.tries\n\n"
        "ShipOrder(order=OrderRef(5), carrier=Carrier.Ups, quantity='3', note=None, ref=1, lines=[])\n"
    )
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir=/dev/null",
                           "--strict", "handlers.py", "shipjobs.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "PATH": "/usr/bin:/bin"})
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert 'handlers.py:5: error: "ShipOrder" has no attribute "quantty"' in out, out
    assert "handlers.py:10: error: Argument \"quantity\" to \"ShipOrder\" has incompatible type \"str\"" in out, out
    assert out.count("error:") == 2, out


def test_a_command_that_does_not_fit_fails_with_one_clear_error(module: Any) -> None:
    def command(**extra: Any) -> PHPObject:
        props = {"order": PHPObject("Illuminate\\Contracts\\Database\\ModelIdentifier",
                                    {"class": "App\\Models\\Order", "id": 5, "relations": [], "connection": "mysql"}),
                 "carrier": PHPEnum("App\\Enums\\Carrier", "Dhl"), "quantity": 2, "note": None, "ref": "r",
                 "lines": {0: "a", 1: "b"}, "queue": "ships"}
        props.update(extra)
        return PHPObject("App\\Jobs\\ShipOrder", {k: v for k, v in props.items() if v is not UNSET})

    order = from_command(module.ShipOrder, command())
    assert (order.order, order.carrier, order.lines, order.tries, order.count) == (
        module.OrderRef(5, "mysql"), module.Carrier.Dhl, ["a", "b"], 3, UNSET)
    with pytest.raises(TypedJobError, match=r"App\\Jobs\\ShipOrder: the job has a property 'colour' that ShipOrder "
                                            r"does not declare"):
        from_command(module.ShipOrder, command(colour="red"))
    with pytest.raises(TypedJobError, match=r"App\\Jobs\\ShipOrder: the job has no property 'quantity'"):
        from_command(module.ShipOrder, command(quantity=UNSET))
    with pytest.raises(TypedJobError, match="holds 'Fedex', not a case of Carrier"):
        from_command(module.ShipOrder, command(carrier=PHPEnum("App\\Enums\\Carrier", "Fedex")))


def test_a_handler_annotated_with_a_generated_class_is_found(module: Any) -> None:
    def handle(order: Any, job: Any) -> None: ...

    handle.__annotations__["order"] = module.ShipOrder
    assert typed_class_of(handle) is module.ShipOrder
    assert typed_class_of(lambda command, job: None) is None


def test_an_annotation_that_does_not_resolve_is_said(caplog: pytest.LogCaptureFixture) -> None:
    def handle(order: Any, job: Any) -> None: ...

    handle.__annotations__["order"] = "phpjobs.NotImported"
    assert typed_class_of(handle) is None
    assert "cannot be resolved" in caplog.text and "NotImported" in caplog.text
