"""``pyapp.PyApp`` pushes the fixture app's jobs as PHP does, on every live Laravel line.

The worker tests that need no PHP push their jobs with :class:`pyapp.PyApp`; here the payload of each job
kind and each ``EchoJob`` setting it writes is compared with what the app's own ``tool.php dispatch`` (real
Laravel) pushes for the same arguments: the same JSON, key for key and in order, and the same serialized
command, apart from the random ``uuid``/``id``, the clock (``createdAt``) and an encrypted command's IV.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from phpapp import TEST_APP_KEY, PhpApp
from pyapp import PyApp

from laraq.protocol.encryption import Encrypter

pytestmark = pytest.mark.php

CASES: list[tuple[str, dict[str, Any]]] = [
    ("echo", {}),
    ("echo", {"args": {"n": 1, "text": "vé ☃"}, "mode": "sleep", "seconds": 1.5}),
    ("echo", {"args": {"raise": "exit"}, "settings": {"tries": 2}}),
    ("echo", {"mode": "fail", "settings": {"tries": 3, "backoff": 30}}),
    ("echo", {"mode": "fail", "settings": {"tries": 10, "maxExceptions": 2, "backoff": [5, 10]}}),
    ("echo", {"mode": "sleep", "seconds": 30, "settings": {"timeout": 1, "tries": 1, "failOnTimeout": True}}),
    ("echo", {"mode": "release", "seconds": 40}),
    ("python", {"document": "q3.pdf", "options": {"pages": [1, 2]}, "owner": "ünïcode", "token": "s3cr3t"}),
    ("python", {}),
    ("plain", {}),
    ("encrypted", {"secret": "top secret ✓"}),
    ("string", {"n": 7, "text": "Ünïcode"}),
    ("string", {}),
]
#: ``--delay``: onto ``:delayed``, scored ``now + delay`` (and the command's ``delay``, 12.11+ the payload's)
DELAYED: list[tuple[str, dict[str, Any]]] = [("python", {"n": 1}), ("echo", {"mode": "ok"}), ("string", {"n": 2})]


def _comparable(raw: bytes, encrypter: Encrypter) -> dict[str, Any]:
    payload = json.loads(raw)
    for key in ("uuid", "id", "createdAt"):
        if key in payload:
            payload[key] = key
    command = payload["data"].get("command") if isinstance(payload["data"], dict) else None
    if isinstance(command, str) and not command.startswith("O:"):
        payload["data"]["command"] = encrypter.decrypt(command).decode("utf-8")  # the IV is random
    return payload


@pytest.mark.parametrize(("kind", "args"), CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_pyapp_pushes_what_php_pushes(laravel: str, redis_server: Any, redis_client: Any, kind: str,
                                      args: dict[str, Any]) -> None:
    php = PhpApp(redis_server.port, version=laravel)
    py = PyApp(redis_server.port, version=laravel)
    assert py.prefix == php.prefix
    encrypter = Encrypter.from_app_key(TEST_APP_KEY)
    php.tool("dispatch", kind, "--queue=cmp", *(["--args=" + json.dumps(args)] if args else []))
    (theirs,) = redis_client.lrange(php.prefix + "queues:cmp", 0, -1)
    redis_client.delete(php.prefix + "queues:cmp", php.prefix + "queues:cmp:notify")
    py.dispatch(kind, "cmp", **args)
    (ours,) = redis_client.lrange(py.prefix + "queues:cmp", 0, -1)
    mine, php_payload = _comparable(ours, encrypter), _comparable(theirs, encrypter)
    assert mine == php_payload
    assert json.dumps(mine) == json.dumps(php_payload)  # and every key in PHP's order, nested ones too
    if str(json.loads(theirs)["data"].get("command", "")).startswith("O:"):  # plain serialize(): the same bytes
        assert json.loads(ours)["data"]["command"] == json.loads(theirs)["data"]["command"]


@pytest.mark.parametrize(("kind", "args"), DELAYED, ids=[k for k, _ in DELAYED])
def test_pyapp_delays_as_php_delays(laravel: str, redis_server: Any, redis_client: Any, kind: str,
                                    args: dict[str, Any]) -> None:
    php = PhpApp(redis_server.port, version=laravel)
    py = PyApp(redis_server.port, version=laravel)
    encrypter = Encrypter.from_app_key(TEST_APP_KEY)
    key = php.prefix + "queues:cmp:delayed"
    before = int(time.time())
    php.tool("dispatch", kind, "--queue=cmp", "--delay=2", "--args=" + json.dumps(args))
    ((theirs, their_score),) = redis_client.zrange(key, 0, -1, withscores=True)
    redis_client.delete(key)
    py.dispatch(kind, "cmp", delay=2, **args)
    ((ours, our_score),) = redis_client.zrange(key, 0, -1, withscores=True)
    after = int(time.time())
    assert before + 2 <= their_score <= after + 2 and before + 2 <= our_score <= after + 2
    assert not redis_client.exists(php.prefix + "queues:cmp")  # nothing on the list itself
    mine, php_payload = _comparable(ours, encrypter), _comparable(theirs, encrypter)
    assert json.dumps(mine) == json.dumps(php_payload)
