"""The app's own configuration without PHP: the ``var_export`` reader (real PHP output, hostile input) and
the overlay of an app's config on the ``.env`` settings (sources, ``LARAQ_*`` precedence, provenance).

The differential tests against real apps are in ``test_app_config_php.py``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import require

from laraq.config.appconfig import (
    BOOTED,
    CACHED,
    EXPORT_FORMAT,
    EXPORTED,
    AppConfig,
    AppConfigError,
    find_app_path,
    load_app_config,
    read_exported_config,
)
from laraq.config.effective import apply_app_config, effective_settings, queue_connection_name
from laraq.config.provenance import setting_facts
from laraq.config.settings import LaravelSettings
from laraq.config.varexport import MAX_DEPTH, VarExportError, parse_var_export, read_var_export_file

# -- var_export ---------------------------------------------------------------------------------------------


def php_export(value_php: str) -> str:
    """What ``config:cache`` writes for a PHP value (real PHP)."""
    require(shutil.which("php") is not None, "php is not installed")
    out = subprocess.run(["php", "-r", f"echo '<?php return '.var_export({value_php}, true).';'.PHP_EOL;"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_real_var_export_output_round_trips() -> None:
    text = php_export(r"""['app' => ['name' => "it's \\ a \"test\"\0end\nline", 'n' => -3, 'f' => 1.5,
        'big' => 1e30, 'z' => -0.0, 'inf' => INF, 't' => true, 'f2' => false, 'nil' => null,
        'list' => [1, 'two', [3]], 'empty' => [], 5 => 'int key', 'ü' => 'ünï ☃']]""")
    value = parse_var_export(text)
    app = value["app"]
    assert app["name"] == 'it\'s \\ a "test"\0end\nline'
    assert (app["n"], app["f"], app["big"], app["t"], app["f2"], app["nil"]) == (-3, 1.5, 1e30, True, False, None)
    assert math.copysign(1, app["z"]) == -1 and app["inf"] == math.inf
    assert app["list"] == [1, "two", [3]] and app["empty"] == [] and app[5] == "int key"
    assert app["ü"] == "ünï ☃"


def test_a_real_cached_config_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.php"
    path.write_text(php_export("['queue' => ['default' => 'jobs', 'connections' => ['jobs' => "
                               "['driver' => 'redis', 'retry_after' => 300]]]]"))
    assert read_var_export_file(path) == {"queue": {"default": "jobs", "connections": {
        "jobs": {"driver": "redis", "retry_after": 300}}}}


@pytest.mark.parametrize("text, what", [
    ("<?php return array ( 'a' => \\Closure::__set_state(array()), );", "Closure"),
    ("<?php return array ( 'a' => (object) array ( ), );", "object"),
    ("<?php return array ( 'a' => \\(object) array ( ), );", "object"),
    ("<?php return array ( 'a' => \\App\\Enums\\Suit::Hearts, );", "App"),
    ("<?php return array ( 'a' => PHP_EOL, );", "PHP_EOL"),
    ("<?php return array ( 'a' => system('id'), );", "system"),
    ("<?php return array ( 'a' => \"$x\", );", "unexpected character"),
    ("<?php return array ( 'a' => '' . \"{$x}\", );", "variable"),
    ("<?php return array ( 'a' => 'unterminated );", "unterminated"),
    ("<?php return array ( 'a' => 1 ", "expected ',' or ')'"),
    ("<?php return array ( 'a' => 1, ); echo 'x';", "after the value"),
    ("<?php return array ( true => 1, );", "array key"),
    ("<?php return array ( 'a' => 1 2, );", "expected ',' or ')'"),
    ("<?php return array ( 'a' => `id`, );", "unexpected character"),
    ("<?php return include '/etc/passwd';", "include"),
    ("", "end of file"),
])
def test_hostile_or_foreign_input_is_refused_with_the_offset(text: str, what: str) -> None:
    with pytest.raises(VarExportError) as info:
        parse_var_export(text, "bootstrap/cache/config.php")
    message = str(info.value)
    assert message.startswith("bootstrap/cache/config.php: ") and "offset" in message
    assert what in message


def test_nesting_and_size_are_bounded(tmp_path: Path) -> None:
    deep = "<?php return " + "array ( 0 => " * (MAX_DEPTH + 5) + "1" + ", )" * (MAX_DEPTH + 5) + ";"
    with pytest.raises(VarExportError, match="nested deeper"):
        parse_var_export(deep)
    fine = "<?php return " + "array ( 0 => " * 10 + "1" + ", )" * 10 + ";"
    assert parse_var_export(fine) == [[[[[[[[[[1]]]]]]]]]]
    big = tmp_path / "config.php"
    with big.open("wb") as fh:
        fh.truncate(17 * 1024 * 1024)
    with pytest.raises(VarExportError, match="larger than"):
        read_var_export_file(big)


def test_invalid_utf8_bytes_are_kept() -> None:
    assert parse_var_export("<?php return array ( 'k' => '\xe9', );") == {"k": "\xe9"}


# -- the overlay --------------------------------------------------------------------------------------------

CUSTOM: dict[str, Any] = {
    "app": {"timezone": "Europe/Paris", "name": "Acme", "key": "base64:" + "A" * 44},
    "database": {
        "default": "sqlite",
        "connections": {"sqlite": {"driver": "sqlite", "database": "/srv/db.sqlite"}},
        "redis": {
            "client": "phpredis",
            "options": {"prefix": "acme_q:", "cluster": "redis"},
            "default": {"host": "10.0.0.5", "port": "6380", "database": 0, "password": "s3cret"},
            "cache-store": {"host": "10.0.0.5", "port": 6380, "database": 3,
                            "options": {"prefix": "acme_c:"}},
        },
    },
    "queue": {
        "default": "sync",
        "connections": {"sync": {"driver": "sync"},
                        "jobs": {"driver": "redis", "connection": "default", "queue": "acme-work",
                                 "retry_after": 300, "block_for": 5, "after_commit": True,
                                 "migration_batch_size": 50}},
        "failed": {"driver": "database-uuids", "database": "sqlite", "table": "acme_failed_jobs"},
        "batching": {"database": "sqlite", "table": "acme_batches"},
    },
    "cache": {"default": "shared", "prefix": "acme-cache-",
              "stores": {"shared": {"driver": "redis", "connection": "cache-store", "lock_connection": "default"}}},
    "horizon": {"prefix": "acme_horizon:", "use": "default"},
}


def custom(values: dict[str, Any] | None = None, source: str = BOOTED) -> AppConfig:
    return AppConfig(values or CUSTOM, source, "/srv/app")


def base(env: dict[str, str] | None = None, version: str = "13") -> LaravelSettings:
    from laraq.config.provenance import env_provenance

    settings = LaravelSettings.from_env(env or {"REDIS_PREFIX": "stock_", "CACHE_PREFIX": "stock-cache-"},
                                        version=version)
    import dataclasses

    return dataclasses.replace(settings, provenance=env_provenance(settings))


def test_every_value_comes_from_the_apps_config() -> None:
    s = apply_app_config(base(), custom())
    assert (s.app_timezone, s.redis_prefix, s.connection_name, s.redis_queue) == (
        "Europe/Paris", "acme_q:", "jobs", "acme-work")
    assert (s.retry_after, s.block_for, s.after_commit, s.migration_batch_size) == (300, 5, True, 50)
    assert (s.cache_store, s.cache_store_driver(), s.cache_prefix) == ("shared", "redis", "acme-cache-")
    assert (s.redis_cache_connection, s.redis_cache_lock_connection) == ("cache-store", "default")
    assert (s.failed_table, s.failed_database, s.batch_table) == ("acme_failed_jobs", "sqlite", "acme_batches")
    assert s.horizon_prefix == "acme_horizon:"
    queue = s.redis_connection(s.redis_queue_connection)
    assert (queue.host, queue.port, queue.database, queue.password) == ("10.0.0.5", 6380, 0, "s3cret")
    assert s.redis_connection("cache-store").database == 3 and s.redis_cache_db == 3
    assert s.database("sqlite").database == "/srv/db.sqlite"
    assert s.provenance["queue.queue"] == BOOTED and s.app_config_source == "booted app (/srv/app)"
    assert "s3cret" not in repr(s) and "s3cret" not in s.describe()


def test_laraq_variables_still_win() -> None:
    env = {"LARAQ_REDIS_PREFIX": "mine:", "LARAQ_QUEUE": "py", "LARAQ_RETRY_AFTER": "60",
           "LARAQ_FAILED_TABLE": "f", "LARAQ_CACHE_PREFIX": "c-"}
    s = apply_app_config(base(env), custom())
    assert (s.redis_prefix, s.redis_queue, s.retry_after, s.failed_table, s.cache_prefix) == (
        "mine:", "py", 60, "f", "c-")
    assert s.provenance["redis.prefix"] == "LARAQ_REDIS_PREFIX" and s.provenance["queue.queue"] == "LARAQ_QUEUE"


def test_the_queue_connection_by_name_or_the_apps_default() -> None:
    config = custom()
    # queue.default is 'sync': the first redis connection is the one laraq can work
    assert queue_connection_name(config, None) == "jobs"
    values = json.loads(json.dumps(CUSTOM))
    values["queue"]["default"] = "other"
    values["queue"]["connections"]["other"] = {"driver": "redis", "connection": "cache-store", "queue": "o"}
    config = custom(values)
    assert queue_connection_name(config, None) == "other"
    s = apply_app_config(base(), config)
    assert (s.connection_name, s.redis_queue, s.redis_prefix) == ("other", "o", "acme_c:")  # per-connection prefix
    s = apply_app_config(base(), config, connection="jobs")
    assert (s.redis_queue, s.redis_prefix) == ("acme-work", "acme_q:")


def test_an_unknown_connection_is_a_clear_error() -> None:
    s = apply_app_config(base(), custom())
    with pytest.raises(ValueError, match=r"no connection 'nope' \(it has: default, cache-store\)"):
        s.redis_connection("nope")


def test_provenance_marks_assumed_values() -> None:
    s = base({"REDIS_PREFIX": "p_"})
    facts = {f["setting"]: f for f in setting_facts(s)}
    assert facts["redis.prefix"]["source"] == "environment REDIS_PREFIX" and not facts["redis.prefix"]["assumed"]
    assert facts["queue.retry_after"]["assumed"] and facts["failed.table"]["assumed"]
    s = apply_app_config(s, custom())
    facts = {f["setting"]: f for f in setting_facts(s)}
    assert not any(f["assumed"] for k, f in facts.items() if k not in ("cache.table",)), facts


def test_env_file_values_are_labelled(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("REDIS_PREFIX=fromfile_\n")
    s = effective_settings({"CACHE_PREFIX": "fromenv-"}, env_file=env_file, version="13")
    assert s.provenance["redis.prefix"] == ".env REDIS_PREFIX"
    assert s.provenance["cache.prefix"] == "environment CACHE_PREFIX"
    assert s.app_config_source is None  # no artisan beside the .env: no app to read


# -- the sources and their order ----------------------------------------------------------------------------

def make_app(tmp_path: Path, cached: dict[str, Any] | None = None) -> Path:
    app = tmp_path / "app"
    (app / "bootstrap" / "cache").mkdir(parents=True)
    (app / "artisan").write_text("<?php\nrequire __DIR__.'/vendor/autoload.php';\n")
    if cached is not None:
        (app / "bootstrap" / "cache" / "config.php").write_text(
            "<?php return " + _export(cached) + ";\n")
    return app


def _export(value: Any) -> str:
    if isinstance(value, dict):
        return "array (\n" + "".join(f"  {_export(k)} => {_export(v)},\n" for k, v in value.items()) + ")"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_the_cached_config_comes_first_and_the_env_file_finds_the_app(tmp_path: Path) -> None:
    app = make_app(tmp_path, cached=CUSTOM)
    (app / ".env").write_text("REDIS_PREFIX=stock_\n")
    exported = tmp_path / "exported.json"
    exported.write_text(json.dumps({"format": EXPORT_FORMAT, "config": {"app": {"timezone": "Asia/Tokyo"}}}))
    s = effective_settings({}, env_file=app / ".env", version="13", app_config=exported)
    assert s.app_config_source == f"{CACHED} ({app / 'bootstrap' / 'cache' / 'config.php'})"
    assert (s.redis_prefix, s.app_timezone) == ("acme_q:", "Europe/Paris")
    assert any("not used" in n for n in s.config_notes)


def test_app_config_cache_env_var_moves_the_cached_file(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    elsewhere = tmp_path / "cfg.php"
    elsewhere.write_text("<?php return " + _export(CUSTOM) + ";")
    config = load_app_config(app, {"APP_CONFIG_CACHE": str(elsewhere)})
    assert config is not None and config.source == CACHED and config.location == str(elsewhere)


def test_an_exported_file_when_the_app_cannot_boot(tmp_path: Path) -> None:
    app = make_app(tmp_path)  # no vendor/: booting fails, with a note
    exported = tmp_path / "exported.json"
    exported.write_text(json.dumps({"format": EXPORT_FORMAT, "config": CUSTOM}))
    config = load_app_config(app, {}, exported=exported)
    assert config is not None and config.source == EXPORTED
    assert any("autoloader" in n for n in config.notes)
    s = effective_settings({"LARAQ_APP_CONFIG": str(exported)}, version="13")
    assert s.redis_queue == "acme-work" and s.provenance["queue.queue"] == EXPORTED


def test_a_broken_cached_config_is_an_error_not_a_guess(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    (app / "bootstrap" / "cache" / "config.php").write_text("<?php return array ( 'a' => foo(), );")
    with pytest.raises(AppConfigError, match="config.php: 'foo'"):
        effective_settings({}, app_path=app, version="13")


def test_an_exported_file_must_be_ours(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{}")
    with pytest.raises(AppConfigError, match="not a file written by laraq config --from"):
        read_exported_config(path)


def test_an_explicit_app_path_must_be_an_app(tmp_path: Path) -> None:
    with pytest.raises(AppConfigError, match="is not a Laravel app"):
        find_app_path(None, tmp_path, {})
    assert find_app_path(tmp_path / ".env", None, {}) is None


# -- the README's banner sample -----------------------------------------------------------------------------

def test_readme_banner_sample_is_the_real_banner(redis_client: Any, redis_server: Any, tmp_path: Path) -> None:
    """``bash scripts/run``'s first banner (no app, Redis on its default port): the README shows it as is."""
    import os
    import re
    import sys

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    sample = re.search(r"```\n(laraq \d[^\n]*\n  Laravel profile.*?)```", readme, re.S)
    assert sample, "the README has no banner sample"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(root),
           "REDIS_PORT": str(redis_server.port)}
    proc = subprocess.run([sys.executable, "-m", "laraq.cli", "config", "--app", "examples.handlers:app"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    banner = proc.stdout.split("\nsettings (value, where it came from):")[0] + "\n"
    # the test's Redis port stands for the default one (scripts/run sets no REDIS_PORT), its HOME for /root
    banner = (banner.replace(f":{redis_server.port}/", ":6379/").replace("[environment REDIS_PORT]", "[assumed]")
              .replace(str(tmp_path), "/root"))
    from laraq.cli.startup import console_lines_path, event_loop_path, unserialize_path

    expected = sample.group(1)
    expected = expected.replace("C (laraq._speedups)\n  console", unserialize_path() + "\n  console")
    expected = re.sub(r"(console lines    )[^\n]*", lambda m: m.group(1) + console_lines_path(), expected)
    expected = re.sub(r"(event loop       )[^\n]*", lambda m: m.group(1) + event_loop_path(), expected)
    assert banner == expected


def test_doctor_says_where_the_config_came_from_and_what_was_assumed() -> None:
    from laraq.ops.doctor import config_findings

    stock = config_findings(base({"UNRELATED": "1"}))
    assert stock[0].level == "info" and "was not read" in stock[0].title and "--app-path" in stock[0].fix
    assert any(f.level == "info" and "assumed" in f.title and "redis.prefix" in f.title for f in stock)
    read = config_findings(apply_app_config(base(), custom()))
    assert read[0].level == "ok" and "booted app (/srv/app)" in read[0].title
    assert "failed.table = 'acme_failed_jobs' (booted app)" in read[0].detail
    noted = config_findings(apply_app_config(base(), AppConfig(CUSTOM, BOOTED, "/srv/app", ("boot failed: x",))))
    assert any(f.level == "warn" and f.detail == "boot failed: x" for f in noted)
