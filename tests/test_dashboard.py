"""``laraq dashboard`` on a real Redis through Starlette's test client: the pages show what the readers
read, actions go through a confirmation and the journal, and nothing is shown or done without credentials.

The browser test (real headless Chromium against a live Laravel app) is ``test_dashboard_browser.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import require_modules

require_modules("starlette", "httpx")

from starlette.testclient import TestClient  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.cli.common import Ops  # noqa: E402
from laraq.dashboard.actions import Journal  # noqa: E402
from laraq.dashboard.app import ACTIONS, create_app  # noqa: E402
from laraq.dashboard.auth import Access, check_bind  # noqa: E402
from laraq.protocol.encryption import Encrypter  # noqa: E402

APP_KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="
LOCAL = "http://127.0.0.1"
EVIL = "<script>alert('x')</script>"
GET_PAGES = ["/", "/batches", "/queues/default", "/queues/default?state=delayed", "/queues/default?state=reserved", "/failed",
             "/workers", "/schedule", "/transfers"]


def write_env(tmp_path: Path, port: int) -> Path:
    path = tmp_path / ".env"
    path.write_text(f"REDIS_HOST=127.0.0.1\nREDIS_PORT={port}\nREDIS_PREFIX=dash_\nLARAQ_LARAVEL_VERSION=12.67\n"
                    f"DB_CONNECTION=sqlite\nDB_DATABASE={tmp_path / 'db.sqlite'}\nAPP_KEY={APP_KEY}\n"
                    "CACHE_STORE=redis\n")
    return path


class Dash:
    """The seeded app and its dashboard."""

    def __init__(self, tmp_path: Path, port: int, **options: Any) -> None:
        self.env_file = write_env(tmp_path, port)
        self.ops = Ops.load(str(self.env_file), None, None)
        self.journal = Journal(tmp_path / "state")
        self.journal.directory.mkdir(mode=0o700)  # type: ignore[union-attr]
        self.options = options

    def client(self, base_url: str = LOCAL, **options: Any) -> TestClient:
        app = create_app(self.ops, journal=self.journal, **{**self.options, **options})
        return TestClient(app, base_url=base_url)

    def seed(self) -> dict[str, Any]:
        d = Dispatcher(self.ops.queue, encrypter=Encrypter.from_app_key(APP_KEY))
        plain = d.prepare_job("App\\Jobs\\EchoJob", {"note": EVIL, "i": 1})
        secret = d.prepare_job("App\\Jobs\\EncryptedJob", {"secret": "top secret value"}, encrypt=True)
        later = d.prepare_job("App\\Jobs\\Other", {"i": 2}, delay=600)
        d.bulk([plain, secret, later])
        store = self.ops.failed_store()
        store.ensure_table()
        for n in range(3):
            name = "App\\Jobs\\Broken" if n < 2 else "App\\Jobs\\Other"
            payload = {"uuid": f"f-{n}", "displayName": name, "job": "Illuminate\\Queue\\CallQueuedHandler@call",
                       "maxTries": None, "attempts": 1, "data": {"commandName": name, "command": "O:8:\"stdClass\":0:{}"}}
            store.log("redis", "default", json.dumps(payload), f"RuntimeException: boom {n} {EVIL}")
        return {"plain": plain, "secret": secret, "later": later}


@pytest.fixture
def dash(tmp_path: Path, redis_server: Any, redis_client: Any) -> Dash:
    return Dash(tmp_path, redis_server.port)


def _ids(prepared: Any) -> tuple[str, str]:
    body = json.loads(prepared.payload)
    return body["uuid"], body["id"]


def test_pages_show_the_queues_jobs_and_failed_rows(dash: Dash) -> None:
    jobs = dash.seed()
    client = dash.client()
    overview = client.get("/")
    assert overview.status_code == 200
    row = re.search(r'<tr data-queue="default">(.*?)</tr>', overview.text, re.S)
    assert row is not None
    cells = dict(re.findall(r'data-col="(\w+)">([^<]*)<', row.group(1)))
    assert cells == {"pending": "2", "delayed": "1", "reserved": "0", "failed": "3", "paused": "no",
                     "taken_per_minute": "-", "failed_per_minute": "-"}  # one sample: no rate yet
    assert 'data-live="5.0"' in overview.text and "/static/dashboard.js" in overview.text
    pending = client.get("/queues/default").text
    assert "App\\Jobs\\EchoJob" in pending and "App\\Jobs\\EncryptedJob" in pending
    assert EVIL not in pending and "&lt;script&gt;" in pending  # payload text is escaped
    assert "top secret value" not in pending and "(encrypted)" in pending
    assert "App\\Jobs\\Other" in client.get("/queues/default?state=delayed").text
    only = client.get("/queues/default", params={"class": "App\\Jobs\\Enc*"}).text
    assert "EncryptedJob" in only and "EchoJob" not in only
    uuid, _ = _ids(jobs["plain"])
    found = client.get("/queues/default", params={"id": uuid}).text
    assert "EchoJob" in found and "EncryptedJob" not in found
    detail = client.get(f"/queues/default/jobs/{uuid}")
    assert detail.status_code == 200 and '&#34;note&#34;: &#34;&lt;script&gt;' in detail.text and EVIL not in detail.text
    secret_uuid, _ = _ids(jobs["secret"])
    closed = client.get(f"/queues/default/jobs/{secret_uuid}").text
    assert "does not decrypt" in closed and "top secret value" not in closed
    assert client.get("/queues/default/jobs/nope").status_code == 404
    failed = client.get("/failed", params={"class": "App\\Jobs\\Broken", "exception": "boom 1"}).text
    assert "1 match" in failed and "boom 1" in failed and EVIL not in failed
    assert "neither a date" in client.get("/failed", params={"after": "bad date"}).text
    for path in GET_PAGES:
        text = client.get(path).text
        assert APP_KEY.split(":")[1] not in text, path


def _batches_table(dash: Dash) -> None:
    """``job_batches`` as Laravel's migration makes it, with a running batch and a cancelled one."""
    import sqlite3

    db = sqlite3.connect(dash.ops.settings.database(None).database)
    db.execute("CREATE TABLE job_batches (id varchar primary key, name varchar, total_jobs integer, "
               "pending_jobs integer, failed_jobs integer, failed_job_ids text, options text, "
               "cancelled_at integer, created_at integer, finished_at integer)")
    db.executemany("INSERT INTO job_batches VALUES (?, ?, ?, ?, ?, '[]', '', ?, ?, ?)", [
        ("9a-old", "imports", 8, 3, 1, None, 1_700_000_000, None),  # 5 of 8 processed: 62.5 -> 63 (PHP round)
        ("9b-new", EVIL, 0, 0, 0, 1_700_000_100, 1_700_000_050, None)])
    db.commit()
    db.close()


