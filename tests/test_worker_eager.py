"""``laraq.worker.eager``: a job's task started with its first step run at once, on whatever Python runs.

The one module that touches asyncio's internals (3.11) keeps asyncio's own contract: the first step
runs inside ``start_task`` in the job's own task (``current_task()``), in the job's own context copy,
with the daemon task current again afterwards; a task that suspends is resumed by the loop; a loop with
a task factory of its own, or any loop on 3.11 that is not the worker's own, gets an ordinary task. The
worker's loop is asyncio's selector loop or uvloop (``--loop``, ``LARAQ_LOOP``): each test runs on both.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any

import pytest
from conftest import require_modules

from laraq.worker.eager import (
    JOB_TASK_NAME,
    LoopKind,
    loop_name,
    new_worker_loop,
    running_loop_name,
    start_task,
)

VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("laraq_eager_var", default=None)


def _run(loop: asyncio.AbstractEventLoop, suspend: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def job() -> None:
        seen["task"] = asyncio.current_task()
        VAR.set("job")
        if suspend:
            await asyncio.sleep(0)
            seen["resumed"] = asyncio.current_task()

    async def daemon() -> None:
        me = asyncio.current_task()
        task, stepped = start_task(loop, job(), me)
        seen.update(stepped=stepped, done_at_once=task.done(), job_task=task, daemon=me,
                    current_after=asyncio.current_task(), var_after=VAR.get(),
                    hook_left="call_soon" in getattr(loop, "__dict__", {}))
        await task

    try:
        loop.run_until_complete(daemon())
    finally:
        loop.close()
    return seen


@pytest.fixture(params=["asyncio", "uvloop"])
def kind(request: pytest.FixtureRequest) -> LoopKind:
    if request.param == "uvloop":
        require_modules("uvloop")
    return request.param  # type: ignore[no-any-return]


def test_the_first_step_runs_at_once_in_the_jobs_own_task(kind: LoopKind) -> None:
    seen = _run(new_worker_loop(kind), suspend=False)
    assert seen["stepped"] and seen["done_at_once"]
    assert seen["task"] is seen["job_task"] and seen["task"] is not seen["daemon"]
    assert seen["task"].get_name() == JOB_TASK_NAME
    assert seen["current_after"] is seen["daemon"]  # the daemon is the running task again
    assert seen["var_after"] is None  # the job's context was its own
    assert not seen["hook_left"]  # the loop's own call_soon is back


def test_a_task_that_suspends_is_resumed_by_the_loop(kind: LoopKind) -> None:
    seen = _run(new_worker_loop(kind), suspend=True)
    assert seen["stepped"] and not seen["done_at_once"]
    assert seen["resumed"] is seen["job_task"]


def test_a_plain_loop_or_a_task_factory_gets_an_ordinary_task(kind: LoopKind) -> None:
    plain = _run(asyncio.new_event_loop(), suspend=False)
    assert plain["stepped"] == (sys.version_info >= (3, 12))
    assert plain["task"] is plain["job_task"]
    loop = new_worker_loop(kind)
    loop.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
    factory = _run(loop, suspend=False)
    assert not factory["stepped"] and factory["task"] is factory["job_task"]


def test_the_loop_asked_for_is_the_loop_made(kind: LoopKind, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = new_worker_loop(kind)
    try:
        assert running_loop_name(loop) == kind == loop_name(kind)
        assert getattr(loop, "catch_step", None) is None  # the hook is idle between starts
        assert hasattr(loop, "catch_step") == (sys.version_info < (3, 12))
    finally:
        loop.close()
    monkeypatch.setenv("LARAQ_LOOP", kind)  # auto takes the environment's choice
    loop = new_worker_loop("auto")
    try:
        assert running_loop_name(loop) == kind
    finally:
        loop.close()


def test_auto_prefers_uvloop_and_a_bad_choice_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    require_modules("uvloop")
    monkeypatch.delenv("LARAQ_LOOP", raising=False)
    assert loop_name("auto") == "uvloop"
    monkeypatch.setenv("LARAQ_LOOP", "tokio")
    with pytest.raises(ValueError, match="LARAQ_LOOP='tokio'.*auto, asyncio or uvloop"):
        loop_name("auto")
    monkeypatch.setattr("laraq.worker.eager._uvloop", None)
    monkeypatch.setenv("LARAQ_LOOP", "uvloop")
    with pytest.raises(ValueError, match="uvloop asked for.*cannot be imported.*--loop asyncio"):
        new_worker_loop("auto")
    monkeypatch.delenv("LARAQ_LOOP")
    assert loop_name("auto") == "asyncio"  # not installed: asyncio's own, no error
