"""laraq.horizon without PHP: settings detection, PHP number strings, payload reading, pid safety, and a
real in-process ``laraq work`` (real Redis) writing Horizon's records for jobs laraq dispatched.

What Horizon itself reads back is proven against real Horizon in ``test_horizon_*_php.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from horizon_support import restore, snapshot

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.cli.work import build_worker, default_params
from laraq.horizon import HorizonPayload, HorizonRecords, HorizonSettings, HorizonTrim, horizon_in_use
from laraq.horizon.listener import HorizonListener
from laraq.horizon.pipe import RecordPipe
from laraq.horizon.records import php_float_string
from laraq.horizon.supervisors import NO_SIGNAL_PID, HorizonMaster, process_started, shared_master_name
from laraq.protocol.queue import RedisQueue

P = "laravel_horizon:"


# -- settings -------------------------------------------------------------------------------------------

CONFIG = """<?php

use App\\Jobs\\Noisy;
use Illuminate\\Support\\Str;

return [
    'use' => 'horizon-redis',
    // 'prefix' => 'commented_out:',
    'prefix' => env('HORIZON_PREFIX', Str::slug(env('APP_NAME', 'laravel'), '_').'_horizon:'),
    'trim' => [
        'recent' => 30,
        'pending' => 45,
        'completed' => 15,
        'failed' => 2880,
        'monitored' => 600,
    ],
    'silenced' => [
        Noisy::class,
        \\App\\Jobs\\Heartbeat::class,
        'App\\\\Jobs\\\\Ping',
    ],
];
"""


def test_settings_from_the_app_config(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "horizon.php").write_text(CONFIG)
    s = HorizonSettings.from_app({"APP_NAME": "My Shop@Home", "APP_ENV": "local"}, tmp_path)
    assert s.prefix == "my_shop_at_home_horizon:"
    assert s.use == "horizon-redis" and s.environment == "local"
    assert s.trim == HorizonTrim(recent=30, pending=45, completed=15, failed=2880, recent_failed=None, monitored=600)
    assert s.trim.recent_failed_minutes == 2880
    assert s.silenced == ("App\\Jobs\\Noisy", "App\\Jobs\\Heartbeat", "App\\Jobs\\Ping")
    assert HorizonSettings.from_app({"HORIZON_PREFIX": "hz:"}, tmp_path).prefix == "hz:"
    assert horizon_in_use({}, tmp_path)


def test_settings_read_the_apps_env_file_under_the_environment(tmp_path: Path) -> None:
    """``.env`` is merged in as Laravel loads it: a variable the environment already has wins."""
    (tmp_path / ".env").write_text('APP_NAME="Shop Front"\nAPP_ENV=staging\nHORIZON_PREFIX="${APP_ENV}-hz:"\n')
    s = HorizonSettings.from_app({}, str(tmp_path))
    assert (s.prefix, s.environment) == ("staging-hz:", "staging")
    s = HorizonSettings.from_app({"APP_ENV": "production"}, tmp_path)
    assert (s.prefix, s.environment) == ("production-hz:", "production")
    (tmp_path / ".env").write_text('APP_NAME="Shop Front"\n')
    assert HorizonSettings.from_app({}, tmp_path).prefix == "shop_front_horizon:"


def test_stock_settings_and_detection(tmp_path: Path) -> None:
    s = HorizonSettings.from_app({}, None)
    assert (s.prefix, s.trim, s.silenced) == ("laravel_horizon:", HorizonTrim(), ())
    assert HorizonSettings.from_app({"APP_NAME": "Laravel"}, None).prefix == "laravel_horizon:"
    assert not horizon_in_use({}, tmp_path) and not horizon_in_use({}, None)
    assert horizon_in_use({"HORIZON_PREFIX": "x:"}, None)
    (tmp_path / "vendor" / "laravel" / "horizon").mkdir(parents=True)
    assert horizon_in_use({}, tmp_path)


def test_one_detection_for_work_dispatch_and_from_app(tmp_path: Path) -> None:
    import dataclasses

    from laraq.config.settings import LaravelSettings
    from laraq.horizon import app_horizon

    plain = LaravelSettings.from_env({"LARAQ_BASE_PATH": str(tmp_path)})
    assert app_horizon(plain) is None and app_horizon(plain, False) is None
    assert app_horizon(plain, True) is not None  # --horizon / horizon=True
    # the app's own configuration (cached, booted or exported) gives the prefix and connection: in use
    configured = dataclasses.replace(plain, base_path=None, horizon_prefix="acme_horizon:", horizon_use="cache")
    found = app_horizon(configured)
    assert found is not None and (found.prefix, found.use) == ("acme_horizon:", "cache")
    assert app_horizon(configured, False) is None
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "horizon.php").write_text("<?php return [\n    'prefix' => 'lit_horizon:',\n];")
    found = app_horizon(plain)
    assert found is not None and found.prefix == "lit_horizon:"


@pytest.mark.parametrize(("value", "text"), [
    (1795351333.30195, "1795351333.3019"), (1795351333.30196, "1795351333.302"), (1795351333.3019, "1795351333.3019"), (27.67, "27.67"),
    (5.0, "5"), (0.0, "0"), (-1795351330.3388, "-1795351330.3388"), (1795351330.0, "1795351330"),
])
def test_php_float_strings(value: float, text: str) -> None:
    assert php_float_string(value) == text


def test_payload_fields_as_horizon_reads_them() -> None:
    p = HorizonPayload.parse(b'{"uuid":"u","id":"r","displayName":"A","tags":{},"silenced":true,"retry_of":"x"}')
    assert (p.id, p.display_name, p.tags, p.silenced, p.retry_of) == ("u", "A", [], True, "x")
    q = HorizonPayload.parse('{"id":"r","tags":["a",1]}')
    assert (q.id, q.tags, q.silenced, q.retry_of) == ("r", ["a", "1"], False, None)
    with pytest.raises(ValueError):
        HorizonPayload.parse(b"[1]")


def _raw_state(client: Any) -> dict[bytes, Any]:
    """Every key's type, content (sorted sets with their scores) and expiry (the Unix time EXPIREAT set: a
    TTL would move with the clock between two states)."""
    state: dict[bytes, Any] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key).decode()
        content = {"hash": client.hgetall, "set": client.smembers,
                   "zset": lambda k: client.zrange(k, 0, -1, withscores=True)}[kind](key)
        state[key] = (kind, content, client.execute_command("EXPIRETIME", key))
    return state


@pytest.mark.parametrize(("silenced", "tags"), [(False, []), (True, []), (False, ["other", "watched"]),
                                                (False, ["other"]), (True, ["watched"])])
def test_packed_completion_writes_what_the_pipeline_writes(redis_client: Any, silenced: bool,
                                                           tags: list[str]) -> None:
    """The worker's record pipe (RESP packed here, replies read later) and :meth:`HorizonRecords.completed`
    leave the same Redis state, the reservation written first in both, a job with a monitored tag
    remembered in both; scripts Redis lost are loaded again and their calls sent again, so the metrics
    count the job once."""
    redis_client.sadd(P + "monitoring", "watched", "elsewhere")
    body = {"uuid": "u-1", "displayName": "App\\Jobs\\Ok", "attempts": 2, "tags": tags, "silenced": silenced,
            "delay": None}
    payload = HorizonPayload.parse(json.dumps(body).encode())
    settings = HorizonSettings()
    records = HorizonRecords(redis_client, settings, clock=lambda: 1795351333.5)
    records.pushed("redis", "default", payload)
    start = snapshot(redis_client)

    records.completed("redis", "default", payload, 12.344,
                      before=[records.reserved_write(payload, 1795351333.125)])
    records.completed("redis", "default", payload, 20.0)
    assert redis_client.hget(P + "job:App\\Jobs\\Ok", "throughput") == b"2"
    sync = _raw_state(redis_client)

    restore(redis_client, start)
    assert records.pipes_completed(payload)
    loads: list[str] = []

    def load() -> str:
        records.load_scripts()
        loads.append("loaded")
        return loads[-1]

    pipe = RecordPipe(redis_client, load)
    packed, replies, metrics = records.pack_completed("redis", "default", payload, 12.344,
                                                      records.pack_reserved(payload, 1795351333.125), 1)
    assert pipe.write(packed, (replies, metrics))
    pipe.collect(wait=True)
    redis_client.script_flush()  # Redis loses the script: the next calls are answered NOSCRIPT
    packed, replies, metrics = records.pack_completed("redis", "default", payload, 20.0)
    assert pipe.write(packed, (replies, metrics))
    pipe.collect(wait=True)
    assert not pipe.unconfirmed
    pipe.close()
    assert len(loads) == 1
    assert _raw_state(redis_client) == sync
    assert redis_client.zcard(P + "monitored_jobs") == (1 if "watched" in tags else 0)


# -- the master record's pid -----------------------------------------------------------------------------

def test_a_pid_that_is_not_ours_is_never_recorded(redis_client: Any) -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        master = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1,
                               signal_pid=other.pid)
        master.persist()
        assert not redis_client.exists(P + "master:" + master.name)
        assert redis_client.zcard(P + "masters") == 0
    finally:
        other.kill()
        other.wait()


def test_no_signal_pid_is_beyond_any_linux_pid(redis_client: Any) -> None:
    limit = int(Path("/proc/sys/kernel/pid_max").read_text()) if Path("/proc/sys/kernel/pid_max").exists() else 0
    assert max(limit, 2**22) < NO_SIGNAL_PID
    with pytest.raises(ProcessLookupError):
        os.kill(NO_SIGNAL_PID, 0)
    master = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1,
                           signal_pid=NO_SIGNAL_PID)
    master.persist()
    assert redis_client.hget(P + "master:" + master.name, "pid") == str(NO_SIGNAL_PID).encode()


def test_stale_laraq_masters_of_this_host_are_removed(redis_client: Any) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert process_started(dead.pid) is None
    ghost = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1)
    ghost.persist()
    # pretend its process died (the pid is gone)
    redis_client.hset(P + "master:" + ghost.name, "pid", str(dead.pid))
    # a PHP master under another name is never touched
    redis_client.hset(P + "master:elsewhere-AbCd", mapping={"name": "elsewhere-AbCd", "pid": str(dead.pid)})
    redis_client.zadd(P + "masters", {"elsewhere-AbCd": int(time.time())})
    me = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1)
    assert me.forget_dead_laraq_masters() == [ghost.name]
    assert not redis_client.exists(P + "master:" + ghost.name, P + "supervisor:" + ghost.supervisor)
    assert redis_client.exists(P + "master:elsewhere-AbCd")
    assert me.php_master_alive()


def test_unreadable_and_unknown_commands(redis_client: Any) -> None:
    master = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1)
    redis_client.rpush(P + "commands:master:" + master.name, b"not json",
                       json.dumps({"command": "Laravel\\Horizon\\SupervisorCommands\\Scale", "options": {"scale": 3}}))
    [cmd] = master.pending_commands()
    assert cmd.action is None and cmd.options == {"scale": 3}
    assert not redis_client.exists(P + "commands:master:" + master.name)


# -- a real worker with the listener (no PHP) --------------------------------------------------------------

app = App("horizon-unit")


@app.handler("App\\Jobs\\Ok")
def ok(command: Any, job: Any) -> None:
    pass


@app.handler("App\\Jobs\\SelfRelease")
def self_release(command: Any, job: Any) -> None:
    if job.attempts < 2:
        job.release(0)


@app.handler("App\\Jobs\\Boom")
def boom(command: Any, job: Any) -> None:
    job.fail(RuntimeError("boom from python"))


def test_laraq_dispatch_and_work_write_horizon_records(redis_client: Any, redis_server: Any) -> None:
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "DB_CONNECTION": "sqlite",
           "DB_DATABASE": ":memory:", "CACHE_STORE": "redis", "QUEUE_CONNECTION": "redis",
           "QUEUE_FAILED_DRIVER": "null"}
    params = default_params(laravel="13", sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            tries=3, horizon=True)
    worker = build_worker(params, env=env, app=app)
    assert any(isinstance(listener, HorizonListener) for listener in worker.events)
    queue = RedisQueue(redis_client, prefix="laravel-database-", version="13")
    d = Dispatcher(queue, horizon=HorizonSettings())
    ids = {name: d.dispatch_job(f"App\\Jobs\\{name}", {}, tags=[name.lower()]).uuid
           for name in ("Ok", "SelfRelease", "Boom")}
    assert all(redis_client.hget(P + i, "status") == b"pending" for i in ids.values())
    assert worker.run() == 0
    status = {name: redis_client.hget(P + i, "status").decode() for name, i in ids.items()}
    assert status == {"Ok": "completed", "SelfRelease": "completed", "Boom": "failed"}
    assert redis_client.hget(P + ids["Boom"], "exception").decode().startswith("RuntimeError: boom from python")
    # the self-released attempt did not count: throughput 2 (Ok, SelfRelease's second attempt)
    assert redis_client.hget(P + "queue:default", "throughput") == b"2"
    assert redis_client.zrange(P + "failed:boom", 0, -1) == [ids["Boom"].encode()]
    assert redis_client.zcard(P + "completed_jobs") == 2 and redis_client.zcard(P + "failed_jobs") == 1
    # stopping removed the master and supervisor records at once
    assert redis_client.zcard(P + "masters") == 0 and not redis_client.keys(P + "supervisor:*")


def test_untagged_jobs_records_ride_in_the_acks_writes(redis_client: Any, redis_server: Any) -> None:
    """Jobs without tags: their records are packed and ride in the acks' writes (the records' client is the
    queue's), and end as Horizon's: completed, referenced, timed, counted once each."""
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "DB_CONNECTION": "sqlite",
           "DB_DATABASE": ":memory:", "CACHE_STORE": "redis", "QUEUE_CONNECTION": "redis",
           "QUEUE_FAILED_DRIVER": "null"}
    params = default_params(laravel="13", sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            tries=3, horizon=True)
    worker = build_worker(params, env=env, app=app)
    [listener] = [x for x in worker.events if isinstance(x, HorizonListener)]
    assert worker.acks.rider is listener
    queue = RedisQueue(redis_client, prefix="laravel-database-", version="13")
    d = Dispatcher(queue, horizon=HorizonSettings())
    ids = [d.dispatch_job("App\\Jobs\\Ok", {}).uuid for _ in range(30)]
    assert worker.run() == 0
    for job_id in ids:
        record = redis_client.hgetall(P + job_id)
        assert record[b"status"] == b"completed" and b"reserved_at" in record and b"completed_at" in record
        assert 0 < redis_client.ttl(P + job_id) <= HorizonSettings().trim.completed * 60
    assert sorted(redis_client.zrange(P + "completed_jobs", 0, -1)) == sorted(i.encode() for i in ids)
    assert redis_client.zcard(P + "pending_jobs") == 0
    assert redis_client.hget(P + "queue:default", "throughput") == b"30"
    assert redis_client.hget(P + "job:App\\Jobs\\Ok", "throughput") == b"30"
    assert not listener.holding and listener.pipe is not None and not listener.pipe.unconfirmed
    assert not worker.acks.pipe or not worker.acks.pipe.unconfirmed


def test_a_restarted_worker_removes_its_predecessors_master(redis_client: Any) -> None:
    # a supervised worker records its supervisor's pid (here: this process's parent)
    parent = os.getppid()
    before = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1,
                           signal_pid=parent)
    before.persist()
    after = HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1,
                          signal_pid=parent)
    assert after.forget_dead_laraq_masters() == [before.name]
    after.persist()
    assert [m.decode() for m in redis_client.zrange(P + "masters", 0, -1)] == [after.name]


def test_worker_processes_of_one_laraq_work_share_one_master(redis_client: Any) -> None:
    # two worker processes of one laraq work (its pid: this process's parent), and one of another
    parent = os.getppid()
    name = shared_master_name(parent)
    assert name == shared_master_name(parent) != shared_master_name(os.getpid())
    workers = [HorizonMaster(redis_client, HorizonSettings(environment="production"), connection="redis",
                             queues="default", processes=1, signal_pid=parent, name=name, slot=i, slots=2)
               for i in range(2)]
    for w in workers:
        assert w.forget_dead_laraq_masters() == []  # a sibling is not a predecessor
        w.persist()
    assert [m.decode() for m in redis_client.zrange(P + "masters", 0, -1)] == [name]
    record = {k.decode(): v.decode() for k, v in redis_client.hgetall(P + "master:" + name).items()}
    assert json.loads(record["supervisors"]) == [f"{name}:laraq-default-1", f"{name}:laraq-default-2"]
    assert (record["pid"], record["environment"]) == (str(parent), "laraq:production")
    assert sorted(m.decode() for m in redis_client.zrange(P + "supervisors", 0, -1)) == json.loads(record["supervisors"])
    # one stops: its supervisor goes; the master is written again by the other at its next heartbeat
    workers[0].forget()
    workers[1].persist()
    assert [m.decode() for m in redis_client.zrange(P + "supervisors", 0, -1)] == [f"{name}:laraq-default-2"]
    assert redis_client.exists(P + "master:" + name)
    workers[1].forget()
    assert redis_client.zcard(P + "masters") == 0 and not redis_client.keys(P + "supervisor:*")


# -- the Horizon release and what follows from it ---------------------------------------------------------

@pytest.mark.parametrize("installed", [
    {"packages": [{"name": "laravel/framework", "version": "v12.0.0"}, {"name": "laravel/horizon", "version": "v5.41.0"}]},
    [{"name": "laravel/horizon", "version": "v5.41.0"}],  # Composer 1's plain list
])
def test_horizon_release_read_like_composer_records_it(tmp_path: Path, installed: object) -> None:
    from laraq.horizon.version import NEWEST, HorizonVersion, detect_horizon_version

    assert detect_horizon_version({}, tmp_path) == (NEWEST, detect_horizon_version({}, None)[1])
    (tmp_path / "vendor" / "composer").mkdir(parents=True)
    (tmp_path / "vendor" / "composer" / "installed.json").write_text(json.dumps(installed))
    version, source = detect_horizon_version({}, tmp_path)
    assert (version, source) == (HorizonVersion(5, 41, 0), "vendor/composer/installed.json")
    assert not version.pending_before_push and version.has_silenced_tags
    assert detect_horizon_version({"LARAQ_HORIZON_VERSION": "5.45.1"}, tmp_path)[0].job_hash_delay
    settings = HorizonSettings.from_app({}, tmp_path)
    assert settings.version == version and not settings.pending_before_push


def test_silenced_tags_only_from_534(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "horizon.php").write_text(
        "<?php return ['silenced' => [], 'silenced_tags' => [\n    'quiet', // a comment\n    'noisy',\n]];")
    new = HorizonSettings.from_app({"LARAQ_HORIZON_VERSION": "5.34.0"}, tmp_path)
    assert new.silenced_tags == ("quiet", "noisy")
    assert new.is_silenced("App\\Jobs\\X", ["noisy"]) and not new.is_silenced("App\\Jobs\\X", ["other"])
    old = HorizonSettings.from_app({"LARAQ_HORIZON_VERSION": "5.33.9"}, tmp_path)
    assert not old.is_silenced("App\\Jobs\\X", ["noisy"])


def test_a_migrated_jobs_reservation_carries_delay_zero_from_5451(tmp_path: Path) -> None:
    # RedisJobRepository::migrated (5.45.1+) sets delay 0 on each job a migration moved; laraq's reserve
    # migrates without that event, so the reservation of such a job writes it
    def reserved_fields(release: str, **payload: Any) -> dict[str, Any]:
        settings = HorizonSettings.from_app({"LARAQ_HORIZON_VERSION": release}, tmp_path)
        body = HorizonPayload.parse(json.dumps({"uuid": "u1", "displayName": "J", "delay": None, **payload}))
        return HorizonRecords(None, settings).reserved_write(body, 1795351333.5)[1]

    assert reserved_fields("5.48.1", attempts=1)["reserved_at"] == "1795351333.5"
    assert "delay" not in reserved_fields("5.48.1", attempts=1)          # pushed: never migrated
    assert reserved_fields("5.48.1", attempts=1, delay=30)["delay"] == 0  # dispatched delayed
    assert reserved_fields("5.48.1", attempts=2)["delay"] == 0            # released, or its lease expired
    assert reserved_fields("5.45.1", attempts=2)["delay"] == 0
    assert "delay" not in reserved_fields("5.45.0", attempts=2, delay=30)  # no such field before 5.45.1
    assert "delay" not in reserved_fields("5.29.1", attempts=2, delay=30)


def test_the_supervisor_relay_is_a_real_process_that_passes_signals_on() -> None:
    import signal as sig

    from laraq.horizon.relay import SupervisorRelay

    relay = SupervisorRelay()
    pid = relay.start()
    try:
        assert pid is not None and pid != os.getpid() and relay.pid == pid
        seen: list[str] = []
        for signum in (sig.SIGUSR2, sig.SIGCONT, sig.SIGTERM):  # one at a time, as commands arrive
            os.kill(pid, signum)
            deadline = time.monotonic() + 10
            before = len(seen)
            while len(seen) == before and time.monotonic() < deadline:
                seen += relay.actions()
                time.sleep(0.02)
        assert seen == ["pause", "continue", "terminate"]
        assert relay.pid == pid  # none of them ended it
    finally:
        relay.stop()
    assert relay.pid is None and relay.actions() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, gone


# -- jobs only PHP can run, waiting with no PHP worker (laraq.horizon.phpwait) ------------------------------

def test_jobs_only_php_can_run_are_counted_recorded_and_sampled(redis_client: Any) -> None:
    from prometheus_client import CollectorRegistry

    from laraq.horizon.phpwait import PhpWaitWatch, read_php_waiting
    from laraq.production.metrics import QueueSampler

    queue = RedisQueue(redis_client, prefix="laravel-database-", version="13")
    d = Dispatcher(queue)
    for name in ("Ok", "PhpOnly", "PhpOnly"):
        d.dispatch_job(f"App\\Jobs\\{name}", {})
    # laraq's own supervisor on the queue is not a PHP worker
    HorizonMaster(redis_client, HorizonSettings(), connection="redis", queues="default", processes=1).persist()
    watch = PhpWaitWatch(queue, redis_client, P, app.resolve)
    [waiting] = watch.check("redis", ["default"])
    assert (waiting.queue, waiting.jobs, waiting.looked_at) == ("default", 2, 3)
    assert [(w.queue, w.jobs) for w in read_php_waiting(redis_client, queue.prefix)] == [("default", 2)]
    registry = CollectorRegistry()
    sampler = QueueSampler(registry)
    sampler.update(queue, ["default"])
    assert registry.get_sample_value("laraq_php_only_jobs_waiting", {"queue": "default"}) == 2
    # a PHP Horizon supervisor works the queue (Horizon's supervisor record): nothing waits for PHP any more
    sup = "php-host-AbCd:supervisor-1"
    redis_client.hset(P + "supervisor:" + sup, mapping={
        "name": sup, "master": "php-host-AbCd", "status": "running",
        "processes": json.dumps({"redis:default": 1}), "options": json.dumps({"queue": "default", "connection": "redis"})})
    redis_client.zadd(P + "supervisors", {sup: int(time.time())})
    assert watch.check("redis", ["default"]) == []
    assert read_php_waiting(redis_client, queue.prefix) == []
    sampler.update(queue, ["default"])
    assert registry.get_sample_value("laraq_php_only_jobs_waiting", {"queue": "default"}) == 0