def _batch_times(dash: Dash, batch: str) -> tuple[Any, Any]:
    import sqlite3

    db = sqlite3.connect(dash.ops.settings.database(None).database)
    try:
        found = db.execute("SELECT cancelled_at, finished_at FROM job_batches WHERE id = ?", (batch,)).fetchone()
    finally:
        db.close()
    return found[0], found[1]


def test_a_batch_is_cancelled_from_its_page_as_batch_cancel_writes(dash: Dash) -> None:
    import time

    _batches_table(dash)
    client = dash.client()
    page = client.get("/batches").text
    forms = re.findall(r'name="batch" value="([^"]+)"', page)
    assert forms == ["9a-old"]  # the cancelled batch has no button
    asked = _post(client, "/actions/cancel", {"csrf": _csrf(client), "batch": "9a-old"})
    assert asked.status_code == 200 and "Cancel batch <strong>9a-old</strong>" in asked.text
    assert _batch_times(dash, "9a-old") == (None, None)  # asked, not done
    before = int(time.time())
    done = _post(client, "/actions/cancel", {"csrf": _csrf(client), "batch": "9a-old", "confirm": "yes"})
    assert done.status_code == 200 and "Batch [9a-old] cancelled" in done.text
    cancelled, finished = _batch_times(dash, "9a-old")
    assert cancelled == finished and before <= cancelled <= int(time.time())  # DatabaseBatchRepository::cancel
    (line,) = [json.loads(x) for x in dash.journal.path.read_text().splitlines()]
    assert (line["action"], line["target"]) == ("cancel", "9a-old")
    assert 'name="batch"' not in client.get("/batches").text
    absent = _post(client, "/actions/cancel", {"csrf": _csrf(client), "batch": "nope", "confirm": "yes"})
    assert absent.status_code == 400 and "no batch &#39;nope&#39;" in absent.text
    access = Access()
    read_only = dash.client(read_only=True, access=access)
    assert "/actions/" not in read_only.get("/batches").text
    refused = _post(read_only, "/actions/cancel", {"csrf": access.csrf_token(), "batch": "9b-new", "confirm": "yes"})
    assert refused.status_code == 403 and _batch_times(dash, "9b-new") == (1_700_000_100, None)


