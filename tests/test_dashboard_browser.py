"""The dashboard in a real browser (headless Chromium) against a live Laravel app on a real Redis.

PHP dispatches and the overview's counts move on the open page (its script refreshes it in place);
a job PHP's ``queue:work`` failed is retried from the failed page (select, count, confirm) and PHP runs
it again; a queue paused from the page is left alone by artisan's and laraq's ``queue:work`` until it is continued
from the page. Each
page's screenshot is written under the test's temporary directory (``LARAQ_DASHBOARD_SHOTS`` names
another directory, e.g. ``docs/`` for the README's pictures).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import require, require_laravel, require_modules
from phpapp import PhpApp
from test_worker_support import run_laraq

require_modules("starlette", "httpx", "websocket")

from chromium import Browser, chromium_binary  # noqa: E402
from test_dashboard import serve  # noqa: E402

from laraq.cli.common import Ops  # noqa: E402

pytestmark = pytest.mark.php
LINE = "13"


def _cell(column: str, queue: str = "default") -> str:
    return (f"(document.querySelector('tr[data-queue=\"{queue}\"] [data-col=\"{column}\"]') || "
            "{textContent: ''}).textContent.trim()")


@pytest.fixture
def browser(tmp_path: Path) -> Any:
    require(chromium_binary() is not None, "chromium (Debian's package) is not installed")
    made = Browser(tmp_path / "chromium-profile")
    yield made
    made.close()


def test_dashboard_in_chromium_against_a_live_laravel_app(php: str, redis_server: Any, tmp_path: Path,
                                                         browser: Browser) -> None:
    require_laravel(LINE)
    app = PhpApp(redis_server.port, version=LINE, workdir=tmp_path / "php")
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(app.laravel_env.items())))
    shots = Path(os.environ.get("LARAQ_DASHBOARD_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    served = serve(env_file, tmp_path, "--laravel", app.release)
    try:
        app.tool("dispatch", "echo", "--args=" + json.dumps({"mode": "ok"}))
        browser.open(served.url)
        assert browser.wait_for(_cell("pending")) == "1"
        for n in range(2, 4):  # PHP dispatches while the page stays open: the count moves without a reload
            app.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"n": n}, "mode": "ok"}))
        browser.wait_for(_cell("pending") + " === '3'")
        assert browser.js("performance.getEntriesByType('navigation').length") == 1  # still the first load
        # the last hour's depth chart moved with it (a sample a second): its newest point is 3
        browser.wait_for("(() => { const p = document.querySelector('#chart-depth polyline'); "
                         "return p && p.getAttribute('points').trim().split(' ').length >= 2 "
                         "&& document.querySelector('#chart-depth .legend').textContent.includes('default (3)'); })()")
        browser.screenshot(shots / "dashboard-overview.png")

        browser.open(served.url + "queues/default")
        browser.wait_for("document.querySelector('#jobs') && document.querySelectorAll('#jobs tbody tr').length === 3")
        browser.screenshot(shots / "dashboard-queue.png")
        browser.click("#jobs tbody tr a")
        browser.wait_for("!!document.querySelector('#properties')")
        assert "EchoJob" in browser.js("document.body.textContent")
        browser.screenshot(shots / "dashboard-job.png")

        app.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"why": "<b>fails</b>"}, "mode": "fail"}))
        app.artisan("queue:work", "redis", "--stop-when-empty", "--tries=1", check=True)
        [failing] = [r["uuid"] for r in app.runs() if r.get("mode") == "fail"]
        browser.open(served.url + "failed")
        browser.wait_for("document.querySelectorAll('#failed tbody tr').length === 1")
        assert "<b>fails</b>" not in browser.js("document.body.innerHTML")  # payload text arrives escaped
        browser.screenshot(shots / "dashboard-failed.png")
        browser.click("#failed tbody input[name=ids]")
        browser.click("button[data-action=retry]")
        assert "1 failed job(s) would be retried" in browser.wait_for(
            "document.querySelector('#plan-count') && document.querySelector('#plan-count').textContent")
        browser.click("#confirm")
        assert "1 pushed" in browser.wait_for(
            "document.querySelector('#result') && document.querySelector('#result').textContent")
        ops = Ops.load(str(env_file), app.release, None)
        assert ops.failed_store().all() == [] and ops.queue.client.llen(app.prefix + "queues:default") == 1
        app.artisan("queue:work", "redis", "--stop-when-empty", "--tries=1", check=True)
        assert [r["uuid"] for r in app.runs() if r.get("mode") == "fail"] == [failing, failing]  # PHP ran it again
        assert len(ops.failed_store().all()) == 1

        browser.open(served.url)
        browser.click("tr[data-queue=\"default\"] button[data-action=pause]")
        browser.wait_for("!!document.querySelector('#confirm')")
        browser.click("#confirm")
        assert "has been paused" in browser.wait_for(
            "document.querySelector('#result') && document.querySelector('#result').textContent")
        assert ops.cache().paused_queues(ops.settings.connection_name, ["default"]) == ["default"]
        browser.open(served.url)
        assert browser.wait_for(_cell("paused")) == "yes"
        # paused for artisan and laraq alike: neither takes the job PHP dispatches now
        app.tool("dispatch", "echo", "--args=" + json.dumps({"args": {"after": "pause"}, "mode": "ok"}))
        runs = len(app.runs())
        app.artisan("queue:work", "redis", "--stop-when-empty", check=True)
        laraq = run_laraq(app, "redis", "--queue=default", "--stop-when-empty")
        assert laraq.returncode == 0, laraq.stderr
        assert ops.queue.client.llen(app.prefix + "queues:default") == 1 and len(app.runs()) == runs
        browser.click("tr[data-queue=\"default\"] button[data-action=resume]")
        browser.wait_for("!!document.querySelector('#confirm')")
        browser.click("#confirm")
        assert "has been resumed" in browser.wait_for(
            "document.querySelector('#result') && document.querySelector('#result').textContent")
        app.artisan("queue:work", "redis", "--stop-when-empty", check=True)
        assert [r["args"] for r in app.runs()[runs:]] == [{"after": "pause"}]
        journal = (tmp_path / "served-state" / "laraq-dashboard.jsonl").read_text().splitlines()
        assert [json.loads(line)["action"] for line in journal] == ["retry", "pause", "resume"]
        for name in ("workers", "batches", "schedule", "transfers"):  # every other page, as an artifact
            browser.open(served.url + name)
            assert browser.js("document.querySelector('h1').textContent").lower().startswith(name)
            browser.screenshot(shots / f"dashboard-{name}.png")
    finally:
        served.stop()


def test_workers_page_lists_a_real_horizon_master_and_its_supervisor(php: str, redis_server: Any, tmp_path: Path,
                                                                    browser: Browser) -> None:
    from horizon_support import horizon_app
    from test_horizon_worker_php import _stop
    from test_worker_support import wait_for

    hz = horizon_app("13", redis_server.port)
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(hz.laravel_env.items())))
    proc = hz.popen_artisan("horizon")
    served = serve(env_file, tmp_path, "--laravel", hz.release)
    try:
        dump = wait_for(lambda: (d := hz.tool("horizon-dump")) and d["masters"] and d["supervisors"] and d,
                        timeout=120, interval=0.5)
        browser.open(served.url + "workers")
        [master], [supervisor] = dump["masters"], dump["supervisors"]
        text = browser.wait_for(f"document.body.textContent.includes({json.dumps(supervisor['name'])}) "
                                "&& document.body.textContent")
        assert master["name"] in text and "No Horizon master" not in text
        row = browser.js(f"[...document.querySelectorAll('tr')].map(r => r.textContent)"
                         f".find(t => t.includes({json.dumps(supervisor['name'])}))")
        assert "default" in row and "running" in row
        shots = Path(os.environ.get("LARAQ_DASHBOARD_SHOTS") or tmp_path / "shots")
        shots.mkdir(parents=True, exist_ok=True)
        browser.screenshot(shots / "dashboard-workers.png")
    finally:
        served.stop()
        _stop(hz, proc)
