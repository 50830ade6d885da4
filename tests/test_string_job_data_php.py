"""A string job's data stays data: laraq never reads it as a serialized command, nor hands it to PHP as one.

``Queue::push('App\\Handlers\\Foo@bar', $data)`` runs ``Foo::bar($job, $data)`` under ``queue:work``:
nothing in ``$data`` is unserialized, whatever keys it has. An app that pushes user-keyed arrays
(``$request->all()``) lets its users choose those keys, so they may write ``commandName`` and a
serialized ``command`` into it. laraq must pick the handler by the ``job`` string alone (as Laravel does)
and give the handler the data, on success and on failure, with the app on the worker's host (the
in-process PHP steps) and without it (continuations to ``--php-queue``, run by artisan afterwards).

The ``command`` here is a serialized ``App\\Handlers\\Tripwire`` (fixtures/laravel8/app/Handlers): its
``__wakeup`` writes a line, as a gadget chain would run code. It carries a ``chained`` step and EchoJob's
properties, so a worker that took ``commandName`` for the class would run EchoJob's handler and then hand
PHP the chain step (or, with ``mode`` fail, ``failed()``), and PHP would unserialize it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import test_worker_support as support
from conftest import queue_count
from phpapp import PhpApp

from laraq.app import App
from laraq.cli.work import build_worker, default_params

pytestmark = pytest.mark.php

QUEUE = "strings"
TRIPWIRE = "App\\Handlers\\Tripwire"


def _gadget(mode: str) -> str:
    """``serialize(new Tripwire)`` with EchoJob's properties and one chained step."""
    def s(text: str) -> str:
        return f's:{len(text.encode())}:"{text}";'
    props = (s("mode") + s(mode) + s("seconds") + "i:0;" + s("args") + "a:0:{}" + s("note") + "N;"
             + s("hidden") + "N;" + s("chained") + "a:1:{i:0;" + s("x") + "}")
    return f'O:{len(TRIPWIRE)}:"{TRIPWIRE}":6:{{{props}}}'


def _foo_bar(data: Any, job: Any) -> None:
    support.record(job, data=support.plain(data))
    if data.get("mode") == "fail":
        raise RuntimeError("string job failed on purpose")


handlers = App("string-data")
handlers.register("App\\Jobs\\EchoJob", support.echo)
handlers.register("App\\Handlers\\Foo@bar", _foo_bar)


@pytest.fixture
def app(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


@pytest.mark.parametrize(("where", "mode"), [("on-host", "ok"), ("on-host", "fail"), ("off-host", "ok"),
                                             ("off-host", "fail")])
def test_a_string_job_whose_data_names_a_command_runs_as_a_string_job(app: PhpApp, redis_client: Any,
                                                                      where: str, mode: str) -> None:
    gadget = _gadget(mode)
    data = {"commandName": "App\\Jobs\\EchoJob", "command": gadget, "mode": mode}
    app.tool("dispatch", "string", f"--queue={QUEUE}", "--args=" + json.dumps(data))
    uuid = json.loads(redis_client.lindex(app.prefix + "queues:" + QUEUE, 0))["uuid"]

    on_host = {"php_app": str(app.path)} if where == "on-host" else {"php_queue": "php"}
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue=QUEUE, tries=1, **on_host)
    worker = build_worker(params, env=app.env, app=handlers)
    try:
        assert worker.daemon() == 0
    finally:
        if worker.callqueued.steps.php is not None:
            worker.callqueued.steps.php.close()
    # whatever laraq handed to PHP (a continuation on the PHP queue) runs here, under a stock artisan
    app.artisan("queue:work", "redis", f"--queue={QUEUE},php", "--stop-when-empty", "--sleep=0", check=True)

    runs = app.runs()
    assert [r for r in runs if r.get("class") == TRIPWIRE] == []       # nobody unserialized the data
    assert [(r["runner"], r["class"], r["uuid"]) for r in runs] == [("python", "App\\Handlers\\Foo", uuid)]
    assert runs[0]["data"]["command"] == gadget                         # the handler got it as text
    failed = sqlite3.connect(app.db_path).execute("select payload, exception from failed_jobs").fetchall()
    if mode == "fail":
        assert len(failed) == 1 and json.loads(failed[0][0])["uuid"] == uuid
        assert "string job failed on purpose" in failed[0][1]
    else:
        assert failed == []
    for name in (QUEUE, "php"):
        key = app.prefix + "queues:" + name
        assert queue_count(redis_client, key) == 0


