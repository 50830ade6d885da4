"""Dispatch fidelity: laraq's dispatch of a class with a schema writes what PHP's ``dispatch()`` writes,
proven byte for byte against Laravel 8, 12 and 13, with the unique lock taken (and a second dispatch
dropped) like PHP's ``PendingDispatch``. The schema is exported from the app by ``laraq schema`` (PHP
reflection with the app's own autoloader) or declared in Python.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner
from phpapp import PhpApp

from laraq.bus.dispatch import Dispatcher
from laraq.bus.schema import SchemaError, export_schema, parse_schema
from laraq.config.settings import LaravelSettings
from laraq.protocol.queue import RedisQueue
from laraq.stores.cache import LaravelCache

pytestmark = pytest.mark.php

DEFAULTS = "App\\Jobs\\DefaultsJob"
ECHO = "App\\Jobs\\EchoJob"


@pytest.fixture
def app(laravel: str, redis_server: Any, tmp_path: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel, workdir=tmp_path)


def exported(app: PhpApp, *classes: str) -> dict[str, Any]:
    return export_schema(app.path, classes, env=app.env)


def dispatcher(app: PhpApp, redis_client: Any, schemas: dict[str, Any]) -> Dispatcher:
    settings = LaravelSettings.from_env(app.env, version=app.release)
    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)
    return Dispatcher(queue, schemas=schemas, cache=LaravelCache.from_settings(settings))


def norm(body: bytes, side: str) -> dict[str, Any]:
    """The payload with what differs by nature blanked: ids, the dispatch time, the side's queue name
    and unique id (``pq``/``lq``), and 13.24+'s random lock owner (``Str::random(16)``)."""
    text = body.decode().replace(f'\\"{side}', '\\"xq').replace(f":{side}-", ":xq-")
    text = re.sub(r'(s:16:\\")[A-Za-z0-9]{16}(\\")', r"\1-\2", text)
    payload = json.loads(text)
    payload["uuid"] = payload["id"] = "-"
    if "createdAt" in payload:
        payload["createdAt"] = 0
    return payload


def pushed(app: PhpApp, redis_client: Any, queue: str) -> list[bytes]:
    return list(redis_client.lrange(app.prefix + "queues:" + queue, 0, -1))


def lock(app: PhpApp, redis_client: Any, unique_id: str) -> tuple[bytes | None, int]:
    (key,) = [k for k in redis_client.scan_iter(match=f"*laravel_unique_job:*{unique_id}*")]
    return redis_client.get(key), redis_client.ttl(key)


def test_exported_schema_dispatch_is_phps_byte_for_byte(app: PhpApp, redis_client: Any) -> None:
    data = exported(app, DEFAULTS, ECHO, "App\\Enums\\Status")
    jobs, enums = parse_schema(data)
    assert enums == {"App\\Enums\\Status": {"Active": "active", "Archived": "archived"}}
    d = dispatcher(app, redis_client, jobs)
    # a unique class: PHP's dispatch() takes the lock, a second one is dropped while it is held
    for side in ("pq", "lq"):
        for _ in range(2):
            if side == "pq":
                app.tool("dispatch", "defaults", "--queue=pq", "--pending",
                         "--args=" + json.dumps({"label": "hello", "id": "pq-1", "count": 7}))
            else:
                d.dispatch_job(DEFAULTS, {"label": "hello", "uniqueId": "lq-1", "count": 7}, queue="lq",
                               connection="redis")
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    assert norm(py_body, "lq") == norm(php_body, "pq")
    payload = json.loads(py_body)
    assert (payload["maxTries"], payload["backoff"], payload["timeout"], payload["maxExceptions"],
            payload["failOnTimeout"]) == (3, "10,60", 30, 2, True)
    php_lock, py_lock = lock(app, redis_client, "pq-1"), lock(app, redis_client, "lq-1")
    assert 0 < php_lock[1] <= 600 and 0 < py_lock[1] <= 600  # uniqueFor
    if app.version == "13":  # the owner written into the command is the lock's value
        assert py_lock[0] and py_lock[0].decode() in payload["data"]["command"]
    # a plain class with protected/private properties and Queueable's trait properties
    app.tool("dispatch", "echo", "--queue=pq", "--args=" + json.dumps({"args": {"n": 1}, "mode": "ok"}))
    d.dispatch_job(ECHO, {"args": {"n": 1}, "mode": "ok", "seconds": 0}, queue="lq", connection="redis")
    php_body, py_body = pushed(app, redis_client, "pq")[-1], pushed(app, redis_client, "lq")[-1]
    assert norm(py_body, "lq") == norm(php_body, "pq")
    # PHP runs laraq's dispatch with the class's settings
    redis_client.delete(*redis_client.keys("*laravel_unique_job*"))
    app.artisan("queue:work", "redis", "--queue=lq", "--stop-when-empty", "--sleep=0", check=True)
    runs = [r for r in app.runs() if r.get("queue") == "lq"]
    assert [(r["class"], r.get("label"), r.get("tries")) for r in runs] == [(DEFAULTS, "hello", 3), (ECHO, None, None)]


