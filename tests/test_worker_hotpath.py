"""The worker's shortcuts (a task's first step run at once) hand handlers exactly what the plain path does
(nothing timed).

* An async job's first step runs at once from the daemon (``laraq.worker.eager.start_task``): the handler still
  runs in its own ``asyncio.Task`` (``current_task()`` is that task, never the daemon), in its own
  ``contextvars`` context (nothing leaks into the next job), and a handler that suspends, raises or
  overruns its timeout is treated as before.
* The one-pass decode (``laraq.protocol.phparray.loads_php_arrays``) gives the handler ``PHPArray`` values, as
  ``php_arrays(loads(...))`` does.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from typing import Any

import pytest
from conftest import in_process_worker

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.protocol.phparray import PHPArray
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.worker.eager import JOB_TASK_NAME, loop_name, running_loop_name

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("laraq_test_var", default=None)


def _fill(redis_server: Any, modes: list[str], queue: str = "hot") -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i, "tags": []}, "mode": mode, "seconds": 0},
                          queue=queue, connection="redis") for i, mode in enumerate(modes)])


def _worker(redis_server: Any, app: App, workers: list[Any], **opts: Any) -> Any:
    return in_process_worker(redis_server, app, workers, queue="hot", **opts)


@pytest.fixture(params=["worker-loop", "asyncio-worker-loop", "plain-asyncio-loop"])
def loop_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The worker's own loop (uvloop where installed, ``--loop asyncio``; on 3.11 each hands a task's
    first step over), and a plain asyncio loop (as under another event-loop policy: on 3.11 the first
    step is then scheduled the ordinary way; 3.12+ starts it eagerly on any loop)."""
    if request.param == "plain-asyncio-loop":
        monkeypatch.setattr("laraq.worker.worker.new_worker_loop", lambda kind: asyncio.new_event_loop())
    elif request.param == "asyncio-worker-loop":
        monkeypatch.setenv("LARAQ_LOOP", "asyncio")
    return str(request.param)


def test_async_jobs_run_in_their_own_task_and_context(redis_server: Any, redis_client: Any,
                                                      workers: list[Any], loop_kind: str) -> None:
    seen: list[dict[str, Any]] = []
    starting: list[int] = []
    app = App("hot")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        before = VAR.get()
        eager = bool(starting)  # this first step runs inside start_job, not in a later loop pass
        VAR.set(f"job {command['args']['n']}")
        task = asyncio.current_task()
        if command["mode"] == "sleep":
            await asyncio.sleep(0.01)  # suspends: resumed by the loop, still in the same task
        seen.append({"n": command["args"]["n"], "before": before, "task": task, "after": asyncio.current_task(),
                     "tags": command["args"]["tags"], "daemon": worker.executor.daemon_task, "eager": eager,
                     "loop": running_loop_name(asyncio.get_running_loop())})
        if command["mode"] == "fail":
            raise RuntimeError("failed on purpose")

    _fill(redis_server, ["ok", "sleep", "ok", "fail", "ok"])
    worker = _worker(redis_server, app, workers, tries=1)
    start_job = worker.executor.start

    def start_job_watched(job: Any) -> None:
        starting.append(1)
        try:
            start_job(job)
        finally:
            starting.pop()

    worker.executor.start = start_job_watched
    assert worker.daemon() == 0
    # every first step ran at once (the shortcut under test: Python 3.12's eager start, or the worker's
    # own on 3.11), in the job's own task; a plain loop on 3.11 runs it in the next loop pass, same task
    eager = loop_kind != "plain-asyncio-loop" or sys.version_info >= (3, 12)
    assert [s["eager"] for s in seen] == [eager] * 5
    expected_loop = loop_name("auto") if loop_kind == "worker-loop" else "asyncio"  # auto: LARAQ_LOOP, else uvloop
    assert {s["loop"] for s in seen} == {expected_loop}
    assert [s["n"] for s in seen] == [0, 1, 2, 3, 4]
    assert all(s["before"] is None for s in seen)  # no context leaks from one job into the next
    assert VAR.get() is None
    tasks = [s["task"] for s in seen]
    assert all(t is not None and t is s["after"] and t is not s["daemon"] for t, s in zip(tasks, seen, strict=True))
    assert len({id(t) for t in tasks}) == 5
    assert {t.get_name() for t in tasks} == {JOB_TASK_NAME}
    assert all(type(s["tags"]) is PHPArray and s["tags"].is_list for s in seen)
    assert redis_client.llen(PREFIX + "queues:hot") == 0
    assert redis_client.zcard(PREFIX + "queues:hot:reserved") == 0


def test_an_async_job_over_its_timeout_is_still_cancelled(redis_server: Any, redis_client: Any,
                                                          workers: list[Any]) -> None:
    cancelled: list[bool] = []
    app = App("hot-timeout")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        if command["mode"] == "sleep":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    _fill(redis_server, ["ok", "sleep", "ok"])
    worker = _worker(redis_server, app, workers, tries=3, timeout=1)
    kills: list[int] = []
    worker.executor.kill = lambda: kills.append(1)
    assert worker.daemon() == 0
    assert cancelled == [True] and kills == []
    # the timed-out job stays reserved (attempt 1 of 3), as with a killed PHP worker; the others are done
    assert redis_client.llen(PREFIX + "queues:hot") == 0
    assert redis_client.zcard(PREFIX + "queues:hot:reserved") == 1


@pytest.mark.parametrize("concurrency", [1, 4])
def test_many_short_async_jobs_all_finish(redis_server: Any, redis_client: Any, workers: list[Any],
                                          concurrency: int) -> None:
    done: list[int] = []
    app = App("hot-many")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        if command["args"]["n"] % 7 == 0:
            await asyncio.sleep(0)
        done.append(command["args"]["n"])

    _fill(redis_server, ["ok"] * 450)
    worker = _worker(redis_server, app, workers, concurrency=concurrency)
    assert worker.daemon() == 0
    assert sorted(done) == list(range(450))
    assert redis_client.zcard(PREFIX + "queues:hot:reserved") == 0
