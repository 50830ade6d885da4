"""Every failure path ends with the job in Redis or in ``failed_jobs`` with a clear reason, never gone;
and no log line, ``--json`` line or ``failed_jobs`` text carries a Redis password or APP_KEY.

Real Redis, the fixture app's jobs pushed from Python (``pyapp.PyApp``: PHP's bytes, checked in
``test_pyapp_php.py``): each path is laraq's own, on the newest line, on the oldest too where the payload or
the failed row could differ by version. Paths covered elsewhere:
unserialize errors (``test_worker.py``), timeouts, SIGTERM/second signal/SIGKILL
(``test_cli_work.py``, ``test_worker_fastpath.py``, ``test_worker_soak.py``), poison members
(``test_lua.py``).
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import test_worker_support as support
from conftest import RedisServer
from phpapp import TEST_APP_KEY
from pyapp import ENDS, PyApp
from test_worker_support import free_port_url, laraq_env, popen_laraq, run_laraq, wait_for

from laraq.app import App
from laraq.bus.job import Job
from laraq.cli.work import build_worker, default_params
from laraq.worker.worker import Worker

WRONG_KEY = "base64:" + base64.b64encode(b"W" * 32).decode()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    made: list[Worker] = []
    yield made
    for w in made:
        w.close()


def make_worker(pyapp: PyApp, workers: list[Worker], app: Any = support.app, env: dict[str, str] | None = None,
                **overrides: Any) -> Worker:
    params = default_params(laravel=pyapp.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            **overrides)
    worker = build_worker(params, env=env or pyapp.env, app=app)
    workers.append(worker)
    return worker


def failed_rows(pyapp: PyApp) -> list[dict[str, Any]]:
    return pyapp.failed_rows()


def qkey(pyapp: PyApp, name: str) -> str:
    return pyapp.prefix + "queues:" + name


def queue_empty(client: redis.Redis, key: str) -> bool:
    return not client.exists(key, key + ":reserved", key + ":delayed")


def key_material(app_key: str) -> list[str]:
    raw = base64.b64decode(app_key.removeprefix("base64:"))
    return [app_key, app_key.removeprefix("base64:"), raw.hex(), raw.decode("latin-1")]


# -- decryption failures ---------------------------------------------------------------------------

@pytest.mark.parametrize("pyapp", ENDS, indirect=True)  # 9+ write an encrypted command with a "tag"
@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
@pytest.mark.parametrize("app_key", [WRONG_KEY, None], ids=["wrong-key", "no-key"])
def test_undecryptable_job_goes_to_failed_jobs_with_a_clear_reason(
        pyapp: PyApp, redis_client: Any, workers: list[Worker], app_key: str | None, batch: int) -> None:
    pyapp.dispatch("encrypted", "enc", secret="top secret ✓")
    body = redis_client.lrange(qkey(pyapp, "enc"), 0, -1)[0]
    uuid = json.loads(body)["uuid"]
    env = {k: v for k, v in pyapp.env.items() if k != "APP_KEY"}
    if app_key is not None:
        env["APP_KEY"] = app_key

    assert make_worker(pyapp, workers, env=env, queue="enc", batch=batch).daemon() == 0

    (row,) = failed_rows(pyapp)
    assert row["payload"].encode() == body and row["uuid"] == uuid
    text = row["exception"]  # PHP's order: the innermost cause first, then "Next" the job's error
    if app_key is None:
        assert text.startswith("RuntimeError: Unable to extract job payload: App\\Jobs\\EncryptedJob "
                               "is encrypted and APP_KEY is not set")
    else:
        assert text.startswith("laraq.protocol.encryption.DecryptError: The MAC is invalid.")
        assert f"Next RuntimeError: Cannot decrypt the command of App\\Jobs\\EncryptedJob (uuid {uuid}): " \
               "The MAC is invalid." in text
    for secret in key_material(TEST_APP_KEY) + key_material(WRONG_KEY) + ["top secret"]:
        assert secret not in row["exception"]
    assert queue_empty(redis_client, qkey(pyapp, "enc"))  # failed once (tries 1), not retried forever
    assert [r for r in pyapp.runs() if r["runner"] == "python"] == []


@pytest.mark.parametrize("pyapp", ENDS, indirect=True)
def test_undecryptable_job_with_tries_is_released_then_failed(pyapp: PyApp, redis_client: Any,
                                                              workers: list[Worker]) -> None:
    pyapp.dispatch("encrypted", "enc")
    env = dict(pyapp.env, APP_KEY=WRONG_KEY)
    make_worker(pyapp, workers, env=env, queue="enc", tries=2, backoff="30").daemon()
    ((member, _),) = redis_client.zrange(qkey(pyapp, "enc:delayed"), 0, -1, withscores=True)
    assert json.loads(member)["attempts"] == 1 and failed_rows(pyapp) == []
    redis_client.zadd(qkey(pyapp, "enc:delayed"), {member: 0})
    make_worker(pyapp, workers, env=env, queue="enc", tries=2, backoff="30").daemon()
    (row,) = failed_rows(pyapp)
    assert "MAC is invalid" in row["exception"]
    assert queue_empty(redis_client, qkey(pyapp, "enc"))


def test_decryption_failure_logs_no_key_material(pyapp: PyApp, redis_client: Any) -> None:
    pyapp.dispatch("encrypted", "enc")
    proc = run_laraq(pyapp, "--stop-when-empty", "--queue=enc", "-vv", "--json",
                     env=laraq_env(pyapp, APP_KEY=WRONG_KEY))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "MAC is invalid" in out and "App\\Jobs\\EncryptedJob" in out
    for secret in key_material(TEST_APP_KEY) + key_material(WRONG_KEY):
        assert secret not in out
    (row,) = failed_rows(pyapp)
    assert "MAC is invalid" in row["exception"]


# -- handlers that raise BaseException ------------------------------------------------------------

class CustomBase(BaseException):
    pass


base_app = App("base-exceptions")


@base_app.handler("App\\Jobs\\EchoJob")
def raise_base(command: Any, job: Job) -> None:
    support.record(job)
    kind = command.args["raise"]
    raise {"exit": SystemExit(3), "interrupt": KeyboardInterrupt(), "custom": CustomBase("boom")}[kind]


async_base_app = App("base-exceptions-async")


@async_base_app.handler("App\\Jobs\\EchoJob")
async def raise_base_async(command: Any, job: Job) -> None:
    raise_base(command, job)


@pytest.mark.parametrize("app", [base_app, async_base_app], ids=["sync", "async"])
@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
@pytest.mark.parametrize("kind", ["exit", "interrupt", "custom"])
def test_handler_raising_base_exception_is_released_or_failed(
        pyapp: PyApp, redis_client: Any, workers: list[Worker], kind: str, batch: int, concurrency: int,
        app: App) -> None:
    pyapp.dispatch("echo", "b", args={"raise": kind}, settings={"tries": 2})
    pyapp.dispatch("echo", "b2", args={"raise": kind})
    assert make_worker(pyapp, workers, app=app, queue="b,b2", batch=batch, concurrency=concurrency,
                       backoff="30").daemon() == 0

    # attempt 1 of 2: released (the attempt counts), not left in :reserved
    ((member, _),) = redis_client.zrange(qkey(pyapp, "b:delayed"), 0, -1, withscores=True)
    assert json.loads(member)["attempts"] == 1
    assert redis_client.zcard(qkey(pyapp, "b:reserved")) == 0
    # attempt 1 of 1: failed with the exception's name
    (row,) = failed_rows(pyapp)
    assert row["queue"] == "b2" and {"exit": "SystemExit", "interrupt": "KeyboardInterrupt",
                                     "custom": "CustomBase"}[kind] in row["exception"]
    assert queue_empty(redis_client, qkey(pyapp, "b2"))


# -- failed_jobs unavailable -------------------------------------------------------------------------

def test_failed_jobs_unwritable_parks_the_job(pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    # kept with its failure, not run again (tests/test_failed_parked.py: the row is written later)
    pyapp.dispatch("echo", "f", mode="fail")
    body = redis_client.lrange(qkey(pyapp, "f"), 0, -1)[0]
    worker = make_worker(pyapp, workers, queue="f")
    conn = sqlite3.connect(pyapp.db_path)
    conn.execute("ALTER TABLE failed_jobs RENAME TO failed_jobs_gone")  # the DB is there, the table is not
    conn.commit()
    conn.close()
    assert worker.daemon() == 0

    (record,) = redis_client.hvals(qkey(pyapp, "f:failed-parked"))
    assert json.loads(record)["payload"].encode() == body  # the original body, kept in Redis
    assert queue_empty(redis_client, qkey(pyapp, "f"))


def test_failed_jobs_unreachable_for_an_unreadable_payload_releases_it(
        pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    redis_client.rpush(qkey(pyapp, "u"), json.dumps({"attempts": 0, "id": "x1", "data": []}))
    # no name at all: only a worker that takes any job (not --unhandled leave) reads it
    worker = make_worker(pyapp, workers, queue="u", unhandled="requeue")
    conn = sqlite3.connect(pyapp.db_path)
    conn.execute("DROP TABLE failed_jobs")
    conn.commit()
    conn.close()
    worker.daemon()
    assert redis_client.zcard(qkey(pyapp, "u:delayed")) == 1 and redis_client.zcard(qkey(pyapp, "u:reserved")) == 0


# -- Redis connection lost while a job runs ------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_redis_connections_killed_mid_job(pyapp: PyApp, redis_client: Any, workers: list[Worker],
                                          batch: int, mode: str) -> None:
    pyapp.dispatch("echo", "k", mode="sleep", seconds=1.0, settings={"tries": 3})
    pyapp.dispatch("echo", "k", mode=mode, settings={"tries": 3})
    worker = make_worker(pyapp, workers, queue="k", batch=batch, backoff="30")
    killer = redis.Redis(port=redis_client.connection_pool.connection_kwargs["port"])
    done = threading.Event()

    def kill_while_running() -> None:
        wait_for(lambda: pyapp.runs() or done.is_set())
        time.sleep(0.3)
        killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

    t = threading.Thread(target=kill_while_running)
    t.start()
    try:
        assert worker.daemon() == 0
    finally:
        done.set()
        t.join()
    runs = [r for r in pyapp.runs() if r["runner"] == "python"]
    assert len(runs) == 2
    assert redis_client.zcard(qkey(pyapp, "k:reserved")) == 0 and redis_client.llen(qkey(pyapp, "k")) == 0
    delayed = redis_client.zrange(qkey(pyapp, "k:delayed"), 0, -1)
    assert len(delayed) == (1 if mode == "fail" else 0)
    assert failed_rows(pyapp) == []


def test_redis_restarted_mid_job_nothing_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The redis-server process is restarted on the same port (with its data) while a job runs."""
    server = RedisServer(tmp_path)
    try:
        app = PyApp(server.port, workdir=tmp_path / "app")
        monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
        app.dispatch("echo", "r", mode="sleep", seconds=1.5)
        app.dispatch("echo", "r")
        worker = popen_laraq(app, "--queue=r", "--stop-when-empty", "-v")
        wait_for(app.runs)
        client = server.client()
        client.execute_command("SAVE")
        client.close()
        server.proc.kill()
        server.proc.wait()
        time.sleep(0.3)
        restart = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(server.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server.proc = restart
        wait_for(lambda: _pings(server.port))
        try:
            code = worker.wait(60)
        finally:
            if worker.poll() is None:
                worker.kill()
        stderr = worker.stderr.read() if worker.stderr else ""
        assert code == 0, stderr
        client = server.client()
        assert len(app.runs()) == 2
        assert not client.exists(qkey(app, "r"), qkey(app, "r:reserved"), qkey(app, "r:delayed"))
    finally:
        server.stop()


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_connect_timeout=0.2).ping())
    except redis.ConnectionError:
        return False


