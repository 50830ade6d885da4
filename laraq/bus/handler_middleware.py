"""Job middleware written in Python, declared on a handler: ``@app.handler(name, middleware=[...])``.

The seam mirrors Laravel's ``handle($job, $next)`` (and dramatiq's middleware idea): each middleware is
a callable ``mw(command, job, call_next)`` that may run code before and after ``call_next(command, job)``,
change the command it passes on, or not call it at all (the job then ends as after a PHP middleware that
does not call ``$next``: deleted unless it released or failed itself). The first in the list is the
outermost. For an ``async`` handler every middleware is ``async`` and awaits ``call_next``.

It runs inside the handler's run (timeouts, exceptions and release behave as for the handler) and after
the middleware serialized on the job by PHP (:mod:`laraq.bus.middleware`).

Stock Python middleware: :func:`skip_if_batch_cancelled` (Laravel's ``SkipIfBatchCancelled``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["compose", "skip_if_batch_cancelled"]


def compose(name: str, func: Callable[..., Any], middleware: Sequence[Callable[..., Any]],
            is_async: bool) -> Callable[..., Any]:
    """``func`` wrapped in ``middleware`` (outermost first); a mix of sync and async is refused."""
    for mw in middleware:
        if not callable(mw):
            raise TypeError(f"middleware {mw!r} of the {name} handler is not callable")
        mw_async = inspect.iscoroutinefunction(mw) or inspect.iscoroutinefunction(type(mw).__call__)
        if mw_async != is_async:
            kind = "async" if is_async else "plain"
            raise TypeError(f"middleware {getattr(mw, '__name__', mw)!r} of the {name} handler must be {kind}, "
                            f"like the handler")
    wrapped = func
    for mw in reversed(list(middleware)):
        wrapped = _layer(mw, wrapped, is_async)
    return wrapped


def _layer(mw: Callable[..., Any], inner: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    if is_async:
        @functools.wraps(inner)
        async def layer_async(command: Any, job: Any) -> Any:
            return await mw(command, job, inner)

        return layer_async

    @functools.wraps(inner)
    def layer(command: Any, job: Any) -> Any:
        return mw(command, job, inner)

    return layer


def skip_if_batch_cancelled(command: Any, job: Any, call_next: Callable[[Any, Any], Any]) -> Any:
    """Laravel's ``SkipIfBatchCancelled``: do not run the handler when the job's batch was cancelled."""
    if job.batch_cancelled():
        return None
    return call_next(command, job)
