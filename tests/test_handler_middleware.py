"""Python job middleware on a handler (laraq.bus.handler_middleware) and what --app load tells from schemas."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from laraq.app import App
from laraq.bus.schema import JobSchema
from laraq.protocol.versions import LaravelVersion


def test_middleware_wraps_the_handler_outermost_first() -> None:
    app = App()
    calls: list[str] = []

    def outer(command: Any, job: Any, call_next: Any) -> Any:
        calls.append("outer-before")
        result = call_next(command + "!", job)
        calls.append("outer-after")
        return result

    def gate(command: Any, job: Any, call_next: Any) -> Any:
        calls.append("gate")
        return None if command.startswith("stop") else call_next(command, job)

    app.register("App\\Jobs\\X", lambda command, job: calls.append(f"handle {command}"), middleware=[outer, gate])
    handler = app._handlers["App\\Jobs\\X"]
    handler.func("go", None)
    handler.func("stop", None)
    assert calls == ["outer-before", "gate", "handle go!", "outer-after", "outer-before", "gate", "outer-after"]
    assert handler.python_middleware == 2


def test_async_handlers_take_async_middleware_only() -> None:
    app = App()

    async def handle(command: Any, job: Any) -> str:
        return f"ran {command}"

    async def mw(command: Any, job: Any, call_next: Any) -> Any:
        return (await call_next(command, job)).upper()

    app.register("App\\Jobs\\A", handle, middleware=[mw])
    assert asyncio.run(app._handlers["App\\Jobs\\A"].func("x", None)) == "RAN X"
    with pytest.raises(TypeError, match="must be async"):
        app.register("App\\Jobs\\B", handle, middleware=[lambda c, j, n: n(c, j)])
    with pytest.raises(TypeError, match="must be plain"):
        app.register("App\\Jobs\\C", lambda c, j: None, middleware=[mw])


def test_app_load_names_what_the_schemas_say_laraq_cannot_do() -> None:
    app = App()
    app.register("App\\Jobs\\M", lambda c, j: None)
    app.register("App\\Jobs\\U", lambda c, j: None)
    app.register("App\\Jobs\\P", lambda c, j: None)
    app.job_schemas["App\\Jobs\\M"] = JobSchema("App\\Jobs\\M", methods=frozenset({"middleware"}))
    app.job_schemas["App\\Jobs\\U"] = JobSchema("App\\Jobs\\U", methods=frozenset({"uniqueId"}),
                                                interfaces=frozenset({"Illuminate\\Contracts\\Queue\\ShouldBeUnique"}))
    app.job_schemas["App\\Jobs\\P"] = JobSchema("App\\Jobs\\P", interfaces=frozenset(
        {"Illuminate\\Contracts\\Queue\\ShouldBeUnique", "Illuminate\\Contracts\\Queue\\ShouldBeUniqueUntilProcessing"}))
    old = app.problems(LaravelVersion.parse("8.83.26"))
    assert len(old) == 3
    assert "App\\Jobs\\M has a middleware() method" in old[0]
    assert "declare unique='until_processing'" in old[1] and "declare unique=True" in old[2]
    # 11.39+ payloads name the lock of a uniqueId() method: no declaration needed
    assert len(app.problems(LaravelVersion.parse("12.67.0"))) == 2


def test_doctor_repeats_what_the_schemas_say(redis_server: Any, redis_client: Any, tmp_path: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import sys

    from laraq.config.settings import LaravelSettings
    from laraq.ops.doctor import diagnose
    from laraq.protocol.queue import RedisQueue

    (tmp_path / "doctor_app.py").write_text(
        "import laraq\napp = laraq.App()\napp.register('App\\\\Jobs\\\\M', lambda c, j: None)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("doctor_app", None)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"jobs": {"App\\Jobs\\M": {"methods": ["middleware"], "properties": []}}}))
    settings = LaravelSettings.from_env({"APP_NAME": "Laravel", "REDIS_PORT": str(redis_server.port),
                                         "LARAQ_SCHEMA": str(schema)}, version="12")
    queue = RedisQueue(redis_client, prefix="", version=settings.version)
    found = [(f.level, f.title) for f in diagnose(settings, queue, app_ref="doctor_app:app")]
    assert ("warn", "App\\Jobs\\M has a middleware() method laraq cannot run (declare Python middleware on "
            "the handler to stand for it): its jobs go back to PHP") in found
