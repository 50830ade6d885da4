"""The worker's listener seam (:mod:`laraq.worker.events`) with a real worker, real Redis and the Laravel 8
fixture app's jobs (pushed from Python with PHP's bytes: ``pyapp.PyApp``).

Every job outcome announces its events once, in order; a listener that raises is logged once per kind
of event and changes nothing about the jobs (the same Redis and ``failed_jobs`` end state).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from typing import Any

import pytest
import test_worker_support as support
from pyapp import PyApp

from laraq.cli.work import build_worker, default_params
from laraq.worker import events
from laraq.worker.events import WorkerListener
from laraq.worker.worker import Worker

PREFIX = "laravel_database_queues:"


@pytest.fixture
def app8(redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PyApp:
    app = PyApp(redis_server.port, version="8")
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


class Recorder(WorkerListener):
    """Records every event as ``(kind, job id or None, detail)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, Any]] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, uuid: str | None, detail: Any = None) -> None:
        with self._lock:
            self.events.append((kind, uuid, detail))

    def worker_starting(self, event: events.WorkerStarting) -> None:
        self._add("worker_starting", None)

    def job_reserved(self, event: events.JobReserved) -> None:
        self._add("job_reserved", event.job.id)

    def job_processing(self, event: events.JobProcessing) -> None:
        self._add("job_processing", event.job.id)

    def job_processed(self, event: events.JobProcessed) -> None:
        assert event.runtime >= 0
        self._add("job_processed", event.job.id)

    def job_released(self, event: events.JobReleased) -> None:
        exc = event.exception
        self._add("job_released", event.job.id, (event.delay, None if exc is None else str(exc)))

    def job_failed(self, event: events.JobFailed) -> None:
        self._add("job_failed", event.job.id, type(event.exception).__name__)

    def job_timed_out(self, event: events.JobTimedOut) -> None:
        self._add("job_timed_out", event.job.id)

    def job_unhandled(self, event: events.JobUnhandled) -> None:
        self._add("job_unhandled", event.job.id, event.action)

    def worker_stopping(self, event: events.WorkerStopping) -> None:
        self._add("worker_stopping", None, event.status)

    def of(self, uuid: str) -> list[tuple[str, Any]]:
        return [(kind, detail) for kind, u, detail in self.events if u == uuid]


class Raiser(WorkerListener):
    """Raises from every event (and counts the calls)."""

    def __init__(self) -> None:
        self.calls = 0

    def _boom(self, kind: str) -> None:
        self.calls += 1
        raise RuntimeError(f"listener broke in {kind}")


EVENT_KINDS = [name for name in vars(WorkerListener) if name.startswith(("job_", "worker_"))]
for _kind in EVENT_KINDS:  # override every method, so the fan-out calls them all
    setattr(Raiser, _kind, lambda self, *_a, _k=_kind: self._boom(_k))


def dispatch_mix(app8: PyApp) -> dict[str, str]:
    """One job per outcome, on queue ``py``; returns outcome -> job id."""
    uuids = {}
    for name, args in (
        ("ok", {"mode": "ok"}),
        ("fails", {"mode": "fail", "settings": {"tries": 1}}),
        ("retried", {"mode": "fail", "settings": {"tries": 3, "backoff": 30}}),
        ("self_release", {"mode": "release", "seconds": 40}),
    ):
        uuids[name] = app8.dispatch("echo", "py", **args)[0]
    uuids["unhandled"] = app8.dispatch("plain", "py")[0]
    return uuids


def end_state(app8: PyApp, redis_client: Any) -> dict[str, Any]:
    conn = sqlite3.connect(app8.db_path)
    failed = sorted(json.loads(r[0])["id"] for r in conn.execute("SELECT payload FROM failed_jobs"))
    conn.close()
    delayed = sorted(json.loads(m)["id"] for m in redis_client.zrange(PREFIX + "py:delayed", 0, -1))
    return {"failed": failed, "delayed": delayed, "list": redis_client.llen(PREFIX + "py"),
            "reserved": redis_client.zcard(PREFIX + "py:reserved")}


