"""``Dispatcher.from_app`` on a Horizon app writes what PHP's ``dispatch()`` through Horizon writes, byte for byte.

Live Laravel 12 and 13 with Horizon 5.29.1 and Laravel 13 with Horizon 5.48.1 (``13-h548``), each as the stock
fixture app (settings from the environment) and as the ``custom`` app (literal ``config/*.php``: a renamed
queue connection, Redis and Horizon prefixes of its own), booted and after ``config:cache``. PHP dispatches
``GenerateReport`` with Horizon registered; laraq's dispatcher is made by ``from_app`` alone, which finds
Horizon, its prefix and its release in the app. The raw payloads (pushed and delayed) are equal once the
``uuid``/``id`` and the clock (``createdAt``, ``pushedAt``) are set aside, and so are Horizon's pending
records. ``horizon=False`` writes Laravel's own payload, byte-equal to PHP's dispatch without Horizon. The
README's one-liner, run as written on such an app, writes Horizon's payload and record too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from conftest import require
from horizon_support import HORIZON_LINES, horizon_state
from phpapp import PhpApp, live_missing
from test_worker_support import ROOT

from laraq.bus.dispatch import Dispatcher

pytestmark = pytest.mark.php

#: the Horizon lines proven (``LARAQ_HORIZON_LINES`` narrows them)
LINES = [line for line in ("12", "13", "13-h548") if line in HORIZON_LINES]
#: (line, app): the stock fixture app, the custom app booted, the custom app after config:cache
CASES = [(line, kind) for line in LINES for kind in ("stock", "custom", "cached")]
ARGS = {"document": "q3.pdf", "options": {"pages": 12}}
#: GenerateReport's properties in PHP's declaration order (its $tries, $backoff, $timeout come first)
PROPERTIES = {"tries": 3, "backoff": [10, 60], "timeout": 120, **ARGS}


class Target:
    """One app: where its queue and Horizon's records are, and how laraq is pointed at it."""

    def __init__(self, line: str, kind: str, port: int, *, horizon: bool = True) -> None:
        require(live_missing(line) is None, live_missing(line) or "")
        self.custom = kind != "stock"
        self.app = PhpApp(port, version=line, horizon=horizon, variant="custom" if self.custom else None)
        if kind == "cached":
            self.app.artisan("config:cache", check=True)
        self.connection = "jobs" if self.custom else "redis"
        self.prefix = "acme_q:" if self.custom else self.app.prefix
        self.horizon_prefix = "acme_horizon:" if self.custom else "laravel_horizon:"
        self.client = redis.Redis(port=port)

    def from_app(self, **options: Any) -> Dispatcher:
        if self.custom:  # a real app: laraq is given its .env and finds the rest
            return Dispatcher.from_app(env_file=str(self.app.path / ".env"), **options)
        return Dispatcher.from_app(env=self.app.env, app_path=str(self.app.path), **options)

    def php_dispatch(self, *extra: str) -> str:
        [job_id] = self.app.tool("dispatch", "report", f"--connection={self.connection}", "--queue=python",
                                 "--args=" + json.dumps(ARGS), *extra)["ids"]
        return str(job_id)

    def take(self, delayed: bool = False) -> bytes:
        """The one payload on ``python`` (or its delayed set), removed."""
        if delayed:
            [raw] = self.client.zrange(self.prefix + "queues:python:delayed", 0, -1)
            self.client.delete(self.prefix + "queues:python:delayed")
            return bytes(raw)
        [raw] = self.client.lrange(self.prefix + "queues:python", 0, -1)
        self.client.delete(self.prefix + "queues:python")
        return bytes(raw)


@pytest.fixture(params=CASES, ids=[f"{line}-{kind}" for line, kind in CASES])
def target(request: pytest.FixtureRequest, php: str, redis_server: Any) -> Target:
    redis_server.client(0).flushall()
    line, kind = request.param
    return Target(line, kind, redis_server.port)


def normalised(raw: bytes) -> bytes:
    """The payload with its ``uuid``/``id`` and its clock readings replaced by placeholders (nothing else
    touched). Horizon's ``id`` is the ``uuid``; Laravel's own is a random string of its own."""
    decoded = json.loads(raw)
    out = raw
    for key in ("uuid", "id"):
        out = out.replace(f'"{key}":"{decoded[key]}"'.encode(), f'"{key}":"<{key}>"'.encode())
    out = re.sub(rb'"createdAt":\d+', b'"createdAt":"<time>"', out)
    return re.sub(rb'"pushedAt":"[0-9.]+"', b'"pushedAt":"<time>"', out)


