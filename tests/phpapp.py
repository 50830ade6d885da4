"""Python handle on the fixture Laravel apps (``fixtures/laravel8`` to ``laravel13``, ``laravel13-horizon548``).

Laravel 8 is Debian's ``php-laravel-framework``; 9 to 13 are the live trees in
``../shared/laravel-live/N/vendor`` (or ``$LARAQ_LARAVEL_LIVE/N/vendor``), which the app reaches through a
``vendor`` symlink made here at test time and never committed. ``version="13-h548"`` is the Laravel 13 app
on the ``13-horizon-5.48`` tree (Horizon 5.48.1 with its published config); every other line carries
Horizon 5.29.1. Each :class:`PhpApp` gets its own storage directory, SQLite database (migrated once per
process and version: ``failed_jobs``, ``cache``, ``cache_locks``, ``job_batches`` and, on 11+, the
skeleton's ``jobs``) and bootstrap cache paths, so tests never share state. ``tool()`` runs the app's
``tool.php`` (Laravel's own RedisQueue, Cache and Dispatcher) and returns the JSON it prints;
``artisan()`` runs real ``php artisan`` commands such as ``queue:work``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from laraq.protocol.versions import LaravelVersion

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
APP_PATH = FIXTURES / "laravel8"

#: The corpus' published test key. Never use it for anything real.
TEST_APP_KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="

#: The Laravel lines the suite runs live, and the exact release each fixture runs (for laraq's profiles).
VERSIONS = ("8", "9", "10", "11", "12", "13", "13-h548")
RELEASES = {"8": "8.83.26", "9": "9.52.22", "10": "10.50.3", "11": "11.56.0", "12": "12.67.0",
            "13": "13.26.1", "13-h548": "13.26.1"}
#: The Horizon release each line's tree carries (Debian's Laravel 8 has none).
HORIZON_RELEASES = {"8": None, "9": "5.29.1", "10": "5.29.1", "11": "5.29.1", "12": "5.29.1",
                    "13": "5.29.1", "13-h548": "5.48.1"}
#: The environment an app's process must not inherit from the test run (its own settings come from it).
APP_ENV_PREFIXES = ("REDIS_", "DB_", "APP_", "CACHE_", "QUEUE_", "HORIZON_", "LARAVEL_", "LARAQ_")
#: Stock key prefixes of each line's skeleton (Redis connection, cache store).
STOCK_PREFIX = {"8": "laravel_database_", "9": "laravel_database_", "10": "laravel_database_",
                "11": "laravel_database_", "12": "laravel-database-", "13": "laravel-database-",
                "13-h548": "laravel-database-"}
STOCK_CACHE_PREFIX = {"8": "laravel_cache", "9": "laravel_cache_", "10": "laravel_cache_",
                      "11": "laravel_cache_", "12": "laravel-cache-", "13": "laravel-cache-",
                      "13-h548": "laravel-cache-"}
#: Where a version's fixture app and live tree are when not ``laravelN`` and ``N``.
_FIXTURE_DIRS = {"13-h548": "laravel13-horizon548"}
_TREES = {"13-h548": "13-horizon-5.48"}
#: A line whose variant apps are another line's (``13-h548``'s custom app is ``laravel13-custom`` on the
#: Horizon 5.48 tree).
_CUSTOM_OF = {"13-h548": "13"}


def live_root() -> Path:
    """Where the live Laravel 9-13 trees are: ``$LARAQ_LARAVEL_LIVE`` or ``../shared/laravel-live``."""
    env = os.environ.get("LARAQ_LARAVEL_LIVE")
    return Path(env) if env else FIXTURES.parent.parent / "shared" / "laravel-live"


def live_tree(version: str) -> Path:
    """The ``vendor`` directory of a version's live tree."""
    return live_root() / _TREES.get(version, version) / "vendor"


def live_missing(version: str) -> str | None:
    """Why the given line cannot run here (``None`` when it can)."""
    if version not in VERSIONS:
        return f"no fixture app for Laravel {version!r} (have {', '.join(VERSIONS)})"
    if version == "8":
        if not Path("/usr/share/php/Illuminate/autoload.php").exists():
            return "Debian's Laravel 8 (php-laravel-framework) is not installed"
        return None
    tree = live_tree(version)
    if not (tree / "autoload.php").exists():
        return f"the live Laravel {version} tree is missing at {tree} (set LARAQ_LARAVEL_LIVE)"
    return None


def app_path(version: str) -> Path:
    """The fixture app of a Laravel line; for 9+ its ``vendor`` link to the live tree is made here."""
    path = FIXTURES / _FIXTURE_DIRS.get(version, f"laravel{version}")
    if version != "8":
        link = path / "vendor"
        target = live_tree(version).resolve()
        if not (link.is_symlink() and link.resolve() == target):
            tmp = path / f".vendor.{os.getpid()}.{threading.get_ident()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            os.replace(tmp, link)  # atomic, so parallel test processes never see a half-made link
    return path


