"""The Laravel 13 behaviours laraq once listed as gaps, proven against the real 13.26 app (and 12.67
where the behaviour exists there too): enum queue names, ``Queue::forward`` (13.26) and the 13.4+
listing helpers (``pendingJobs``/``delayedJobs``/``reservedJobs`` and their ``all*`` forms).
"""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from conftest import require_laravel
from phpapp import PhpApp
from test_worker_support import laraq_env, run_laraq

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.listing import (
    all_delayed_jobs,
    all_pending_jobs,
    all_reserved_jobs,
    delayed_jobs,
    pending_jobs,
    reserved_jobs,
)
from laraq.protocol.queue import RedisQueue
from laraq.protocol.routing import QueueForwards, enum_value

pytestmark = pytest.mark.php


class QueueName(enum.StrEnum):
    """The Python twin of the fixture's ``App\\Enums\\QueueName`` (a backed enum)."""

    DEFAULT = "default"
    EMAILS = "emails"


@pytest.fixture(params=["12", "13"])
def modern(request: pytest.FixtureRequest, redis_server: Any, redis_client: Any) -> PhpApp:
    require_laravel(request.param)
    return PhpApp(redis_server.port, version=request.param)


@pytest.fixture
def app13(redis_server: Any, redis_client: Any) -> PhpApp:
    require_laravel("13")
    return PhpApp(redis_server.port, version="13", extra_env={"LARAQ_FIXTURE_FORWARD": "old=new"})


def test_enum_queue_names_land_where_php_puts_them(modern: PhpApp, redis_client: Any) -> None:
    modern.tool("dispatch", "echo", "--queue-enum=Emails", "--args=" + json.dumps({"args": ["php"]}))
    (php_body,) = redis_client.lrange(modern.prefix + "queues:emails", 0, -1)
    queue = RedisQueue(redis_client, prefix=modern.prefix, version=modern.release)
    d = Dispatcher(queue)
    ordered = {"args": ["php"], "mode": "ok", "seconds": 0, "tries": None, "backoff": None, "timeout": None,
               "maxExceptions": None, "failOnTimeout": False, "\0*\0note": "protected note",
               "\0App\\Jobs\\EchoJob\0hidden": "private value"}
    ours = d.dispatch_job("App\\Jobs\\EchoJob", ordered, queue=QueueName.EMAILS, connection="redis")
    _, py_body = redis_client.lrange(modern.prefix + "queues:emails", 0, -1)
    # the command's queue property is the enum's value, as onQueue(enum) stores it
    assert json.loads(py_body)["data"]["command"] == json.loads(php_body)["data"]["command"]
    assert ours.queue == "emails" and queue.size(QueueName.EMAILS) == 2 == modern.tool("size", "--queue=emails")["size"]
    assert enum_value(enum.Enum("Pure", "A B").A) == "A"  # a pure case is its name, as in PHP
    proc = run_laraq(modern, "--queue=emails", "--stop-when-empty")
    assert proc.returncode == 0, proc.stderr
    assert [(r["runner"], r["queue"]) for r in modern.runs()] == [("python", "emails")] * 2


def test_attribute_settings_and_enum_queue_attribute_on_13(redis_server: Any, redis_client: Any) -> None:
    require_laravel("13")
    app = PhpApp(redis_server.port, version="13")
    app.tool("dispatch", "attribute", '--args={"mode": "fail"}')  # #[Queue(QueueName::Emails)], #[Tries(4)] ...
    (body,) = redis_client.lrange(app.prefix + "queues:emails", 0, -1)
    payload = json.loads(body)
    assert (payload["maxTries"], payload["backoff"], payload["timeout"], payload["maxExceptions"],
            payload["failOnTimeout"]) == (4, "1,3", 20, 3, True)
    # laraq reads the attribute settings from the payload like the 13 worker: a failure releases
    # with the first backoff (1 s), attempts 1
    proc = run_laraq(app, "--once", "--queue=emails", app_spec="test_live_13:attr_app")
    assert proc.returncode == 0, proc.stderr
    ((member, score),) = redis_client.zrange(app.prefix + "queues:emails:delayed", 0, -1, withscores=True)
    assert json.loads(member)["attempts"] == 1 and json.loads(member)["uuid"] == payload["uuid"]
    redis_client.zadd(app.prefix + "queues:emails:delayed", {member: 0})
    work = app.artisan("queue:work", "redis", "--queue=emails", "--once", check=True)
    assert work.returncode == 0
    ((member, _),) = redis_client.zrange(app.prefix + "queues:emails:delayed", 0, -1, withscores=True)
    assert json.loads(member)["attempts"] == 2  # PHP released it too (attempt 2 of 4)


