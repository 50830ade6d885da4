"""The ``RunsInPython`` hand-off on a queue shared by a PHP worker and laraq (stock flags), on real Laravel 8,
12 and 13 with ``php artisan queue:work``, and on Laravel 13 with Horizon 5.29.1 and 5.48.1 as the PHP worker.

To Laravel and Horizon a job a PHP worker handed over is a job that has not run yet: while laraq is
stopped the chain's next step is not dispatched, the batch's counters and callbacks do not move, the unique
lock stays held (a second dispatch is dropped) and Horizon counts nothing. Once laraq runs, each Python step
runs once, in Python, and the end state is the one the same scenario reaches with PHP-only classes run by
the PHP worker alone: chain order, batch callbacks ``then``/``catch``/``finally`` once and in order with
counters never negative, the lock free, ``failed()`` run once in PHP, Horizon's completed count and
throughput one per job.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import queue_count, queue_jobs, require
from horizon_support import HORIZON_PREFIX, HORIZON_RELEASE_LINES
from phpapp import PhpApp, live_missing
from test_worker_support import plain, popen_laraq, record, wait_for

from laraq.app import App
from laraq.bus.job import Job
from laraq.protocol.serializer import PHPObject

pytestmark = pytest.mark.php

app = App("handoff")


def _step(command: PHPObject, job: Job) -> None:
    record(job, args=plain(command.args), mode=command.mode)
    if command.mode == "fail":
        raise RuntimeError(f"python step failed on purpose: {plain(command.args)}")


app.register("App\\Jobs\\PyStepJob", _step, php_failed=True)
app.register("App\\Jobs\\PyUniqueJob", _step, php_failed=True)
app.register("App\\Jobs\\PyUntilProcessingJob", _step, unique="until_processing", php_failed=True)

APP = "test_handoff_php:app"
QUEUE = "default"
#: (Laravel line, PHP worker): artisan on 8, 12 and 13; Horizon 5.29.1 and 5.48.1 on 13.
CASES = [(v, "artisan") for v in ("8", "12", "13")] + [(v, "horizon") for v in HORIZON_RELEASE_LINES]


class Side:
    """A fixture app with its PHP worker running on ``QUEUE``; laraq joins with :meth:`start_laraq`."""

    def __init__(self, php: PhpApp, worker: str) -> None:
        self.php, self.worker = php, worker
        self.procs: list[subprocess.Popen[str]] = []
        if worker == "horizon":
            self.procs.append(php.popen_artisan("horizon"))
            wait_for(lambda: php.tool("horizon-dump")["supervisors"], timeout=60, interval=0.3)
        else:
            self.procs.append(php.popen_artisan("queue:work", "redis", f"--queue={QUEUE}", "--sleep=1"))

    def start_laraq(self) -> None:
        self.procs.append(popen_laraq(self.php, f"--queue={QUEUE}", "--php-app", str(self.php.path), "--sleep=1",
                                      *(["--horizon"] if self.worker == "horizon" else []), app_spec=APP))

    def handed(self, uuid: str) -> bool:
        """Whether the PHP worker has handed this job over (its debug line in the app's log)."""
        logs = list((self.php.storage / "logs").glob("*.log"))
        return any(f"handed over from queue {QUEUE}" in line and uuid in line
                   for log in logs for line in log.read_text().splitlines())

    def stop(self) -> None:
        if self.worker == "horizon":
            self.php.artisan("horizon:terminate")
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@pytest.fixture(params=CASES, ids=[f"{v}-{w}" for v, w in CASES])
def side(request: pytest.FixtureRequest, redis_client: Any, redis_server: Any) -> Iterator[Side]:
    version, worker = request.param
    reason = live_missing(version)
    require(reason is None, reason or "")
    extra = {"HORIZON_BALANCE": "false", "HORIZON_TRIES": "1"} if worker == "horizon" else None
    php = PhpApp(redis_server.port, version=version, horizon=worker == "horizon", extra_env=extra)
    s = Side(php, worker)
    try:
        yield s
    finally:
        s.stop()


def steps_run(php: PhpApp) -> list[tuple[int, str]]:
    return [(r["args"]["n"], r["runner"]) for r in php.runs() if r.get("class", "").startswith("App\\Jobs\\")]


def queue_uuids(php: PhpApp, redis_client: Any) -> list[str]:
    """The jobs waiting on ``QUEUE`` or reserved by a worker (the PHP worker keeps taking a handed job back)."""
    members = queue_jobs(redis_client, php.prefix + "queues:" + QUEUE, ("", ":reserved"))
    return sorted({json.loads(m)["uuid"] for m in members})


def settled(php: PhpApp, redis_client: Any) -> bool:
    return queue_count(redis_client, php.prefix + "queues:" + QUEUE) == 0


def test_chain_runs_each_step_once_in_order(side: Side, redis_client: Any) -> None:
    php = side.php
    kinds = ["echo", "py-step", "echo", "py-step", "echo"]
    steps = [{"kind": k, "args": {"n": i + 1}} for i, k in enumerate(kinds)]
    php.tool("chain", f"--queue={QUEUE}", "--steps=" + json.dumps(steps), f"--catch={QUEUE}")
    # laraq stopped: PHP runs step 1, hands step 2 over, and the chain waits there
    def waiting() -> list[str]:
        ran = {r.get("uuid") for r in php.runs()}
        return [u for u in queue_uuids(php, redis_client) if u not in ran] if steps_run(php) == [(1, "php")] else []

    [py2] = wait_for(waiting, timeout=60)
    wait_for(lambda: side.handed(py2), timeout=60)
    assert steps_run(php) == [(1, "php")] and queue_uuids(php, redis_client) == [py2]
    side.start_laraq()
    wait_for(lambda: len(steps_run(php)) >= 5 and settled(php, redis_client), timeout=120, interval=0.2)
    assert steps_run(php) == [(1, "php"), (2, "python"), (3, "php"), (4, "python"), (5, "php")]
    assert not [r for r in php.runs() if r.get("class") == "chain-catch"]
    if side.worker == "horizon":
        dump = wait_for(lambda: (d := php.tool("horizon-dump"))["counts"]["completed"] == 5 and d, timeout=60)
        assert dump["throughput"] == 5 and dump["counts"]["pending"] == 0
        assert sorted(j["status"] for j in dump["recent"]) == ["completed"] * 5
        # one run each, per class too: the hand-offs counted nothing
        assert sorted((j["name"], j["throughput"]) for j in dump["jobs"]) == [
            ("App\\Jobs\\EchoJob", 3), ("App\\Jobs\\PyStepJob", 2)]


def batch_state(php: PhpApp, batch_id: str) -> dict[str, Any]:
    status = php.tool("batch-status", batch_id)
    callbacks = [r["what"] for r in php.runs() if r.get("class") == "batch-callback"]
    return {"pending": status["pending"], "failed": status["failed"], "callbacks": callbacks,
            "finished": status["finished"], "cancelled": status["cancelled"]}


@pytest.mark.parametrize("modes", [("ok", "ok", "ok"), ("ok", "fail", "ok")], ids=["all-ok", "item2-fails"])
def test_batch_callbacks_once_in_order_counters_never_negative(side: Side, redis_client: Any,
                                                                modes: tuple[str, ...]) -> None:
    php = side.php
    steps = [{"kind": "py-step", "args": {"n": i + 1}, "mode": m, "settings": {"tries": 1}} for i, m in enumerate(modes)]
    batch_id = php.tool("batch-callbacks", f"--queue={QUEUE}", "--allow-failures", "--steps=" + json.dumps(steps))["id"]
    uuids = queue_uuids(php, redis_client)
    wait_for(lambda: all(side.handed(u) for u in uuids), timeout=120, interval=0.3)
    # handed over, not run: the batch has not moved
    assert batch_state(php, batch_id) == {"pending": 3, "failed": 0, "callbacks": [], "finished": False,
                                          "cancelled": False}
    side.start_laraq()
    wait_for(lambda: "finally" in batch_state(php, batch_id)["callbacks"] and settled(php, redis_client),
             timeout=120, interval=0.3)
    # artisan's end state for the batch (test_jobmodel_php proves laraq's bookkeeping equals it): a failed
    # item stays counted as pending and failed, and leaves the batch unfinished (finished_at unset)
    failing = "fail" in modes
    state = batch_state(php, batch_id)
    assert state == {"pending": 1 if failing else 0, "failed": 1 if failing else 0,
                     "callbacks": ["catch", "finally"] if failing else ["then", "finally"],
                     "finished": not failing, "cancelled": False}
    assert sorted(steps_run(php)) == [(1, "python"), (2, "python"), (3, "python")]
    failed_hooks = [r["args"]["n"] for r in php.runs() if r.get("class") == "py-failed"]
    assert failed_hooks == ([2] if failing else [])
    with sqlite3.connect(php.db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM failed_jobs").fetchone()[0] == (1 if failing else 0)


def lock_keys(redis_client: Any) -> list[bytes]:
    return sorted(redis_client.scan_iter(match="*laravel_unique_job:*"))


@pytest.mark.parametrize("kind", ["py-unique", "py-until-processing"])
def test_unique_lock_held_while_waiting_free_after_python_ran(side: Side, redis_client: Any, kind: str) -> None:
    php = side.php

    def dispatch(n: int) -> None:
        php.tool("dispatch", kind, f"--queue={QUEUE}", "--pending", "--args=" + json.dumps({"args": {"n": n, "key": "k1"}}))

    dispatch(1)
    [first] = queue_uuids(php, redis_client)
    wait_for(lambda: side.handed(first), timeout=60)
    # handed over, not started: the lock is held and a second dispatch with the key is dropped
    assert len(lock_keys(redis_client)) == 1
    dispatch(2)
    key = php.prefix + "queues:" + QUEUE
    assert redis_client.llen(key) + redis_client.zcard(key + ":reserved") == 1
    side.start_laraq()
    wait_for(lambda: steps_run(php) and settled(php, redis_client), timeout=120, interval=0.2)
    assert steps_run(php) == [(1, "python")]
    assert lock_keys(redis_client) == []
    # the lock is free: the next dispatch with the key is queued and runs (in Python)
    dispatch(3)
    wait_for(lambda: len(steps_run(php)) == 2 and settled(php, redis_client), timeout=120, interval=0.2)
    assert steps_run(php) == [(1, "python"), (3, "python")]
    assert lock_keys(redis_client) == []


def test_python_failure_runs_php_failed_once(side: Side, redis_client: Any) -> None:
    php = side.php
    php.tool("dispatch", "py-step", f"--queue={QUEUE}", "--args=" + json.dumps({"args": {"n": 1}, "mode": "fail"}))
    [uuid] = queue_uuids(php, redis_client)
    wait_for(lambda: side.handed(uuid), timeout=60)
    side.start_laraq()
    wait_for(lambda: [r for r in php.runs() if r.get("class") == "py-failed"] and settled(php, redis_client),
             timeout=120, interval=0.2)
    assert steps_run(php) == [(1, "python")]
    [hook] = [r for r in php.runs() if r.get("class") == "py-failed"]
    assert "python step failed on purpose" in hook["message"]
    with sqlite3.connect(php.db_path) as db:
        rows = db.execute("SELECT uuid FROM failed_jobs").fetchall()
    assert rows == [(uuid,)]
    if side.worker == "horizon":
        dump = wait_for(lambda: (d := php.tool("horizon-dump"))["counts"]["failed"] == 1 and d, timeout=60)
        assert dump["counts"]["completed"] == 0
        assert redis_client.hget(HORIZON_PREFIX + uuid, "status") == b"failed"


@pytest.mark.parametrize("version", HORIZON_RELEASE_LINES)
def test_horizon_sees_a_handed_job_as_just_pushed(version: str, redis_client: Any, redis_server: Any) -> None:
    """One hand-off by a worker on Horizon's queue (``queue:work --once`` on the Horizon app): every Horizon key
    is as it was right after the push, but the record's ``updated_at``, and the job waits on its queue as pushed."""
    reason = live_missing(version)
    require(reason is None, reason or "")
    php = PhpApp(redis_server.port, version=version, horizon=True)
    php.tool("dispatch", "py-step", f"--queue={QUEUE}", "--args=" + json.dumps({"args": {"n": 1}}))
    [body] = redis_client.lrange(php.prefix + "queues:" + QUEUE, 0, -1)

    def horizon_keys() -> dict[bytes, Any]:
        state: dict[bytes, Any] = {}
        for key in sorted(redis_client.keys(HORIZON_PREFIX + "*")):
            kind = redis_client.type(key)
            if kind == b"hash":
                state[key] = {k: v for k, v in redis_client.hgetall(key).items() if k != b"updated_at"}
            elif kind == b"zset":
                state[key] = redis_client.zrange(key, 0, -1, withscores=True)
            else:
                state[key] = redis_client.dump(key)
        return state

    pushed = horizon_keys()
    php.artisan("queue:work", "redis", f"--queue={QUEUE}", "--once", check=True)
    assert php.runs() == []
    assert redis_client.lrange(php.prefix + "queues:" + QUEUE, 0, -1) == [body]
    assert redis_client.zcard(php.prefix + "queues:" + QUEUE + ":reserved") == 0
    assert horizon_keys() == pushed
