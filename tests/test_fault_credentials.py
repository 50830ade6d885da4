"""Credentials rotated under a running worker: detected in a few reconnects, not minutes.

redis-py retries a command that failed to connect ten times with a backoff, and counts a refused login as
a failed connection. laraq's clients raise a refused login at once (:mod:`laraq.protocol.redis_retry`), so
the worker's own bounded retry (4 refusals, backoff 1-8 s, then exit 4) is what decides. Counted on a
real ``redis-server`` by the connections it received, not by the clock.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import RedisServer
from pyapp import PyApp
from test_worker_support import laraq_env, popen_laraq, wait_for

from laraq.protocol.queue import RedisQueue
from laraq.protocol.redis_retry import AuthFailFastRetry


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.client().config_set("requirepass", "rightpw")
    yield server
    server.stop()


def _connections(server: RedisServer, password: str) -> int:
    info = redis.Redis(port=server.port, password=password).info("stats")
    return int(info["total_connections_received"])


def test_a_refused_login_is_not_retried(auth_server: RedisServer) -> None:
    plain = redis.Redis(port=auth_server.port, password="wrong")
    before = _connections(auth_server, "rightpw")
    with pytest.raises(redis.AuthenticationError):
        plain.ping()
    retried = _connections(auth_server, "rightpw") - before - 1  # minus the INFO connection
    assert retried > 1  # redis-py's own retry tries again and again (this is what made it slow)

    client = redis.Redis(port=auth_server.port, password="wrong")
    queue = RedisQueue(client, version="12.0")
    assert isinstance(queue.client.get_retry(), AuthFailFastRetry)
    before = _connections(auth_server, "rightpw")
    with pytest.raises(redis.AuthenticationError):
        client.ping()
    assert _connections(auth_server, "rightpw") - before - 1 == 1  # one login, refused, raised


def test_connection_errors_are_still_retried(auth_server: RedisServer) -> None:
    client = redis.Redis(port=auth_server.port, password="rightpw")
    RedisQueue(client, version="12.0")
    client.ping()
    killer = redis.Redis(port=auth_server.port, password="rightpw")
    killer.client_kill_filter(_type="normal", skipme=True)
    assert client.ping()  # the killed connection is re-opened by redis-py's retry, as before


def test_password_rotated_under_a_running_worker_exits_4(auth_server: RedisServer) -> None:
    app = PyApp(auth_server.port, version="8")  # the fixture app's settings; no job is needed
    env = laraq_env(app, REDIS_PASSWORD="rightpw", REDIS_PORT=str(auth_server.port))
    worker = popen_laraq(app, "--queue=py", env=env)
    out = ""
    try:
        admin = redis.Redis(port=auth_server.port, password="rightpw")
        wait_for(lambda: any(c.get("name", "").startswith("laraq") or c.get("cmd") in ("brpop", "evalsha", "eval",
                                                                                       "blpop", "zadd")
                             for c in admin.client_list()), timeout=60)
        admin.config_set("requirepass", "newpw")
        redis.Redis(port=auth_server.port, password="newpw").client_kill_filter(_type="normal", skipme=True)
        code = worker.wait(120)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if worker.poll() is None:
            worker.kill()
        out = (worker.stdout.read() if worker.stdout else "") + (worker.stderr.read() if worker.stderr else "")
    assert code == 4, out[-3000:]
    refusals = [line for line in out.splitlines() if "refused the credentials" in line]
    # the bounded retry decides: attempts 1..3, then "stopping" - and no redis-py retry storm in between
    assert any("attempt 1 of 4" in line for line in refusals) and "stopping: Redis" in out
    assert "rightpw" not in out and "newpw" not in out


