"""The worker's run and stop rules (:class:`laraq.worker.stoprules.StopRules`) on their own: Laravel's
order of ``stopIfNecessary``, ``daemonShouldRun``'s pause and maintenance, and laraq's rule that a failed
reserve is never an empty queue. The loops that call them are covered by ``test_worker_stopping.py``."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from laraq.protocol.versions import LaravelVersion
from laraq.worker import stoprules
from laraq.worker.context import Signals, WorkerOptions
from laraq.worker.notes import EXIT_MEMORY_LIMIT, RunNotes
from laraq.worker.stoprules import UNKNOWN, StopRules


class _Cache:
    def __init__(self, stamp: Any = 100) -> None:
        self.stamp = stamp

    def restart_timestamp(self) -> Any:
        if isinstance(self.stamp, Exception):
            raise self.stamp
        return self.stamp


def _rules(*, cache: Any = None, down: bool = False, version: str = "13.0.0", failed_rounds: int = 0,
           failure_status: int = 0, **options: Any) -> tuple[StopRules, Any]:
    context: Any = SimpleNamespace(options=WorkerOptions(**options), signals=Signals(), cache=cache,
                                   version=LaravelVersion.parse(version))
    reservation: Any = SimpleNamespace(failed_rounds=failed_rounds, failure_status=failure_status,
                                       settle=lambda: None)
    executor: Any = SimpleNamespace(kill_pending=False, running=set())
    rules = StopRules(context, RunNotes("w", context.options.memory), reservation, executor, lambda: down)
    return rules, context


def test_laravel_order_quit_then_memory_then_restart_then_empty() -> None:
    cache = _Cache(100)
    rules, context = _rules(cache=cache, memory=1, stop_when_empty=True, max_jobs=1)
    context.signals.quit(0, "SIGTERM received")
    started = time.monotonic()
    assert rules.status(100, started, 5, popped=False) == 0
    assert rules.notes.reason == "SIGTERM received"

    context.signals.should_quit = False  # then --memory (1 MB: any process is over)
    assert rules.status(100, started, 5, popped=False) == EXIT_MEMORY_LIMIT

    context.options.memory = 1 << 20  # then queue:restart
    cache.stamp = 101
    assert rules.status(100, started, 5, popped=False) == 0
    assert rules.notes.reason == "queue:restart was broadcast"

    cache.stamp = 100  # then --stop-when-empty, before --max-jobs
    assert rules.status(100, started, 5, popped=False) == 0
    assert rules.notes.reason.startswith("--stop-when-empty")
    assert rules.status(100, started, 5, popped=True) == 0
    assert rules.notes.reason == "--max-jobs reached"


def test_an_unreadable_restart_stamp_never_stops_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    cache = _Cache(OSError("cache away"))
    rules, _ = _rules(cache=cache, memory=1 << 20)
    with caplog.at_level(logging.WARNING, "laraq.worker.worker"):
        assert rules.restart_stamp() is UNKNOWN
        assert rules.status(100, time.monotonic(), 0, popped=True) is None
        assert rules.periodic(UNKNOWN, time.monotonic()) is None
    assert "could not read the queue:restart signal: cache away" in caplog.text
    cache.stamp = 7  # readable again: only a change from a known stamp is a restart
    assert rules.status(UNKNOWN, time.monotonic(), 0, popped=True) is None
    assert rules.status(6, time.monotonic(), 0, popped=True) == 0


def test_memory_zero_is_unlimited_only_where_laravel_says_so() -> None:
    for version in ("8.83.0", "13.0.0"):
        rules, context = _rules(version=version, memory=0)
        expected = not context.version.memory_zero_is_unlimited  # 0 MB: any process is over
        assert rules.memory_exceeded(0) is expected, version


def test_stop_when_empty_for_counts_from_the_last_job_taken() -> None:
    rules, _ = _rules(stop_when_empty_for=0.2, memory=1 << 20)
    started = time.monotonic() - 1.0
    assert rules.empty_for(started)
    rules.job_taken()
    assert not rules.empty_for(started)
    assert rules.status(None, started, 1, popped=False) is None
    rules.last_job_at = time.monotonic() - 0.5
    assert rules.status(None, started, 1, popped=False) == 0
    assert rules.notes.reason == "--stop-when-empty-for: no job for 0.2s"


def test_a_failed_reserve_is_not_an_empty_queue_until_the_tries_run_out() -> None:
    rules, _ = _rules(failed_rounds=stoprules.STOP_WHEN_EMPTY_TRIES - 1, failure_status=3)
    assert rules.failed_not_empty() is None
    rules.reservation.failed_rounds += 1
    assert rules.failed_not_empty() == 3
    assert f"{stoprules.STOP_WHEN_EMPTY_TRIES} reserve rounds failed in a row" in rules.notes.reason
    rules.reservation.failure_status = 0  # no known fault: exit 1, never 0
    assert rules.failed_not_empty() == stoprules.EXIT_ERROR


def test_pause_and_maintenance_are_said_once_and_force_runs_anyway(caplog: pytest.LogCaptureFixture) -> None:
    rules, context = _rules(down=True)
    with caplog.at_level(logging.INFO, "laraq.worker.worker"):
        assert not rules.should_run()
        assert not rules.should_run()
        context.options.force = True
        assert rules.should_run()
        context.signals.paused = True
        assert not rules.should_run()
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("worker w paused: the app is down") for line in lines) == 1
    assert any(line.startswith("worker w resumed") for line in lines)
    assert any("paused (SIGUSR2" in line for line in lines)


def test_a_broken_maintenance_probe_counts_as_up(caplog: pytest.LogCaptureFixture) -> None:
    rules, _ = _rules()

    def broken() -> bool:
        raise RuntimeError("no storage/framework/down")

    rules.maintenance = broken
    with caplog.at_level(logging.WARNING, "laraq.worker.worker"):
        assert rules.should_run()
    assert "maintenance-mode check failed: no storage/framework/down" in caplog.text


def test_the_batched_loop_reads_the_restart_stamp_at_most_every_quarter_second() -> None:
    """Read on every reserve round of a burst, the stamp would cost one cache round trip per batch."""
    reads: list[float] = []

    class Counting(_Cache):
        def restart_timestamp(self) -> Any:
            reads.append(time.monotonic())
            return super().restart_timestamp()

    cache = Counting(100)
    rules, _ = _rules(cache=cache, memory=1 << 20)
    started = time.monotonic()
    for _ in range(50):
        assert rules.periodic(100, started) is None
    assert len(reads) == 1
    cache.stamp = 101
    assert rules.periodic(100, started) is None  # not read again yet
    rules._stamp_read_at -= stoprules.RESTART_READ_EVERY
    assert rules.periodic(100, started) == 0
    assert len(reads) == 2 and rules.notes.reason == "queue:restart was broadcast"
    # the per-job loop's rules (Laravel's stopIfNecessary after every job) read it every time
    assert rules.status(101, started, 0, popped=True) is None
    assert len(reads) == 3