def test_batches_page_reads_job_batches_with_laravels_progress(dash: Dash) -> None:

    client = dash.client()
    assert "cannot read &#39;job_batches&#39;: OperationalError" in client.get("/batches").text  # no table yet: said, not a crash
    _batches_table(dash)
    text = client.get("/batches").text
    rows = re.findall(r'<tr data-batch="([^"]+)">.*?data-col="progress">(\d+)%', text, re.S)
    assert rows == [("9b-new", "0"), ("9a-old", "63")]
    assert EVIL not in text and "&lt;script&gt;" in text and "2023-11-14" in text


def test_a_failed_job_opens_from_the_failed_store(dash: Dash) -> None:
    dash.seed()
    text = dash.client().get("/queues/default/jobs/f-1").text
    assert 'id="exception"' in text and "boom 1" in text and EVIL not in text and "failed_id" in text


def test_history_measures_jobs_taken_and_failed_per_minute_and_draws_the_last_hour(dash: Dash) -> None:
    from laraq.dashboard.history import History

    dash.seed()
    history = History(every=10)
    client = dash.client(history=history)
    t0 = dash.ops.queue.clock()
    assert history.maybe_sample(dash.ops, now=t0) is not None
    assert history.maybe_sample(dash.ops, now=t0 + 5) is None  # too soon: one sample per 10 s
    dash.ops.queue.pop("default")  # a worker takes one job, and one more job fails
    dash.ops.failed_store().log("redis", "default", json.dumps({"uuid": "f-9", "job": "x", "data": {}}), "E")
    last = history.maybe_sample(dash.ops, now=t0 + 30)
    assert last is not None and last.taken["default"] == 1 and last.seconds == 30
    assert history.recent(dash.ops).per_minute("default") == (2.0, 2.0)
    page = client.get("/").text  # the request's own sample comes too soon after t0 + 30: none is added
    cells = dict(re.findall(r'data-col="(\w+)">([^<]*)<', page))
    assert (cells["taken_per_minute"], cells["failed_per_minute"]) == ("2.0", "2.0")
    for what in ("depth", "throughput", "wait"):
        assert f'id="chart-{what}"' in page
    depth = re.search(r'id="chart-depth".*?<polyline[^>]*points="([^"]+)"', page, re.S)
    assert depth is not None and len(depth.group(1).split()) == 2  # two samples, two points