# -- jobs without a handler, bad JSON -----------------------------------------------------------------

def test_class_at_method_without_handler_fails_with_a_clear_reason(
        pyapp: PyApp, redis_client: Any, workers: list[Worker]) -> None:
    pyapp.dispatch("string", "s", n=1)
    body = redis_client.lrange(qkey(pyapp, "s"), 0, -1)[0]
    other = App("other")
    other.handler("App\\Jobs\\EchoJob")(lambda command, job: None)
    make_worker(pyapp, workers, app=other, queue="s", unhandled="fail").daemon()
    (row,) = failed_rows(pyapp)
    assert row["payload"].encode() == body
    assert row["exception"].startswith("RuntimeException: No Python handler registered for App\\Handlers\\Foo@bar in ")
    assert queue_empty(redis_client, qkey(pyapp, "s"))


@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
def test_bad_json_is_parked_in_poison_with_a_warning(pyapp: PyApp, redis_client: Any, workers: list[Worker],
                                                     batch: int, caplog: pytest.LogCaptureFixture) -> None:
    redis_client.rpush(qkey(pyapp, "j"), b"{not json", b'{"job": "X", "attempts": "many"}')
    pyapp.dispatch("python", "j")
    with caplog.at_level("WARNING"):
        assert make_worker(pyapp, workers, queue="j", batch=batch).daemon() == 0
    assert redis_client.lrange(qkey(pyapp, "j:poison"), 0, -1) == [b"{not json", b'{"job": "X", "attempts": "many"}']
    assert "unreadable member(s)" in caplog.text
    assert len([r for r in pyapp.runs() if r["runner"] == "python"]) == 1
    assert queue_empty(redis_client, qkey(pyapp, "j"))


