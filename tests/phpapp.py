"""Python handle on the Laravel 8 fixture app (``fixtures/laravel8``) used by the interop tests.

Each :class:`PhpApp` gets its own storage directory, SQLite database (with Laravel's ``failed_jobs``
table, created by Laravel's schema builder) and bootstrap cache paths, so tests never share state.
``tool()`` runs ``fixtures/laravel8/tool.php`` (Laravel's own RedisQueue, Cache and Dispatcher) and
returns the JSON it prints; ``artisan()`` runs real ``php artisan`` commands such as ``queue:work``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import Any

APP_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "laravel8"

#: The corpus' published test key. Never use it for anything real.
TEST_APP_KEY = "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI="


class PhpError(RuntimeError):
    pass


class PhpApp:
    def __init__(
        self,
        redis_port: int,
        *,
        prefix: str = "laravel_database_",
        queue: str = "default",
        retry_after: int | None = 90,
        block_for: int | None = None,
        cache_prefix: str = "laravel_cache",
        app_key: str = TEST_APP_KEY,
        workdir: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.path = APP_PATH
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="laraq-php-"))
        if workdir is None:
            # Our own temporary directory: remove it when this handle goes away.
            weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self.storage = self.workdir / "storage"
        for sub in ("framework/cache/data", "framework/sessions", "framework/views", "logs", "app"):
            (self.storage / sub).mkdir(parents=True, exist_ok=True)
        self.db_path = self.workdir / "database.sqlite"
        self.db_path.touch()
        self.log_path = self.workdir / "runs.jsonl"
        self.log_path.touch()
        self.redis_port = redis_port
        self.prefix = prefix
        self.queue = queue
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("REDIS_", "DB_", "APP_", "CACHE_", "QUEUE_"))
        }
        env.update({
            "APP_NAME": "Laravel",
            "APP_ENV": "testing",
            "APP_KEY": app_key,
            "LARAQ_STORAGE": str(self.storage),
            "LARAQ_LOG": str(self.log_path),
            "APP_SERVICES_CACHE": str(self.workdir / "services.php"),
            "APP_PACKAGES_CACHE": str(self.workdir / "packages.php"),
            "APP_CONFIG_CACHE": str(self.workdir / "config.php"),
            "APP_ROUTES_CACHE": str(self.workdir / "routes.php"),
            "APP_EVENTS_CACHE": str(self.workdir / "events.php"),
            "REDIS_HOST": "127.0.0.1",
            "REDIS_PORT": str(redis_port),
            "REDIS_PREFIX": prefix,
            "REDIS_QUEUE": queue,
            "REDIS_QUEUE_RETRY_AFTER": "null" if retry_after is None else str(retry_after),
            "REDIS_QUEUE_BLOCK_FOR": "" if block_for is None else str(block_for),
            "CACHE_DRIVER": "redis",
            "CACHE_PREFIX": cache_prefix,
            "DB_CONNECTION": "sqlite",
            "DB_DATABASE": str(self.db_path),
            "QUEUE_CONNECTION": "redis",
        })
        if extra_env:
            env.update(extra_env)
        self.env = env
        self.tool("migrate-db")

    # -- running PHP ------------------------------------------------------------------------------

    def tool(self, *args: str, stdin: bytes | None = None, timeout: float = 60) -> Any:
        """Run ``tool.php`` and return its JSON output."""
        proc = subprocess.run(
            ["php", str(self.path / "tool.php"), *args],
            input=stdin, capture_output=True, env=self.env, timeout=timeout, cwd=self.path,
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
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]

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