def test_history_is_kept_in_redis_shared_by_dashboards_and_bounded(dash: Dash) -> None:
    from laraq.dashboard.history import CAP, WINDOW, History, history_key

    dash.seed()
    client = dash.ops.queue.client
    key = history_key(dash.ops.queue.prefix)
    t0 = dash.ops.queue.clock()
    client.zadd(key, {"an hour and more ago": t0 - WINDOW - 5})
    first = History(every=10)
    assert first.maybe_sample(dash.ops, now=t0) is not None
    assert client.zcard(key) == 1 and 0 < client.ttl(key) <= WINDOW + 60  # the old one trimmed, the key expires
    dash.ops.queue.pop("default")
    assert first.maybe_sample(dash.ops, now=t0 + 30) is not None
    # another dashboard, or this one restarted: the same samples, and no sample sooner than `every` after them
    second = History(every=10)
    assert second.maybe_sample(dash.ops, now=t0 + 35) is None
    assert [s.at for s in second.recent(dash.ops).samples] == [t0, t0 + 30]
    assert second.recent(dash.ops).per_minute("default")[0] == 2.0
    page = dash.client(history=second).get("/").text
    depth = re.search(r'id="chart-depth".*?<polyline[^>]*points="([^"]+)"', page, re.S)
    assert depth is not None and len(depth.group(1).split()) == 2
    later = second.maybe_sample(dash.ops, now=t0 + 40)  # its first sample: nothing to measure taken against
    assert later is not None and later.taken["default"] is None and later.seconds == 0
    for n in range(CAP + 5):  # never more than CAP samples
        client.zadd(key, {f"filler {n}": t0 + 41 + n / 1000})
    assert second.maybe_sample(dash.ops, now=t0 + 60) is not None and client.zcard(key) == CAP
    assert second.recent(dash.ops).samples[-1].at == t0 + 60  # members that are not samples are skipped


def test_reserved_jobs_show_their_holder_and_orphans(dash: Dash) -> None:
    dash.seed()
    dash.ops.queue.pop("default")  # reserved by nobody that beats: an orphan until its lease ends
    text = dash.client().get("/queues/default?state=reserved").text
    assert 'id="reservations"' in text and "not a laraq worker" in text and "orphan" in text


def _post(client: TestClient, path: str, data: dict[str, Any]) -> Any:
    return client.post(path, data=data)


def _csrf(client: TestClient) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/").text)
    assert match is not None
    return match.group(1)


def _journal(dash: Dash) -> list[dict[str, Any]]:
    return [json.loads(line) for line in dash.journal.path.read_text().splitlines()]


def test_pause_asks_then_pauses_and_writes_the_journal(dash: Dash) -> None:
    dash.seed()
    client = dash.client()
    csrf = _csrf(client)
    asked = _post(client, "/actions/pause", {"csrf": csrf, "queue": "default"})
    assert asked.status_code == 200 and 'name="confirm" value="yes"' in asked.text
    assert dash.ops.cache().paused_queues("redis", ["default"]) == []  # nothing done before the confirmation
    done = _post(client, "/actions/pause", {"csrf": csrf, "queue": "default", "confirm": "yes"})
    assert done.status_code == 200 and "has been paused" in done.text
    assert dash.ops.cache().paused_queues("redis", ["default"]) == ["default"]
    assert 'data-col="paused">yes' in client.get("/").text
    _post(client, "/actions/resume", {"csrf": csrf, "queue": "default", "confirm": "yes"})
    assert dash.ops.cache().paused_queues("redis", ["default"]) == []
    restart = _post(client, "/actions/restart", {"csrf": csrf, "confirm": "yes"})
    assert "Broadcasting queue restart signal" in restart.text
    lines = _journal(dash)
    assert [line["action"] for line in lines] == ["pause", "resume", "restart"]
    assert lines[0]["target"] == "default" and lines[0]["client"]
    assert oct(dash.journal.path.stat().st_mode & 0o777) == "0o600"


