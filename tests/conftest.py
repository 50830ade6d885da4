"""Shared test fixtures: a real ``redis-server`` on a free loopback port, real PHP, the wire corpus.

Tests never use a fake Redis. The session starts its own server (no persistence) and every test that
asks for ``redis_client`` gets it flushed. Tests that need real PHP/Laravel are marked ``php``; when
PHP is missing they are skipped locally, but under CI (``CI=true``) they fail, because ``.ci/run``
installs PHP and a skipped interop test there would hide a broken set-up.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
LARAVEL_APP = FIXTURES / "laravel8"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def corpus_dir() -> Path:
    """The Laravel wire corpus: ``fixtures/laravel-payloads`` in the repository, or ``$LARAQ_CORPUS``."""
    env = os.environ.get("LARAQ_CORPUS")
    return Path(env) if env else FIXTURES / "laravel-payloads"


def pytest_configure(config: pytest.Config) -> None:
    # laraq's no-project fallback failed-job store (laraq.cli.startup) must not write to the user's home
    if "LARAQ_STATE_DIR" not in os.environ:
        import tempfile

        os.environ["LARAQ_STATE_DIR"] = tempfile.mkdtemp(prefix="laraq-state-")
    # The corpus ships with the repository; without it whole corpus test modules would skip.
    if IN_CI and not (corpus_dir() / "manifest.json").exists():
        raise pytest.UsageError(f"the Laravel wire corpus is missing at {corpus_dir()} (set LARAQ_CORPUS)")


def require(condition: bool, reason: str) -> None:
    """Skip locally, fail in CI: a missing prerequisite in CI is a broken ``.ci/run``."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason)


def require_modules(*names: str) -> None:
    """At a test module's top: skip the module locally, fail it in CI, when one of ``names`` (an optional
    extra's package, e.g. the ``dashboard`` extra's starlette) is not installed."""
    import importlib.util

    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if not missing:
        return
    reason = f"not installed: {', '.join(missing)} (pip install -e '.[test,dashboard]')"
    if IN_CI:
        raise pytest.UsageError(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason, allow_module_level=True)


