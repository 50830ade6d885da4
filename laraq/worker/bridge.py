"""The worker's event loop as the other objects reach it: where ``async def`` handlers and blocking
bookkeeping run.

While the worker runs, the loop is the daemon's own (:meth:`AsyncBridge.attach` while
:meth:`laraq.worker.worker.Worker.daemon` runs it); outside it (``Worker.process`` called by an embedding
program, a ``failed`` callback called from a thread) an ``async def`` handler or callback runs on one
event loop thread started on first use, of the kind ``--loop`` chooses. Blocking bookkeeping an async job
needs (release, fail, ``failed`` callbacks) runs on a small pool off the loop's thread
(:meth:`AsyncBridge.off_loop`).
:class:`laraq.bus.callqueued.CallQueuedHandler` runs handlers through it (its ``Runner``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from laraq.worker.eager import LoopKind, new_worker_loop
from laraq.worker.running import Raised, Running

if TYPE_CHECKING:
    from laraq.bus.handlers import Handler
    from laraq.bus.job import Job

__all__ = ["AsyncBridge"]

T = TypeVar("T")


class AsyncBridge:
    """The worker's event loop (the daemon's, or a thread of its own) and the pool beside it."""

    def __init__(self, loop_kind: LoopKind = "auto") -> None:
        #: ``--loop``: the kind of the loop started outside the daemon
        self.loop_kind: LoopKind = loop_kind
        #: the loop async handlers run on (None until the daemon attaches one or a handler needs one)
        self.loop: asyncio.AbstractEventLoop | None = None
        #: the thread running the daemon's loop (None while the daemon does not run)
        self.loop_thread: int | None = None
        self._aux_pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: the daemon's slot threads (see :meth:`enter_slot`)
        self._slot_threads: set[int] = set()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The daemon runs ``loop`` on this thread from now on."""
        self.loop = loop
        self.loop_thread = threading.get_ident()

    def detach(self) -> None:
        """The daemon's loop stopped: forget it and stop the pool."""
        self.loop = None
        self.loop_thread = None
        self._slot_threads.clear()  # the daemon's pool stops with it
        if self._aux_pool is not None:
            self._aux_pool.shutdown(wait=False)
            self._aux_pool = None

    def on_loop_thread(self) -> bool:
        """Is the caller the thread running the daemon's loop?"""
        return self.loop_thread == threading.get_ident()

    def enter_slot(self) -> None:
        """The calling thread is one of the daemon's slot threads (the thread pool's initializer): the end
        of each job it runs wakes the loop."""
        self._slot_threads.add(threading.get_ident())

    def loop_follows(self) -> bool:
        """Does the daemon's loop run before the next job starts, without a wake-up of its own? True on
        its thread, and on a slot thread (its job's end wakes the loop) while the daemon runs."""
        ident = threading.get_ident()
        return self.loop_thread is not None and (self.loop_thread == ident or ident in self._slot_threads)

    def call(self, handler: Handler, argument: Any, job: Job, running: Running | None) -> None:
        """Run ``handler`` to completion on this thread (an ``async def`` one on the loop thread)."""
        if not handler.is_async:
            handler.func(argument, job)
            return
        done = threading.Event()

        async def runner() -> Any:
            try:
                return await handler.func(argument, job)
            except (SystemExit, KeyboardInterrupt) as exc:
                # asyncio re-raises these out of the loop (killing its thread): hand them over instead
                return Raised(exc)
            finally:
                done.set()

        future = asyncio.run_coroutine_threadsafe(runner(), self.event_loop())
        if running is not None:
            running.is_async, running.task_done, running.future = True, done, future
        result = future.result()
        if isinstance(result, Raised):
            raise result.exc

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop async handlers run on; outside the daemon, a loop thread started on first use."""
        if self.loop is None:
            loop = new_worker_loop(self.loop_kind)
            threading.Thread(target=loop.run_forever, name="laraq-asyncio", daemon=True).start()
            self.loop = loop
        return self.loop

    async def off_loop(self, func: Callable[..., T], *args: Any) -> T:
        """Run blocking bookkeeping (release, fail, failed callbacks) off the loop thread."""
        if self._aux_pool is None:
            self._aux_pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="laraq-aux")
        assert self.loop is not None
        return await self.loop.run_in_executor(self._aux_pool, func, *args)

    def run_coroutine(self, coro: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
        """Run a coroutine to completion from synchronous code (a ``failed`` callback)."""
        if self.loop is not None and self.on_loop_thread():
            # on the daemon's own loop thread (a sync job run inline): a private loop elsewhere
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                return ex.submit(asyncio.run, coro).result(timeout)
        return asyncio.run_coroutine_threadsafe(coro, self.event_loop()).result(timeout)

    def close(self) -> None:
        """Stop the loop thread started for async handlers (if any)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
