"""Starting a job's task with its first step run at once: the only place laraq touches asyncio's internals.

An ``async def`` handler runs as its own ``asyncio.Task`` (``current_task()``, its own ``contextvars``
context, cancellable by the watchdog). Scheduled the ordinary way, a task's first step waits for the
next pass of the event loop: a job that never suspends then costs a ready-queue round, a wake-up of
the daemon and an ``epoll`` call. Started eagerly, the first step runs in the constructor and most
jobs are finished before :func:`start_task` returns. ``bench/task_start.py`` measures the difference
through the whole worker: 8-10 CPU µs of about 35-45 per no-op job on Python 3.11, well outside the
host's noise (``compat-docs/performance-history.md``).

* Python 3.12+: :func:`asyncio.eager_task_factory`, public.
* Python 3.11, on :class:`WorkerLoop` (the worker's loop under asyncio's default policy): the task
  is built the ordinary way while :class:`WorkerLoop` catches the ``call_soon`` of its first step, and
  the step is run at once with the daemon task stepped aside (``asyncio.tasks._enter_task`` /
  ``_leave_task``, private), so ``current_task()`` is the job's task during it.
* Any other loop (another event-loop policy): ``loop.create_task``, scheduled the ordinary way.

``tests/test_worker_eager.py`` holds this module to that contract on whatever Python runs it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any, TypeVarTuple, Unpack

_Ts = TypeVarTuple("_Ts")

__all__ = ["JOB_TASK_NAME", "WorkerLoop", "new_worker_loop", "start_task"]

#: The name of every job's task (``asyncio.current_task().get_name()`` in an ``async def`` handler). A
#: given name also spares CPython 3.11 formatting a ``Task-<n>`` string for each job's task.
JOB_TASK_NAME = "laraq-job"

#: Python 3.12+: the public eager task factory (None before)
_EAGER_FACTORY: Any = getattr(asyncio, "eager_task_factory", None)
#: Python 3.11: asyncio's private bookkeeping of the running task (None: no first step runs early)
_enter_task: Any = None if _EAGER_FACTORY is not None else getattr(asyncio.tasks, "_enter_task", None)
_leave_task: Any = None if _EAGER_FACTORY is not None else getattr(asyncio.tasks, "_leave_task", None)


class WorkerLoop(asyncio.SelectorEventLoop):
    """The worker's event loop: asyncio's selector loop with one hook for :func:`start_task` (3.11).

    While a job's task is built, ``catch_step`` is a list; the ``call_soon`` that ``asyncio.Task`` makes
    for its first step then hands (callback, context) to it instead of queueing a handle. Any other
    ``call_soon`` goes to asyncio as usual."""

    catch_step: list[tuple[Callable[..., object], Context | None]] | None = None

    def call_soon(self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
                  context: Context | None = None) -> asyncio.Handle:
        caught = self.catch_step
        if caught is not None and not args and not caught:
            caught.append((callback, context))
            return None  # type: ignore[return-value]  # asyncio.Task ignores the handle of its first step
        return super().call_soon(callback, *args, context=context)


def new_worker_loop() -> asyncio.AbstractEventLoop:
    """The worker's loop: :class:`WorkerLoop` under asyncio's default policy on 3.11, else whatever
    loop the installed policy makes."""
    if _EAGER_FACTORY is None and type(asyncio.get_event_loop_policy()) is asyncio.DefaultEventLoopPolicy \
            and sys.platform != "win32":
        return WorkerLoop()
    return asyncio.new_event_loop()


def start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None],
               daemon: asyncio.Task[Any] | None) -> tuple[asyncio.Task[None], bool]:
    """A job's task on ``loop``, started from the ``daemon`` task (the one running now); True if its
    first step has run (then ``task.done()`` tells whether it finished without suspending)."""
    if daemon is None or loop.get_task_factory() is not None:
        return loop.create_task(coro, name=JOB_TASK_NAME), False
    if _EAGER_FACTORY is not None:
        return _EAGER_FACTORY(loop, coro, name=JOB_TASK_NAME), True
    if type(loop) is not WorkerLoop or _enter_task is None:
        return loop.create_task(coro, name=JOB_TASK_NAME), False
    caught: list[tuple[Callable[..., object], Context | None]] = []
    loop.catch_step = caught
    try:
        task = asyncio.Task(coro, loop=loop, name=JOB_TASK_NAME)
    finally:
        loop.catch_step = None
    if not caught:
        return task, False
    callback, context = caught[0]
    _leave_task(loop, daemon)
    try:
        if context is None:
            callback()
        else:
            context.run(callback)
    finally:
        _enter_task(loop, daemon)
    return task, True
