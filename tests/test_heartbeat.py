"""Heartbeat records on a real Redis: one per worker, TTL, own-record removal, ``laraq workers``/``health``."""

from __future__ import annotations

import json
import os
import time

import click
import pytest
from click.testing import CliRunner

from laraq.cli.production import COMMANDS
from laraq.production.heartbeat import Heartbeat, check_health, live_workers, registry_key
from laraq.protocol.versions import LaravelVersion
from laraq.worker.context import WorkerOptions
from laraq.worker.events import (
    Held,
    JobFailed,
    JobProcessed,
    JobReleased,
    WorkerStarting,
    WorkerStopping,
)
from laraq.worker.notes import rss_mb

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})
PREFIX = "hb_"


@pytest.fixture
def env(redis_server, redis_client, tmp_path):
    return {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
            "LARAQ_LARAVEL_VERSION": "12.67", "COLUMNS": "250"}


def worker_like(queues=("default",), name="default"):
    """The event a worker starts with (real workers: test_production_worker.py)."""
    return WorkerStarting("redis", list(queues), WorkerOptions(name=name), LaravelVersion.parse("12.67"))


def _redis_seconds(client) -> float:
    seconds, micros = client.time()
    return int(seconds) + int(micros) / 1e6


def wait_until(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_each_worker_has_its_own_record_and_stopping_removes_only_its_own(redis_client, tmp_path):
    held = Held({}, 0)
    a = Heartbeat(redis_client, PREFIX, interval=0.2, id_file=tmp_path / "a.id", held=lambda: held)
    b = Heartbeat(redis_client, PREFIX, interval=0.2)
    a.worker_starting(worker_like(["high", "default"], "alpha"))
    b.worker_starting(worker_like(["emails"]))
    try:
        assert (tmp_path / "a.id").read_text().strip() == a.id
        assert wait_until(lambda: len(live_workers(redis_client, PREFIX)) == 2)  # the first beat is the thread's
        records = {r.id: r for r in live_workers(redis_client, PREFIX)}
        assert set(records) == {a.id, b.id}
        ra = records[a.id]
        assert (ra.pid, ra.ppid, ra.name, ra.queues, ra.laravel) == (os.getpid(), os.getppid(), "alpha",
                                                                     ["high", "default"], "12.67.0")
        assert 0 < redis_client.ttl(f"{registry_key(PREFIX)}:{a.id}") <= a.ttl
        # outcomes only touch memory; the next beat carries them, with what the worker holds at that moment
        jobs = [object() for _ in range(5)]
        for job in jobs[:3]:
            a.job_processed(JobProcessed(job, 0.01))
        a.job_failed(JobFailed(jobs[3], RuntimeError("x"), 0.5))
        a.job_released(JobReleased(jobs[4], 0, None))  # a handler's own release: still running until job_processed
        held = Held({"j5": 1700000000.5, "j6": 1700000001.0}, 1)
        assert wait_until(lambda: {r.id: r for r in live_workers(redis_client, PREFIX)}[a.id].jobs_done == 3)
        assert wait_until(lambda: {r.id: r for r in live_workers(redis_client, PREFIX)}[a.id].in_flight == 1)
        ra = {r.id: r for r in live_workers(redis_client, PREFIX)}[a.id]
        assert (ra.jobs_done, ra.jobs_failed, ra.jobs_released, ra.in_flight) == (3, 1, 1, 1)
        assert json.loads(ra.extra["holding"]) == {"j5": 1700000000.5, "j6": 1700000001.0}
        assert {r.id: r for r in live_workers(redis_client, PREFIX)}[b.id].extra["holding"] == "{}"  # no worker
        # its resident memory, as the worker's --memory check measures it (this process's: same ballpark)
        assert ra.memory_mb is not None and rss_mb() / 2 < ra.memory_mb < rss_mb() * 2
        redis_client.hdel(f"{registry_key(PREFIX)}:{b.id}", "memory_mb")  # a record written without it
        assert {r.id: r for r in live_workers(redis_client, PREFIX)}[b.id].memory_mb is None
        a.worker_stopping(WorkerStopping(0, "done", WorkerOptions()))
        assert [r.id for r in live_workers(redis_client, PREFIX)] == [b.id]
        assert not (tmp_path / "a.id").exists()
        assert check_health(redis_client, PREFIX, within=10, queues=["emails"])[0]
        assert not check_health(redis_client, PREFIX, within=10, queues=["high"])[0]
    finally:
        a.stop()
        b.stop()
    assert live_workers(redis_client, PREFIX) == []


def test_a_killed_worker_expires_and_is_cleaned_from_the_registry(redis_client):
    # No waiting on the clock: the beat is written by hand, Redis's own expiry is checked as the TTL it
    # set, and its effect (the hash gone) is applied by hand; the registry is then read as live_workers does.
    hb = Heartbeat(redis_client, PREFIX, interval=0.2, ttl=1)
    hb._static.update({"started": "0", "queues": "default", "name": "default"})
    assert hb.beat()
    record = f"{registry_key(PREFIX)}:{hb.id}"
    assert 0 < redis_client.pttl(record) <= 1000  # the record expires by itself within its ttl
    assert [r.id for r in live_workers(redis_client, PREFIX, ttl=1)] == [hb.id]
    redis_client.delete(record)  # what Redis does at the TTL when the process died and stopped beating
    assert live_workers(redis_client, PREFIX, ttl=60) == []
    assert redis_client.zcard(registry_key(PREFIX)) == 0  # the dead id is cleaned from the registry
    # and an id whose beat is older than the ttl is dropped even while its hash is still there
    assert hb.beat()
    beat = float(redis_client.hget(record, "beat"))
    redis_client.zadd(registry_key(PREFIX), {hb.id: beat - 5})
    assert live_workers(redis_client, PREFIX, ttl=1) == []
    assert redis_client.zcard(registry_key(PREFIX)) == 0
    assert redis_client.keys(f"{registry_key(PREFIX)}:*") == [record.encode()]


def test_a_wedged_loop_stops_beating(redis_client, caplog):
    # Events, not sleeps: the beat thread logs "not beating" on each pass once the loop is stalled, so after
    # the first such line no beat is in flight, and three more lines are three passes without a beat.
    hb = Heartbeat(redis_client, PREFIX, interval=0.05, ttl=60, stall_after=0.3)
    hb.worker_starting(worker_like())

    def stalled_passes() -> int:
        return sum("not beating" in r.getMessage() for r in caplog.records)

    try:
        with caplog.at_level("WARNING", logger="laraq.production.heartbeat"):
            assert wait_until(lambda: live_workers(redis_client, PREFIX))
            first = live_workers(redis_client, PREFIX)[0].beat
            assert wait_until(lambda: live_workers(redis_client, PREFIX, ttl=60)[0].beat > first)
            hb._looped -= 10  # the loop has not reported for 10 s
            assert wait_until(lambda: stalled_passes() >= 1)
            frozen = live_workers(redis_client, PREFIX, ttl=60)[0].beat
            seen = stalled_passes()
            assert wait_until(lambda: stalled_passes() >= seen + 3)
            assert live_workers(redis_client, PREFIX, ttl=60)[0].beat == frozen
            # unhealthy once Redis's clock is past the last beat by more than `within`
            assert wait_until(lambda: _redis_seconds(redis_client) > frozen + 0.5)
            assert not check_health(redis_client, PREFIX, within=0.4)[0]
            assert check_health(redis_client, PREFIX, within=3600)[0]
    finally:
        hb.stop()


def test_workers_and_health_commands(env, redis_client, tmp_path):
    out = CliRunner().invoke(cli, ["workers"], env=env)
    assert out.exit_code == 0 and "No live laraq workers" in out.output
    assert CliRunner().invoke(cli, ["health"], env=env).exit_code == 1
    idf = tmp_path / "w.id"
    hb = Heartbeat(redis_client, PREFIX, interval=0.2, id_file=idf)
    hb.worker_starting(worker_like(["default", "mail"], "web-1"))
    try:
        assert wait_until(lambda: live_workers(redis_client, PREFIX))
        table = CliRunner().invoke(cli, ["workers"], env=env)
        assert table.exit_code == 0 and "web-1" in table.output and "default,mail" in table.output
        listed = json.loads(CliRunner().invoke(cli, ["workers", "--json"], env=env).output)
        assert [w["id"] for w in listed] == [hb.id] and listed[0]["queues"] == ["default", "mail"]
        assert listed[0]["memory_mb"] > 0 and f"{listed[0]['memory_mb']:.0f}M" in table.output.replace("\n", "")
        for args in (["--id-file", str(idf)], ["--pid", str(os.getpid())], ["--pid", str(os.getppid())],
                     ["--queue", "mail"], []):
            result = CliRunner().invoke(cli, ["health", *args], env=env)
            assert result.exit_code == 0, (args, result.output)
        for args in (["--queue", "other"], ["--pid", "1", "--host", "elsewhere"],
                     ["--id-file", str(tmp_path / "missing.id")]):
            assert CliRunner().invoke(cli, ["health", *args], env=env).exit_code == 1, args
    finally:
        hb.stop()
    result = CliRunner().invoke(cli, ["health", "--id-file", str(idf)], env=env)
    assert result.exit_code == 1
    unreachable = {**env, "REDIS_PORT": "1"}
    result = CliRunner().invoke(cli, ["health"], env=unreachable)
    assert result.exit_code == 1 and "cannot read" in result.output
