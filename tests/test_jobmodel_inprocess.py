"""The job model at artisan's moment with stock flags: laraq with the app on its host (``--php-app``, or
an ``--env-file`` inside the app) runs the app's own ``CallQueuedHandler`` steps in one persistent PHP
process (:mod:`laraq.bus.phpprocess`), synchronously, and nothing is handed to a PHP queue.

Each scenario is dispatched twice by PHP: once drained by ``php artisan queue:work`` alone, once by laraq
(``--php-app`` and ``--app`` only) followed by a stock ``queue:work --stop-when-empty``. The end states are
compared, callbacks' order included. Two topologies: laraq alone on a Python queue, and laraq and artisan
on one shared queue (20 chains worked by a mixed fleet). Live Laravel 8, 12 and 13.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

import pytest
import test_worker_support as support
from conftest import queue_count
from phpapp import PhpApp

from laraq.app import App
from laraq.bus.handoff import continuation_payload, is_continuation
from laraq.bus.phpprocess import PhpProcess, PhpStepError, app_on_host
from laraq.bus.phpsteps import continuation_conflict
from laraq.cli.work import build_worker, default_params
from laraq.protocol.payload import Payload
from laraq.protocol.versions import LaravelVersion
from laraq.worker.worker import Worker

pytestmark = pytest.mark.php


#: The Python twins of the fixture jobs these tests dispatch.
handlers = App("jobmodel")
handlers.register("App\\Jobs\\EchoJob", support.echo)
handlers.register("App\\Jobs\\BatchEchoJob", support.batch_echo)
handlers.register("App\\Jobs\\FailedHookJob", support.failed_hook, php_failed=True)
handlers.register("App\\Jobs\\PrintingFailedJob", support.failed_hook, php_failed=True)
handlers.register("App\\Jobs\\UniquePropertyJob", support.unique_property)
handlers.register("App\\Jobs\\UniqueMethodJob", support.unique_method, unique=True)
handlers.register("App\\Jobs\\UntilProcessingJob", support.until_processing, unique="until_processing")
handlers.register("App\\Jobs\\UntilProcessingMethodJob",
                  lambda command, job: support._unique_run(command, job, "m-" + command.key), unique="until_processing")


@pytest.fixture
def app(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def laraq_worker(app: PhpApp, workers: list[Worker], queue: str) -> Worker:
    """laraq as a user runs it next to the app: ``--php-app`` (the app on this host) and ``--app``."""
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue=queue, php_app=str(app.path))
    worker = build_worker(params, env=app.env, app=handlers)
    workers.append(worker)
    assert worker.callqueued.steps.php is not None
    return worker


def laraq_drain(app: PhpApp, workers: list[Worker], queue: str) -> None:
    worker = laraq_worker(app, workers, queue)
    try:
        assert worker.daemon() == 0
    finally:
        assert worker.callqueued.steps.php is not None
        worker.callqueued.steps.php.close()


def artisan_drain(app: PhpApp, queues: str) -> None:
    app.artisan("queue:work", "redis", f"--queue={queues}", "--stop-when-empty", "--sleep=0", check=True)


def pending(app: PhpApp, redis_client: Any, queue: str) -> int:
    return queue_count(redis_client, app.prefix + "queues:" + queue)


def drain(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    """artisan alone drains ``pq``; laraq drains ``lq`` ONCE, then a stock artisan drains what is left.
    Nothing may be left for artisan: every PHP step ran in laraq's PHP process, at its moment."""
    artisan_drain(app, "pq")
    laraq_drain(app, workers, "lq")
    for queue in ("lq", "default"):
        assert pending(app, redis_client, queue) == 0, f"laraq left jobs on {queue}"
    artisan_drain(app, "lq,default")