def test_retry_counts_first_then_goes_through_the_audited_bulk_path(dash: Dash) -> None:
    dash.seed()
    client = dash.client()
    csrf = _csrf(client)
    store = dash.ops.failed_store()
    before = dash.ops.queue.client.llen("dash_queues:default")
    form = {"csrf": csrf, "class": "App\\Jobs\\Broken", "all": "yes"}
    plan = _post(client, "/actions/retry", form)
    assert '<p id="plan-count">2 failed job(s) would be retried' in plan.text
    assert len(store.all()) == 3  # the dry run changes nothing
    done = _post(client, "/actions/retry", {**form, "confirm": "yes"})
    assert done.status_code == 200 and "2 pushed" in done.text
    assert [j.display_name for j in store.all()] == ["App\\Jobs\\Other"]
    assert dash.ops.queue.client.llen("dash_queues:default") == before + 2
    [line] = _journal(dash)
    assert line["action"] == "retry" and len(line["target"]) == 2
    retry_journal = Path(line["outcome"]["journal"])
    assert retry_journal.exists() and f"laraq retry --undo {retry_journal}" in done.text
    # undo from the page: the jobs leave the queue, the rows come back; only our own journals by name
    name = retry_journal.name
    assert f'name="journal" value="{name}"' in done.text
    for wrong in ("../../etc/passwd", str(retry_journal), "laraq-retry-x.jsonl", ""):
        refused = _post(client, "/actions/undo", {"csrf": csrf, "journal": wrong, "confirm": "yes"})
        assert refused.status_code == 400 and "no retry journal" in refused.text
    asked = _post(client, "/actions/undo", {"csrf": csrf, "journal": name})
    assert "Take back this retry" in asked.text and len(store.all()) == 1
    undone = _post(client, "/actions/undo", {"csrf": csrf, "journal": name, "confirm": "yes"})
    assert undone.status_code == 200 and "2 restored" in undone.text
    assert sorted(j.display_name or "" for j in store.all()) == ["App\\Jobs\\Broken", "App\\Jobs\\Broken",
                                                                 "App\\Jobs\\Other"]
    assert dash.ops.queue.client.llen("dash_queues:default") == before
    assert _journal(dash)[-1]["action"] == "undo"
    for j in [j for j in store.all() if j.display_name == "App\\Jobs\\Broken"]:
        store.forget(j.id)
    [row] = store.all()
    asked = _post(client, "/actions/forget", {"csrf": csrf, "ids": str(row.id)})
    assert "1 failed job(s) would be deleted" in asked.text and len(store.all()) == 1
    gone = _post(client, "/actions/forget", {"csrf": csrf, "ids": str(row.id), "confirm": "yes"})
    assert "1 deleted" in gone.text and store.all() == []
    assert _journal(dash)[-1]["action"] == "forget"


def test_actions_refuse_without_csrf_or_selection_and_when_read_only(dash: Dash) -> None:
    dash.seed()
    client = dash.client()
    missing = _post(client, "/actions/pause", {"queue": "default", "confirm": "yes"})
    assert missing.status_code == 403 and "CSRF" in missing.text
    wrong = _post(client, "/actions/pause", {"csrf": "0" * 64, "queue": "default", "confirm": "yes"})
    assert wrong.status_code == 403
    nothing = _post(client, "/actions/retry", {"csrf": _csrf(client), "confirm": "yes"})
    assert nothing.status_code == 400 and "select failed jobs" in nothing.text
    assert client.get("/actions/pause").status_code == 405
    assert dash.ops.cache().paused_queues("redis", ["default"]) == []
    access = Access()
    read_only = dash.client(read_only=True, access=access)
    page = read_only.get("/").text
    assert "read-only" in page and "/actions/" not in page and "/actions/" not in read_only.get("/failed").text
    refused = _post(read_only, "/actions/pause", {"csrf": access.csrf_token(), "queue": "default",
                                                   "confirm": "yes"})
    assert refused.status_code == 403 and dash.ops.cache().paused_queues("redis", ["default"]) == []
    assert not dash.journal.path.exists()


ACTION_FORMS = {"pause": {"queue": "default"}, "resume": {"queue": "default"}, "restart": {},
                "retry": {"all": "yes"}, "forget": {"all": "yes"}, "undo": {"journal": "laraq-retry-x.jsonl"},
                "cancel": {"batch": "9a-old"}}


