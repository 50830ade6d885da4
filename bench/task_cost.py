"""What an ``async def`` handler's task costs per job on this interpreter, without the rest of the worker.

The worker runs each job of an ``async def`` handler as its own ``asyncio.Task`` whose first step it
runs at once (``laraq/worker/eager.py``: ``eager_task_factory`` on Python 3.12+, ``WorkerLoop``'s caught step on
3.11), so a job that never suspends costs no loop pass. This times a no-op job coroutine three ways on
the worker's own loop (``new_worker_loop``: uvloop where installed; ``LARAQ_LOOP=asyncio`` for asyncio's),
best of 5 rounds of 200,000:

* ``plain``: the coroutine driven by hand (``send(None)``): no task at all, the floor;
* ``at once``: a task per job, first step run at once, by the worker's own ``start_task``;
* ``scheduled``: a task per job, awaited the ordinary way (one loop pass each).

The difference between the first two is what the task itself adds to each job of an async handler,
next to the same job with a ``def`` handler (``compat-docs/performance-history.md``)::

    python3 bench/task_cost.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from laraq.worker.eager import JOB_TASK_NAME, new_worker_loop, running_loop_name, start_task  # noqa: E402

COUNT = 200_000


async def _handler(command: object, job: object) -> None:
    return None


async def _job() -> None:  # the worker's job coroutine awaits the handler
    await _handler(None, None)


def plain() -> None:
    for _ in range(COUNT):
        coro = _job()
        try:  # noqa: SIM105 - a suppress() context would be timed with the floor
            coro.send(None)
        except StopIteration:
            pass


async def at_once(loop: asyncio.AbstractEventLoop) -> None:
    me = asyncio.current_task()
    for _ in range(COUNT):
        task, stepped = start_task(loop, _job(), me)
        if not (stepped and task.done()):
            raise RuntimeError("a no-op job's task did not finish in its first step")


async def scheduled(loop: asyncio.AbstractEventLoop) -> None:
    for _ in range(COUNT):
        await asyncio.Task(_job(), loop=loop, name=JOB_TASK_NAME)


def best_us(run: Callable[[], object], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best / COUNT * 1e6


def main() -> None:
    loop = new_worker_loop()
    try:
        floor = best_us(plain)
        eager = best_us(lambda: loop.run_until_complete(at_once(loop)))
        queued = best_us(lambda: loop.run_until_complete(scheduled(loop)))
    finally:
        loop.close()
    print(f"Python {sys.version.split()[0]} on {running_loop_name(loop)}, µs per no-op job coroutine: plain {floor:.2f}; "
          f"task, first step at once {eager:.2f} (+{eager - floor:.2f}); scheduled task {queued:.2f} "
          f"(+{queued - floor:.2f})")


if __name__ == "__main__":
    main()