def failed_rows(app: PhpApp, queue: str) -> list[tuple[str, str]]:
    conn = sqlite3.connect(app.db_path)
    rows = [(json.loads(p)["displayName"], e.splitlines()[0].split(": ", 1)[-1].rsplit(" in /", 1)[0])
            for q, p, e in conn.execute("SELECT queue, payload, exception FROM failed_jobs ORDER BY id") if q == queue]
    conn.close()
    return rows


def chain_side(app: PhpApp, queue: str) -> dict[str, Any]:
    runs = app.runs()
    steps = [(r["args"]["n"], r["attempts"]) for r in runs
             if r.get("class") == "App\\Jobs\\EchoJob" and r.get("args", {}).get("q") == queue]
    catches = [r["message"] for r in runs if r.get("class") == "chain-catch" and r.get("tag") == queue]
    return {"steps": steps, "catches": catches, "failed": failed_rows(app, queue)}


def chain(app: PhpApp, queue: str, modes: list[str]) -> None:
    steps = [{"args": {"q": queue, "n": i + 1}, "mode": m, "settings": {"tries": 1}} for i, m in enumerate(modes)]
    app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(steps), f"--catch={queue}")


@pytest.mark.parametrize("modes", [["ok", "ok", "ok"], ["ok", "fail", "ok"]], ids=["success", "step2-fails"])
def test_chain(app: PhpApp, redis_client: Any, workers: list[Worker], modes: list[str]) -> None:
    for queue in ("pq", "lq"):
        chain(app, queue, modes)
    drain(app, redis_client, workers)
    pq, lq = chain_side(app, "pq"), chain_side(app, "lq")
    assert pq == lq
    if "fail" in modes:
        assert pq["steps"] == [(1, 1), (2, 1)] and pq["catches"] == ["echo job failed on purpose"]
    else:
        assert pq == {"steps": [(1, 1), (2, 1), (3, 1)], "catches": [], "failed": []}
    assert {r["runner"] for r in app.runs() if r.get("args", {}).get("q") == "lq"} == {"python"}


def batch_side(app: PhpApp, queue: str, batch_id: str) -> dict[str, Any]:
    runs = app.runs()
    items = [(r["args"]["n"], r.get("cancelled")) for r in runs
             if r.get("class") == "App\\Jobs\\BatchEchoJob" and r.get("args", {}).get("q") == queue]
    callbacks = [r["what"] for r in runs if r.get("class") == "batch-callback" and r.get("tag") == queue]
    conn = sqlite3.connect(app.db_path)
    total, pending_jobs, failed, failed_ids, cancelled, finished = conn.execute(
        "SELECT total_jobs, pending_jobs, failed_jobs, failed_job_ids, cancelled_at, finished_at "
        "FROM job_batches WHERE id = ?", (batch_id,)).fetchone()
    conn.close()
    return {"items": items, "callbacks": callbacks, "total": total, "pending": pending_jobs, "failed": failed,
            "failed_ids": len(json.loads(failed_ids)), "cancelled": cancelled is not None,
            "finished": finished is not None, "failed_rows": failed_rows(app, queue)}


@pytest.mark.parametrize("modes", [("ok", "ok", "ok"), ("ok", "fail", "ok")], ids=["success", "item2-fails"])
def test_batch(app: PhpApp, redis_client: Any, workers: list[Worker], modes: tuple[str, ...]) -> None:
    ids = {}
    for queue in ("pq", "lq"):
        steps = [{"args": {"q": queue, "n": i + 1}, "mode": m, "settings": {"tries": 1}} for i, m in enumerate(modes)]
        ids[queue] = app.tool("batch-callbacks", f"--queue={queue}", "--steps=" + json.dumps(steps))["id"]
    drain(app, redis_client, workers)
    pq, lq = batch_side(app, "pq", ids["pq"]), batch_side(app, "lq", ids["lq"])
    assert pq == lq
    if "fail" in modes:
        # the failure was recorded and the batch cancelled before item 3 ran: item 3 saw cancelled()
        assert pq["items"] == [(1, False), (2, False), (3, True)]
        assert pq["cancelled"] and pq["failed"] == pq["failed_ids"] == 1
        assert pq["callbacks"] == ["catch", "finally"]
    else:
        assert pq["callbacks"] == ["then", "finally"] and pq["finished"] and pq["pending"] == 0