def test_forward_routes_push_and_pop_like_php(app13: PhpApp, redis_client: Any) -> None:
    app13.tool("dispatch", "echo", "--queue=old")
    assert redis_client.llen(app13.prefix + "queues:new") == 1 and not redis_client.exists(app13.prefix + "queues:old")
    assert app13.tool("size", "--queue=old")["size"] == 1

    forwards = QueueForwards.parse("old=new")
    queue = RedisQueue(redis_client, prefix=app13.prefix, version=app13.release, forwards=forwards)
    Dispatcher(queue).dispatch_job("App\\Jobs\\EchoJob", {"args": ["py"]}, queue="old")
    assert redis_client.llen(app13.prefix + "queues:new") == 2 and queue.size("old") == 2
    # not on 12.67, which has no forwards
    q12 = RedisQueue(redis_client, prefix=app13.prefix, version="12.67.0", forwards=forwards)
    assert q12.keys("old").list == app13.prefix + "queues:old"

    # laraq work --queue=old pops from "new" (the job's queue is still reported as "old"), like artisan
    env = laraq_env(app13, LARAQ_QUEUE_FORWARD="old=new")
    proc = run_laraq(app13, "--queue=old", "--once", env=env)
    assert proc.returncode == 0, proc.stderr
    app13.artisan("queue:work", "redis", "--queue=old", "--once", check=True)
    assert sorted((r["runner"], r["queue"]) for r in app13.runs()) == [("php", "old"), ("python", "old")]
    assert app13.tool("size", "--queue=old")["size"] == 0 == queue.size("old")


@pytest.mark.parametrize("state", ["pending", "delayed", "reserved"])
def test_listing_helpers_match_php(redis_server: Any, redis_client: Any, state: str) -> None:
    require_laravel("13")
    app = PhpApp(redis_server.port, version="13")
    for q in ("default", "default", "mail"):
        app.tool("dispatch", "echo", f"--queue={q}")
        app.tool("dispatch", "plain", f"--queue={q}", "--delay=600")
    app.tool("dispatch", "string", "--queue=mail")
    app.pop("default")
    app.pop("mail")
    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)

    def shape(jobs: list[Any]) -> list[dict[str, Any]]:
        return [{"uuid": j.uuid, "queue": j.queue, "name": j.name, "attempts": j.attempts,
                 "createdAt": None if j.created_at is None else int(j.created_at.timestamp())} for j in jobs]

    one = {"pending": pending_jobs, "delayed": delayed_jobs, "reserved": reserved_jobs}[state]
    every = {"pending": all_pending_jobs, "delayed": all_delayed_jobs, "reserved": all_reserved_jobs}[state]
    for name in ("default", "mail", "none"):
        php = app.tool("inspect", state, f"--queue={name}")
        assert shape(one(queue, name)) == php, (state, name)
    php_all = app.tool("inspect", state, "--all")
    ours = shape(every(queue))
    assert sorted(ours, key=json.dumps) == sorted(php_all, key=json.dumps) and len(ours) >= 2
    # a member that is not JSON: PHP's InspectedJob throws a TypeError; laraq lists it without a uuid
    redis_client.rpush(app.prefix + "queues:mail", b"not json")
    if state == "pending":
        assert shape(one(queue, "mail"))[-1] == {"uuid": None, "queue": "mail", "name": None, "attempts": 0,
                                                 "createdAt": None}


def test_debounced_jobs_go_back_to_php_which_runs_only_the_newest(redis_server: Any, redis_client: Any) -> None:
    require_laravel("13")
    app = PhpApp(redis_server.port, version="13")
    app.tool("dispatch", "debounced", '--args={"key": "k1", "label": "first"}')
    app.tool("dispatch", "debounced", '--args={"key": "k1", "label": "second"}')
    delayed = app.prefix + "queues:default:delayed"

    def make_due() -> list[bytes]:
        members = redis_client.zrange(delayed, 0, -1)
        redis_client.zadd(delayed, dict.fromkeys(members, 0))
        return members

    bodies = make_due()
    assert len(bodies) == 2
    # laraq has a handler for the class, but cannot tell which copy is superseded: both go back untouched
    proc = run_laraq(app, "--stop-when-empty", app_spec="test_live_13:attr_app")
    assert proc.returncode == 0, proc.stderr
    assert "is debounced" in proc.stderr and app.runs() == []
    assert sorted(make_due()) == sorted(bodies)  # byte for byte, attempts not burned
    # PHP runs the newest dispatch only and deletes the superseded one
    app.artisan("queue:work", "redis", "--stop-when-empty", "--sleep=0", check=True)
    assert [(r["class"], r["label"]) for r in app.runs()] == [("App\\Jobs\\DebouncedJob", "second")]
    assert app.tool("size")["size"] == 0


# -- a handler for AttributeJob (fails, so the attribute backoff applies) ---------------------------------

from laraq.app import App  # noqa: E402

attr_app = App("attr")


@attr_app.handler("App\\Jobs\\AttributeJob")
def attribute_job(command: Any, job: Any) -> None:
    raise RuntimeError(f"attribute job failed in python: {command.mode}")


@attr_app.handler("App\\Jobs\\DebouncedJob")
def debounced_job(command: Any, job: Any) -> None:
    raise AssertionError("a debounced job must never run in Python")
