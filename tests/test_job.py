"""Job, App and Output without PHP: a job's state and Redis effects, handler lookup, output formats."""

from __future__ import annotations

import io
import json
import re
import time
from typing import Any

import pytest

from laraq.app import App, load_app
from laraq.bus.job import Job, QueueActions
from laraq.cli.output import Output, format_run_time
from laraq.protocol.payload import Payload, build_object_payload, build_string_payload
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

V8 = LaravelVersion.parse("8")
V13 = LaravelVersion.parse("13")


@pytest.fixture
def queue(redis_client: Any) -> RedisQueue:
    return RedisQueue(redis_client, prefix="p_", version=V8)


def pop_job(queue: RedisQueue, body: str, failures: list[Any] | None = None) -> Job:
    queue.push_raw(body, "q")
    reserved = queue.pop("q")
    assert reserved is not None
    hook = (lambda job, exc: failures.append((job, exc))) if failures is not None else None
    return Job(queue, reserved, Payload.parse(reserved.body, version=V8), connection_name="redis",
               actions=QueueActions(hook))


def test_job_identity_and_attempts(queue: RedisQueue) -> None:
    body = build_string_payload(V8, "App\\Handlers\\Foo@bar", {"n": 1}, max_tries=4, timeout=9, backoff=[1, 2])
    job = pop_job(queue, body)
    payload = json.loads(body)
    assert (job.id, job.uuid, job.queue, job.connection) == (payload["id"], payload["uuid"], "q", "redis")
    assert job.name == "App\\Handlers\\Foo" and job.attempts == 1
    assert (job.max_tries, job.timeout, job.backoff, job.data) == (4, 9, "1,2", {"n": 1})
    assert job.body == body.encode() and json.loads(job.reserved)["attempts"] == 1


def test_release_delete_fail(queue: RedisQueue, redis_client: Any) -> None:
    job = pop_job(queue, build_string_payload(V8, "X@y", {}))
    job.release(30)
    assert job.is_released and not job.is_deleted
    ((member, score),) = redis_client.zrange("p_queues:q:delayed", 0, -1, withscores=True)
    assert member == job.reserved and int(time.time()) + 29 <= score <= int(time.time()) + 30
    assert redis_client.zcard("p_queues:q:reserved") == 0

    job = pop_job(queue, build_string_payload(V8, "X@y", {}))
    job.delete()
    assert job.is_deleted and redis_client.zcard("p_queues:q:reserved") == 0

    failures: list[Any] = []
    job = pop_job(queue, build_string_payload(V8, "X@y", {}), failures)
    boom = RuntimeError("boom")
    job.fail(boom)
    assert job.has_failed and job.is_deleted and failures == [(job, boom)]
    job.fail(boom)  # already deleted: no second failed_jobs row
    assert len(failures) == 1


def test_abandoned_job_ignores_the_handler(queue: RedisQueue, redis_client: Any) -> None:
    failures: list[Any] = []
    job = pop_job(queue, build_string_payload(V8, "X@y", {}), failures)
    job.abandon()
    job.delete()
    job.release(1)
    job.fail(RuntimeError("late"))
    assert redis_client.zcard("p_queues:q:reserved") == 1 and failures == []
    assert job.mark_failed(from_watchdog=True)  # the watchdog still may (its timeout bookkeeping)
    QueueActions(lambda j, e: failures.append((j, e))).fail(job, RuntimeError("timeout"))
    assert redis_client.zcard("p_queues:q:reserved") == 0 and len(failures) == 1


def test_app_resolves_like_laravel() -> None:
    app = App()

    @app.handler("\\App\\Jobs\\Report")
    def report(command: Any, job: Job) -> None: ...

    @app.handler("App\\Handlers\\Foo@bar")
    async def foo(data: Any, job: Job) -> None: ...

    @app.handler("App\\Legacy\\Fire")
    def fire(data: Any, job: Job) -> None: ...

    obj = Payload.parse(build_object_payload(V13, command_name="App\\Jobs\\Report", command="O:1:\"x\":0:{}",
                                             display_name="Custom report name"))
    handler = app.resolve(obj)
    assert handler is not None and handler.func is report and handler.kind == "command" and not handler.is_async
    string = app.resolve(Payload.parse(build_string_payload(V13, "App\\Handlers\\Foo@bar", {})))
    assert string is not None and string.is_async and string.kind == "string"
    assert app.resolve(Payload.parse(build_string_payload(V13, "App\\Legacy\\Fire", {}))).func is fire  # type: ignore[union-attr]
    assert app.resolve(Payload.parse(build_string_payload(V13, "App\\Handlers\\Foo@baz", {}))) is None
    with pytest.raises(ValueError, match="already registered"):
        app.register("App\\Jobs\\Report", report)
    assert "App\\Jobs\\Report" in app and app.names == sorted(app.names)


def test_load_app() -> None:
    assert isinstance(load_app("examples.handlers:app"), App)
    with pytest.raises(TypeError):
        load_app("json:dumps")