def _uuid(raw: bytes) -> str:
    return str(json.loads(raw)["uuid"])


def test_from_app_writes_horizons_payload_and_record_byte_for_byte(target: Target) -> None:
    d = target.from_app()
    assert d.horizon is not None, "from_app did not find the app's Horizon"
    for delayed in (False, True):
        target.client.flushall()
        php_id = target.php_dispatch(*(["--delay=30"] if delayed else []))
        php = target.take(delayed)
        php_state = horizon_state(target.client, {php_id: "<job>"}, target.horizon_prefix)
        target.client.flushall()
        d.dispatch_job("App\\Jobs\\GenerateReport", PROPERTIES, protected={"owner": "ops"}, queue="python",
                       connection=target.connection, tries=3, backoff=[10, 60], timeout=120,
                       delay=30 if delayed else None)
        ours = target.take(delayed)
        assert b'"pushedAt":"' in php and b'"type":"job"' in php  # Horizon's own fields, on both sides
        assert normalised(ours) == normalised(php)
        py_state = horizon_state(target.client, {_uuid(ours): "<job>"}, target.horizon_prefix)
        for state, raw, job_id in ((php_state, php, php_id), (py_state, ours, _uuid(ours))):
            kind, fields, ttl = state["<job>"]
            assert fields["payload"] == raw.decode().replace(job_id, "<job>")  # the record keeps the payload
            fields["payload"] = normalised(raw)
        assert py_state == php_state and "pending_jobs" in php_state


def test_horizon_false_writes_laravels_own_payload(php: str, redis_server: Any) -> None:
    # the same app with Horizon not registered: PHP's plain dispatch, and laraq's with horizon=False
    redis_server.client(0).flushall()
    target = Target("13", "custom", redis_server.port, horizon=False)
    target.php_dispatch()
    php = target.take()
    target.from_app(horizon=False).dispatch_job(
        "App\\Jobs\\GenerateReport", PROPERTIES, protected={"owner": "ops"}, queue="python",
        connection=target.connection, tries=3, backoff=[10, 60], timeout=120)
    ours = target.take()
    assert b'"pushedAt"' not in php
    assert normalised(ours) == normalised(php)
    assert target.client.keys(target.horizon_prefix + "*") == []


@pytest.mark.parametrize("line", LINES)
def test_readme_one_liner_on_a_horizon_app(line: str, php: str, redis_server: Any, tmp_path: Any) -> None:
    from click.testing import CliRunner

    from laraq.cli import main

    redis_server.client(0).flushall()
    target = Target(line, "custom", redis_server.port)
    schema = tmp_path / "schema.json"
    exported = CliRunner().invoke(main, ["schema", "--from", str(target.app.path), "--class",
                                         "App\\Jobs\\GenerateReport", "-o", str(schema)], env=target.app.env)
    assert exported.exit_code == 0, exported.output
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(from laraq import Dispatcher\n.*?Dispatcher\.from_app.*?)```", readme, re.S)
    assert block, "the README's Dispatcher.from_app example is gone"
    exec(block.group(1).replace('"/var/www/app/.env"', repr(str(target.app.path / ".env")))  # noqa: S102
         .replace('schema="schema.json"', f"schema={str(schema)!r}"), {})
    ours = target.take()
    target.php_dispatch()
    # the fixture's tool names the connection, onConnection('jobs'); the README's PHP line does not: null
    php = target.take().replace(b'\\"connection\\";s:4:\\"jobs\\";', b'\\"connection\\";N;', 1)
    py_payload, php_payload = json.loads(normalised(ours)), json.loads(normalised(php))
    assert list(py_payload) == list(php_payload) and py_payload == php_payload
    assert (py_payload["type"], py_payload["tags"], py_payload["silenced"]) == ("job", [], False)
    record = target.client.hgetall(target.horizon_prefix + _uuid(ours))
    assert (record[b"status"], record[b"queue"], record[b"connection"]) == (b"pending", b"python", b"jobs")
