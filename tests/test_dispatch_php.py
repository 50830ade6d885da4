"""Jobs dispatched by laraq, run by real PHP (``php artisan queue:work`` of the Laravel 8, 12 and 13 apps)."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from phpapp import TEST_APP_KEY, PhpApp

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php

ECHO = "App\\Jobs\\EchoJob"


@pytest.fixture
def app(laravel, redis_client, redis_server, tmp_path):
    return PhpApp(redis_server.port, version=laravel, workdir=tmp_path)


@pytest.fixture
def dispatcher(app, redis_client):
    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)
    return Dispatcher(queue, encrypter=Encrypter.from_app_key(TEST_APP_KEY))


def work(app: PhpApp, *extra: str) -> str:
    proc = app.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", *extra)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def test_php_runs_object_and_string_jobs_with_the_properties_python_sent(app, dispatcher):
    args = {"n": 1, "text": "Héllo ☃ 😀 \u2028 / \\ \"q\"", "list": [1, 2.5, None, True], "empty": []}
    echo = dispatcher.dispatch_job(ECHO, {"args": args, "mode": "ok"},
                                   protected={"note": "from python"}, private={"hidden": "s3/cr\"et"})
    py = dispatcher.dispatch_job("App\\Jobs\\PythonJob", {"document": "r.pdf", "options": {"dpi": 300}},
                                 protected={"owner": "py"}, private={"token": "tok"}, queue="default")
    s = dispatcher.dispatch_string("App\\Handlers\\Foo@bar", {"order": 42, "name": "Zoë"})
    work(app)
    runs = {r["uuid"]: r for r in app.runs()}
    assert runs[echo.uuid] == {"runner": "php", "class": ECHO, "uuid": echo.uuid, "attempts": 1, "queue": "default",
                               "args": args, "mode": "ok", "note": "from python", "hidden": "s3/cr\"et"}
    assert runs[py.uuid]["document"] == "r.pdf" and runs[py.uuid]["options"] == {"dpi": 300}
    assert (runs[py.uuid]["owner"], runs[py.uuid]["token"]) == ("py", "tok")
    assert runs[s.uuid]["data"] == {"order": 42, "name": "Zoë"} and runs[s.uuid]["class"] == "App\\Handlers\\Foo@bar"


def test_unserialized_command_has_every_value(app, dispatcher):
    prepared = dispatcher.prepare_job(ECHO, {"args": [1], "mode": "x", "seconds": 2.5}, protected={"note": "n"},
                                      private={"hidden": "h"}, queue="emails", connection="redis", delay=7)
    seen = app.tool("unserialize-command", stdin=prepared.payload)
    assert seen["class"] == ECHO
    props = seen["properties"]
    assert (props["args"], props["mode"], props["seconds"], props["note"], props["hidden"]) == ([1], "x", 2.5, "n", "h")
    assert (props["queue"], props["connection"], props["delay"]) == ("emails", "redis", 7)
    assert props["middleware"] == [] and props["chained"] == [] and props["job"] is None


def test_command_bytes_equal_php_serialize(app, dispatcher, redis_client):
    # PHP's own dispatch of EchoJob (all declared properties, declaration order) vs laraq's.
    app.tool("dispatch", "echo", "--queue=cmp", "--args=" + json.dumps({"args": {"k": "vé"}, "mode": "ok"}))
    php_payload = json.loads(redis_client.lpop(app.prefix + "queues:cmp"))
    ordered = {"args": {"k": "vé"}, "mode": "ok", "seconds": 0, "tries": None, "backoff": None, "timeout": None,
               "maxExceptions": None, "failOnTimeout": False, "\0*\0note": "protected note",
               "\0App\\Jobs\\EchoJob\0hidden": "private value"}
    ours = dispatcher.prepare_job(ECHO, ordered, queue="cmp", connection="redis")
    py_payload = json.loads(ours.payload)
    assert py_payload["data"]["command"] == php_payload["data"]["command"]
    for key in ("uuid", "id", "createdAt"):  # random, and the clock (12+: createdAt) may tick between the two
        if key in php_payload:
            py_payload[key] = php_payload[key]
    assert py_payload == php_payload and list(py_payload) == list(php_payload)


def test_delayed_job_lands_in_delayed_with_the_right_score_then_runs(app, dispatcher, redis_client):
    before = int(time.time())
    res = dispatcher.dispatch_job(ECHO, {"args": ["late"]}, delay=1)
    after = int(time.time())
    [(member, score)] = redis_client.zrange(app.prefix + "queues:default:delayed", 0, -1, withscores=True)
    assert member == res.payload and before + 1 <= score <= after + 1 and score == res.available_at
    assert redis_client.llen(app.prefix + "queues:default") == 0
    time.sleep(max(0.0, res.available_at - time.time()) + 0.05)
    work(app)
    assert [r["args"] for r in app.runs()] == [["late"]]


def test_tries_and_backoff_from_python_are_honoured(app, dispatcher, redis_client):
    failing = dispatcher.dispatch_job(ECHO, {"args": ["f"], "mode": "fail"}, tries=2)
    work(app)
    assert [r["attempts"] for r in app.runs()] == [1, 2]
    with sqlite3.connect(app.db_path) as db:
        failed = db.execute("select uuid, queue, payload from failed_jobs").fetchall()
    assert [(u, q) for u, q, _ in failed] == [(failing.uuid, "default")]
    assert json.loads(failed[0][2])["attempts"] == 1  # the released (cjson) body of the second attempt

    backoff = dispatcher.dispatch_job(ECHO, {"args": ["b"], "mode": "fail"}, tries=3, backoff=[30, 60])
    start = int(time.time())
    work(app)
    [(member, score)] = redis_client.zrange(app.prefix + "queues:default:delayed", 0, -1, withscores=True)
    assert json.loads(member)["uuid"] == backoff.uuid and json.loads(member)["attempts"] == 1
    assert start + 30 <= score <= int(time.time()) + 30


def test_encrypted_dispatch_is_decrypted_by_php(app, dispatcher, redis_client):
    res = dispatcher.dispatch_job("App\\Jobs\\EncryptedJob", {"secret": "top ✓ secret"}, encrypt=True)
    assert json.loads(res.payload)["data"]["command"].startswith("eyJpdiI6")
    work(app)
    [run] = app.runs()
    assert run["uuid"] == res.uuid and run["secret"] == "top ✓ secret"


def test_bulk_dispatch_runs_on_php(app, dispatcher):
    jobs = [dispatcher.prepare_job(ECHO, {"args": [i]}, queue="bulk") for i in range(5)]
    jobs.append(dispatcher.prepare_string("App\\Handlers\\Foo@bar", {"n": 9}, queue="bulk"))
    dispatcher.bulk(jobs)
    work(app, "--queue=bulk")
    runs = app.runs()
    assert [r["args"] for r in runs[:5]] == [[0], [1], [2], [3], [4]] and runs[5]["data"] == {"n": 9}