def test_no_page_or_action_without_credentials_or_with_a_wrong_token(dash: Dash) -> None:
    assert set(ACTION_FORMS) == set(ACTIONS)  # every action is tried
    dash.seed()
    _batches_table(dash)
    access = Access(token="right-token")
    client = dash.client(base_url="http://dash.example.net", access=access)
    failed_before = len(dash.ops.failed_store().all())
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "Basic d3Jvbmc6d3Jvbmc="}):
        for path in [*GET_PAGES, "/queues/default/jobs/anything"]:
            answer = client.get(path, headers=headers)
            assert answer.status_code == 401, (path, headers)
            assert "EchoJob" not in answer.text and "boom" not in answer.text and "csrf" not in answer.text
        for name, form in ACTION_FORMS.items():
            answer = client.post(f"/actions/{name}", data={**form, "csrf": access.csrf_token(), "confirm": "yes"},
                                 headers=headers)
            assert answer.status_code == 401, (name, headers)
    wrong_cookie = TestClient(create_app(dash.ops, access=access, journal=dash.journal),
                              base_url="http://dash.example.net", cookies={"laraq_dashboard": "forged"})
    assert wrong_cookie.get("/").status_code == 401
    assert client.post("/login", data={"token": "wrong-token"}).status_code == 401
    assert dash.ops.cache().paused_queues("redis", ["default"]) == []
    assert len(dash.ops.failed_store().all()) == failed_before and not dash.journal.path.exists()
    assert _batch_times(dash, "9a-old") == (None, None)
    # the right token, as a header or through the sign-in page's cookie
    assert client.get("/", headers={"Authorization": "Bearer right-token"}).status_code == 200
    signed = client.post("/login", data={"token": "right-token"}, follow_redirects=False)
    assert signed.status_code == 303 and "right-token" not in signed.headers["set-cookie"]
    assert "httponly" in signed.headers["set-cookie"].lower() and "samesite=strict" in signed.headers["set-cookie"].lower()
    assert client.get("/queues/default").status_code == 200


def test_basic_auth_and_the_open_dashboard_answers_only_loopback_hosts(dash: Dash) -> None:
    dash.seed()
    basic = dash.client(base_url="http://dash.example.net", access=Access(basic=("ops", "pw")))
    denied = basic.get("/")
    assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Basic")
    assert basic.get("/", auth=("ops", "wrong")).status_code == 401
    assert basic.get("/failed", auth=("ops", "pw")).status_code == 200
    open_app = dash.client(base_url="http://attacker.example")  # DNS rebinding: a foreign Host
    assert open_app.get("/").status_code == 421
    assert dash.client(base_url="http://localhost:8089").get("/").status_code == 200
    with pytest.raises(ValueError, match="needs a token"):
        check_bind("0.0.0.0", Access())
    check_bind("0.0.0.0", Access(token="t"))
    check_bind("::1", Access())


def test_the_dashboard_mounts_inside_another_asgi_app(dash: Dash) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    dash.seed()
    outer = Starlette(routes=[Mount("/queues-ui", app=create_app(dash.ops, journal=dash.journal))])
    client = TestClient(outer, base_url=LOCAL)
    page = client.get("/queues-ui/")
    assert page.status_code == 200 and 'href="/queues-ui/queues/default"' in page.text
    assert client.get("/queues-ui/static/dashboard.js").status_code == 200