def materialize_app(version: str, variant: str, dest: Path) -> Path:
    """A private copy of ``fixtures/laravel{version}-{variant}`` at ``dest``: its own ``bootstrap/cache``
    (for ``config:cache``), ``storage`` and ``.env``; ``config``/``database``/``routes`` link to the fixture,
    ``vendor`` to the line's live tree."""
    src = FIXTURES / f"laravel{_CUSTOM_OF.get(version, version)}-{variant}"
    if not src.is_dir():
        raise ValueError(f"no fixture app {src.name}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config", "database", "routes", "composer.json"):
        if (src / name).exists():
            (dest / name).symlink_to(src / name)
    shutil.copyfile(src / "artisan", dest / "artisan")
    (dest / "bootstrap" / "cache").mkdir(parents=True)
    for name in ("app.php", "providers.php"):
        if (src / "bootstrap" / name).exists():
            shutil.copyfile(src / "bootstrap" / name, dest / "bootstrap" / name)
    autoload = (src / "bootstrap" / "autoload.php").read_text()
    autoload = (autoload.replace("__DIR__.'/../vendor/autoload.php'", repr(str(dest / "vendor" / "autoload.php")))
                .replace("__DIR__.'/../../common/autoload.php'", repr(str(FIXTURES / "common" / "autoload.php")))
                .replace("dirname(__DIR__, 2)", repr(str(FIXTURES))))
    (dest / "bootstrap" / "autoload.php").write_text(autoload)
    (dest / "tool.php").write_text("<?php\ndefine('LARAQ_FIXTURE_BASE', __DIR__);\n"
                                   f"require {str(FIXTURES / 'common' / 'tool.php')!r};\n")
    for sub in ("framework/cache/data", "framework/sessions", "framework/views", "logs", "app"):
        (dest / "storage" / sub).mkdir(parents=True, exist_ok=True)
    if version != "8":
        (dest / "vendor").symlink_to(live_tree(version).resolve())
    return dest


_templates: dict[tuple[str, str], Path] = {}
_templates_lock = threading.Lock()


class PhpError(RuntimeError):
    pass


