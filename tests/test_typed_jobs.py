"""Typed job classes (:mod:`laraq.bus.typed`) without PHP: mypy catches a wrong property name in code
using a generated class, and a command that does not fit its class fails with one clear error. (The
byte-for-byte dispatch and the handler's instance are proven against live Laravel in
``test_typed_jobs_php.py``.)
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laraq.bus.typed import UNSET, TypedJobError, from_command, generate_module, typed_class_of, wire_values
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
            _prop("items", ["iterable"], promoted=False),
            _prop("queue", [], promoted=False, initialized=True, framework=True),
        ],
        "reflection_order": []},
        "App\\Jobs\\SendInvoice": {
            "interfaces": ["Illuminate\\Contracts\\Queue\\ShouldQueue"], "traits": [], "methods": [],
            "attributes": [], "properties": [_prop("amount", ["float"])], "reflection_order": []}},
    "enums": {"App\\Enums\\Carrier": {"Ups": "ups", "Dhl": "dhl"}},
    "kinds": {"App\\Models\\Order": "model", "App\\Enums\\Carrier": "enum"},
    "sources": {},
    "connections": {"App\\Models\\Order": "mysql"},
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


def test_dispatch_refuses_what_php_would_refuse(module: Any) -> None:
    """PHP's ``unserialize()`` refuses a value its typed property cannot hold (no coercion but int to float):
    so does dispatch, in one line naming the class, the property and the PHP type."""
    def ship(**change: Any) -> Any:
        values = {"order": module.OrderRef(5), "carrier": module.Carrier.Ups, "quantity": 2, "note": None,
                  "ref": "r", "lines": []}
        return module.ShipOrder(**(values | change))

    assert wire_values(ship())["quantity"] == 2
    cases = [
        ({"carrier": "paid"}, "carrier is 'paid' (string), not App\\Enums\\Carrier"),
        ({"carrier": None}, "carrier is None (null), not App\\Enums\\Carrier"),
        ({"quantity": "3"}, "quantity is '3' (string), not int"),
        ({"quantity": True}, "quantity is True (bool), not int"),
        ({"quantity": 2.0}, "quantity is 2.0 (float), not int"),
        ({"ref": 1.5}, "ref is 1.5 (float), not string|int"),
        ({"note": 7}, "note is 7 (int), not ?string"),
        ({"lines": "a"}, "lines is 'a' (string), not array"),
        ({"order": 5}, "order is 5 (int), not App\\Models\\Order"),
    ]
    for change, said in cases:
        with pytest.raises(TypedJobError) as caught:
            wire_values(ship(**change))
        message = str(caught.value)
        assert message.startswith("App\\Jobs\\ShipOrder: " + said + ": PHP would refuse it"), message
        assert "\n" not in message and "regenerate" not in message
    # an int for a float property is written as the float PHP's property holds
    assert wire_values(module.SendInvoice(amount=3)) == {"amount": 3.0}
    assert type(wire_values(module.SendInvoice(amount=3))["amount"]) is float
    # the model's connection is what a fetched model serializes (its app's connection), not null
    assert module.OrderRef(5).connection == "mysql"
    assert wire_values(ship())["order"]._props["connection"] == "mysql"


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


def test_a_handler_never_gets_a_value_its_annotation_excludes(module: Any) -> None:
    """A payload value outside a field's type fails the job naming the class, the property and the type;
    "regenerate" only when the PHP class's source really changed since the module was written."""
    def command(**extra: Any) -> PHPObject:
        props = {"order": PHPObject("Illuminate\\Contracts\\Database\\ModelIdentifier",
                                    {"class": "App\\Models\\Order", "id": 5, "relations": [], "connection": "mysql"}),
                 "carrier": PHPEnum("App\\Enums\\Carrier", "Dhl"), "quantity": 2, "note": None, "ref": "r",
                 "lines": {}}
        return PHPObject("App\\Jobs\\ShipOrder", props | extra)

    with pytest.raises(TypedJobError) as caught:
        from_command(module.ShipOrder, command(carrier="paid"))
    message = str(caught.value)
    assert message.startswith("App\\Jobs\\ShipOrder: carrier is 'paid' (string), not App\\Enums\\Carrier; "), message
    assert "regenerate" not in message and "not written by App\\Jobs\\ShipOrder's dispatch()" in message
    with pytest.raises(TypedJobError, match=r"carrier is None \(null\), not App\\Enums\\Carrier"):
        from_command(module.ShipOrder, command(carrier=None))
    with pytest.raises(TypedJobError, match=r"quantity is '2' \(string\), not int"):
        from_command(module.ShipOrder, command(quantity="2"))
    # an iterable property holds an array or a Traversable object (a Collection), nothing else
    collection = PHPObject("Illuminate\\Support\\Collection", {"\0*\0items": {0: 1}})
    assert from_command(module.ShipOrder, command(items=collection)).items is collection
    assert from_command(module.ShipOrder, command(items={0: "a"})).items == ["a"]
    with pytest.raises(TypedJobError, match=r"items is 'abc' \(string\), not iterable"):
        from_command(module.ShipOrder, command(items="abc"))
    # with the PHP source at hand: unchanged -> the job's own fault; changed -> regenerate, naming the class
    source = Path(module.__file__).parent / "ShipOrder.php"
    source.write_text("<?php // ShipOrder\n")
    module.__laraq_sources__["App\\Jobs\\ShipOrder"] = (str(source), hashlib.sha256(source.read_bytes()).hexdigest())
    with pytest.raises(TypedJobError, match="is unchanged since shipjobs was written, so the job was not written"):
        from_command(module.ShipOrder, command(colour="red"))
    source.write_text("<?php // ShipOrder, with a colour\n")
    with pytest.raises(TypedJobError) as caught:
        from_command(module.ShipOrder, command(colour="red"))
    assert str(caught.value) == ("App\\Jobs\\ShipOrder: the job has a property 'colour' that ShipOrder does not "
                                 "declare; App\\Jobs\\ShipOrder changed since shipjobs was written: regenerate it "
                                 "with laraq schema --from APP --python")