def test_cli_refuses_a_public_bind_without_credentials_and_serves_loopback(dash: Dash, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from laraq.cli import main

    refused = CliRunner().invoke(main, ["dashboard", "--env-file", str(dash.env_file), "--host", "0.0.0.0"],
                                 env={"LARAQ_DASHBOARD_TOKEN": ""})
    assert refused.exit_code == 2 and "needs a token" in refused.output
    dash.seed()
    served = serve(dash.env_file, tmp_path)
    try:
        import httpx

        answer = httpx.get(served.url, timeout=30)
        assert answer.status_code == 200 and 'data-queue="default"' in answer.text
    finally:
        served.stop()


class Served:
    """``laraq dashboard`` running in a subprocess."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve(env_file: Path, tmp_path: Path, *extra: str) -> Served:
    """Start ``laraq dashboard`` on a free port and wait for the URL it prints."""
    from conftest import free_port

    port = free_port()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "LARAQ_STATE_DIR": str(tmp_path / "served-state")}
    proc = subprocess.Popen([sys.executable, "-m", "laraq", "dashboard", "--env-file", str(env_file), "--port",
                             str(port), "--poll", "1", "--sample", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=root)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+/)", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"laraq dashboard did not print its URL: {line!r} {proc.stdout.read()}")
    url = match.group(1)
    import httpx

    for _ in range(600):  # the URL is printed before uvicorn binds: wait for the socket, not for a time
        try:
            httpx.get(url, timeout=5)
            break
        except httpx.TransportError:
            if proc.poll() is not None:
                raise AssertionError(f"laraq dashboard exited: {proc.stdout.read()}") from None
            import time

            time.sleep(0.05)
    return Served(proc, url)


def test_workers_page_shows_a_running_laraq_worker_and_its_job(dash: Dash, redis_server: Any,
                                                               workers: list[Any]) -> None:
    import threading
    import time

    from laraq.app import App
    from laraq.cli.work import build_worker, default_params
    from laraq.production.heartbeat import live_workers

    d = Dispatcher(dash.ops.queue)
    job = d.dispatch_job("App\\Jobs\\Slow", {"n": 1}, queue="default")
    d.dispatch_job("App\\Jobs\\Slow", {"n": 2}, queue="nobody")  # a queue no worker lists
    started, release = threading.Event(), threading.Event()
    app = App("dashboard")

    @app.handler("App\\Jobs\\Slow")
    def slow(command: Any, job: Any) -> None:
        started.set()
        release.wait(120)

    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": "dash_",
           "LARAQ_LARAVEL_VERSION": "12.67", "REDIS_QUEUE_RETRY_AFTER": "90"}
    worker = build_worker(default_params(sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                                         queue="default"), env=env, app=app)
    workers.append(worker)
    thread = threading.Thread(target=worker.daemon, daemon=True)
    thread.start()
    try:
        assert started.wait(60)
        client = dash.client()
        for _ in range(600):  # the heartbeat names the job once its next beat is written
            page = client.get("/workers").text
            if 'href="/queues/default/jobs/' + job.id in page:
                break
            time.sleep(0.1)
        (record,) = live_workers(dash.ops.queue.client, "dash_")
        assert f"<td>{record.host}</td>" in page and f">{record.pid}</td>" in page
        assert record.memory_mb is not None
        assert re.search(r'data-col="memory">\d+ MB<', page) is not None  # its resident memory at its last beat
        assert 'href="/queues/default/jobs/' + job.id in page and "App\\Jobs\\Slow</a> (default," in page
        assert 'id="unworked"' in page and "nobody" in page.split('id="unworked"')[1]
        reserved = client.get("/queues/default?state=reserved").text
        assert f"laraq {record.host} pid {record.pid}" in reserved
    finally:
        release.set()
        thread.join(60)


def test_templates_and_static_files_ship_in_the_wheel() -> None:
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["laraq"]
    package = root / "laraq"
    files = [p.relative_to(package).as_posix() for sub in ("templates", "static")
             for p in (package / "dashboard" / sub).iterdir()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), files


def test_schedule_page_lists_the_schedulers_entries(dash: Dash) -> None:
    from laraq.app import App
    from laraq.schedule.scheduler import Scheduler

    app = App("scheduled")
    app.schedule_job("App\\Jobs\\Report", {"kind": "daily"}, cron="0 6 * * *", name="daily-report")
    Scheduler(app, dash.ops.queue).sync()
    text = dash.client().get("/schedule").text
    row = re.search(r"<tr><td>daily-report</td><td>([^<]+)</td>", text)
    assert row is not None and row.group(1).endswith("06:00:00")  # the next due time, UTC


def test_transfers_page_names_a_held_move_without_its_password(dash: Dash, tmp_path: Path) -> None:
    import redis
    from conftest import RedisServer
    from test_migrate_held import hold_one

    from laraq.protocol.queue import RedisQueue

    (tmp_path / "other").mkdir()
    other = RedisServer(tmp_path / "other")
    try:
        src = RedisQueue(redis.Redis(port=dash.ops.queue.client.connection_pool.connection_kwargs["port"]),
                         prefix="old_", version="12.67")
        Dispatcher(src).dispatch_job("App\\Jobs\\EchoJob", {"i": 1})
        dst = RedisQueue(redis.Redis.from_url(f"redis://:s3cret-pw@127.0.0.1:{other.port}/0"), prefix="new_",
                         version="13")
        hold_one(src, dst)
        ops = Ops.load(str(dash.env_file), None, "old_")
        text = TestClient(create_app(ops, journal=dash.journal), base_url=LOCAL).get("/transfers").text
        assert '<table id="transfers">' in text and "<td>default</td><td class=\"num\">1</td>" in text
        assert "laraq move --recover default" in text and "s3cret-pw" not in text
    finally:
        other.stop()


def test_urls_on_a_page_lose_their_password() -> None:
    from laraq.dashboard.views import mask_url

    assert mask_url("to redis://u:pw@h:1/0 and rediss://:p%40ss@y/2 or redis://h") == \
        "to redis://u:***@h:1/0 and rediss://:***@y/2 or redis://h"


def test_a_search_on_a_big_queue_reads_a_bounded_part_and_says_so(dash: Dash, monkeypatch: pytest.MonkeyPatch) -> None:
    from laraq.dashboard import views

    monkeypatch.setattr(views, "SEARCH_LIMIT", 5)
    d = Dispatcher(dash.ops.queue)
    jobs = [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(8)]
    d.bulk(jobs)
    client = dash.client()
    near, far = _ids(jobs[1])[0], _ids(jobs[6])[0]
    found = client.get("/queues/default", params={"id": near}).text
    assert near in found and 'id="searched"' in found and f"laraq show {near}" in found
    missed = client.get("/queues/default", params={"id": far}).text
    assert "No pending jobs match" in missed and 'id="searched"' in missed
    lost = client.get(f"/queues/default/jobs/{far}")  # no hint: the job page's search is bounded too
    assert lost.status_code == 404 and 'id="searched"' in lost.text and f"laraq show {far}" in lost.text
    absent = client.get("/queues/default", params={"class": "App\\Jobs\\Nothing"}).text
    assert "No pending jobs match" in absent and "The class filter read the first 5 jobs" in absent
    present = client.get("/queues/default", params={"class": "App\\Jobs\\EchoJob"}).text
    assert present.count("App\\Jobs\\EchoJob</a>") == 5


def test_a_jobs_own_page_reads_where_the_list_page_saw_it(dash: Dash, monkeypatch: pytest.MonkeyPatch) -> None:
    from laraq.dashboard import views

    monkeypatch.setattr(views, "SEARCH_LIMIT", 2)
    d = Dispatcher(dash.ops.queue)
    jobs = [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(8)]
    d.bulk(jobs)
    later = [d.prepare_job("App\\Jobs\\Other", {"i": i}) for i in range(3)]
    for i, job in enumerate(later):
        dash.ops.queue.later(3600 + i, job.payload, "default")
    client = dash.client()
    far = _ids(jobs[6])[0]
    listed = client.get("/queues/default").text
    link = re.search(r'href="(/queues/default/jobs/' + far + r'\?state=pending&amp;at=6)"', listed)
    assert link is not None, listed
    url = link.group(1).replace("&amp;", "&")
    assert far in client.get(url).text
    keys = dash.ops.queue.keys("default")
    dash.ops.queue.client.lpop(keys.list, 3)  # three jobs taken: it moved to index 3, still found from 6
    page = client.get(url)
    assert page.status_code == 200 and far in page.text and "EchoJob" in page.text
    assert client.get(f"/queues/default/jobs/{far}").status_code == 404  # beyond the bounded search
    dash.ops.queue.client.lpush(keys.list, *[json.dumps({"put": "back", "n": n}) for n in range(5)])
    assert far in client.get(url).text  # pushed on to index 8 by jobs put back at the head: found after 6
    gone = client.get(url.replace(far, _ids(jobs[0])[0]))  # taken: not there, said with the way to look further
    assert gone.status_code == 404 and 'id="searched"' in gone.text
    third = _ids(later[2])[0]  # a delayed job is read from its score, past the bounded search
    delayed = client.get("/queues/default", params={"state": "delayed"}).text
    link = re.search(r'href="(/queues/default/jobs/' + third + r'\?state=delayed&amp;at=[0-9.e+]+)"', delayed)
    assert link is not None, delayed
    assert "App\\Jobs\\Other" in client.get(link.group(1).replace("&amp;", "&")).text
