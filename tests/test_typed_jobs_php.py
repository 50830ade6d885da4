"""Typed jobs (``laraq schema --python``, :mod:`laraq.bus.typed`) against live Laravel 8, 12 and 13:
the generated class dispatched by :meth:`Dispatcher.dispatch` writes what PHP's ``dispatch()`` writes,
byte for byte (ids and times aside); PHP runs it with the same values; a Python handler annotated with
the class gets an instance holding what PHP dispatched.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from phpapp import PhpApp
from test_schema_php import dispatcher, norm, pushed

from laraq.bus.dispatch import Dispatcher

pytestmark = pytest.mark.php

TYPED = "App\\Jobs\\TypedOrderJob"


@pytest.fixture
def app(laravel: str, redis_server: Any, tmp_path: Any) -> PhpApp:
    php = PhpApp(redis_server.port, version=laravel, workdir=tmp_path)
    conn = sqlite3.connect(php.db_path)
    conn.executemany("INSERT INTO posts (id, title) VALUES (?, ?)", [(1, "first"), (2, "second")])
    conn.commit()
    conn.close()
    return php


def generate(app: PhpApp, tmp_path: Path, name: str, *classes: str, every: bool = False) -> Any:
    """``laraq schema --from APP --python`` into a fresh module, imported (``every``: all the app's classes)."""
    from laraq.cli import main

    out = tmp_path / f"{name}.py"
    picked = [] if every else [arg for c in (classes or (TYPED,)) for arg in ("--class", c)]
    result = CliRunner().invoke(main, ["schema", "--from", str(app.path), *picked, "--python", str(out)],
                                env=app.env)
    assert result.exit_code == 0, result.output
    spec = importlib.util.spec_from_file_location(name, out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_typed_instance_dispatch_is_phps_byte_for_byte(app: PhpApp, redis_client: Any, tmp_path: Path) -> None:
    jobs = generate(app, tmp_path, f"typed_jobs_{app.version}")
    order = jobs.TypedOrderJob(post=jobs.PostRef(1), status=jobs.Status.Archived, quantity=3, ratio=1.5,
                               note=None, tags=["a", "b"], ref="R-9", priority=jobs.Priority.High)
    args = {"post": 1, "status": "archived", "quantity": 3, "ratio": 1.5, "tags": ["a", "b"], "ref": "R-9",
            "priority": 10}
    app.tool("dispatch", "typed-order", "--queue=pq", "--args=" + json.dumps(args))
    d = dispatcher(app, redis_client, {})
    result = d.dispatch(order, queue="lq", connection="redis")
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    assert result.id and norm(py_body, "lq") == norm(php_body, "pq")
    # an int ref, a rush flag and defaults left as PHP's (priority null): still PHP's bytes
    app.tool("dispatch", "typed-order", "--queue=pq", "--args=" + json.dumps({"post": 2, "ref": 7, "rush": True,
                                                                               "note": "n", "quantity": 1}))
    d.dispatch(jobs.TypedOrderJob(post=jobs.PostRef(2), status=jobs.Status.Active, quantity=1, ratio=0.5,
                                  note="n", tags=[], ref=7, rush=True), queue="lq", connection="redis")
    php_body, py_body = pushed(app, redis_client, "pq")[-1], pushed(app, redis_client, "lq")[-1]
    assert norm(py_body, "lq") == norm(php_body, "pq")
    # PHP runs laraq's dispatches with the values given
    app.artisan("queue:work", "redis", "--queue=lq", "--stop-when-empty", "--sleep=0", check=True)
    runs = [r for r in app.runs() if r.get("queue") == "lq"]
    assert [(r["post"], r["status"], r["quantity"], r["ref"], r["rush"], r["priority"], r["channel"])
            for r in runs] == [(1, "archived", 3, "R-9", False, 10, "web"), (2, "active", 1, 7, True, None, "web")]


def test_a_value_php_refuses_is_refused_at_dispatch(app: PhpApp, redis_client: Any, tmp_path: Path) -> None:
    """Not a case of the enum, ``None`` for a non-nullable, a word for an int: PHP's worker cannot restore
    such a command (``TypeError``), and laraq's dispatch refuses the instance in one line, naming the class,
    the property and the PHP type."""
    from laraq.bus.typed import TypedJobError, wire_values

    jobs = generate(app, tmp_path, f"typed_refuse_{app.version}")
    good = {"post": jobs.PostRef(1), "status": jobs.Status.Active, "quantity": 1, "ratio": 0.5, "note": None,
            "tags": [], "ref": 1}
    d = dispatcher(app, redis_client, {})
    for change, said in [({"status": "paid"}, "status is 'paid' (string), not App\\Enums\\Status"),
                         ({"note": None, "ratio": None}, "ratio is None (null), not float"),
                         ({"quantity": "three"}, "quantity is 'three' (string), not int")]:
        order = jobs.TypedOrderJob(**(good | change))
        with pytest.raises(TypedJobError) as caught:
            d.dispatch(order, queue="lq")
        assert str(caught.value).startswith(f"{TYPED}: {said}: PHP would refuse it"), caught.value
        # the same values written without the check: PHP's own unserialize refuses them
        values = wire_values(jobs.TypedOrderJob(**good)) | change
        prepared = d.prepare_job(TYPED, values, queue="lq")
        with pytest.raises(ValueError) as refused:  # the tool prints PHP's error, not JSON
            app.tool("unserialize-command", stdin=prepared.payload)
        assert "Cannot assign" in getattr(refused.value, "doc", ""), refused.value
    assert redis_client.llen(app.prefix + "queues:lq") == 0


def test_the_readme_typed_example_writes_phps_bytes(app: PhpApp, redis_client: Any, tmp_path: Path) -> None:
    """The README's typed-jobs example, run as written (its module generated by ``laraq schema --python``)."""
    from laraq.app import App

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```python\n( *from myproject\.phpjobs import GenerateReport\n.*?) *```", readme, re.S)
    assert block, "the README's typed example is gone"
    jobs = generate(app, tmp_path, f"readme_phpjobs_{app.version}", "App\\Jobs\\GenerateReport")
    sys.modules["myproject"] = type(sys)("myproject")
    sys.modules["myproject.phpjobs"] = jobs
    try:
        d = dispatcher(app, redis_client, {})
        exec(textwrap.dedent(block.group(1)), {"app": App("readme"), "dispatcher": d})  # noqa: S102
    finally:
        sys.modules.pop("myproject.phpjobs", None)
        sys.modules.pop("myproject", None)
    app.tool("dispatch", "report", "--queue=python", "--args=" + json.dumps({"document": "q4.pdf",
                                                                             "options": {"pages": 3}}))
    python_body, php_body = pushed(app, redis_client, "python")
    # the fixture's tool calls onConnection('redis'); the README's PHP line does not (null)
    php_body = php_body.replace(b'\\"connection\\";s:5:\\"redis\\";', b'\\"connection\\";N;', 1)
    assert norm(python_body, "python") == norm(php_body, "python")


def test_a_model_collection_in_an_untyped_property(app: PhpApp, redis_client: Any, tmp_path: Path) -> None:
    """``PostJob`` (``SerializesModels``, untyped properties): a model, an enum and a collection of models."""
    from laraq.bus.typed import ModelCollection

    jobs = generate(app, tmp_path, f"typed_posts_{app.version}", "App\\Jobs\\PostJob")
    conn = sqlite3.connect(app.db_path)
    conn.execute("INSERT INTO posts (id, title) VALUES (3, 'third')")
    conn.commit()
    conn.close()
    app.tool("dispatch", "post", "--queue=pq", "--args=" + json.dumps({"id": 1, "status": "archived", "others": [2, 3]}))
    d = dispatcher(app, redis_client, {})
    d.dispatch(jobs.PostJob(post=jobs.PostRef(1), status=jobs.Status.Archived,
                            others=ModelCollection("App\\Models\\Post", (2, 3), "sqlite")), queue="lq",
               connection="redis")
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    assert norm(py_body, "lq") == norm(php_body, "pq")


def test_a_typed_handler_gets_an_instance_of_what_php_dispatched(app: PhpApp, redis_client: Any, tmp_path: Path,
                                                                  workers: list[Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from laraq.app import App
    from laraq.cli.work import build_worker, default_params

    jobs = generate(app, tmp_path, f"typed_recv_{app.version}")
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    seen: list[Any] = []
    py = App("typed")

    def handle(order: Any, job: Any) -> None:
        seen.append(order)

    handle.__annotations__["order"] = jobs.TypedOrderJob  # as `order: TypedOrderJob` with the module imported

    py.register(TYPED, handle)
    assert py.typed_jobs == {TYPED: jobs.TypedOrderJob} and py.problems() == []
    app.tool("dispatch", "typed-order", "--queue=lq", "--args=" + json.dumps(
        {"post": 2, "status": "archived", "quantity": 4, "ratio": 2.5, "tags": {"k": "v"}, "ref": 11, "priority": 1}))
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, queue="lq")
    worker = build_worker(params, env=app.env, app=py)
    workers.append(worker)
    assert worker.daemon() == 0
    (order,) = seen
    assert isinstance(order, jobs.TypedOrderJob)
    assert (order.post.id, order.post.row["title"], order.status, order.quantity, order.ratio, order.note,
            order.tags, order.ref, order.rush, order.priority, order.channel, order.tries) == (
        2, "second", jobs.Status.Archived, 4, 2.5, None, {"k": "v"}, 11, False, jobs.Priority.Low, "web", 2)
    assert redis_client.llen(app.prefix + "queues:lq") == 0


def test_a_changed_php_class_is_reported(app: PhpApp, tmp_path: Path) -> None:
    """The module records its sources' SHA-256: a change shows in ``App.problems`` (doctor, banner)."""
    from laraq.app import App
    from laraq.bus.typed import drift

    jobs = generate(app, tmp_path, f"typed_drift_{app.version}")
    assert drift([jobs.TypedOrderJob]) == []
    path, _ = jobs.__laraq_sources__[TYPED]
    jobs.__laraq_sources__[TYPED] = (path, "0" * 64)  # as if the file had been edited since
    py = App("drift")

    def handle(order: Any, job: Any) -> None:
        pass

    handle.__annotations__["order"] = jobs.TypedOrderJob

    py.register(TYPED, handle)
    (problem,) = py.problems()
    assert TYPED in problem and "regenerate" in problem


def test_typed_dispatch_into_horizon_tags_the_models_as_horizon_does(php: str, redis_server: Any, redis_client: Any,
                                                                    tmp_path: Path) -> None:
    from horizon_support import horizon_app

    from laraq.horizon import HorizonSettings
    from laraq.protocol.queue import RedisQueue

    hz = horizon_app("13", redis_server.port)
    conn = sqlite3.connect(hz.db_path)
    conn.executemany("INSERT INTO posts (id, title) VALUES (?, ?)", [(1, "first")])
    conn.commit()
    conn.close()
    jobs = generate(hz, tmp_path, "typed_horizon")
    hz.tool("dispatch", "typed-order", "--queue=pq", "--args=" + json.dumps({"post": 1, "ref": 3}))
    d = Dispatcher(RedisQueue(redis_client, prefix=hz.prefix, version=hz.release), horizon=HorizonSettings())
    d.dispatch(jobs.TypedOrderJob(post=jobs.PostRef(1), status=jobs.Status.Active, quantity=1, ratio=0.5,
                                  note=None, tags=[], ref=3), queue="lq", connection="redis")
    (php_body,), (py_body,) = pushed(hz, redis_client, "pq"), pushed(hz, redis_client, "lq")
    php_payload, py_payload = json.loads(php_body), json.loads(py_body)
    assert py_payload["tags"] == php_payload["tags"] == ["App\\Models\\Post:1"]
    assert list(py_payload) == list(php_payload)


def test_schema_check_says_when_the_module_is_stale(php: str, redis_server: Any, tmp_path: Path) -> None:
    from conftest import require_laravel

    from laraq.cli import main

    require_laravel("13")  # one line is enough: the check compares the exporter's fingerprint
    app = PhpApp(redis_server.port, version="13", workdir=tmp_path)
    generate(app, tmp_path, "typed_check")
    out = tmp_path / "typed_check.py"
    args = ["schema", "--from", str(app.path), "--class", TYPED, "--python", str(out), "--check"]
    ok = CliRunner().invoke(main, args, env=app.env)
    assert ok.exit_code == 0 and "matches" in ok.output, ok.output
    text = out.read_text()
    out.write_text(re.sub(r"__laraq_fingerprint__ = '[0-9a-f]{64}'", "__laraq_fingerprint__ = '" + "0" * 64 + "'",
                          text))
    stale = CliRunner().invoke(main, args, env=app.env)
    assert stale.exit_code == 1 and "out of date" in stale.output
    # a class whose PHP declaration changed since: named, with its properties
    out.write_text(re.sub(r"__laraq_fingerprint__ = '[0-9a-f]{64}'", "__laraq_fingerprint__ = '" + "0" * 64 + "'",
                          text).replace("'name': 'quantity'", "'name': 'qty'").replace("'Archived': 'archived'", "'Old': 'x'")
                   .replace("    Archived = 'archived'", "    Old = 'x'"))
    stale = CliRunner().invoke(main, args, env=app.env)
    assert stale.exit_code == 1, stale.output
    assert f"job {TYPED}: properties qty, quantity changed" in stale.output, stale.output
    assert "enum App\\Enums\\Status: its cases changed" in stale.output, stale.output


def test_schema_names_each_class_it_cannot_read(php: str, redis_server: Any, tmp_path: Path) -> None:
    """A job class whose file does not parse is named, and nothing is written unless --skip-unreadable."""
    from conftest import require_laravel

    from laraq.cli import main

    require_laravel("13")
    app = PhpApp(redis_server.port, version="13", variant="custom", workdir=tmp_path)
    (app.path / "app" / "Jobs").mkdir(parents=True, exist_ok=True)
    (app.path / "app" / "Jobs" / "BrokenJob.php").write_text(
        "<?php\nnamespace App\\Jobs;\nclass BrokenJob implements \\Illuminate\\Contracts\\Queue\\ShouldQueue {\n"
        "    public function handle( {}\n}\n")
    out = tmp_path / "broken_jobs.py"
    refused = CliRunner().invoke(main, ["schema", "--from", str(app.path), "--python", str(out)], env=app.env)
    assert refused.exit_code == 1, refused.output
    assert "cannot read App\\Jobs\\BrokenJob: ParseError: syntax error" in refused.output, refused.output
    assert "--skip-unreadable" in refused.output and not out.exists()
    skipped = CliRunner().invoke(main, ["schema", "--from", str(app.path), "--python", str(out), "--skip-unreadable"],
                                 env=app.env)
    assert skipped.exit_code == 0 and "cannot read App\\Jobs\\BrokenJob" in skipped.output, skipped.output
    assert out.exists() and "BrokenJob" not in out.read_text()