class FakeJob:
    id, uuid, connection, queue, name, attempts = "ID1", "u-1", "redis", "default", "App\\Jobs\\X", 2
    is_deleted, is_released, has_failed = True, False, False


def test_output_styles() -> None:
    job: Any = FakeJob()
    for version, expected in ((V8, r"^\[.{19}\]\[ID1\] Processing: App\\Jobs\\X$"),
                              (V13, r"^  .{19} App\\Jobs\\X \.+ RUNNING$")):
        buf = io.StringIO()
        Output(version, stream=buf, width=80).job(job, "starting")
        assert re.match(expected, buf.getvalue().rstrip("\n"))
    buf = io.StringIO()
    out = Output(V13, stream=buf, json_mode=True)
    out.job(job, "starting")
    out.job(job, "failed", RuntimeError("a/b"))
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert list(first) == ["level", "id", "uuid", "connection", "queue", "job", "status", "result", "attempts",
                           "timestamp"]
    assert second["level"] == "warning" and second["exception"] == "RuntimeError" and second["message"] == "a/b"
    assert "a\\/b" in buf.getvalue()  # json_encode without flags escapes slashes
    quiet = io.StringIO()
    Output(V13, stream=quiet, quiet=True).job(job, "starting")
    assert quiet.getvalue() == ""


def test_run_time_format() -> None:
    assert format_run_time(0.01234) == "12.34ms"
    assert format_run_time(1.5) == "1s" and format_run_time(123) == "2m 3s"
    assert format_run_time(1.5, humanize=False) == "1,500.00ms"
    # just under a second rounds up to 1000.00, which number_format writes with its separator
    assert format_run_time(0.999996) == "1,000.00ms" and format_run_time(0.99998) == "999.98ms"
    assert format_run_time(0.999996, humanize=False) == "1,000.00ms"


def _lines(version: str, statuses: tuple[str, ...], elapsed: float, monkeypatch: pytest.MonkeyPatch,
           **kw: Any) -> list[str]:
    """The lines one job prints (start, then ``statuses``), at a fixed date and run time."""
    buf = io.StringIO()
    out = Output(LaravelVersion.parse(version), stream=buf, width=80, **kw)
    monkeypatch.setattr(out, "_date", lambda: "2026-11-23 01:02:03")
    monkeypatch.setattr(time, "monotonic", lambda: 50.0)
    job: Any = FakeJob()
    out.job(job, "starting")
    monkeypatch.setattr(time, "monotonic", lambda: 50.0 + elapsed)
    for status in statuses:
        out.job(job, status, RuntimeError("boom"))  # type: ignore[arg-type]
    return buf.getvalue().splitlines()


def test_console_lines_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact console lines of each style: plain, coloured, ``-v``, and each outcome's word."""
    # the dots fill the line to the width: 80 - name - 33, or 80 - name - run time - 31
    assert _lines("13.26", ("success",), 0.01234, monkeypatch) == [
        f"  2026-11-23 01:02:03 App\\Jobs\\X {'.' * 37} RUNNING",
        f"  2026-11-23 01:02:03 App\\Jobs\\X {'.' * 32} 12.34ms DONE"]
    gray, reset, bold = "\x1b[90m", "\x1b[0m", "\x1b[1m"
    assert _lines("13.26", ("released_after_exception",), 2.0, monkeypatch, color=True)[1] == (
        f"  {gray}2026-11-23 01:02:03{reset} App\\Jobs\\X {gray}{'.' * 37}{reset} "
        f"{gray}2s{reset} {bold}\x1b[33mFAIL{reset}")
    # -v: the job id, and from 12.20 the connection and queue; 10.13.0 does not humanize the run time
    assert _lines("12.20", ("failed",), 0.5, monkeypatch, verbosity=1)[1] == (
        f"  2026-11-23 01:02:03 App\\Jobs\\X ID1 redis default {'.' * 13} 500.00ms FAIL")
    assert _lines("12.19", ("failed",), 2.5, monkeypatch, verbosity=1)[1] == (
        f"  2026-11-23 01:02:03 App\\Jobs\\X ID1 {'.' * 33} 2s FAIL")
    assert _lines("10.13.0", ("success",), 2.5, monkeypatch)[1].endswith(" 2,500.00ms DONE")
    # inline (9.21-9.40): no RUNNING line of its own; legacy: releases print nothing
    assert _lines("9.30", ("success",), 0.001, monkeypatch) == [
        f"  2026-11-23 01:02:03 App\\Jobs\\X {'.' * 33} 1.00ms DONE"]
    assert _lines("8.83", ("released_after_exception", "failed"), 0.0, monkeypatch) == [
        "[2026-11-23 01:02:03][ID1] Processing: App\\Jobs\\X",
        "[2026-11-23 01:02:03][ID1] Failed:     App\\Jobs\\X"]
    assert _lines("8.83", ("success",), 0.0, monkeypatch, color=True) == [
        "\x1b[33m[2026-11-23 01:02:03][ID1] Processing:\x1b[0m App\\Jobs\\X",
        "\x1b[32m[2026-11-23 01:02:03][ID1] Processed: \x1b[0m App\\Jobs\\X"]
