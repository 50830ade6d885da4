"""Deep commands: laraq reads as deep as PHP's ``unserialize()`` (``unserialize_max_depth``, 4096) and fails
what PHP fails, on the C and the pure-Python paths, against real ``php``.

PHP counts objects and arrays with members (an empty array is no level). The codec is checked against
``php -r unserialize()`` at and around the limit; then one EchoJob of the Laravel 13 fixture app whose
``$seconds`` property holds an array nested 600, 4095 and 4096 levels deep (the object itself is one level
more) is given to ``php artisan queue:work`` and to ``laraq work``: 601 and 4096 levels run on both, 4097
end in ``failed_jobs`` on both, nothing left in Redis.
Depth is decoded with explicit stacks, so 4096 levels never touch Python's recursion limit.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from typing import Any

import pytest
from conftest import require, require_laravel
from phpapp import PhpApp
from test_worker_support import laraq_env, run_laraq

from laraq.protocol.phparray import loads_php_arrays
from laraq.protocol.serializer import PHPSerializeError, loads

pytestmark = pytest.mark.php

STDCLASS = b'O:8:"stdClass":1:{s:1:"p";'


def nest(depth: int, inner: bytes = b"i:1;", head: bytes = b"a:1:{i:0;") -> bytes:
    return head * depth + inner + b"}" * depth


CASES = {
    "arrays-4096": nest(4096), "arrays-4097": nest(4097),
    "arrays-4096-then-empty": nest(4096, b"a:0:{}"), "arrays-4097-then-empty": nest(4097, b"a:0:{}"),
    "objects-4096": nest(4096, head=STDCLASS), "objects-4097": nest(4097, head=STDCLASS),
    "objects-4096-then-empty-object": nest(4096, b'O:8:"stdClass":0:{}', head=STDCLASS),
    "arrays-600": nest(600),
}


def php_accepts(data: bytes) -> bool:
    require(bool(subprocess.run(["which", "php"], capture_output=True).stdout), "php is not on PATH")
    proc = subprocess.run(["php", "-r", "echo @unserialize(stream_get_contents(STDIN)) === false ? 'no' : 'yes';"],
                          input=data, capture_output=True, timeout=60)
    return proc.stdout == b"yes"


@pytest.mark.parametrize("pure", [False, True], ids=["c", "pure-python"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_depth_limit_is_phps(name: str, pure: bool) -> None:
    data = CASES[name]
    code = ("import sys\nfrom laraq.protocol.phparray import loads_php_arrays, _c_pairs_loads\n"
            "from laraq.protocol.serializer import loads, PHPSerializeError\n"
            "assert (_c_pairs_loads is None) == PURE\n"
            "data = sys.stdin.buffer.read()\nout = []\n"
            "for f in (loads, loads_php_arrays):\n"
            "    try:\n        f(data); out.append('yes')\n"
            "    except PHPSerializeError as e:\n        assert 'max_depth=4096' in str(e), e; out.append('no')\n"
            "print(' '.join(out))\n").replace("PURE", str(pure))
    env = dict(os.environ, LARAQ_PURE_PYTHON="1" if pure else "0")
    proc = subprocess.run(["python3", "-c", code], input=data, capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    expected = "yes" if php_accepts(data) else "no"
    assert proc.stdout.decode().split() == [expected, expected]


def test_both_paths_in_process() -> None:
    assert loads_php_arrays(CASES["arrays-4096"]) is not None and loads(CASES["objects-4096"]) is not None
    with pytest.raises(PHPSerializeError):
        loads_php_arrays(CASES["arrays-4097"])


@pytest.fixture
def app13(redis_server: Any) -> PhpApp:
    require_laravel("13")
    redis_server.client().flushall()
    return PhpApp(redis_server.port, version="13")


def deep_echo(app: PhpApp, client: Any, queue: str, depth: int) -> None:
    """An EchoJob dispatched by PHP, its ``$seconds`` then replaced by a ``depth``-deep array."""
    app.tool("dispatch", "echo", f"--queue={queue}", "--args=" + json.dumps({"args": {"n": depth}, "mode": "ok"}))
    key = f"{app.prefix}queues:{queue}"
    payload = json.loads(client.lpop(key))
    command = payload["data"]["command"]
    assert 's:7:"seconds";i:0;' in command
    payload["data"]["command"] = command.replace('s:7:"seconds";i:0;', 's:7:"seconds";' + nest(depth).decode())
    client.rpush(key, json.dumps(payload))


def failed_queues(app: PhpApp) -> list[tuple[str, str]]:
    with sqlite3.connect(app.db_path) as db:
        return [(q, e.splitlines()[0]) for q, e in db.execute("select queue, exception from failed_jobs order by id")]


@pytest.mark.parametrize("depth", [600, 4095, 4096])  # inside the job object: one level more
def test_deep_job_end_to_end(app13: PhpApp, redis_client: Any, depth: int) -> None:
    deep_echo(app13, redis_client, "pq", depth)
    deep_echo(app13, redis_client, "lq", depth)
    php = app13.artisan("queue:work", "redis", "--once", "--queue=pq", timeout=120)
    laraq = run_laraq(app13, "--once", "--queue=lq", "--no-supervise", env=laraq_env(app13))
    assert laraq.returncode == 0, laraq.stderr[-3000:]
    assert "RecursionError" not in laraq.stderr + php.stderr
    runs = sorted((r["runner"], r["args"]["n"]) for r in app13.runs())
    failed = failed_queues(app13)
    if depth + 1 <= 4096:  # the EchoJob object is a level too
        assert runs == [("php", depth), ("python", depth)], (php.stdout, laraq.stderr[-2000:])
        assert failed == []
    else:
        assert runs == []
        assert sorted(q for q, _ in failed) == ["lq", "pq"], (failed, php.stdout)
        reasons = dict(failed)
        assert "4096" in reasons["pq"] and "4096" in reasons["lq"], reasons
    for queue in ("pq", "lq"):
        for suffix in ("", ":reserved", ":delayed"):
            assert redis_client.llen(f"{app13.prefix}queues:{queue}") == 0 if not suffix else \
                redis_client.zcard(f"{app13.prefix}queues:{queue}{suffix}") == 0