def run_worker(app8: PyApp, workers: list[Worker], listeners: list[WorkerListener], batch: int) -> int:
    params = default_params(laravel="8", sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="py", batch=batch, unhandled="requeue")
    worker = build_worker(params, env=app8.env, app=support.app)
    for listener in listeners:
        worker.add_listener(listener)
    workers.append(worker)
    return worker.daemon()


@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
def test_every_event_fires_once_per_outcome_in_order(app8: PyApp, redis_client: Any, workers: list[Worker],
                                                     batch: int) -> None:
    uuids = dispatch_mix(app8)
    recorder = Recorder()
    assert run_worker(app8, workers, [recorder], batch) == 0

    assert recorder.events[0][0] == "worker_starting"
    assert recorder.events[-1] == ("worker_stopping", None, 0)
    assert [e for e in recorder.events if e[0] in ("worker_starting", "worker_stopping")] == [
        ("worker_starting", None, None), ("worker_stopping", None, 0)]
    assert recorder.of(uuids["ok"]) == [("job_reserved", None), ("job_processing", None), ("job_processed", None)]
    assert recorder.of(uuids["fails"]) == [("job_reserved", None), ("job_processing", None),
                                           ("job_failed", "RuntimeError")]
    assert recorder.of(uuids["retried"]) == [("job_reserved", None), ("job_processing", None),
                                             ("job_released", (30, "echo job failed on purpose"))]
    assert recorder.of(uuids["self_release"]) == [("job_reserved", None), ("job_processing", None),
                                                  ("job_released", (40, None)), ("job_processed", None)]
    assert recorder.of(uuids["unhandled"]) == [("job_reserved", None), ("job_unhandled", "requeue")]
    assert end_state(app8, redis_client) == {
        "failed": [uuids["fails"]],
        "delayed": sorted([uuids["retried"], uuids["self_release"], uuids["unhandled"]]),
        "list": 0, "reserved": 0,
    }


def test_a_raising_listener_loses_nothing(app8: PyApp, redis_client: Any, workers: list[Worker],
                                          caplog: pytest.LogCaptureFixture) -> None:
    uuids = dispatch_mix(app8)
    raiser, recorder = Raiser(), Recorder()
    with caplog.at_level(logging.ERROR, logger="laraq.worker.events"):
        assert run_worker(app8, workers, [raiser, recorder], 100) == 0

    # the listener after the broken one still heard everything
    assert recorder.of(uuids["ok"]) == [("job_reserved", None), ("job_processing", None), ("job_processed", None)]
    assert recorder.of(uuids["fails"])[-1] == ("job_failed", "RuntimeError")
    assert raiser.calls > len(EVENT_KINDS)  # called for every job, not switched off
    # logged once per kind, not once per job
    logged = [r.getMessage() for r in caplog.records if r.name == "laraq.worker.events"]
    assert len(logged) == len(set(logged))
    assert any("job_processing" in m for m in logged)
    # the jobs ended exactly as without the broken listener
    assert end_state(app8, redis_client) == {
        "failed": [uuids["fails"]],
        "delayed": sorted([uuids["retried"], uuids["self_release"], uuids["unhandled"]]),
        "list": 0, "reserved": 0,
    }
    runs = [r for r in app8.runs() if r["runner"] == "python"]
    assert len(runs) == 4  # ok, fails, retried and self_release ran once each


def test_timeout_announces_timed_out_then_failed(app8: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    (uuid,) = app8.dispatch("echo", "py", mode="sleep", seconds=30, settings={"timeout": 1, "tries": 1})
    recorder = Recorder()
    params = default_params(laravel="8", sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, queue="py")
    built = build_worker(params, env=app8.env, app=support.async_app)
    workers.append(built)
    context = built.context
    worker = Worker(context.app, built.queue, "py", options=built.options, version=built.version, cache=context.cache,
                    failer=context.failer, listeners=[recorder])
    workers.append(worker)
    assert worker.daemon() == 0
    assert recorder.of(uuid) == [("job_reserved", None), ("job_processing", None), ("job_timed_out", None),
                                 ("job_failed", "MaxAttemptsExceededError")]  # Laravel 8's timeout exception
    assert end_state(app8, redis_client)["failed"] == [uuid]
