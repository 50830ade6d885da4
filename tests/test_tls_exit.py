"""A TLS fault at start is a settings fault (exit 6), not an outage (exit 3), on a real TLS redis-server.

A supervisor that restarts on 3 ("Redis unreachable", worth retrying) would loop forever on a certificate
the CA does not sign; 6 ("bad settings") tells it, and the operator, that only a settings change helps.
``laraq.config.faults.explain`` picks the code; the job stays in Redis in every case.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from conftest import RedisServer, free_port, require
from test_queue import _make_tls_files

from laraq import exitcodes
from laraq.bus.dispatch import Dispatcher
from laraq.cli import main as cli
from laraq.protocol.queue import RedisQueue

QUEUE_KEY = "laravel_database_queues:default"


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[RedisServer, int, Path]]:
    ca, cert, key = _make_tls_files(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tls_port = s.getsockname()[1]
    try:
        server = RedisServer(tmp_path, "--tls-port", str(tls_port), "--tls-cert-file", str(cert),
                             "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no")
    except RuntimeError:
        require(False, "redis-server does not start with --tls-port (built without TLS support?)")
        raise
    try:
        yield server, tls_port, ca
    finally:
        server.stop()


def _work(url: str) -> Any:
    env: dict[str, str | None] = {k: None for k in ("REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD",
                                                    "DB_CONNECTION", "APP_KEY", "LARAQ_LARAVEL_VERSION")}
    return CliRunner().invoke(cli, ["work", "--no-supervise", "--once", "--laravel", "8", "--app",
                                    "examples.handlers:app", "--redis-url", url], env=env)


def _push(client: redis.Redis) -> None:
    Dispatcher(RedisQueue(client, prefix="laravel_database_", version="8")).dispatch_string(
        "App\\Handlers\\Foo@bar", {"n": 1})


def test_unverified_certificate_exits_with_the_settings_code(tls_server: tuple[RedisServer, int, Path]) -> None:
    server, tls_port, ca = tls_server
    client = server.client()
    _push(client)
    result = _work(f"rediss://127.0.0.1:{tls_port}/0")  # no ssl_ca_certs: the test CA is not trusted
    assert result.exit_code == exitcodes.EXIT_CONFIG, result.output
    assert "TLS certificate" in result.output and "ssl_ca_certs" in result.output
    assert "start it there" not in result.output
    assert client.llen(QUEUE_KEY) == 1  # the job is kept
    ok = _work(f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={ca}")  # the right CA: it runs
    assert ok.exit_code == 0, ok.output
    assert client.llen(QUEUE_KEY) == 0


def test_host_name_the_certificate_does_not_cover(tls_server: tuple[RedisServer, int, Path]) -> None:
    server, tls_port, ca = tls_server
    _push(server.client())
    result = _work(f"rediss://localhost:{tls_port}/0?ssl_ca_certs={ca}")  # issued for 127.0.0.1 only
    assert result.exit_code == exitcodes.EXIT_CONFIG, result.output
    assert "not valid for the host name" in result.output
    assert server.client().llen(QUEUE_KEY) == 1


def test_tls_to_a_plain_port_stays_ambiguous(tls_server: tuple[RedisServer, int, Path]) -> None:
    """A plain-text Redis never answers the handshake: a timeout, as a hung server gives, so 3 (with
    the TLS advice first)."""
    server, _tls_port, _ca = tls_server
    _push(server.client())
    result = _work(f"rediss://127.0.0.1:{server.port}/0")
    assert result.exit_code == exitcodes.EXIT_REDIS_UNREACHABLE, result.output
    assert "TLS handshake" in result.output
    assert server.client().llen(QUEUE_KEY) == 1


def test_a_server_that_is_down_stays_unreachable() -> None:
    result = _work(f"rediss://127.0.0.1:{free_port()}/0")
    assert result.exit_code == exitcodes.EXIT_REDIS_UNREACHABLE, result.output