def test_python_declared_schema_matches_php(app: PhpApp, redis_client: Any) -> None:
    from laraq.app import App

    py = App()
    py.job_schema(DEFAULTS, properties={"label": "none"}, tries=3, backoff=[10, 60], timeout=30, max_exceptions=2,
                  fail_on_timeout=True, unique_for=600, unique=True)
    d = dispatcher(app, redis_client, py.job_schemas)
    app.tool("dispatch", "defaults", "--queue=pq", "--pending", "--args=" + json.dumps({"label": "x", "id": "pq-2"}))
    # declared: the class's own properties in its order; uniqueId and the typed $count come after
    d.dispatch_job(DEFAULTS, {"label": "x", "uniqueId": "lq-2"}, queue="lq", connection="redis")
    again = d.dispatch_job(DEFAULTS, {"label": "x", "uniqueId": "lq-2"}, queue="lq", connection="redis")
    assert again.skipped and again.id is None  # the lock is held: dropped, as PHP drops it
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    assert norm(py_body, "lq") == norm(php_body, "pq")


def test_a_payload_only_php_code_computes_is_refused(app: PhpApp, redis_client: Any) -> None:
    jobs, _ = parse_schema(exported(app, "App\\Jobs\\ConfiguredJob", "App\\Jobs\\UniqueMethodJob"))
    d = dispatcher(app, redis_client, jobs)
    with pytest.raises(SchemaError, match=r"retryUntil\(\) \(give retry_until=\)"):
        d.dispatch_job("App\\Jobs\\ConfiguredJob", {})
    with pytest.raises(SchemaError, match=r"uniqueId\(\) \(give unique_id=\)"):
        d.dispatch_job("App\\Jobs\\UniqueMethodJob", {"key": "k"})
    with pytest.raises(SchemaError, match="declares no property nope"):
        d.dispatch_job("App\\Jobs\\ConfiguredJob", {"nope": 1}, retry_until=60)
    assert pushed(app, redis_client, "default") == []


def test_schema_command_writes_json(app: PhpApp, tmp_path: Any) -> None:
    from laraq.cli import main

    out = tmp_path / "schema.json"
    result = CliRunner().invoke(main, ["schema", "--from", str(app.path), "--class", DEFAULTS, "-o", str(out)],
                                env=app.env)
    assert result.exit_code == 0, result.output
    jobs, _ = parse_schema(json.loads(out.read_text()))
    assert jobs[DEFAULTS].is_unique and [p.name for p in jobs[DEFAULTS].properties or []][:3] == [
        "label", "tries", "backoff"]


