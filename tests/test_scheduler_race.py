"""Exactly once under fire: separate scheduler processes race over thousands of simulated minutes.

The clock is the Redis key ``sim:now``, moved by the test in 7-minute steps across a Europe/Berlin DST
change (March and October), with one clock step backwards and one forward jump of hours. Processes are
SIGKILLed at random points and restarted, once all of them at the same time (total downtime while the
clock moves on). After each step the test waits until no entry is due any more, so every claim happens
at a ``now`` the test knows, and an independent oracle (written here, not the scheduler's planner)
says exactly which due times must have fired under each entry's catch-up policy.

What is counted is what landed in Redis: the job payloads in the queues (one per firing, distinct
uuids) and the scheduler's history, compared with the oracle entry by entry.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sched_instance import PREFIX, race_app

from laraq.protocol.queue import RedisQueue
from laraq.schedule.entries import Cron, Every
from laraq.schedule.scheduler import Scheduler

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Fleet:
    def __init__(self, port: int, size: int) -> None:
        self.port = port
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.generation = 0
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]))
        for i in range(size):
            self.start(f"p{i}")

    def start(self, slot: str) -> None:
        self.generation += 1
        name = f"{slot}.{self.generation}"
        self.procs[slot] = subprocess.Popen([sys.executable, str(HERE / "sched_instance.py"), str(self.port), name, "sim"],
                                            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def kill(self, slot: str) -> None:
        proc = self.procs[slot]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def check_alive(self) -> None:
        for slot, proc in self.procs.items():
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise AssertionError(f"instance {slot} exited {proc.returncode}:\n{err[-3000:]}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


def timing_of(entry) -> Cron | Every:
    return entry.timing


def due_times(timing: Cron | Every, after: int, until: int) -> list[int]:
    """Every due time in (after, until]: arithmetic for intervals, the cron library for expressions."""
    if isinstance(timing, Every):
        first = after + 1
        first += (timing.offset - first) % timing.seconds
        return list(range(first, until + 1, timing.seconds))
    out = []
    for t in timing.after(after):
        if t > until:
            break
        out.append(t)
    return out


def oracle(entry, start: int, nows: list[int]) -> tuple[list[int], int]:
    """(due times that must fire, how many must be skipped) for ``entry`` claimed at each of ``nows``."""
    horizon = max(nows)
    grid = due_times(entry.timing, start, horizon + 10 * 86400)
    score_index = 0
    fired: list[int] = []
    skipped = 0
    policy = entry.catch_up
    for now in nows:
        if grid[score_index] > now:
            continue
        missed = []
        while grid[score_index] <= now:
            missed.append(grid[score_index])
            score_index += 1
        if policy.policy == "all":
            take = missed[-policy.limit:]
        elif policy.policy == "once":
            take = missed[-1:]
        else:
            take = missed[-1:] if now - missed[-1] <= policy.grace else []
        fired += take
        skipped += len(missed) - len(take)
    return fired, skipped


def wait_until_nothing_due(client, now: int, fleet: Fleet, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while client.zcount(f"{PREFIX}laraq:schedule:due", "-inf", now):
        if time.monotonic() > deadline:
            fleet.check_alive()
            raise AssertionError(f"entries still due at {now} after {timeout}s")
        time.sleep(0.003)


@pytest.mark.slow
@pytest.mark.parametrize("window_start", ["2026-03-28T18:00:00+00:00", "2026-10-24T18:00:00+00:00"],
                         ids=["berlin-spring-forward", "berlin-fall-back"])
def test_processes_with_sigkills_fire_every_due_time_exactly_once_or_per_policy(redis_client, redis_server,
                                                                                  window_start):
    from datetime import datetime

    rng = random.Random(window_start)
    start = int(datetime.fromisoformat(window_start).timestamp())
    client = redis_client
    client.set("sim:now", start)
    app = race_app()
    # install the definitions at `start` (an instance started then), so every first due time is known
    installer = Scheduler(app, RedisQueue(client, prefix=PREFIX, version="8.83.26", clock=lambda: start),
                          clock=lambda: start, instance="installer")
    assert set(installer.sync().values()) == {"added"}

    nows: list[int] = []
    now = start
    fleet = Fleet(redis_server.port, 4)
    kills = 0
    try:
        for step in range(1, 321):   # 320 steps of about 7 minutes: 37 simulated hours
            if step == 90:
                now -= 45 * 60           # the clock steps back 45 minutes (NTP correction, VM restore)
            elif step == 200:
                now += 5 * 3600 + 17     # and jumps 5 hours forward
            else:
                now += 7 * 60
            if step == 140:              # total downtime: every instance killed, the clock moves on
                for slot in list(fleet.procs):
                    fleet.kill(slot)
                    kills += 1
                now += 2 * 3600 + 11
                for slot in list(fleet.procs):
                    fleet.start(slot)
            client.set("sim:now", now)
            nows.append(now)
            if rng.random() < 0.12:      # SIGKILL one instance at a random moment of this step
                victim = rng.choice(sorted(fleet.procs))
                time.sleep(rng.random() * 0.01)
                fleet.kill(victim)
                kills += 1
                fleet.start(victim)
            wait_until_nothing_due(client, now, fleet)
        fleet.check_alive()
    finally:
        fleet.stop()
    assert kills >= 20

    history = installer.store.history()
    by = {h["by"].split(".")[0] for h in history}
    assert len(by) >= 3, f"the instances did not share the work: {by}"
    payloads = [json.loads(m) for q in ("default", "other", "py") for m in client.lrange(f"{PREFIX}queues:{q}", 0, -1)]
    assert len({p["uuid"] for p in payloads}) == len(payloads) == len(history)
    status = {row["name"]: row for row in installer.store.status()}
    total_checked = 0
    for entry in app.schedule_entries:
        expected, expected_skipped = oracle(entry, start, nows)
        got = [h["due"] for h in history if h["name"] == entry.name]
        assert got == expected, f"{entry.name}: fired {len(got)} due times, expected {len(expected)}"
        assert status[entry.name]["fires"] == len(expected)
        assert status[entry.name]["skipped"] == expected_skipped, entry.name
        if entry.kind == "job":
            landed = [p for p in payloads if p["displayName"] == entry.target.class_name]
        else:
            landed = [p for p in payloads if p["job"] == "Laraq\\Schedule@py-fn"]
            assert [p["data"]["due"] for p in landed] == expected
        assert len(landed) == len(expected)
        total_checked += len(expected)
    assert total_checked > 2500
    # the DST day is in the window: the fixed-time entry fired on it exactly once
    fixed = [h["due"] for h in history if h["name"] == "berlin-0230-all"]
    assert len(fixed) == len(set(fixed)) >= 1