# -- secrets in logs -----------------------------------------------------------------------------------

def _no_secret(proc_out: str, secret: str = "s3cretpw") -> None:
    assert secret not in proc_out, proc_out


@pytest.fixture
def app_env(redis_server: Any) -> PyApp:
    """The fixture app's settings for laraq-only checks (no job runs): the Laravel 8 one."""
    return PyApp(redis_server.port, version="8")


@pytest.mark.parametrize("extra", [[], ["--once"], ["--json"], ["--no-supervise"], ["--batch=1"]])
def test_redis_password_never_logged_when_unreachable(app_env: PyApp, extra: list[str]) -> None:
    url = free_port_url().replace("redis://", "redis://user:s3cretpw@")
    worker = popen_laraq(app_env, "--queue=py", "--redis-url", url, "-vv", *extra)
    try:
        code = worker.wait(60)  # unreachable at start: one line, exit 3 (laraq.config.faults)
    finally:
        if worker.poll() is None:
            worker.kill()
    out = (worker.stdout.read() if worker.stdout else "") + (worker.stderr.read() if worker.stderr else "")
    _no_secret(out)
    assert code == 3, out
    assert "user:********@" in out and "cannot reach Redis" in out


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.client().config_set("requirepass", "rightpw")
    yield server
    server.stop()


@pytest.mark.parametrize("extra", [[], ["--once"], ["--batch=1"]])
def test_wrong_redis_password_never_logged(app_env: PyApp, auth_server: RedisServer, extra: list[str]) -> None:
    url = f"redis://:s3cretpw@127.0.0.1:{auth_server.port}/0"
    env = laraq_env(app_env, REDIS_PASSWORD="s3cretpw", REDIS_PORT=str(auth_server.port))
    for args in (["--redis-url", url], []):  # from the flag and from REDIS_PASSWORD
        worker = popen_laraq(app_env, "--queue=py", "-vv", *args, *extra, env=env)
        try:
            code = worker.wait(60)  # refused credentials at start: one line, exit 4, no retry loop
        finally:
            if worker.poll() is None:
                worker.kill()
        out = (worker.stdout.read() if worker.stdout else "") + (worker.stderr.read() if worker.stderr else "")
        _no_secret(out)
        assert code == 4, out
        assert "refused the credentials" in out and "REDIS_PASSWORD" in out
        assert "HELLO must be called" not in out and "Traceback" not in out