class PhpApp:
    def __init__(
        self,
        redis_port: int,
        *,
        version: str = "8",
        prefix: str | None = None,
        queue: str = "default",
        retry_after: int | None = 90,
        block_for: int | None = None,
        cache_prefix: str | None = None,
        cache_store: str = "redis",
        horizon: bool = False,
        app_key: str = TEST_APP_KEY,
        workdir: Path | None = None,
        extra_env: dict[str, str] | None = None,
        variant: str | None = None,
    ) -> None:
        if version not in VERSIONS:
            raise ValueError(f"no fixture app for Laravel {version!r} (have {', '.join(VERSIONS)})")
        self.version = version
        #: The exact release, as laraq's version profiles take it.
        self.release = RELEASES[version]
        #: The Horizon release in this line's tree (``None`` on Debian's Laravel 8).
        self.horizon_release = HORIZON_RELEASES[version]
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="laraq-php-"))
        if workdir is None:
            # Our own temporary directory: remove it when this handle goes away.
            weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        #: ``variant="custom"``: a private copy of ``fixtures/laravel{version}-custom`` (:func:`materialize_app`)
        self.variant = variant
        self.path = materialize_app(version, variant, self.workdir / "app") if variant else app_path(version)
        self.storage = self.workdir / "storage"
        for sub in ("framework/cache/data", "framework/sessions", "framework/views", "logs", "app"):
            (self.storage / sub).mkdir(parents=True, exist_ok=True)
        self.db_path = self.workdir / "database.sqlite"
        self.log_path = self.workdir / "runs.jsonl"
        self.log_path.touch()
        self.redis_port = redis_port
        self.prefix = STOCK_PREFIX[version] if prefix is None else prefix
        self.cache_prefix = STOCK_CACHE_PREFIX[version] if cache_prefix is None else cache_prefix
        self.cache_store = cache_store
        self.queue = queue
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(APP_ENV_PREFIXES)
        }
        env.update({
            "APP_NAME": "Laravel",
            "APP_ENV": "testing",
            "APP_KEY": app_key,
            "LARAQ_STORAGE": str(self.storage),
            "LARAVEL_STORAGE_PATH": str(self.storage),
            "LARAQ_LOG": str(self.log_path),
            "APP_SERVICES_CACHE": str(self.workdir / "services.php"),
            "APP_PACKAGES_CACHE": str(self.workdir / "packages.php"),
            "APP_CONFIG_CACHE": str(self.workdir / "config.php"),
            "APP_ROUTES_CACHE": str(self.workdir / "routes.php"),
            "APP_EVENTS_CACHE": str(self.workdir / "events.php"),
            "REDIS_HOST": "127.0.0.1",
            "REDIS_PORT": str(redis_port),
            "REDIS_PREFIX": self.prefix,
            "REDIS_QUEUE": queue,
            "REDIS_QUEUE_RETRY_AFTER": "null" if retry_after is None else str(retry_after),
            "REDIS_QUEUE_BLOCK_FOR": "" if block_for is None else str(block_for),
            "CACHE_DRIVER": cache_store,   # Laravel 8's name
            "CACHE_STORE": cache_store,    # Laravel 11+'s name
            "CACHE_PREFIX": self.cache_prefix,
            "DB_CONNECTION": "sqlite",
            "DB_DATABASE": str(self.db_path),
            "QUEUE_CONNECTION": "redis",
        })
        if variant:  # the private copy's own bootstrap/cache, where config:cache writes as in a real app
            for name in ("SERVICES", "PACKAGES", "CONFIG", "ROUTES", "EVENTS"):
                env.pop(f"APP_{name}_CACHE")
        if horizon:
            env["LARAQ_HORIZON"] = "1"
        if extra_env:
            env.update(extra_env)
        self.env = env
        if variant:
            (self.path / ".env").write_text("".join(f"{k}={v}\n" for k, v in sorted(self.laravel_env.items())))
        self._migrate()

    def _migrate(self) -> None:
        """Give this app a migrated SQLite file: migrated once per process and version, then copied."""
        key = (self.version, str(self.path))
        with _templates_lock:
            template = _templates.get(key)
            if template is None or not template.exists():
                tdir = Path(tempfile.mkdtemp(prefix=f"laraq-db{self.version}-"))
                template = tdir / "database.sqlite"
                template.touch()
                env = dict(self.env, DB_DATABASE=str(template))
                self._run_tool(("migrate-db",), env=env)
                _templates[key] = template
                atexit.register(shutil.rmtree, str(tdir), True)
        shutil.copyfile(template, self.db_path)

    @property
    def profile(self) -> LaravelVersion:
        """laraq's version profile of this app's exact release (what tests expect per version)."""
        return LaravelVersion.parse(self.release)

    @property
    def laravel_env(self) -> dict[str, str]:
        """The app's Laravel settings (REDIS_*, CACHE_*, DB_*, APP_*), as laraq reads them from a ``.env``."""
        return {k: v for k, v in self.env.items()
                if k.startswith(("REDIS_", "DB_", "APP_NAME", "APP_KEY", "CACHE_", "QUEUE_"))}

    # -- running PHP ------------------------------------------------------------------------------

    def tool(self, *args: str, stdin: bytes | None = None, timeout: float = 60) -> Any:
        """Run ``tool.php`` and return its JSON output."""
        return self._run_tool(args, stdin=stdin, timeout=timeout)

    def _run_tool(self, args: tuple[str, ...], *, stdin: bytes | None = None, timeout: float = 60,
                  env: dict[str, str] | None = None) -> Any:
        proc = subprocess.run(
            ["php", str(self.path / "tool.php"), *args],
            input=stdin, capture_output=True, env=env or self.env, timeout=timeout, cwd=self.path,
        )
        if proc.returncode != 0:
            raise PhpError(
                f"tool.php {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stderr.decode(errors='replace')}\n{proc.stdout.decode(errors='replace')}"
            )
        return json.loads(proc.stdout)

    def artisan(self, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``php artisan ...`` to completion."""
        proc = subprocess.run(
            ["php", str(self.path / "artisan"), *args],
            capture_output=True, text=True, env=self.env, timeout=timeout, cwd=self.path,
        )
        if check and proc.returncode != 0:
            raise PhpError(f"artisan {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
        return proc

    def popen_artisan(self, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``php artisan ...`` in the background (e.g. a long-running ``queue:work``)."""
        return subprocess.Popen(
            ["php", str(self.path / "artisan"), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env, cwd=self.path, **kwargs,
        )

    # -- helpers ------------------------------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """Jobs PHP handled so far (one JSON line each, written by the fixture jobs)."""
        # split on newlines only: str.splitlines() also splits inside a record at U+2028/U+2029 (which
        # Python's json.dumps(ensure_ascii=False) writes raw). A line still being appended by a running
        # worker has no newline yet: it is read next time, not half now.
        complete = self.log_path.read_text().split("\n")[:-1]
        return [json.loads(line) for line in complete if line.strip()]

    def pop(self, queue: str | None = None) -> dict[str, Any] | None:
        """Laravel's ``RedisQueue::pop``; returns ``{job, reserved, attempts, queue}`` with bytes."""
        res = self.tool("pop", f"--queue={queue or self.queue}")
        if res is None:
            return None
        import base64

        return {
            "job": base64.b64decode(res["job_b64"]),
            "reserved": base64.b64decode(res["reserved_b64"]),
            "attempts": res["attempts"],
            "queue": res["queue"],
        }

    @staticmethod
    def job_stdin(job: bytes, reserved: bytes) -> bytes:
        import base64

        return json.dumps({
            "job_b64": base64.b64encode(job).decode(),
            "reserved_b64": base64.b64encode(reserved).decode(),
        }).encode()