@pytest.mark.parametrize("op", ["success", "failed"])
def test_the_php_process_refuses_a_string_job_as_a_command(app: PhpApp, redis_client: Any, op: str) -> None:
    """The in-process PHP's own guard: asked to run a step on a string job (whatever its data says), it
    answers with an error and unserializes nothing."""
    from laraq.bus.phpprocess import PhpProcess, PhpStepError

    data = {"commandName": "App\\Jobs\\EchoJob", "command": _gadget("ok")}
    app.tool("dispatch", "string", f"--queue={QUEUE}", "--args=" + json.dumps(data))
    body = redis_client.lpop(app.prefix + "queues:" + QUEUE)
    process = PhpProcess(app.path, env=app.env)
    try:
        with pytest.raises(PhpStepError, match=r'not a queued command \(job "App\\\\Handlers\\\\Foo@bar"\)'):
            if op == "success":
                process.success(body, "redis", QUEUE, ["chain"])
            else:
                process.failed(body, "redis", QUEUE, json.loads(body)["uuid"], "RuntimeException", "boom")
        process.ping()  # the process lives on
    finally:
        process.close()
    assert app.runs() == []


def test_on_a_real_apps_shared_queue_neither_worker_unserializes_a_string_jobs_data(
        laravel: str, redis_server: Any) -> None:
    """The app as a team configures it (``fixtures/laravel{N}-custom``: literal values in ``config/``, its own
    connection, prefix and queue, a cached config) with artisan and laraq working its queue together:
    string jobs whose data carry ``commandName`` and the gadget run once each, on whichever side takes
    them (laraq with the app on its host through ``--env-file``), and nothing is unserialized."""
    import os
    import subprocess
    import sys

    from test_app_config_php import CONNECTION, PREFIX, QUEUE, app_redis, clean_env, failed_rows
    from test_worker_support import wait_for

    for db in (0, 1, 3):
        redis_server.client(db).flushall()
    app = PhpApp(redis_server.port, version=laravel, variant="custom")
    app.artisan("config:cache", check=True)
    client = app_redis(app)
    key = f"{PREFIX}queues:{QUEUE}"
    def dispatch(count: int) -> None:
        for mode in ("ok", "fail") * (count // 2):
            data = {"commandName": "App\\Jobs\\EchoJob", "command": _gadget(mode), "mode": mode}
            app.tool("dispatch", "string", f"--connection={CONNECTION}", "--args=" + json.dumps(data))

    def pushed() -> set[str]:
        return {json.loads(m)["uuid"] for m in client.lrange(key, 0, -1)}

    dispatch(10)
    first = pushed()
    assert len(first) == 10
    env = {**clean_env(app), "LARAQ_LOG": str(app.log_path)}
    laraq = subprocess.Popen(
        [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--env-file", str(app.path / ".env"),
         "--app", f"{__name__}:handlers", "--sleep", "0", "--tries", "1", "--no-supervise", "--quiet"],
        env={**env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])},
        cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    artisan = None
    try:
        # laraq alone works the first ten; then artisan joins and both work the next ten
        wait_for(lambda: queue_count(client, key, ("", ":reserved")) == 0, timeout=120, interval=0.1)
        artisan = app.popen_artisan("queue:work", "--sleep=0", "--tries=1", "--quiet")
        dispatch(10)
        wait_for(lambda: queue_count(client, key, ("", ":reserved")) == 0, timeout=120, interval=0.1)
    finally:
        procs = [p for p in (laraq, artisan) if p is not None]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.communicate(timeout=60)
    runs = app.runs()
    assert [r for r in runs if r.get("class") == TRIPWIRE] == []       # nobody unserialized the data
    ran = [r["uuid"] for r in runs]
    assert len(ran) == len(set(ran)) == 20                              # each ran once, on one side
    assert first <= {r["uuid"] for r in runs if r["runner"] == "python"}
    python_failed = {r["uuid"] for r in runs if r["runner"] == "python" and r["data"]["mode"] == "fail"}
    assert python_failed and {json.loads(row["payload"])["uuid"] for row in failed_rows(app)} >= python_failed
