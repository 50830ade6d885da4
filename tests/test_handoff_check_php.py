"""Python jobs whose PHP class lacks the ``RunsInPython`` hand-off are named while a PHP worker shares their queue.

A real ``php artisan horizon:supervisor`` (Laravel 13, Horizon 5.29.1) works ``default``, the queue laraq takes
``App\\Jobs\\PythonJob`` (no trait) and ``App\\Jobs\\HandedToPythonJob`` (the trait) from. With the app on the
host, its PHP says which class has no trait: the banner's warnings, ``laraq doctor`` and the
``laraq_handoff_missing`` metric name ``PythonJob`` and only it. Without the app on the host each says once that
it could not be checked. With no PHP worker on laraq's queue, nothing is said.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import require_laravel
from phpapp import PhpApp

from laraq.bus.handoffcheck import HandoffCheck
from laraq.cli.work import default_params, prepare
from laraq.config.settings import LaravelSettings
from laraq.ops.doctor import diagnose
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php

APP = "test_worker_shared:app"
MISSING = "App\\Jobs\\PythonJob"
HANDED = "App\\Jobs\\HandedToPythonJob"
#: What the hand-off check's line says (HandoffCheck.warning), and no other banner or doctor line
HANDOFF_LINE = "PHP classes of"


@pytest.fixture
def supervised(redis_client: Any, redis_server: Any) -> Iterator[PhpApp]:
    require_laravel("13")
    app = PhpApp(redis_server.port, version="13", horizon=True)
    proc = app.popen_artisan("horizon:supervisor", "host:supervisor-1", "redis", "--queue=default",
                             "--max-processes=1", "--min-processes=1", "--workers-name=default", "--balance=off")
    try:
        deadline = time.monotonic() + 60
        while not redis_client.zcard("laravel_horizon:supervisors") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        yield app
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def banner_warnings(app: PhpApp, queue: str, *, on_host: bool) -> tuple[list[str], HandoffCheck | None]:
    from test_worker_shared import app as handlers

    params = default_params(laravel=app.release, queue=queue, php_app=str(app.path) if on_host else None)
    prepared = prepare(params, env=app.env, app=handlers)
    return [w for w in prepared.info["warnings"] if HANDOFF_LINE in w], prepared.handoff


def test_the_banner_names_the_class_without_the_trait(supervised: PhpApp) -> None:
    warnings, check = banner_warnings(supervised, "default", on_host=True)
    assert check == HandoffCheck(missing=(MISSING,))
    [line] = warnings
    assert MISSING in line and HANDED not in line


def test_without_the_app_on_the_host_it_says_once_it_could_not_check(supervised: PhpApp) -> None:
    warnings, check = banner_warnings(supervised, "default", on_host=False)
    assert check is not None and check.missing == () and check.unchecked
    [line] = warnings
    assert "could not be checked" in line and "not on this host" in line


def test_nothing_is_said_for_a_queue_no_php_worker_works(supervised: PhpApp) -> None:
    warnings, check = banner_warnings(supervised, "python", on_host=True)
    assert warnings == [] and check is None


@pytest.mark.parametrize("on_host", [True, False], ids=["app-on-host", "app-elsewhere"])
def test_doctor_names_the_class(supervised: PhpApp, redis_client: Any, on_host: bool) -> None:
    env = {**supervised.env, **({"LARAQ_BASE_PATH": str(supervised.path)} if on_host else {})}
    settings = LaravelSettings.from_env(env, version=supervised.release)
    queue = RedisQueue(redis_client, prefix=supervised.prefix, version=settings.version)
    found = [f for f in diagnose(settings, queue, app_ref=APP, queues=["default"]) if HANDOFF_LINE in f.detail]
    [finding] = found
    assert finding.level == "warn"
    if on_host:
        assert finding.title == "1 PHP class(es) of Python jobs lack RunsInPython"
        assert MISSING in finding.detail and HANDED not in finding.detail
    else:
        assert "could not be checked" in finding.title


def test_metric_names_the_class(supervised: PhpApp) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from laraq.production.metrics import Metrics

    _, check = banner_warnings(supervised, "default", on_host=True)
    registry = CollectorRegistry()
    Metrics(registry=registry, handoff=check)
    page = generate_latest(registry).decode()
    assert 'laraq_handoff_missing{job="App\\\\Jobs\\\\PythonJob"} 1.0' in page
    assert "HandedToPythonJob" not in page
    assert "laraq_handoff_unchecked 0.0" in page
    unchecked = CollectorRegistry()
    Metrics(registry=unchecked, handoff=banner_warnings(supervised, "default", on_host=False)[1])
    assert "laraq_handoff_unchecked 1.0" in generate_latest(unchecked).decode()


def test_laraq_config_names_the_class(supervised: PhpApp) -> None:
    from test_worker_support import ROOT, laraq_env

    proc = subprocess.run([sys.executable, "-c", "from laraq.cli import main; main()", "config", "--json",
                           "--app", APP, "--app-path", str(supervised.path), "--laravel", supervised.release],
                          env=laraq_env(supervised), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [line] = [w for w in json.loads(proc.stdout)["warnings"] if HANDOFF_LINE in w]
    assert MISSING in line and HANDED not in line
