"""Repeated warnings are rate-limited: one line, then a count every few seconds.

The clock is a counter the test moves by hand: nothing here waits on the wall clock.
"""

from __future__ import annotations

import logging

import pytest

from laraq.repeated import Repeated


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_then_a_count_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = logging.getLogger("laraq.test.ratelimit")
    warning = Repeated(log, "could not send %d ack(s) (%s): retrying", every=5.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="laraq.test.ratelimit"):
        for _ in range(400):  # 400 failures in 25 s, as in the outage
            warning.warn(3, "Connection refused")
            clock.now += 25 / 400
        warning.clear("acks sent again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "could not send 3 ack(s) (Connection refused): retrying"
    assert 5 <= len(lines) <= 7
    assert all("more time(s) in the last 5s" in line for line in lines[1:-1])
    counted = sum(int(line.split("retrying (", 1)[1].split(" ")[0]) for line in lines[1:-1])
    assert counted + len(lines) - 1 <= 400
    assert lines[-1] == "acks sent again (after 400 occurrence(s))"


def test_clear_without_a_fault_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("laraq.test.ratelimit2")
    warning = Repeated(log, "x %s", clock=Clock())
    with caplog.at_level(logging.WARNING, logger="laraq.test.ratelimit2"):
        warning.clear("back")
        warning.warn("a")
        warning.clear("back")
        warning.warn("b")
    assert [r.getMessage() for r in caplog.records] == ["x a", "back (after 1 occurrence(s))", "x b"]


def test_a_worker_that_cannot_reach_redis_writes_one_ack_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A worker's deferred acks against a Redis that is not there: 200 flushes, one line."""
    from test_worker_support import free_port_url

    from laraq.protocol.acks import Acks
    from laraq.protocol.queue import RedisQueue

    acks = Acks(RedisQueue(free_port_url(), prefix="p_"))
    acks.restore({"default": [b"member"]})
    with caplog.at_level(logging.WARNING, logger="laraq.worker.worker"):
        for _ in range(200):
            acks.flush(force=True)
    lines = [r.getMessage() for r in caplog.records if "ack(s)" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("could not send 1 ack(s)")
    assert acks.pending  # kept, to be sent once Redis is back
    acks.close()
