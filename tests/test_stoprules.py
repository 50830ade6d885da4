"""The worker's run and stop rules (:class:`laraq.worker.stoprules.StopRules`) on their own: Laravel's
order of ``stopIfNecessary`` as one check that answers with a value, ``daemonShouldRun``'s pause and
maintenance, and laraq's rule that a failed reserve is never an empty queue. The loop that calls them is
covered by ``test_worker_stopping.py``."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from laraq.exitcodes import EXIT_ERROR, EXIT_MEMORY_LIMIT
from laraq.protocol.versions import LaravelVersion
from laraq.worker import stoprules
from laraq.worker.context import Signals, WorkerOptions
from laraq.worker.notes import RunNotes
from laraq.worker.reserver import Fault
from laraq.worker.stoprules import UNKNOWN, Round, Stop, StopRules


class _Cache:
    def __init__(self, stamp: Any = 100) -> None:
        self.stamp = stamp

    def restart_timestamp(self) -> Any:
        if isinstance(self.stamp, Exception):
            raise self.stamp
        return self.stamp


def _rules(*, cache: Any = None, down: bool = False, version: str = "13.0.0", **options: Any) -> tuple[StopRules, Any]:
    options.setdefault("batch", 1)  # the restart stamp is read on every check unless a test says otherwise
    context: Any = SimpleNamespace(options=WorkerOptions(**options), signals=Signals(), cache=cache,
                                   version=LaravelVersion.parse(version))
    rules = StopRules(context, RunNotes("w", context.options.memory), lambda: down, lambda: None)
    rules.begin()
    return rules, context


def test_laravel_order_quit_then_memory_then_restart_then_empty() -> None:
    cache = _Cache(100)
    rules, context = _rules(cache=cache, memory=1, stop_when_empty=True, max_jobs=1)
    context.signals.quit(0, "SIGTERM received")
    assert rules.check(Round(5, empty=True)) == Stop(0, "SIGTERM received")

    context.signals.should_quit = False  # then --memory (1 MB: any process is over)
    assert rules.check(Round(5, empty=True)) == Stop(EXIT_MEMORY_LIMIT, "over --memory")

    context.options.memory = 1 << 20  # then queue:restart
    cache.stamp = 101
    assert rules.check(Round(5, empty=True)) == Stop(0, "queue:restart was broadcast")

    cache.stamp = 100  # then --stop-when-empty, before --max-jobs
    rules.last_restart = 100
    stop = rules.check(Round(5, empty=True))
    assert stop is not None and stop.status == 0 and stop.reason.startswith("--stop-when-empty")
    assert rules.check(Round(5)) == Stop(0, "--max-jobs reached")


def test_an_unreadable_restart_stamp_never_stops_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    cache = _Cache(OSError("cache away"))
    rules, _ = _rules(cache=cache, memory=1 << 20)
    with caplog.at_level(logging.WARNING, "laraq.worker.worker"):
        assert rules.last_restart is UNKNOWN
        assert rules.check(Round(0)) is None
    assert "could not read the queue:restart signal: cache away" in caplog.text
    cache.stamp = 7  # readable again: only a change from a known stamp is a restart
    assert rules.check(Round(0)) is None
    rules.last_restart = 6
    assert rules.check(Round(0)) == Stop(0, "queue:restart was broadcast")


def test_memory_zero_is_unlimited_only_where_laravel_says_so() -> None:
    for version in ("8.83.0", "13.0.0"):
        rules, context = _rules(version=version, memory=0)
        expected = not context.version.memory_zero_is_unlimited  # 0 MB: any process is over
        assert rules.memory_exceeded(0) is expected, version


def test_stop_when_empty_for_counts_from_the_last_job_taken() -> None:
    rules, _ = _rules(stop_when_empty_for=0.2, memory=1 << 20)
    rules.started = time.monotonic() - 1.0
    assert rules.check(Round(0, empty=True)) == Stop(0, "--stop-when-empty-for: no job for 0.2s")
    rules.job_taken()
    assert rules.check(Round(1, empty=True)) is None
    assert rules.check(Round(1)) is None  # a round that took a job is not empty, however long ago
    rules.last_job_at = time.monotonic() - 0.5
    assert rules.check(Round(1, empty=True)) == Stop(0, "--stop-when-empty-for: no job for 0.2s")


def test_a_failed_reserve_is_not_an_empty_queue_until_the_tries_run_out() -> None:
    rules, _ = _rules(stop_when_empty=True, memory=1 << 20)
    assert rules.check(Round(0, fault=Fault(3, stoprules.STOP_WHEN_EMPTY_TRIES - 1, 1.0))) is None
    stop = rules.check(Round(0, fault=Fault(3, stoprules.STOP_WHEN_EMPTY_TRIES, 1.0)))
    assert stop is not None and stop.status == 3
    assert f"{stoprules.STOP_WHEN_EMPTY_TRIES} reserve rounds failed in a row" in stop.reason
    stop = rules.check(Round(0, fault=Fault(0, stoprules.STOP_WHEN_EMPTY_TRIES, 1.0)))
    assert stop is not None and stop.status == EXIT_ERROR  # no known fault: exit 1, never 0
    # without --stop-when-empty a failed round stops nothing: the worker retries with its backoff
    rules, _ = _rules(memory=1 << 20)
    assert rules.check(Round(0, fault=Fault(3, 99, 30.0))) is None


def test_a_failed_reserve_still_meets_max_time_and_max_jobs() -> None:
    rules, _ = _rules(stop_when_empty=True, memory=1 << 20, max_jobs=2)
    assert rules.check(Round(2, fault=Fault(3, 1, 1.0))) == Stop(0, "--max-jobs reached")


def test_pause_and_maintenance_are_said_once_and_force_runs_anyway(caplog: pytest.LogCaptureFixture) -> None:
    rules, context = _rules(down=True)
    with caplog.at_level(logging.INFO, "laraq.worker.worker"):
        assert not rules.should_run()
        assert not rules.should_run()
        context.options.force = True
        assert rules.should_run()
        context.signals.paused = True
        assert not rules.should_run()
        assert not rules.should_run(kill_pending=True)
    lines = [r.getMessage() for r in caplog.records]
    assert sum(line.startswith("worker w paused: the app is down") for line in lines) == 1
    assert any(line.startswith("worker w resumed") for line in lines)
    assert any("paused (SIGUSR2" in line for line in lines)


def test_a_broken_maintenance_probe_counts_as_up(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> bool:
        raise RuntimeError("no storage/framework/down")

    context: Any = SimpleNamespace(options=WorkerOptions(), signals=Signals(), cache=None,
                                   version=LaravelVersion.parse("13.0.0"))
    rules = StopRules(context, RunNotes("w", 128), broken, lambda: None)
    with caplog.at_level(logging.WARNING, "laraq.worker.worker"):
        assert rules.should_run()
    assert "maintenance-mode check failed: no storage/framework/down" in caplog.text


def test_the_batched_loop_reads_the_restart_stamp_at_most_every_quarter_second() -> None:
    """Read on every reserve round of a burst, the stamp would cost one cache round trip per batch; with
    ``--batch 1`` it is read after every job, as Laravel's ``stopIfNecessary`` reads it."""
    reads: list[float] = []

    class Counting(_Cache):
        def restart_timestamp(self) -> Any:
            reads.append(time.monotonic())
            return super().restart_timestamp()

    cache = Counting(100)
    rules, _ = _rules(cache=cache, memory=1 << 20, batch=32)
    reads.clear()  # the read at begin()
    for _ in range(50):
        assert rules.check(Round(0)) is None
    assert len(reads) <= 1
    cache.stamp = 101
    rules._stamp_read_at = time.monotonic()
    assert rules.check(Round(0)) is None  # not read again yet
    rules._stamp_read_at -= stoprules.RESTART_READ_EVERY
    assert rules.check(Round(0)) == Stop(0, "queue:restart was broadcast")

    per_job, _ = _rules(cache=cache, memory=1 << 20, batch=1)
    reads.clear()
    for _ in range(3):
        per_job.check(Round(0))
    assert len(reads) == 3