def free_port(below: int = 65536) -> int:
    """A free loopback port under ``below`` (a cluster node also needs its bus port, port + 10000)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port


class RedisServer:
    """A throw-away ``redis-server`` process bound to 127.0.0.1."""

    def __init__(self, workdir: Path, *extra_args: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found (bash .ci/run installs it)")
        cluster = "--cluster-enabled" in extra_args
        self.port = free_port(below=55536 if cluster else 65536)
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(workdir), *extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                break
            except (redis.ConnectionError, redis.ResponseError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis(port=self.port, db=db)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


QUEUE_PARTS = ("", ":reserved", ":delayed")


def queue_jobs(client: redis.Redis, key: str, parts: tuple[str, ...] = QUEUE_PARTS) -> list[bytes]:
    """The job bodies on a queue's list (``""``) and sorted sets (``":reserved"``, ``":delayed"``), read
    in one transaction. Read one after another, a job that moves between them meanwhile (popped, released,
    migrated from ``:delayed``) is seen twice or not at all, and a queue still busy can read as empty."""
    pipe = client.pipeline(transaction=True)
    for part in parts:
        if part:
            pipe.zrange(key + part, 0, -1)
        else:
            pipe.lrange(key, 0, -1)
    return [body for bodies in pipe.execute() for body in bodies]


def queue_count(client: redis.Redis, key: str, parts: tuple[str, ...] = QUEUE_PARTS) -> int:
    """How many jobs :func:`queue_jobs` reads."""
    return len(queue_jobs(client, key, parts))


def dump_redis(client: redis.Redis, dbs: tuple[int, ...] = (0,)) -> dict[str, object]:
    """Every key of the given databases with its type and full contents, for state comparisons."""
    state: dict[str, object] = {}
    pool_kwargs = client.connection_pool.connection_kwargs
    for db in dbs:
        c = redis.Redis(host=pool_kwargs.get("host", "127.0.0.1"), port=pool_kwargs["port"], db=db)
        for key in sorted(c.scan_iter(count=1000)):
            kind = c.type(key).decode()
            if kind == "list":
                value: object = c.lrange(key, 0, -1)
            elif kind == "zset":
                value = c.zrange(key, 0, -1, withscores=True)
            elif kind == "string":
                value = c.get(key)
            elif kind == "hash":
                value = c.hgetall(key)
            elif kind == "set":
                value = sorted(c.smembers(key))
            else:
                value = None
            state[f"{db}:{key.decode()}"] = (kind, value)
        c.close()
    return state


# -- PHP ----------------------------------------------------------------------------------------

def php_available() -> bool:
    return shutil.which("php") is not None and Path("/usr/share/php/Illuminate/autoload.php").exists()


def _require_php() -> str:
    require(php_available(), "PHP + Debian's Laravel 8 are not installed (bash .ci/run installs them)")
    probe = subprocess.run(["php", "-m"], capture_output=True, text=True, check=True).stdout
    require("redis" in probe.split(), "php-redis extension missing")
    return shutil.which("php") or "php"


@pytest.fixture(scope="session")
def php() -> str:
    return _require_php()


#: Every Laravel line the differential tests run live (8: Debian's packages; 9 to 13: the trees in
#: ../shared/laravel-live). ``LARAQ_LIVE_LINES=9,10`` narrows a local run to some of them.
LIVE_LINES = ["8", "9", "10", "11", "12", "13"]
_ONLY_LINES = [v for v in os.environ.get("LARAQ_LIVE_LINES", "").split(",") if v]
PARAM_LINES = [v for v in LIVE_LINES if v in _ONLY_LINES] if _ONLY_LINES else LIVE_LINES
#: Lines without ``queue:pause`` / ``queue:continue`` (added in Laravel 12).
NO_QUEUE_PAUSE = ("8", "9", "10", "11")


@pytest.fixture(scope="session", params=PARAM_LINES)
def laravel(request: pytest.FixtureRequest) -> str:
    """Each live Laravel line in turn (8: Debian's packages; 9 to 13: the trees in ../shared/laravel-live).

    A differential test takes this fixture and builds ``PhpApp(port, version=laravel)``; a missing tree
    skips locally and fails under CI.
    """
    version: str = request.param
    require_laravel(version)
    return version


#: Every differential module runs on every live line (compat-docs/README.md: 9 to 11 add 10 to 16 minutes of
#: ``-n 2`` on the shared 2-core machine). ``LARAQ_CORE_MATRIX=1`` narrows a local run: on the lines
#: below only the core interop and smoke modules run (``CORE_MODULES``), the others skip with that reason.
CORE_MATRIX_LINES = ("9", "10", "11")
#: The core differential modules: queue and payload interop both ways, dispatch run by artisan, the worker
#: lifecycle against artisan's, failed_jobs and the operator commands, signals, restart/maintenance/
#: stop-when-empty, models, and the smoke tests of each fixture app.
CORE_MODULES = frozenset({
    "test_queue_php", "test_dispatch_php", "test_worker_interop", "test_failed_php", "test_worker_signals",
    "test_ops_cli_php", "test_stop_when_empty_php", "test_models_php", "test_live_apps",
})


#: ``bash scripts/test --fast`` (``LARAQ_FAST=1``): the developer's loop runs only what needs no PHP: the
#: tests that take the ``php`` or ``laravel`` fixture, or are marked ``php``, are left out (CI runs them all).
FAST = os.environ.get("LARAQ_FAST", "").lower() in ("1", "true", "yes")


def _needs_php(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "php" in names or "laravel" in names or item.get_closest_marker("php") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FAST:
        kept = [item for item in items if not _needs_php(item)]
        config.hook.pytest_deselected(items=[item for item in items if _needs_php(item)])
        items[:] = kept
    if os.environ.get("LARAQ_CORE_MATRIX", "").lower() not in ("1", "true", "yes"):
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        line = callspec.params.get("laravel") if callspec is not None else None
        if line in CORE_MATRIX_LINES and Path(item.nodeid.split("::", 1)[0]).stem not in CORE_MODULES:
            item.add_marker(pytest.mark.skip(reason=(
                f"LARAQ_CORE_MATRIX=1: Laravel {line} runs the core interop modules only (a narrowed local run)")))


def skip_without_queue_pause(version: str) -> None:
    """Laravel 8 to 11 have no ``queue:pause``/``queue:continue``: a test of them skips there (a fact
    of the version, so a skip even under CI)."""
    if version.split(".")[0] in NO_QUEUE_PAUSE:
        pytest.skip(f"Laravel {version} has no queue:pause/queue:continue (added in Laravel 12)")


def require_laravel(version: str) -> None:
    """PHP and the given live Laravel line must be here: skip locally, fail under CI."""
    from phpapp import live_missing

    _require_php()
    reason = live_missing(version)
    require(reason is None, reason or "")


def load_json(path: Path) -> object:
    return json.loads(path.read_bytes())


# -- database servers (MariaDB/PostgreSQL for the failed-job and cache stores) --------------------------

@pytest.fixture(scope="session")
def mariadb() -> Iterator[object]:
    from dbservers import MariaDBServer, mariadb_unavailable

    reason = mariadb_unavailable()
    require(reason is None, reason or "")  # .ci/run installs mariadb-server: a skip there hides a broken set-up
    server = MariaDBServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    from dbservers import PostgresServer, postgres_unavailable

    reason = postgres_unavailable()
    require(reason is None, reason or "")  # .ci/run installs postgresql
    server = PostgresServer()
    yield server
    server.stop()


# -- the fixture app without PHP ---------------------------------------------------------------------------

@pytest.fixture
def pyapp(request: pytest.FixtureRequest, redis_client: redis.Redis, redis_server: RedisServer,
          monkeypatch: pytest.MonkeyPatch) -> object:
    """The fixture app's settings and ``failed_jobs`` with jobs pushed from Python (``pyapp.PyApp``), for a
    test where PHP would only be the job source. The Laravel line is the newest unless the test asks for
    others with ``@pytest.mark.parametrize("pyapp", ENDS, indirect=True)``. The in-process handlers of
    ``test_worker_support`` record their runs in its log."""
    from pyapp import NEWEST, PyApp

    app = PyApp(redis_server.port, version=getattr(request, "param", NEWEST))
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


# -- in-process workers ------------------------------------------------------------------------------------

def in_process_worker(redis_server: RedisServer, app: Any, workers: list, *, queue: str, **opts: Any) -> Any:
    """A worker built in this process as ``laraq work`` builds it, on ``redis_server``'s queue ``queue``:
    the Laravel 8 profile, ``--sleep 0 --stop-when-empty --quiet``, the array cache, no ``--memory`` limit in
    reach; ``opts`` are more ``laraq work`` options, or these changed. Appended to ``workers`` (closed after
    the test)."""
    from laraq.cli.work import build_worker, default_params

    params = default_params(**{"laravel": "8", "sleep": 0, "stop_when_empty": True, "quiet": True, "queue": queue,
                               "redis_url": redis_server.url, "prefix": "laravel_database_", "memory": 1 << 20,
                               **opts})
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "CACHE_DRIVER": "array"}
    worker = build_worker(params, env=env, app=app)
    workers.append(worker)
    return worker


@pytest.fixture
def workers() -> Iterator[list]:
    """Workers a test builds (append them); their slot threads and loops are closed afterwards."""
    made: list = []
    yield made
    for w in made:
        w.close()
