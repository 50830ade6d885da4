"""``laraq work --queue 'tenant-*' --fair`` beside ``php artisan queue:work`` on the same tenant queues.

artisan lists the tenant queues (its priority order); laraq works them by pattern, in turns, with
``--max-per-queue``. Every job runs exactly once, each PHP-only job by PHP, each Python job by Python, and
nothing goes through ``:delayed``: the selection layer changes which queue laraq asks, never how a job is
reserved (Laravel's own reserve step), so artisan sees the queues as it would beside any laraq worker.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import popen_laraq, run_laraq, wait_for

pytestmark = pytest.mark.php

APP = "test_worker_shared:app"
TENANTS = ("tenant-a", "tenant-b", "tenant-c")


@pytest.fixture
def php(laravel: str, redis_client: Any, redis_server: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel)


def key(php: PhpApp, queue: str) -> str:
    return php.prefix + "queues:" + queue


def dispatch(php: PhpApp, kind: str, queue: str, **args: Any) -> None:
    php.tool("dispatch", kind, f"--queue={queue}", "--args=" + json.dumps(args))


def test_fair_laraq_leaves_each_tenants_php_jobs_in_place(php: PhpApp, redis_client: Any) -> None:
    for tenant in TENANTS:
        for n in range(3):
            dispatch(php, "echo", tenant, args={"n": n})
            dispatch(php, "python", tenant, document=f"{tenant}-{n}")
    before = {t: redis_client.lrange(key(php, t), 0, -1) for t in TENANTS}
    proc = run_laraq(php, "--queue=tenant-*", "--fair", "--max-per-queue=2", "--stop-when-empty", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    for tenant in TENANTS:
        assert redis_client.lrange(key(php, tenant), 0, -1) == [m for m in before[tenant] if b"EchoJob" in m]
        assert redis_client.zcard(key(php, tenant) + ":reserved") == 0
        assert redis_client.zcard(key(php, tenant) + ":delayed") == 0
        assert not redis_client.exists(key(php, tenant) + ":laraq-slots")  # every slot given back
    ran = php.runs()
    assert len(ran) == 9 and {r["runner"] for r in ran} == {"python"}
    # turns: the first three Python jobs came from three different tenants
    assert {r["queue"] for r in ran[:3]} == set(TENANTS)


def test_artisan_and_fair_laraq_on_the_same_tenant_queues_run_each_job_once(php: PhpApp, redis_client: Any) -> None:
    artisan = php.popen_artisan("queue:work", "redis", "--queue=" + ",".join(TENANTS), "--sleep=0")
    laraq = popen_laraq(php, "--queue=tenant-*,python", "--fair", "--max-per-queue=1", "--discover-every=0.2",
                        "--sleep=0.1", app_spec=APP)
    try:
        for n in range(10):
            for tenant in TENANTS:
                dispatch(php, "echo", tenant, args={"n": n, "q": tenant})
                dispatch(php, "handed", tenant, n=n)
        wait_for(lambda: len(php.runs()) >= 60, timeout=240)
        wait_for(lambda: all(redis_client.llen(key(php, q)) == 0 and redis_client.zcard(key(php, q) + ":reserved") == 0
                             for q in (*TENANTS, "python")), timeout=60)
    finally:
        for proc in (artisan, laraq):
            proc.terminate()
        for proc in (artisan, laraq):
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    runs = php.runs()
    echo = [r for r in runs if r["class"].endswith("EchoJob")]
    handed = [r for r in runs if r["class"].endswith("HandedToPythonJob")]
    assert len(runs) == 60
    assert len(echo) == 30 and {r["runner"] for r in echo} == {"php"} and len({r["uuid"] for r in echo}) == 30
    assert all(r["attempts"] == 1 for r in runs)
    assert len(handed) == 30 and {r["runner"] for r in handed} == {"python"}
    assert sorted(r["n"] for r in handed) == sorted(list(range(10)) * 3)
    for q in (*TENANTS, "python"):
        assert redis_client.zcard(key(php, q) + ":delayed") == 0


def test_a_paused_tenant_is_skipped_and_the_global_pause_stops_the_pattern(redis_client: Any, redis_server: Any) -> None:
    """``queue:pause`` of the real 13.x app: one tenant paused is left out of the turns; ``--all`` (13.25+)
    pauses every queue the pattern matches, for laraq as for artisan."""
    from conftest import require_laravel

    require_laravel("13")
    php = PhpApp(redis_server.port, version="13")
    for tenant in TENANTS:
        dispatch(php, "python", tenant, document=tenant)
    php.artisan("queue:pause", "redis:tenant-b", check=True)
    proc = run_laraq(php, "--queue=tenant-*", "--fair", "--stop-when-empty", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    assert sorted(r["queue"] for r in php.runs()) == ["tenant-a", "tenant-c"]
    assert redis_client.llen(key(php, "tenant-b")) == 1
    php.artisan("queue:resume", "redis:tenant-b", check=True)
    php.artisan("queue:pause", "--all", check=True)
    dispatch(php, "python", "tenant-a", document="again")
    proc = run_laraq(php, "--queue=tenant-*", "--fair", "--stop-when-empty", app_spec=APP)
    assert proc.returncode == 0, proc.stderr
    assert len(php.runs()) == 2
    assert redis_client.llen(key(php, "tenant-a")) == 1 and redis_client.llen(key(php, "tenant-b")) == 1
