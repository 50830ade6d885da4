"""The worker's event loop, and a job's task started with its first step run at once: the only place
laraq touches asyncio's internals.

The loop (``--loop``, :func:`new_worker_loop`) is uvloop where it is installed, else asyncio's selector
loop; ``LARAQ_LOOP`` chooses for ``auto``. Jobs that wait on the network spend about half the CPU per
job on uvloop (``compat-docs/performance.md``); the loop's semantics are asyncio's either way.

An ``async def`` handler runs as its own ``asyncio.Task`` (``current_task()``, its own ``contextvars``
context, cancellable by the watchdog). Scheduled the ordinary way, a task's first step waits for the
next pass of the event loop: a job that never suspends then costs a ready-queue round, a wake-up of
the daemon and an ``epoll`` call. Started eagerly, the first step runs in the constructor and most
jobs are finished before :func:`start_task` returns. ``bench/task_start.py`` measures the difference
through the whole worker: 8-10 CPU µs of about 35-45 per no-op job on Python 3.11, well outside the
host's noise (``compat-docs/performance-history.md``).

* Python 3.12+: :func:`asyncio.eager_task_factory`, public.
* Python 3.11, on the worker's own loop (:class:`WorkerLoop` or ``UvWorkerLoop``): the task is built
  the ordinary way while the loop (:class:`_CatchStep`) catches the ``call_soon`` of its first step, and
  the step is run at once with the daemon task stepped aside (``asyncio.tasks._enter_task`` /
  ``_leave_task``, private), so ``current_task()`` is the job's task during it.
* Any other loop (another event-loop policy): ``loop.create_task``, scheduled the ordinary way.

``tests/test_worker_eager.py`` holds this module to that contract on whatever Python runs it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any, Literal, TypeVarTuple, Unpack

_Ts = TypeVarTuple("_Ts")

__all__ = ["JOB_TASK_NAME", "LoopKind", "WorkerLoop", "loop_name", "new_worker_loop", "running_loop_name",
           "start_task", "uvloop_version"]

#: The name of every job's task (``asyncio.current_task().get_name()`` in an ``async def`` handler). A
#: given name also spares CPython 3.11 formatting a ``Task-<n>`` string for each job's task.
JOB_TASK_NAME = "laraq-job"

#: Python 3.12+: the public eager task factory (None before)
_EAGER_FACTORY: Any = getattr(asyncio, "eager_task_factory", None)
#: Python 3.11: asyncio's private bookkeeping of the running task (None: no first step runs early)
_enter_task: Any = None if _EAGER_FACTORY is not None else getattr(asyncio.tasks, "_enter_task", None)
_leave_task: Any = None if _EAGER_FACTORY is not None else getattr(asyncio.tasks, "_leave_task", None)

try:
    import uvloop as _uvloop
    _UVLOOP_MISSING = ""
except ImportError as _exc:  # not installed (or no build for this platform): asyncio's own loop
    _uvloop = None  # type: ignore[assignment]
    _UVLOOP_MISSING = str(_exc)

#: ``--loop``: the event loop the worker runs its tasks on
LoopKind = Literal["auto", "asyncio", "uvloop"]


class _CatchStep:
    """The hook :func:`start_task` needs of a loop (3.11). While a job's task is built, ``call_soon`` on
    the loop object is :meth:`_catch` (an attribute of the instance, which hides the class's method for
    that moment only) and ``catch_step`` a list: the ``call_soon`` that ``asyncio.Task`` makes for its
    first step hands (callback, context) to the list instead of queueing a handle; any other goes to the
    loop's own. Outside that moment the loop's ``call_soon`` is the loop's, with nothing in between."""

    catch_step: list[tuple[Callable[..., object], Context | None]] | None = None

    def _catch(self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts,
               context: Context | None = None) -> asyncio.Handle | None:
        caught = self.catch_step
        if caught is not None and not args and not caught:
            caught.append((callback, context))
            return None  # asyncio.Task ignores the handle of its first step
        return type(self).call_soon(self, callback, *args, context=context)  # type: ignore[attr-defined]


class WorkerLoop(_CatchStep, asyncio.SelectorEventLoop):
    """The worker's loop on asyncio's selector loop, with the hook of :func:`start_task` (3.11)."""


