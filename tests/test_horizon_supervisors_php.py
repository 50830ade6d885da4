"""laraq workers as Horizon masters/supervisors, read and commanded by real Horizon (live Laravel 9 to 13
with Horizon 5.29.1, Laravel 13 with Horizon 5.48.1).

``horizon_master_proc.py`` holds the records through :class:`laraq.horizon.HorizonListener` and obeys
signals like ``laraq work``. Horizon's own ``horizon:status``, ``horizon:pause``, ``horizon:continue``,
``horizon:pause-supervisor``, ``horizon:continue-supervisor`` and ``horizon:terminate`` act on it, its
``SupervisorRepository``/``MasterSupervisorRepository``/``WorkloadRepository`` read it, and the
``commands:`` lists are obeyed. A supervisor-level pause leaves the master running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from horizon_support import HORIZON_LINES, HORIZON_PREFIX, horizon_app
from phpapp import PhpApp
from test_worker_support import wait_for

pytestmark = pytest.mark.php

TESTS = Path(__file__).resolve().parent


@pytest.fixture(params=HORIZON_LINES)
def hz(request: pytest.FixtureRequest, php: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return horizon_app(request.param, redis_server.port)


class Proc:
    def __init__(self, port: int) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
        self.p = subprocess.Popen([sys.executable, str(TESTS / "horizon_master_proc.py"), str(port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        first = self.line()
        assert first.startswith("ready"), first + self.p.stderr.read()
        self.name = first.split()[1]
        self.seen: list[str] = []

    def line(self) -> str:
        assert self.p.stdout is not None
        return self.p.stdout.readline().strip()

    def expect(self, word: str) -> None:
        while True:
            got = self.line()
            self.seen.append(got)
            if got == word:
                return
            assert got, f"process ended before {word!r}: {self.seen}"

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)


def test_horizon_sees_and_commands_a_laraq_master(hz: PhpApp, redis_client: Any, redis_server: Any) -> None:
    assert hz.artisan("horizon:status").returncode == 2  # inactive
    proc = Proc(redis_server.port)
    try:
        proc.expect("running")
        status = hz.artisan("horizon:status")
        assert status.returncode == 0 and "running" in status.stdout.lower()
        dump = hz.tool("horizon-dump")
        [master] = dump["masters"]
        assert (master["name"], master["pid"], master["status"]) == (proc.name, str(proc.p.pid), "running")
        [sup] = dump["supervisors"]
        assert master["supervisors"] == [sup["name"]] and sup["master"] == proc.name
        # the supervisor has its own pid (the relay), so Horizon can signal the two levels apart
        assert sup["pid"] != master["pid"] and sup["options"]["parentId"] == str(proc.p.pid)
        assert sup["options"]["workersName"] == "default" and sup["options"]["autoScalingStrategy"] is None
        assert sup["processes"] == {"redis:default,low": 2}
        assert sup["options"]["queue"] == "default,low" and sup["options"]["timeout"] == "60"
        [load] = dump["workload"]
        assert (load["name"], load["processes"]) == ("default,low", 2)
        assert sorted(load["split_queues"]) == ["default", "low"]

        hz.artisan("horizon:pause", check=True)
        proc.expect("paused")
        wait_for(lambda: hz.artisan("horizon:status").returncode == 1, timeout=30)
        hz.artisan("horizon:continue", check=True)
        proc.expect("running")
        wait_for(lambda: hz.artisan("horizon:status").returncode == 0, timeout=30)

        # horizon:pause-supervisor pauses the supervisor only: Horizon still says it is running
        out = hz.artisan("horizon:pause-supervisor", sup["name"], check=True)
        assert sup["pid"] in out.stdout
        proc.expect("paused")
        wait_for(lambda: [s["status"] for s in hz.tool("horizon-dump")["supervisors"]] == ["paused"], timeout=30)
        status = hz.artisan("horizon:status")
        assert status.returncode == 0 and "running" in status.stdout.lower()
        assert [m["status"] for m in hz.tool("horizon-dump")["masters"]] == ["running"]
        hz.artisan("horizon:continue-supervisor", sup["name"], check=True)
        proc.expect("running")
        wait_for(lambda: [s["status"] for s in hz.tool("horizon-dump")["supervisors"]] == ["running"], timeout=30)

        # the command queues Horizon's own master and supervisors read
        redis_client.rpush(HORIZON_PREFIX + "commands:master:" + proc.name, json.dumps(
            {"command": "Laravel\\Horizon\\SupervisorCommands\\Pause", "options": []}))
        proc.expect("paused")
        redis_client.rpush(HORIZON_PREFIX + "commands:" + sup["name"], json.dumps(
            {"command": "Laravel\\Horizon\\SupervisorCommands\\ContinueWorking", "options": []}))
        proc.expect("running")

        out = hz.artisan("horizon:terminate", check=True)
        assert str(proc.p.pid) in out.stdout
        proc.expect("stopped")
        assert proc.p.wait(30) == 0
        # gone at once, not after the TTL
        assert not redis_client.exists(HORIZON_PREFIX + "master:" + proc.name)
        assert hz.artisan("horizon:status").returncode == 2
        assert hz.tool("horizon-dump")["supervisors"] == []
    finally:
        proc.stop()


def test_records_expire_like_horizons(hz: PhpApp, redis_client: Any, redis_server: Any) -> None:
    proc = Proc(redis_server.port)
    try:
        proc.expect("running")
        assert 0 < redis_client.ttl(HORIZON_PREFIX + "master:" + proc.name) <= 15
        [sup] = [k for k in redis_client.keys(HORIZON_PREFIX + "supervisor:*")]
        assert 15 < redis_client.ttl(sup) <= 30
        proc.p.kill()  # a crash leaves the records to expire
        proc.p.wait(10)
        assert redis_client.exists(HORIZON_PREFIX + "master:" + proc.name)
        # a new laraq on this host removes the dead one's records at start (its pid is gone)
        other = Proc(redis_server.port)
        try:
            other.expect("running")
            assert not redis_client.exists(HORIZON_PREFIX + "master:" + proc.name)
            names = [m["name"] for m in hz.tool("horizon-dump")["masters"]]
            assert names == [other.name]
        finally:
            other.stop()
    finally:
        proc.stop()
