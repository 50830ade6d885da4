"""``laraq.worker.eager``: a job's task started with its first step run at once, on whatever Python runs.

The one module that touches asyncio's internals (3.11) keeps asyncio's own contract: the first step
runs inside ``start_task`` in the job's own task (``current_task()``), in the job's own context copy,
with the daemon task current again afterwards; a task that suspends is resumed by the loop; a loop with
a task factory of its own, or any loop on 3.11 that is not ``WorkerLoop``, gets an ordinary task.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any

from laraq.worker.eager import JOB_TASK_NAME, WorkerLoop, new_worker_loop, start_task

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
                    current_after=asyncio.current_task(), var_after=VAR.get())
        await task

    try:
        loop.run_until_complete(daemon())
    finally:
        loop.close()
    return seen


def test_the_first_step_runs_at_once_in_the_jobs_own_task() -> None:
    seen = _run(new_worker_loop(), suspend=False)
    assert seen["stepped"] and seen["done_at_once"]
    assert seen["task"] is seen["job_task"] and seen["task"] is not seen["daemon"]
    assert seen["task"].get_name() == JOB_TASK_NAME
    assert seen["current_after"] is seen["daemon"]  # the daemon is the running task again
    assert seen["var_after"] is None  # the job's context was its own


def test_a_task_that_suspends_is_resumed_by_the_loop() -> None:
    seen = _run(new_worker_loop(), suspend=True)
    assert seen["stepped"] and not seen["done_at_once"]
    assert seen["resumed"] is seen["job_task"]


def test_a_plain_loop_or_a_task_factory_gets_an_ordinary_task() -> None:
    plain = _run(asyncio.new_event_loop(), suspend=False)
    assert plain["stepped"] == (sys.version_info >= (3, 12))
    assert plain["task"] is plain["job_task"]
    loop = new_worker_loop()
    loop.set_task_factory(lambda lp, coro, **kw: asyncio.Task(coro, loop=lp, **kw))
    factory = _run(loop, suspend=False)
    assert not factory["stepped"] and factory["task"] is factory["job_task"]


def test_the_worker_loop_is_used_where_it_is_needed() -> None:
    loop = new_worker_loop()
    try:
        assert (type(loop) is WorkerLoop) == (sys.version_info < (3, 12))
        assert loop.catch_step is None if isinstance(loop, WorkerLoop) else True
    finally:
        loop.close()
