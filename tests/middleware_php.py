"""Shared by the differential middleware tests (test_throttles_php.py, test_ratelimited_php.py): the
fixture app per Laravel version, the two kinds of limiter store, and one side's drain (artisan for
queue ``pq``, laraq for ``lq``)."""

from __future__ import annotations

from typing import Any

import pytest
import test_worker_support as support
from phpapp import PhpApp

from laraq.cli.work import build_worker, default_params
from laraq.worker.worker import Worker

ECHO = "App\\Jobs\\EchoJob"


@pytest.fixture(name="app")
def app_fixture(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


@pytest.fixture(name="kind", params=["cache", "redis"])
def kind_fixture(request: pytest.FixtureRequest) -> str:
    """The plain middleware (Laravel's cache ``RateLimiter``) or its ``*WithRedis`` twin (``DurationLimiter``)."""
    return str(request.param)


def drain(app: PhpApp, queue: str, workers: list[Worker]) -> None:
    """``pq``: ``php artisan queue:work --stop-when-empty``; ``lq``: laraq's worker, the same way."""
    if queue == "pq":
        app.artisan("queue:work", "redis", "--queue=pq", "--stop-when-empty", "--sleep=0", check=True)
        return
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="lq")
    worker = build_worker(params, env=app.env, app=support.app)
    workers.append(worker)
    assert worker.daemon() == 0
