"""LaravelSettings: stock env variables and defaults per Laravel line, .env parsing, Redis URL rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from laraq.config.settings import EnvFileError, LaravelSettings, make_redis, parse_env_text, parse_redis_url


def test_defaults_per_line() -> None:
    s8 = LaravelSettings.from_env({}, version="8")
    assert (s8.redis_prefix, s8.cache_prefix) == ("laravel_database_", "laravel_cache")
    assert (s8.cache_store, s8.queue_connection, s8.db_connection) == ("file", "sync", "mysql")
    assert (s8.db_database, s8.db_username, s8.db_port) == ("forge", "forge", 3306)
    s10 = LaravelSettings.from_env({}, version="10")
    assert s10.cache_prefix == "laravel_cache_"
    s11 = LaravelSettings.from_env({}, version="11")
    assert (s11.redis_prefix, s11.cache_prefix) == ("laravel_database_", "laravel_cache_")
    assert (s11.cache_store, s11.queue_connection, s11.db_connection) == ("database", "database", "sqlite")
    s13 = LaravelSettings.from_env({}, version="13")
    assert (s13.redis_prefix, s13.cache_prefix) == ("laravel-database-", "laravel-cache-")
    for s in (s8, s11, s13):
        assert (s.redis_host, s.redis_port, s.redis_db, s.redis_cache_db) == ("127.0.0.1", 6379, 0, 1)
        assert (s.redis_queue, s.retry_after, s.block_for, s.failed_driver) == ("default", 90, None, "database-uuids")
        assert s.failed_table == "failed_jobs" and s.connection_name == "redis"


def test_app_name_drives_prefixes() -> None:
    s = LaravelSettings.from_env({"APP_NAME": "My App"}, version="10")
    assert (s.redis_prefix, s.cache_prefix) == ("my_app_database_", "my_app_cache_")
    s = LaravelSettings.from_env({"APP_NAME": "My App"}, version="12")
    assert (s.redis_prefix, s.cache_prefix) == ("my-app-database-", "my-app-cache-")
    # an explicitly empty prefix stays empty (env() returns '')
    assert LaravelSettings.from_env({"REDIS_PREFIX": ""}, version="12").redis_prefix == ""


def test_version_specific_variables() -> None:
    env = {"CACHE_DRIVER": "redis", "CACHE_STORE": "array", "REDIS_QUEUE_RETRY_AFTER": "300",
           "DATABASE_URL": "mysql://u:p@db:3307/app", "DB_URL": "pgsql://x@pg/other",
           "APP_MAINTENANCE_DRIVER": "cache", "APP_MAINTENANCE_STORE": "redis",
           "REDIS_QUEUE_CONNECTION": "queue", "DB_CONNECTION": "mysql"}
    s10 = LaravelSettings.from_env(env, version="10.50")
    assert s10.cache_store == "redis" and s10.retry_after == 90
    assert s10.maintenance_driver == "file" and s10.redis_queue_connection == "default"
    assert s10.database().describe() == "mysql://u:********@db:3307/app"
    s11 = LaravelSettings.from_env(env, version="11")
    assert s11.cache_store == "array" and s11.retry_after == 300
    assert (s11.maintenance_driver, s11.maintenance_cache_store) == ("cache", "redis")
    assert s11.redis_queue_connection == "queue"
    assert s11.database().driver == "pgsql" and s11.database().host == "pg"


def test_laraq_overrides() -> None:
    s = LaravelSettings.from_env({"LARAQ_RETRY_AFTER": "120", "LARAQ_BLOCK_FOR": "5", "LARAQ_CONNECTION": "jobs",
                                  "LARAQ_LARAVEL_VERSION": "9.52"})
    assert str(s.version) == "9.52.0"
    assert (s.retry_after, s.block_for, s.connection_name) == (120, 5, "jobs")


def test_env_null_and_empty_literals() -> None:
    s = LaravelSettings.from_env({"REDIS_PASSWORD": "null", "QUEUE_FAILED_DRIVER": "null"}, version="8")
    assert s.redis_password is None and s.failed_driver is None
    s = LaravelSettings.from_env({"REDIS_PASSWORD": "(empty)"}, version="8")
    assert s.redis_password is None


ENV_TEXT = r"""
# comment
APP_NAME="My ${KIND} App"
KIND=queue
export APP_ENV=staging
APP_KEY=base64:abc/def+ghi= # inline comment
QUOTED='single ${KIND} $literal'
DQ="a\"b\\c\nd \$KIND"
HASH=value#not-a-comment
EMPTY=
EMPTY_QUOTED=""
MULTI="line1
line2"
REDIS_PASSWORD=s3cret
SPACED = spaced value
"""


def test_parse_env_text_like_phpdotenv() -> None:
    values = parse_env_text(ENV_TEXT, {"KIND": "worker"})
    assert values["APP_NAME"] == "My worker App"  # the real env wins, also for interpolation
    assert "KIND" not in values
    assert values["APP_ENV"] == "staging"
    assert values["APP_KEY"] == "base64:abc/def+ghi="
    assert values["QUOTED"] == "single ${KIND} $literal"
    assert values["DQ"] == 'a"b\\c\nd $KIND'
    assert values["HASH"] == "value#not-a-comment"
    assert values["EMPTY"] == "" and values["EMPTY_QUOTED"] == ""
    assert values["MULTI"] == "line1\nline2"
    assert values["SPACED"] == "spaced value"
    with pytest.raises(EnvFileError):
        parse_env_text('BROKEN="unterminated\n')
    with pytest.raises(EnvFileError):
        parse_env_text("not a line\n")


def test_env_file_and_base_path(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "APP_NAME=Shop\nREDIS_PORT=6390\nREDIS_PASSWORD=fromfile\nDB_CONNECTION=sqlite\n"
        "DB_DATABASE=database/app.sqlite\nQUEUE_FAILED_DRIVER=file\n")
    s = LaravelSettings.from_env({"REDIS_PASSWORD": "fromenv"}, env_file=tmp_path / ".env", version="11")
    assert s.base_path == tmp_path.resolve()
    assert s.redis_port == 6390 and s.redis_password == "fromenv"
    assert s.redis_prefix == "shop_database_"
    assert s.db_database == str(tmp_path.resolve() / "database/app.sqlite")
    assert s.failed_path == tmp_path.resolve() / "storage/framework/cache/failed-jobs.json"
    assert s.maintenance_file == tmp_path.resolve() / "storage/framework/down"


def test_version_detected_from_project(tmp_path: Path) -> None:
    app = tmp_path / "vendor/laravel/framework/src/Illuminate/Foundation/Application.php"
    app.parent.mkdir(parents=True)
    app.write_text("<?php class Application { const VERSION = '10.48.4'; }")
    (tmp_path / ".env").write_text("")
    s = LaravelSettings.from_env({}, env_file=tmp_path / ".env")
    assert str(s.version) == "10.48.4" and s.cache_prefix == "laravel_cache_"


def test_redis_url_parsing() -> None:
    assert parse_redis_url("rediss://user:p%40ss@cache.example:6380/3") == {
        "scheme": "tls", "host": "cache.example", "port": 6380, "username": "user", "password": "p@ss",
        "database": 3}
    assert parse_redis_url("tls://h") == {"scheme": "tls", "host": "h"}
    assert parse_redis_url("redis://h:1?database=4") == {"scheme": "tcp", "host": "h", "port": 1, "database": 4}


def test_redis_url_overrides_like_laravel() -> None:
    env = {"REDIS_URL": "redis://:secret@10.0.0.5:6390", "REDIS_DB": "2", "REDIS_CACHE_DB": "5",
           "REDIS_PASSWORD": "ignored"}
    s = LaravelSettings.from_env(env, version="12")
    assert s.redis_url_for("default") == "redis://:secret@10.0.0.5:6390/2"
    assert s.redis_url_for("cache") == "redis://:secret@10.0.0.5:6390/5"
    # a database in the URL path applies to both connections (Laravel merges the URL last)
    s = LaravelSettings.from_env({"REDIS_URL": "rediss://u:pw@h:1/7"}, version="12")
    assert s.redis_connection("cache").database == 7 and s.redis_connection("cache").tls
    s = LaravelSettings.from_env({"REDIS_PASSWORD": "pw", "REDIS_USERNAME": "app", "REDIS_SCHEME": "tls"})
    assert s.redis_url_for("default") == "rediss://app:pw@127.0.0.1:6379/0"


def test_secrets_never_shown() -> None:
    env = {"APP_KEY": "base64:TOPSECRETKEY", "REDIS_PASSWORD": "redispw", "DB_PASSWORD": "dbpw",
           "REDIS_URL": "redis://:urlpw@h:1/0", "DB_CONNECTION": "mysql", "APP_PREVIOUS_KEYS": "base64:OLDKEY"}
    s = LaravelSettings.from_env(env, version="11")
    for text in (repr(s), s.describe(), str(s), s.redis_url_for("default", mask=True), repr(s.redis_connection())):
        for secret in ("TOPSECRETKEY", "redispw", "dbpw", "urlpw", "OLDKEY"):
            assert secret not in text, (secret, text)
    assert s.app_previous_keys == ("base64:OLDKEY",)


def test_make_redis_connects(redis_server) -> None:  # type: ignore[no-untyped-def]
    s = LaravelSettings.from_env({"REDIS_PORT": str(redis_server.port)}, version="8")
    default, cache = make_redis(s), make_redis(s, "cache")
    default.set("probe", "0")
    cache.set("probe", "1")
    assert redis_server.client(0).get("probe") == b"0" and redis_server.client(1).get("probe") == b"1"
    redis_server.client(0).flushall()