def unique_locks(redis_client: Any, tag: str) -> int:
    return len(list(redis_client.scan_iter(match=f"*laravel_unique_job:*{tag}*")))


@pytest.mark.parametrize("kind", ["unique-method", "until-processing-method", "until-processing", "unique-property"])
@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_unique(app: PhpApp, redis_client: Any, workers: list[Worker], kind: str, mode: str) -> None:
    for queue in ("pq", "lq"):
        for _ in range(2):  # the second is dropped: the lock is held
            app.tool("dispatch", kind, f"--queue={queue}", "--pending",
                     "--args=" + json.dumps({"id": f"{queue}-1", "mode": mode}))
        assert redis_client.llen(app.prefix + "queues:" + queue) == 1
    drain(app, redis_client, workers)
    result = {}
    for queue in ("pq", "lq"):
        runs = [(r["lock"], r["mode"]) for r in app.runs() if r.get("queue") == queue and "lock" in r]
        result[queue] = {"runs": runs, "locks_left": unique_locks(redis_client, f"{queue}-1"),
                         "failed": len(failed_rows(app, queue))}
    assert result["pq"] == result["lq"]
    free = kind.startswith("until-processing")
    assert result["pq"] == {"runs": [("free" if free else "held", mode)], "locks_left": 0,
                            "failed": int(mode == "fail")}


def test_mixed_fleet_on_a_shared_queue(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    """20 three-step chains on one queue worked at once by laraq and artisan; the same 20 chains by artisan
    alone. Every chain runs its steps in order, once each, and nothing is left."""
    for queue in ("pq", "sq"):
        for c in range(20):
            steps = [{"args": {"q": queue, "n": i + 1, "c": c}, "mode": "ok"} for i in range(3)]
            app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(steps))
    artisan_drain(app, "pq")
    php = app.popen_artisan("queue:work", "redis", "--queue=sq", "--sleep=0", "--stop-when-empty")
    worker = laraq_worker(app, workers, "sq")
    thread = threading.Thread(target=worker.daemon)
    thread.start()
    try:
        php.communicate(timeout=300)
    finally:
        thread.join(300)
        assert worker.callqueued.steps.php is not None
        worker.callqueued.steps.php.close()
    artisan_drain(app, "sq")  # what was left when both stopped (a step queued just after artisan stopped)
    per_chain: dict[str, dict[int, list[int]]] = {"pq": {}, "sq": {}}
    runners = set()
    for r in app.runs():
        args = r.get("args") or {}
        if r.get("class") == "App\\Jobs\\EchoJob" and args.get("q") in per_chain:
            per_chain[args["q"]].setdefault(args["c"], []).append(args["n"])
            if args["q"] == "sq":
                runners.add(r["runner"])
    assert per_chain["pq"] == per_chain["sq"] == {c: [1, 2, 3] for c in range(20)}
    assert runners == {"python", "php"} or runners == {"python"}
    for queue in ("sq", "default"):
        assert pending(app, redis_client, queue) == 0


