"""``laraq status`` reads the paused state that real ``php artisan queue:pause`` (Laravel 12.67 and 13.26,
from ``../shared/laravel-live``) writes, per queue and (13.25+) for every queue.

The app is the smallest console app a slim skeleton makes: ``artisan`` + the framework's own default
config, with a ``vendor`` symlink to the live tree, created in a temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, require
from test_ops_cli import cli

pytestmark = pytest.mark.php

LIVE = Path(os.environ.get("LARAQ_LARAVEL_LIVE", ROOT.parent / "shared" / "laravel-live"))

ARTISAN = """<?php
use Illuminate\\Foundation\\Application;
use Symfony\\Component\\Console\\Input\\ArgvInput;
require __DIR__.'/vendor/autoload.php';
$app = Application::configure(basePath: __DIR__)
    ->withRouting(commands: __DIR__.'/routes/console.php')->withExceptions(function ($e) {})->create();
exit($app->handleCommand(new ArgvInput));
"""


def live_app(tmp_path: Path, line: str, port: int) -> tuple[Path, dict[str, str]]:
    vendor = LIVE / line / "vendor"
    require((vendor / "autoload.php").exists(), f"the live Laravel {line} tree is missing at {vendor}")
    base = tmp_path / f"laravel{line}"
    for sub in ("bootstrap/cache", "storage/framework/cache", "storage/framework/views", "storage/logs", "routes"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "vendor").symlink_to(vendor)
    (base / "artisan").write_text(ARTISAN)
    (base / "routes" / "console.php").write_text("<?php\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "DB_", "APP_", "CACHE_", "QUEUE_"))}
    env.update({"APP_KEY": "base64:srj9QVmuADIUchwd/iag/u7inuvvH26bDFBsn5w4ghI=", "REDIS_CLIENT": "phpredis",
                "REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(port), "CACHE_STORE": "redis",
                "QUEUE_CONNECTION": "redis", "DB_CONNECTION": "sqlite", "DB_DATABASE": str(base / "db.sqlite"),
                # a slim app without config/ gets the framework's own defaults, whose 12.x prefixes still
                # use underscores (the skeleton's config/ moved to hyphens): name them, as an app's .env does
                "REDIS_PREFIX": "laravel-database-", "CACHE_PREFIX": "laravel-cache-"})
    return base, env


def artisan(base: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["php", "artisan", *args], cwd=base, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("line,version", [("12", "12.67"), ("13", "13.26")])
def test_status_shows_what_queue_pause_wrote(php, redis_server, redis_client, tmp_path, line, version):
    base, env = live_app(tmp_path, line, redis_server.port)
    redis_client.rpush("laravel-database-queues:default", b'{"uuid":"a","attempts":0,"job":"x","data":{}}')
    redis_client.rpush("laravel-database-queues:emails", b'{"uuid":"b","attempts":0,"job":"x","data":{}}')
    laraq_env = {**env, "LARAQ_LARAVEL_VERSION": version}

    def paused() -> dict[str, bool]:
        result = CliRunner().invoke(cli, ["status", "--json", "--sample", "0"], env=laraq_env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return {q["queue"]: q["paused"] for q in json.loads(result.stdout)["queues"]}

    assert paused() == {"default": False, "emails": False}
    artisan(base, env, "queue:pause", "redis:emails")
    assert paused() == {"default": False, "emails": True}
    artisan(base, env, "queue:resume", "redis:emails")
    assert paused() == {"default": False, "emails": False}
    if line == "13":
        artisan(base, env, "queue:pause", "--all")
        assert paused() == {"default": True, "emails": True}
        artisan(base, env, "queue:resume", "--all")
        assert paused() == {"default": False, "emails": False}
