"""Every job class of the fixture apps, typed (``laraq schema --python``) and dispatched from Python, writes
the payload PHP's own ``dispatch()`` writes (ids and times aside), models and enums included, with and
without Horizon; PHP's worker runs what laraq dispatched as it runs its own.

The round trip: PHP dispatches a job of each kind (``tool.php dispatch``); the command it wrote becomes an
instance of the generated class (:func:`laraq.bus.typed.from_command`, what a typed handler receives);
:meth:`Dispatcher.dispatch` of that instance must write the same payload. A class whose payload PHP
computes from methods (``tries()``, ``uniqueId()``, ``debounceId()``...) is dispatched with those values
given, as the dispatch refuses it otherwise. Laravel 13's attribute classes (``AttributeJob``'s ``#[Tries]``,
``#[Backoff]``..., ``DebouncedJob``'s ``#[DebounceFor]``) are compared like the others.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from phpapp import PhpApp
from test_schema_php import dispatcher, norm, pushed
from test_typed_jobs_php import generate

from laraq.bus.schema import SchemaError
from laraq.bus.typed import from_command, is_typed_job
from laraq.protocol.encryption import Encrypter
from laraq.protocol.serializer import loads

pytestmark = pytest.mark.php

#: tool.php's job kinds (``make_job``) with the arguments each is dispatched with
KINDS: dict[str, dict[str, Any]] = {
    "plain": {}, "configured": {}, "encrypted": {"secret": "s3cret ✓"}, "rich": {}, "delayed": {},
    "failing": {}, "echo": {"args": [1, "two"], "settings": {"tries": 5, "backoff": [1, 2]}}, "report": {"options": {"pages": 3}},
    "failed-hook": {}, "printing-failed": {}, "unique-property": {"id": "u-rt"}, "unique-method": {"id": "k-rt"},
    "until-processing": {"id": "p-rt"}, "until-processing-method": {"id": "m-rt"}, "handed": {"n": 4},
    "python": {"options": ["a"]}, "batched": {}, "attribute": {}, "debounced": {"key": "dk"},
    "tagged": {"tags": ["t1"]}, "method-middleware": {}, "defaults": {"label": "l", "count": 3},
    "post": {"id": 1, "status": "archived", "others": [2]}, "post-delete-missing": {"id": 2, "others": []},
    "typed-order": {"post": 2, "status": "archived", "quantity": 4, "ratio": 2.5, "note": "n", "tags": ["x"],
                    "ref": "R-1", "rush": True, "priority": 10},
    "silenced": {},
}
#: the kinds a fixture app has from a release on (9+: the Horizon jobs, 12: Batchable, 13: attributes, debounce)
SINCE = {"batched": "12", "attribute": "13", "debounced": "13", "tagged": "9", "silenced": "9"}
#: the payload settings PHP computes from a method, given to the dispatch (option -> payload key)
COMPUTED = {"tries": "maxTries", "backoff": "backoff", "timeout": "timeout", "display_name": "displayName",
            "retry_until": "retryUntil"}


def seed(app: PhpApp) -> None:
    conn = sqlite3.connect(app.db_path)
    conn.executemany("INSERT INTO posts (id, title) VALUES (?, ?)", [(1, "first"), (2, "second")])
    conn.commit()
    conn.close()


def plain_command(app: PhpApp, payload: dict[str, Any]) -> bytes:
    """``serialize($job)``, decrypted for a ``ShouldBeEncrypted`` job (its ciphertext differs by its IV)."""
    text: str = payload["data"]["command"]
    if text.startswith("O:"):
        return text.encode()
    return Encrypter.from_app_key(app.env["APP_KEY"]).decrypt(text)


def compared_form(app: PhpApp, body: bytes, side: str) -> dict[str, Any]:
    payload = norm(body, side)
    if "pushedAt" in payload:  # Horizon's push time
        payload["pushedAt"] = "-"
    command = plain_command(app, payload).replace(f's:2:"{side}"'.encode(), b's:2:"xq"')
    # a debounced job's owner (Str::random(40)) differs by nature
    payload["data"]["command"] = re.sub(rb'(s:13:"debounceOwner";s:40:")[A-Za-z0-9]{40}"', rb'\1-"', command)
    return payload


def first_difference(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"laraq ...{a[max(0, at - 80):at + 80]}... PHP ...{b[max(0, at - 80):at + 80]}..."


def round_trip(app: PhpApp, redis_client: Any, tmp_path: Path, horizon: Any = None) -> set[str]:
    """Each kind through PHP and through the typed class; returns the PHP classes compared."""
    bodies: list[tuple[dict[str, Any], bytes]] = []
    for kind, args in KINDS.items():
        before = len(pushed(app, redis_client, "pq"))
        if not app.profile.since(SINCE.get(kind, "8")):
            continue
        app.tool("dispatch", kind, "--queue=pq", "--pending=1", "--args=" + json.dumps(args))
        now = pushed(app, redis_client, "pq")
        if len(now) > before:
            bodies.append((args, now[-1]))
        else:  # a delayed (or debounced) job waits in the delayed set
            (body,) = redis_client.zrange(app.prefix + "queues:pq:delayed", 0, -1)
            redis_client.delete(app.prefix + "queues:pq:delayed")
            bodies.append((args, body))
    # the fixture apps load most job classes from outside their PSR-4 roots: named one by one
    names = sorted({json.loads(body)["data"]["commandName"] for _, body in bodies})
    jobs = generate(app, tmp_path, f"typed_all_{app.version.replace('-', '_')}_{horizon is not None}", *names)
    typed = {cls.__php_class__: cls for cls in vars(jobs).values() if is_typed_job(cls)}
    d = dispatcher(app, redis_client, {})
    d.horizon = horizon
    d.encrypter = Encrypter.from_app_key(app.env["APP_KEY"])
    compared: set[str] = set()
    for args, php_body in bodies:
        php = json.loads(php_body)
        name = php["data"]["commandName"]
        assert name in typed, f"{name} has no generated class"
        command = loads(plain_command(app, php))
        instance = from_command(typed[name], command)
        options: dict[str, Any] = {"queue": "lq", "connection": "redis"}
        if command._props.get("delay"):  # delay(30): the Queueable property (the payload's "delay" is 12.11+)
            options["delay"] = command._props["delay"]
        try:
            d.prepare(instance, **options)
        except SchemaError:
            options |= {opt: php[key] for opt, key in COMPUTED.items() if php.get(key) is not None}
            if horizon is not None and "tags" in d.schemas[name].methods:
                options["tags"] = php["tags"]
            if "uniqueId" in d.schemas[name].methods:
                options["unique_id"] = "m-" + args["id"]  # what the fixture's uniqueId() returns
            if "debounceId" in d.schemas[name].methods:
                options["debounce_id"] = args["key"]  # what the fixture's debounceId() returns
                options.pop("delay", None)  # the debounce delays it, as it delayed PHP's
        held = list(redis_client.scan_iter(match="*laravel_unique_job*"))
        if held:  # PHP's dispatch took the class's lock, which would drop laraq's dispatch as it drops PHP's
            redis_client.delete(*held)
        assert not d.dispatch(instance, **options).skipped
        if "delay" in options or "debounce_id" in options:
            (py_body,) = redis_client.zrange(app.prefix + "queues:lq:delayed", 0, -1)
            redis_client.delete(app.prefix + "queues:lq:delayed")
        else:
            py_body = pushed(app, redis_client, "lq")[-1]
        ours, theirs = compared_form(app, py_body, "lq"), compared_form(app, php_body, "pq")
        assert ours == theirs, (name, first_difference(repr(ours), repr(theirs)))
        compared.add(name)
    assert compared == set(names)  # every class PHP dispatched, none left out
    return compared


def outcomes(app: PhpApp, queue: str) -> tuple[list[Any], list[str]]:
    """What PHP's worker did with a queue's jobs: the runs the fixture jobs recorded, the classes failed."""
    app.artisan("queue:work", "redis", f"--queue={queue}", "--stop-when-empty", "--sleep=0", "--tries=1",
                check=True)
    runs = sorted(json.dumps({k: v for k, v in r.items() if k not in ("queue", "id", "uuid", "at")}, sort_keys=True)
                  for r in app.runs() if r.get("queue") == queue)
    conn = sqlite3.connect(app.db_path)
    failed = sorted(json.loads(p)["displayName"] for (p,) in
                    conn.execute("SELECT payload FROM failed_jobs WHERE queue = ?", (queue,)))
    conn.close()
    return runs, failed


def test_every_typed_class_dispatches_as_php_does(laravel: str, redis_server: Any, redis_client: Any,
                                                  tmp_path: Path) -> None:
    app = PhpApp(redis_server.port, version=laravel, workdir=tmp_path)
    seed(app)
    compared = round_trip(app, redis_client, tmp_path)
    assert {"App\\Jobs\\TypedOrderJob", "App\\Jobs\\PostJob", "App\\Jobs\\GenerateReport",
            "App\\Jobs\\EncryptedJob"} <= compared
    assert len(compared) >= 20, sorted(compared)
    if app.profile.since("13"):  # the attribute classes: #[Tries]..., #[DebounceFor]
        assert {"App\\Jobs\\AttributeJob", "App\\Jobs\\DebouncedJob"} <= compared
    # PHP's worker runs laraq's dispatches as it runs its own
    php_runs, php_failed = outcomes(app, "pq")
    py_runs, py_failed = outcomes(app, "lq")
    # (the delayed jobs, the debounced one among them, were taken out of the delayed sets above)
    php_runs = [r for r in php_runs if json.loads(r)["class"] in compared or "\\" not in json.loads(r)["class"]]
    assert php_runs and py_runs == php_runs, (set(py_runs) ^ set(php_runs))
    assert py_failed == php_failed


@pytest.mark.parametrize("line", ["13", "13-h548"])
def test_every_typed_class_dispatches_into_horizon_as_php_does(line: str, redis_server: Any, redis_client: Any,
                                                               tmp_path: Path) -> None:
    """Into a Horizon app (5.29 and 5.48): Horizon's payload (tags of the models, silenced, type) as well."""
    from horizon_support import horizon_app, laraq_horizon_settings

    hz = horizon_app(line, redis_server.port)
    seed(hz)
    compared = round_trip(hz, redis_client, tmp_path, horizon=laraq_horizon_settings(hz))
    assert {"App\\Jobs\\TypedOrderJob", "App\\Jobs\\PostJob", "App\\Jobs\\TaggedJob",
            "App\\Jobs\\SilencedJob", "App\\Jobs\\AttributeJob", "App\\Jobs\\DebouncedJob"} <= compared
    php_runs, php_failed = outcomes(hz, "pq")
    py_runs, py_failed = outcomes(hz, "lq")
    php_runs = [r for r in php_runs if json.loads(r)["class"] in compared or "\\" not in json.loads(r)["class"]]
    assert php_runs and py_runs == php_runs, (set(py_runs) ^ set(php_runs))
    assert py_failed == php_failed
