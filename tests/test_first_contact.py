"""First contact: version detection, the start-up banner / ``laraq config``, and every start-up fault as one
line with its exit code (``laraq.config.faults``) and the job kept.

Detection is checked on real app layouts: the Laravel 8 fixture on Debian's system-wide framework
(``/usr/share/php/Illuminate``, loaded by ``bootstrap/autoload.php``), a ``composer.lock``, and a
``vendor/`` outside the app.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from conftest import LARAVEL_APP, RedisServer, free_port, require

from laraq import exitcodes
from laraq.bus.dispatch import Dispatcher
from laraq.cli import main as cli
from laraq.config.settings import LaravelSettings, detect_version
from laraq.protocol.queue import RedisQueue

DEBIAN_FRAMEWORK = Path("/usr/share/php/Illuminate/Foundation/Application.php")
KEY = "base64:" + "A" * 43 + "="


def _app_dir(tmp_path: Path, *, env: str) -> Path:
    """A copy of the Laravel 8 fixture app (artisan, bootstrap/ on Debian's framework) with a .env."""
    app = tmp_path / "app"
    shutil.copytree(LARAVEL_APP, app, ignore=shutil.ignore_patterns("storage"))
    (app / ".env").write_text(env)
    return app


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    base = {"REDIS_URL": "", "REDIS_HOST": "", "REDIS_PORT": "", "REDIS_PASSWORD": "", "DB_CONNECTION": "",
            "CACHE_STORE": "", "CACHE_DRIVER": "", "APP_KEY": "", "LARAQ_LARAVEL_VERSION": ""}
    merged = {k: None for k in base} | (env or {})
    return CliRunner().invoke(cli, list(args), env=merged)  # type: ignore[arg-type]


# -- version detection ---------------------------------------------------------------------------------

def test_detects_debians_system_wide_framework(tmp_path: Path) -> None:
    require(DEBIAN_FRAMEWORK.exists(), "Debian's php-laravel-framework is not installed")
    app = _app_dir(tmp_path, env="APP_NAME=Laravel\n")
    found = detect_version(app)
    assert found.version is not None and found.version.major == 8
    assert str(DEBIAN_FRAMEWORK) in found.source
    settings = LaravelSettings.from_env({}, env_file=app / ".env")
    assert settings.version.major == 8 and settings.redis_prefix == "laravel_database_"
    assert settings.version_warning is None and "detected from" in settings.version_source


def test_detects_composer_lock_and_a_vendor_elsewhere(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "artisan").write_text("<?php\n")
    (locked / "composer.lock").write_text(json.dumps(
        {"packages": [{"name": "laravel/framework", "version": "v11.27.2"}]}))
    assert str(detect_version(locked).version) == "11.27.2"

    shared = tmp_path / "shared" / "vendor" / "laravel" / "framework" / "src" / "Illuminate" / "Foundation"
    shared.mkdir(parents=True)
    (shared / "Application.php").write_text("<?php class Application { const VERSION = '10.48.4'; }\n")
    app = tmp_path / "app"
    (app / "bootstrap").mkdir(parents=True)
    (app / "artisan").write_text(f"<?php\nrequire '{tmp_path}/shared/vendor/autoload.php';\n")
    found = detect_version(app)
    assert str(found.version) == "10.48.4" and "shared/vendor" in found.source

    relative = tmp_path / "rel"
    (relative / "bootstrap").mkdir(parents=True)
    (relative / "artisan").write_text("<?php\nrequire __DIR__.'/../shared/vendor/autoload.php';\n")
    assert str(detect_version(relative).version) == "10.48.4"


def test_detection_failure_is_said(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "artisan").write_text("<?php\n")
    (app / ".env").write_text("APP_NAME=Laravel\n")
    settings = LaravelSettings.from_env({}, env_file=app / ".env")
    assert settings.version.major == 13
    assert settings.version_warning and "not detected" in settings.version_warning and "--laravel" in \
        settings.version_warning
    result = _run("config", "--env-file", str(app / ".env"), "--redis-url", "redis://127.0.0.1:1/0")
    assert "WARNING: Laravel version not detected" in result.output


# -- the banner ------------------------------------------------------------------------------------------

def test_config_shows_the_banner_with_a_masked_password(redis_server: RedisServer,
                                                        redis_client: redis.Redis) -> None:
    url = f"redis://:s3cretpw@127.0.0.1:{redis_server.port}/0"
    redis_client.config_set("requirepass", "s3cretpw")
    try:
        result = _run("config", "--redis-url", url, "--laravel", "8", "--app", "examples.handlers:app", "--json")
    finally:
        redis.Redis(port=redis_server.port, password="s3cretpw").config_set("requirepass", "")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert "s3cretpw" not in result.output and info["redis"].startswith("redis://:********@")
    assert info["laravel"] == "8.83.26" and info["laravel_source"] == "--laravel"
    assert info["prefix"] == "laravel_database_" and info["queues"] == ["default"]
    assert info["retry_after"] == 90 and info["block_for"] is None
    assert "App\\Jobs\\PythonJob" in info["handlers"]
    assert info["failed_store"].startswith("local SQLite")  # 8's stock MySQL is not there


def test_banner_warns_when_jobs_wait_under_another_prefix(redis_server: RedisServer,
                                                          redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, prefix="laravel_database_", version="8")
    Dispatcher(queue).dispatch_string("App\\Handlers\\Foo@bar", {"n": 1})
    result = _run("config", "--redis-url", redis_server.url)  # the 13 profile: 'laravel-database-'
    assert result.exit_code == 0, result.output
    assert "are empty, but queue keys exist under prefix 'laravel_database_'" in result.output
    assert "--prefix" in result.output


# -- faults: one line, a documented exit code, the job kept --------------------------------------------

def _one_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def test_redis_down_and_wrong_port() -> None:
    result = _run("status", env={"REDIS_PORT": str(free_port())})
    assert result.exit_code == exitcodes.EXIT_REDIS_UNREACHABLE
    assert "cannot reach Redis" in _one_line(result.output)


def test_wrong_redis_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    try:
        server.client().config_set("requirepass", "rightpw")
        for env in ({"REDIS_PORT": str(server.port), "REDIS_PASSWORD": "wrong"}, {"REDIS_PORT": str(server.port)}):
            result = _run("status", env=env)
            assert result.exit_code == exitcodes.EXIT_REDIS_AUTH, result.output
            line = _one_line(result.output)
            assert "refused the credentials" in line and "REDIS_PASSWORD" in line and "HELLO" not in line
    finally:
        server.stop()


def test_database_down_for_laraq_failed(redis_server: RedisServer) -> None:
    env = {"REDIS_PORT": str(redis_server.port), "DB_CONNECTION": "mysql", "DB_PORT": str(free_port())}
    result = _run("failed", "--laravel", "8", env=env)
    assert result.exit_code == exitcodes.EXIT_DATABASE, result.output
    assert "database error" in _one_line(result.output)


def test_pause_without_a_cache_table(redis_server: RedisServer, tmp_path: Path) -> None:
    (tmp_path / "database").mkdir()
    sqlite3.connect(tmp_path / "database" / "database.sqlite").close()
    (tmp_path / ".env").write_text(f"CACHE_STORE=database\nREDIS_PORT={redis_server.port}\n")
    result = _run("pause", "--env-file", str(tmp_path / ".env"), "--laravel", "12", "default")
    assert result.exit_code == exitcodes.EXIT_DATABASE, result.output
    line = _one_line(result.output)
    assert "no such table: cache" in line and "migrate" in line


def _work(redis_server: RedisServer, *args: str, env: dict[str, str] | None = None) -> Any:
    return _run("work", "--no-supervise", "--once", "--laravel", "8", "--redis-url", redis_server.url, *args,
                env=env)


def _pushed(redis_client: redis.Redis) -> redis.Redis:
    queue = RedisQueue(redis_client, prefix="laravel_database_", version="8")
    Dispatcher(queue).dispatch_string("App\\Handlers\\Foo@bar", {"n": 1})
    return redis_client


@pytest.mark.parametrize("source, needle", [
    ("def broken(:\n    pass\n", "syntax error in"),
    ("import no_such_dependency_xyz\n", "No module named 'no_such_dependency_xyz'"),
    ("raise RuntimeError('config missing')\n", "importing it raised RuntimeError: config missing"),
])
def test_handler_module_that_cannot_load(redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, source: str, needle: str) -> None:
    _pushed(redis_client)
    name = f"broken_handlers_{abs(hash(source)) % 10_000}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = _work(redis_server, "--app", f"{name}:app")
    assert result.exit_code == exitcodes.EXIT_USAGE
    line = _one_line(result.output)
    assert needle in line and f"cannot load --app {name}:app" in line
    assert redis_client.llen("laravel_database_queues:default") == 1  # the job is kept


def test_malformed_app_key_fails_at_start(redis_server: RedisServer, redis_client: redis.Redis) -> None:
    _pushed(redis_client)
    result = _work(redis_server, "--app", "examples.handlers:app", env={"APP_KEY": "base64:not-a-key"})
    assert result.exit_code == exitcodes.EXIT_CONFIG, result.output
    line = _one_line(result.output)
    assert "APP_KEY is malformed" in line and "not-a-key" not in line
    assert redis_client.llen("laravel_database_queues:default") == 1
    assert KEY  # a well-formed key for contrast is accepted:
    ok = _work(redis_server, "--app", "examples.handlers:app", env={"APP_KEY": KEY})
    assert ok.exit_code == 0, ok.output


# -- the failed() hook runs once per real failure ------------------------------------------------------

def test_failed_hook_runs_once_when_the_failed_store_was_down(redis_server: RedisServer,
                                                               redis_client: redis.Redis, tmp_path: Path) -> None:
    from laraq.app import App
    from laraq.cli.work import build_worker, default_params
    from laraq.stores.failed import DatabaseUuidFailedJobStore

    app = App("hook")
    calls: list[str] = []

    @app.handler("App\\Handlers\\Broken@run")
    def broken(data: Any, job: Any) -> None:
        raise RuntimeError("boom")

    @app.failed("App\\Handlers\\Broken@run")
    def on_failed(data: Any, job: Any, exc: BaseException) -> None:
        calls.append(job.uuid)

    db_path = tmp_path / "not-yet" / "database.sqlite"  # its directory is missing: the store is down
    env = {"REDIS_PORT": str(redis_server.port), "DB_CONNECTION": "sqlite", "DB_DATABASE": str(db_path),
           "LARAQ_BASE_PATH": str(tmp_path), "CACHE_DRIVER": "redis"}
    queue = RedisQueue(redis_client, prefix="laravel_database_", version="8")
    Dispatcher(queue).dispatch_string("App\\Handlers\\Broken@run", {"n": 1}, tries=1)
    body = redis_client.lindex("laravel_database_queues:default", 0)

    def run_once() -> None:
        params = default_params(laravel="8", sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20)
        worker = build_worker(params, env=env, app=app)
        try:
            assert worker.run() == 0
        finally:
            worker.close()

    run_once()
    assert len(calls) == 1  # the failure is real: its hook runs once; only the row waits (parked)
    parked = redis_client.hvals("laravel_database_queues:default:failed-parked")
    assert [json.loads(p)["payload"].encode() for p in parked] == [body]  # kept, byte for byte
    assert not redis_client.exists("laravel_database_queues:default:delayed")  # not run again

    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    DatabaseUuidFailedJobStore(conn, "failed_jobs", dialect="sqlite").ensure_table()
    conn.close()
    run_once()
    run_once()
    assert len(calls) == 1
    rows = sqlite3.connect(db_path).execute("select payload from failed_jobs").fetchall()
    assert [r[0].encode() for r in rows] == [body]


def test_password_changed_under_a_running_worker_stops_with_exit_4(tmp_path: Path) -> None:
    import subprocess
    import sys

    from conftest import ROOT

    server = RedisServer(tmp_path)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app", "examples.handlers:app",
             "--laravel", "8", "--redis-url", server.url, "--sleep", "0.2", "--no-supervise"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        seen = ""
        while "processing [default]" not in seen:  # the worker's loop runs (EOF ends it if the worker died)
            line = proc.stderr.readline()
            assert line, seen
            seen += line
        admin = server.client()
        admin.config_set("requirepass", "rotated")
        admin.client_kill_filter(_type="normal", skipme=True)
        code = proc.wait(120)  # bounded: a few retries with backoff, then exit 4
        err = proc.stderr.read()
        assert code == exitcodes.EXIT_REDIS_AUTH, err[-3000:]
        assert "stopping: Redis at redis://127.0.0.1:" in err and "REDIS_PASSWORD" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