def test_serializes_models_class_is_written_as_php_writes_it(app: PhpApp, redis_client: Any) -> None:
    """``SerializesModels``: reflection order, default-valued properties left out on 9.4+, models as
    ``ModelIdentifier`` and a backed enum as ``E:``."""
    import sqlite3

    from laraq.protocol.serializer import ModelIdentifier, PHPEnum

    conn = sqlite3.connect(app.db_path)
    conn.executemany("INSERT INTO posts (id, title) VALUES (?, ?)", [(1, "first"), (2, "second"), (3, "third")])
    conn.commit()
    conn.close()
    jobs, _ = parse_schema(exported(app, "App\\Jobs\\PostJob"))
    d = dispatcher(app, redis_client, jobs)
    app.tool("dispatch", "post", "--queue=pq", "--args=" + json.dumps({"id": 1, "status": "archived", "others": [3, 2]}))
    with_class = app.version != "8"  # collectionClass arrived in 9.26
    d.dispatch_job("App\\Jobs\\PostJob", {
        "post": ModelIdentifier("App\\Models\\Post", 1, connection="sqlite").to_php(include_collection_class=with_class),
        "status": PHPEnum("App\\Enums\\Status", "Archived"),
        "others": ModelIdentifier("App\\Models\\Post", [2, 3], connection="sqlite").to_php(
            include_collection_class=with_class),
    }, queue="lq", connection="redis")
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    assert norm(py_body, "lq") == norm(php_body, "pq")


def test_a_middleware_method_known_from_the_schema_sends_the_job_to_php(app: PhpApp, redis_client: Any,
                                                                          workers: list[Any], tmp_path: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A class whose ``middleware()`` *method* PHP runs around ``handle()``: invisible in the payload, but
    the exported schema names it, so ``--app`` load says so and its jobs go back to PHP untouched (until
    the handler declares Python middleware to stand for it)."""
    from laraq.app import App
    from laraq.cli.work import build_worker, default_params

    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    cls = "App\\Jobs\\MethodMiddlewareJob"
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(exported(app, cls)))
    seen: list[str] = []

    def run(middleware: list[Any]) -> None:
        py = App("mw")
        py.register(cls, lambda command, job: seen.append(command.mode), middleware=middleware)
        params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                                queue="lq", unhandled_delay=1)
        worker = build_worker(params, env={**app.env, "LARAQ_SCHEMA": str(schema_file)}, app=py)
        workers.append(worker)
        problems = py.problems(worker.version)
        assert bool(problems) is (not middleware)
        assert worker.daemon() == 0

    app.tool("dispatch", "method-middleware", "--queue=lq", "--args=" + json.dumps({"mode": "first"}))
    (body,) = pushed(app, redis_client, "lq")
    run([])
    assert seen == [] and redis_client.zrange(app.prefix + "queues:lq:delayed", 0, -1) == [body]  # untouched
    redis_client.zadd(app.prefix + "queues:lq:delayed", {body: 0})
    app.artisan("queue:work", "redis", "--queue=lq", "--stop-when-empty", "--sleep=0", check=True)
    assert [r["runner"] for r in app.runs() if r.get("class") == cls] == ["php"]

    def stand_in(command: Any, job: Any, call_next: Any) -> Any:  # the Python side of its middleware
        return call_next(command, job)

    app.tool("dispatch", "method-middleware", "--queue=lq", "--args=" + json.dumps({"mode": "second"}))
    run([stand_in])
    assert seen == ["second"]


def test_laraq_dispatch_with_a_schema(app: PhpApp, redis_client: Any, tmp_path: Any) -> None:
    """``laraq dispatch --schema``: PHP's payload for the class; a second unique dispatch is dropped."""
    from laraq.cli import main

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(exported(app, DEFAULTS)))
    app.tool("dispatch", "defaults", "--queue=pq", "--pending", "--args=" + json.dumps({"label": "cli", "id": "pq-3"}))
    args = ["dispatch", DEFAULTS, "--schema", str(schema), "-q", "lq", "-p", 'label="cli"', "-p", 'uniqueId="lq-3"',
            "--laravel", app.release]
    runner = CliRunner()
    first = runner.invoke(main, args, env=app.env)
    assert first.exit_code == 0 and "dispatched" in first.output, first.output
    second = runner.invoke(main, args, env=app.env)
    assert second.exit_code == 0 and "its unique lock is held" in second.output, second.output
    (php_body,), (py_body,) = pushed(app, redis_client, "pq"), pushed(app, redis_client, "lq")
    php = norm(php_body, "pq")
    php["data"]["command"] = php["data"]["command"].replace('s:5:"redis"', "N")  # the fixture's onConnection()
    assert norm(py_body, "lq") == php