def test_php_failed_method_runs_once_before_the_next_job(app: PhpApp, redis_client: Any,
                                                         workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        app.tool("dispatch", "failed-hook", f"--queue={queue}", "--args=" + json.dumps({"reason": f"no {queue}"}))
    drain(app, redis_client, workers)
    hooks = sorted(r["reason"] for r in app.runs() if r.get("class") == "failed-hook")
    assert hooks == ["no lq", "no pq"]


#: What ``PrintingFailedJob::failed()`` prints to stdout, its output buffer and stderr: lines that look like
#: replies of laraq's PHP process (no id, the ids of the next requests, the boot reply, a forged error).
FORGED = ('boom\n{"ok":true}\n{"id":2,"ok":true}\n{"id":3,"ok":true}\n{"id":4,"ok":true}\n'
          '{"ok":false,"error":"forged"}\n{"id":0,"ready":true,"laravel":"0"}\n')


def test_output_the_app_prints_in_a_step_is_never_a_reply(app: PhpApp, redis_client: Any,
                                                           workers: list[Worker]) -> None:
    """A ``failed()`` prints reply-like lines; then a chain whose next step cannot be queued (its connection
    is not configured), then a chain that works. laraq reports the chain's real error as artisan does (the
    step fails, its catch runs), and the replies of every later request still line up."""
    for queue in ("pq", "lq"):
        app.tool("dispatch", "printing-failed", f"--queue={queue}", "--args=" + json.dumps({"reason": FORGED}))
        broken = [{"args": {"q": queue, "n": 1}, "settings": {"tries": 1}},
                  {"args": {"q": queue, "n": 2}, "settings": {"tries": 1, "connection": "nope"}}]
        app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(broken), f"--catch={queue}")
        working = [{"args": {"q": queue, "n": n}, "settings": {"tries": 1}} for n in (11, 12, 13)]
        app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(working))
    drain(app, redis_client, workers)
    pq, lq = chain_side(app, "pq"), chain_side(app, "lq")
    assert pq["steps"] == lq["steps"] == [(1, 1), (11, 1), (12, 1), (13, 1)]
    assert [name for name, _ in pq["failed"]] == [name for name, _ in lq["failed"]] == \
        ["App\\Jobs\\PrintingFailedJob", "App\\Jobs\\EchoJob"]
    assert len(pq["catches"]) == len(lq["catches"]) == 1
    for side in (pq, lq):
        assert "[nope]" in side["failed"][1][1] and "[nope]" in side["catches"][0]
    printed = [r["message"] for r in app.runs() if r.get("class") == "printing-failed"]
    assert printed == [FORGED, FORGED]


# -- the PHP process itself ------------------------------------------------------------------------------