if _uvloop is not None:
    class UvWorkerLoop(_CatchStep, _uvloop.Loop):  # type: ignore[misc]
        """The worker's loop on uvloop, with the hook of :func:`start_task` (3.11)."""

    _HOOKED: tuple[type[_CatchStep], ...] = (WorkerLoop, UvWorkerLoop)
else:
    _HOOKED = (WorkerLoop,)


def loop_name(kind: LoopKind = "auto") -> str:
    """What ``kind`` resolves to here, ``uvloop`` or ``asyncio``: ``auto`` is ``$LARAQ_LOOP`` when that is
    set, else uvloop where it is installed. ``ValueError``, naming the value and the cause, for a
    ``$LARAQ_LOOP`` that is not a loop's name, or uvloop asked for where it cannot be imported."""
    if kind == "auto":
        kind = _from_env()
    if kind == "asyncio":
        return "asyncio"
    if _uvloop is not None:
        return "uvloop"
    if kind == "uvloop":
        raise ValueError(f"uvloop asked for (--loop or LARAQ_LOOP) but it cannot be imported "
                         f"({_UVLOOP_MISSING}): pip install uvloop, or use --loop asyncio")
    return "asyncio"


def uvloop_version() -> str:
    """The installed uvloop's version ("" where it does not import)."""
    return str(getattr(_uvloop, "__version__", "")) if _uvloop is not None else ""


def _from_env() -> LoopKind:
    value = os.environ.get("LARAQ_LOOP", "").strip().lower() or "auto"
    if value not in ("auto", "asyncio", "uvloop"):
        raise ValueError(f"LARAQ_LOOP={os.environ.get('LARAQ_LOOP')!r} is not an event loop laraq knows: "
                         "use auto, asyncio or uvloop")
    return value  # type: ignore[return-value]


def new_worker_loop(kind: LoopKind = "auto") -> asyncio.AbstractEventLoop:
    """The worker's loop of ``kind`` (:func:`loop_name`), on 3.11 with the hook of :func:`start_task`.
    ``auto`` with no ``LARAQ_LOOP``, under an event-loop policy other than asyncio's default (the app
    installed its own), takes what that policy makes."""
    if kind == "auto" and _from_env() == "auto" \
            and type(asyncio.get_event_loop_policy()) is not asyncio.DefaultEventLoopPolicy:
        return asyncio.new_event_loop()
    if loop_name(kind) == "uvloop":
        assert _uvloop is not None
        return UvWorkerLoop() if _EAGER_FACTORY is None else _uvloop.Loop()
    if sys.platform == "win32":
        return asyncio.new_event_loop()
    return WorkerLoop() if _EAGER_FACTORY is None else asyncio.SelectorEventLoop()


def running_loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop``, ``asyncio`` or the class of another loop (the worker's log line at start)."""
    if _uvloop is not None and isinstance(loop, _uvloop.Loop):
        return "uvloop"
    return "asyncio" if isinstance(loop, asyncio.BaseEventLoop) else type(loop).__qualname__


def start_task(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None],
               daemon: asyncio.Task[Any] | None) -> tuple[asyncio.Task[None], bool]:
    """A job's task on ``loop``, started from the ``daemon`` task (the one running now); True if its
    first step has run (then ``task.done()`` tells whether it finished without suspending)."""
    if daemon is None or loop.get_task_factory() is not None:
        return loop.create_task(coro, name=JOB_TASK_NAME), False
    if _EAGER_FACTORY is not None:
        return _EAGER_FACTORY(loop, coro, name=JOB_TASK_NAME), True
    if not isinstance(loop, _HOOKED) or _enter_task is None:
        return loop.create_task(coro, name=JOB_TASK_NAME), False
    caught: list[tuple[Callable[..., object], Context | None]] = []
    loop.catch_step = caught
    setattr(loop, "call_soon", loop._catch)  # noqa: B010  # the instance's, for this moment (see _CatchStep)
    try:
        task = asyncio.Task(coro, loop=loop, name=JOB_TASK_NAME)
    finally:
        delattr(loop, "call_soon")
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