def test_a_handler_annotated_with_another_type_fails_when_registered(module: Any) -> None:
    from laraq.app import App
    from laraq.protocol.serializer import PHPObject as Command

    app = App("t")

    def wrong(cmd: Any, job: Any) -> None: ...

    wrong.__annotations__["cmd"] = module.SendInvoice
    with pytest.raises(TypeError) as caught:
        app.register("App\\Jobs\\ShipOrder", wrong)
    assert str(caught.value) == (
        "handler test_a_handler_annotated_with_another_type_fails_when_registered.<locals>.wrong of "
        "App\\Jobs\\ShipOrder: its first parameter is annotated SendInvoice, the typed class of "
        "App\\Jobs\\SendInvoice: annotate it with the class generated for App\\Jobs\\ShipOrder")
    wrong.__annotations__["cmd"] = int
    with pytest.raises(TypeError, match="annotated int, which the command never is"):
        app.register("App\\Jobs\\ShipOrder", wrong)
    assert app.typed_jobs == {}
    for fine in (module.ShipOrder, Any, Command, object):
        wrong.__annotations__["cmd"] = fine
        App("ok").register("App\\Jobs\\ShipOrder", wrong)
    App("ok").register("App\\Jobs\\ShipOrder", lambda command, job: None)


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


def test_laraq_work_says_a_wrong_annotation_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "wrongly_typed.py").write_text(
        "from laraq.app import App\n"
        "app = App('x')\n\n"
        "@app.handler('App\\\\Jobs\\\\ShipOrder')\n"
        "def ship(cmd: int, job: object) -> None: ...\n")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "laraq", "work", "--app", "wrongly_typed:app", "--once",
                           "--redis-url", "redis://127.0.0.1:1"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{root}:{tmp_path}", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "laraq work: cannot load --app wrongly_typed:app: handler ship of App\\Jobs\\ShipOrder: its first "
        "parameter is annotated int, which the command never is: annotate it with the class laraq schema "
        "--python generated for App\\Jobs\\ShipOrder, PHPObject or Any"), proc.stderr