def test_php_process_reads_no_reply_from_what_the_app_prints(app: PhpApp, redis_client: Any,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """What the app writes to stdout, its output buffer and stderr during a step goes to the worker's
    stderr and is never taken as a reply: the step's own reply, then the next request's error, line up."""
    payload = app.tool("dispatch", "printing-failed", "--queue=forged", "--args=" + json.dumps({"reason": FORGED}))
    body = redis_client.lpop(app.prefix + "queues:forged")
    assert body is not None, payload
    uuid = json.loads(body)["uuid"]
    process = PhpProcess(app.path, env=app.env)
    try:
        process.failed(body, "redis", "forged", uuid, "RuntimeException", "boom")
        with pytest.raises(PhpStepError, match="not a request"):
            process.request({"no": "op"})
        process.ping()
        assert process.starts == 1
    finally:
        process.close()
    assert [r["message"] for r in app.runs() if r.get("class") == "printing-failed"] == ["boom"]
    assert capfd.readouterr().err.count(FORGED) == 3  # stdout, the output buffer, stderr


def test_php_process_reply_to_another_request_is_a_protocol_error(app: PhpApp) -> None:
    """A reply whose id is not the awaited one stops the process and fails the request; the next request
    starts a new process."""
    process = PhpProcess(app.path, env=app.env)
    try:
        process.ping()
        first = process.pid
        process._write(b'{"id":77,"op":"ping"}\n')  # a request nobody awaits: its reply comes first
        with pytest.raises(PhpStepError, match=r"answered ping \(request 2\) with a reply to request 77: "
                                               r"protocol error, stopped"):
            process.ping()
        assert process.pid is None
        process.ping()
        assert process.pid != first and process.starts == 2
    finally:
        process.close()


def test_php_process_restarts_after_it_died(app: PhpApp) -> None:
    process = PhpProcess(app.path, env=app.env)
    try:
        process.ping()
        first = process.pid
        assert first is not None and process.laravel and process.laravel.startswith(app.version)
        process._proc.kill()  # type: ignore[union-attr]
        process._proc.wait()  # type: ignore[union-attr]
        process.ping()  # nothing of it had run: started again and sent
        assert process.pid != first and process.starts == 2
        with pytest.raises(PhpStepError, match="not a request|op"):
            process.request({"no": "op"})
        process.ping()  # still usable after an error reply
    finally:
        process.close()


def test_app_on_host(app: PhpApp, tmp_path: Any) -> None:
    assert app_on_host(str(app.path), None) == app.path.resolve()
    assert app_on_host(None, str(app.path / ".env")) == app.path.resolve()
    assert app_on_host(None, str(tmp_path / ".env")) is None
    with pytest.raises(ValueError, match="not a Laravel app"):
        app_on_host(str(tmp_path), None)


# -- hand-off: never where laraq takes it, a stable name -----------------------------------------------

def test_a_hand_off_laraq_would_take_itself_is_refused() -> None:
    refused = continuation_conflict(["lq", "php"], "php", "default", in_process=False, signing_key=True)
    assert refused is not None and refused[0] == "refuse" and "--php-queue" in refused[1] and "--php-app" in refused[1]
    shared = continuation_conflict(["default"], None, "default", in_process=False, signing_key=True)
    assert shared is not None and shared[0] == "warn"  # the shared-queue topology: PHP workers there take them
    assert continuation_conflict(["default"], "php", "default", in_process=False, signing_key=True) is None
    # taking unhandled jobs (requeue/release/fail), the worker would take its own continuations: refused
    for policy in ("requeue", "release", "fail"):
        taken = continuation_conflict(["default"], None, "default", in_process=False, signing_key=True,
                                      unhandled=policy)
        assert taken is not None and taken[0] == "refuse" and f"--unhandled {policy}" in taken[1]
    assert continuation_conflict(["lq", "php"], "php", "default", in_process=True, signing_key=True) is None
    assert continuation_conflict(["lq", "php"], "php", "default", in_process=False, signing_key=False) is None


def test_continuation_name_is_stable_per_kind() -> None:
    version = LaravelVersion.parse("13.26.1")
    names = {Payload.parse(continuation_payload(version, b"k" * 32, code="function () {}", use={}, about="chain"))
             .display_name for _ in range(3)}
    assert names == {"laraq continuation: chain"}
    assert is_continuation("laraq continuation: chain")
    assert is_continuation("Closure (laraq continuation: batch of X 2c5496be)")  # queued by an older laraq


def test_stock_flags_env_file_inside_the_app(app: PhpApp, redis_client: Any, tmp_path: Any) -> None:
    """The issue's command line: ``laraq work --app ... --env-file APP/.env --queue=default`` and nothing else.
    The app is found from the ``.env``'s directory; the chain and the batch finish in laraq's pass alone."""
    import os
    import subprocess
    import sys

    root = tmp_path / "app"
    root.mkdir()
    for entry in os.listdir(app.path):  # the fixture app, with a .env of its own
        if entry != ".env":
            (root / entry).symlink_to(app.path / entry)
    (root / ".env").write_text("".join(f"{k}={v}\n" for k, v in app.laravel_env.items()))
    chain(app, "default", ["ok", "ok", "ok"])
    steps = [{"args": {"q": "default", "n": i + 1}, "mode": m, "settings": {"tries": 1}}
             for i, m in enumerate(["ok", "fail", "ok"])]
    batch_id = app.tool("batch-callbacks", "--queue=default", "--steps=" + json.dumps(steps))["id"]
    env = {**app.env, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "laraq", "work", "--app", "test_jobmodel_inprocess:handlers",
                           "--env-file", str(root / ".env"), "--queue=default", "--no-supervise",
                           "--stop-when-empty", "--sleep=0"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "in the app's PHP" in proc.stderr
    key = app.prefix + "queues:default"
    left = [*redis_client.lrange(key, 0, -1), *redis_client.zrange(key + ":delayed", 0, -1),
            *redis_client.zrange(key + ":reserved", 0, -1)]
    assert left == [], (left, proc.stderr[-3000:])
    assert chain_side(app, "default")["steps"] == [(1, 1), (2, 1), (3, 1)]
    state = batch_side(app, "default", batch_id)
    assert state["items"] == [(1, False), (2, False), (3, True)] and state["callbacks"] == ["catch", "finally"]
    assert {r["runner"] for r in app.runs() if r.get("args", {}).get("q") == "default"} == {"python"}


def test_failure_of_a_class_the_app_does_not_have(app: PhpApp) -> None:
    """In-process, ``CallQueuedHandler::failed`` is asked for every object job; a class only Python knows
    has no PHP failure steps (Laravel 8 would throw on the incomplete object): answered, not an error."""
    body = json.dumps({"uuid": "u-1", "displayName": "App\\Jobs\\Nothing", "job": "Illuminate\\Queue\\CallQueuedHandler@call",
                       "maxTries": None, "attempts": 0,
                       "data": {"commandName": "App\\Jobs\\Nothing", "command": 'O:16:"App\\Jobs\\Nothing":1:{s:1:"a";i:1;}'}})
    process = PhpProcess(app.path, env=app.env)
    try:
        process.failed(body.encode(), "redis", "default", "u-1", "RuntimeException", "boom")
    finally:
        process.close()


#: A handler that says nothing of uniqueness (``unique=None``), as most are written: the app on the host says
#: the class is ``ShouldBeUniqueUntilProcessing``, keyed by a ``uniqueId()`` method.
undeclared = App("jobmodel-undeclared")
_redispatch: list[PhpApp] = []


@undeclared.handler("App\\Jobs\\UntilProcessingMethodJob")
def _until_processing_method(command: Any, job: Any) -> None:
    support._unique_run(command, job, "m-" + command.key)
    if command.mode == "redispatch":  # a dispatch with the same key while this one runs
        _redispatch[0].tool("dispatch", "until-processing-method", "--queue=lq", "--pending",
                            "--args=" + json.dumps({"id": command.key, "mode": "ok"}))


def test_until_processing_by_method_frees_the_lock_before_the_handler(app: PhpApp, redis_client: Any,
                                                                      workers: list[Worker]) -> None:
    """artisan frees a ``ShouldBeUniqueUntilProcessing`` lock keyed by ``uniqueId()`` before ``handle()``: a
    dispatch with that key while the job runs is queued and runs; laraq with the app on the host does the same."""
    _redispatch[:] = [app]
    for queue in ("pq", "lq"):
        app.tool("dispatch", "until-processing-method", f"--queue={queue}", "--pending",
                 "--args=" + json.dumps({"id": f"{queue}-1", "mode": "redispatch" if queue == "lq" else "ok"}))
    artisan_drain(app, "pq")
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="lq", php_app=str(app.path))
    worker = build_worker(params, env=app.env, app=undeclared)
    workers.append(worker)
    try:
        assert worker.daemon() == 0
    finally:
        assert worker.callqueued.steps.php is not None
        worker.callqueued.steps.php.close()
    runs = {q: [(r["lock"], r["mode"]) for r in app.runs() if r.get("queue") == q and "lock" in r] for q in ("pq", "lq")}
    assert runs["pq"] == [("free", "ok")]
    # the first ran with its lock free, so the dispatch it made was queued, and ran too
    assert runs["lq"] == [("free", "redispatch"), ("free", "ok")]
    assert pending(app, redis_client, "lq") == 0 and unique_locks(redis_client, "lq-1") == 0
