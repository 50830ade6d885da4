"""The fixture Laravel app as a worker test needs it when PHP would only push the jobs: no PHP at all.

:class:`PyApp` has the shape of :class:`phpapp.PhpApp` that the worker tests use (``env``, ``release``,
``version``, ``prefix``, ``profile``, ``workdir``/``storage``, ``db_path``, ``log_path``, ``runs()``), so
``build_worker(..., env=app.env)``, ``popen_laraq(app, ...)`` and ``run_laraq(app, ...)`` work with it
unchanged. Its jobs are pushed by laraq's :class:`~laraq.bus.dispatch.Dispatcher` with the payload the
fixture app's ``tool.php dispatch <kind>`` writes for the same arguments, byte for byte apart from the
random ``uuid``/``id``, the clock and the encryption IV (``test_pyapp_php.py`` checks that against PHP on
every live Laravel line). ``failed_jobs`` is a SQLite file with the table Laravel's migration creates.

Use it where the Laravel line does not change what is tested; a test that compares with artisan, or needs
PHP to read or write the bytes, keeps :class:`phpapp.PhpApp`.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis
from phpapp import APP_ENV_PREFIXES, RELEASES, STOCK_CACHE_PREFIX, STOCK_PREFIX, TEST_APP_KEY

from laraq.bus.dispatch import Dispatcher, PreparedJob
from laraq.protocol.encryption import Encrypter
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.stores.failed import DatabaseUuidFailedJobStore

ECHO = "App\\Jobs\\EchoJob"
PYTHON_JOB = "App\\Jobs\\PythonJob"
PLAIN = "App\\Jobs\\PlainJob"
ENCRYPTED = "App\\Jobs\\EncryptedJob"
STRING_JOB = "App\\Handlers\\Foo@bar"

#: The oldest and the newest live line: a test whose outcome could differ by version runs on both.
ENDS = ("8", "13")
#: The line a test of the worker's own mechanics runs on.
NEWEST = "13"

#: ``EchoJob``'s settings properties and the payload keys ``RedisQueue::createObjectPayload`` reads them into.
_ECHO_SETTINGS = {"tries": "tries", "backoff": "backoff", "timeout": "timeout", "maxExceptions": "max_exceptions",
                  "failOnTimeout": "fail_on_timeout"}
#: ``PlainJob``'s properties in declaration order (private ones mangled with the class name), as PHP serializes them.
_PLAIN_PROPERTIES = {
    "title": "Héllo wörld ☃ 😀 \u2028 end",
    "path": 'dir/sub\\file "quoted"',
    "\0*\0nested": {"level1": {"level2": {"x": 1, "list": [1, 2, 3]}}, "tags": ["a", "b"], "map": {"k": None}},
    "\0App\\Jobs\\PlainJob\0secret": 's3/cr"et',
    "empty": [],
    "ratio": 0.1,
    "big": 9223372036854775807,
    "flag": True,
    "nothing": None,
}
#: ``tool.php dispatch string`` without ``--args``: the data of job ``n``.
_STRING_DEFAULT = {"big": 12345678901234567, "ratio": 0.1, "whole": 1.0, "empty": [], "text": "Ünïcode \u2028 ok",
                   "url": "https://example.com/a/b"}


def echo_properties(args: Any = None, mode: str = "ok", seconds: Any = 0,
                    settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``EchoJob``'s properties as ``new EchoJob($args, $mode, $seconds, $settings)`` has them, in
    declaration order (the settings are properties too)."""
    props: dict[str, Any] = {"args": [] if args is None else args, "mode": mode, "seconds": seconds,
                             "tries": None, "backoff": None, "timeout": None, "maxExceptions": None,
                             "failOnTimeout": False, "\0*\0note": "protected note",
                             "\0App\\Jobs\\EchoJob\0hidden": "private value"}
    for name, value in (settings or {}).items():
        if name not in props:
            raise ValueError(f"EchoJob has no setting {name!r}")
        props[name] = value
    return props


class PyApp:
    """The fixture app's settings, storage and ``failed_jobs`` for Laravel ``version``, with jobs pushed from Python."""

    def __init__(
        self,
        redis_port: int,
        *,
        version: str = NEWEST,
        prefix: str | None = None,
        queue: str = "default",
        retry_after: int | None = 90,
        cache_store: str = "redis",
        cache_prefix: str | None = None,
        app_key: str = TEST_APP_KEY,
        workdir: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if version not in RELEASES:
            raise ValueError(f"no fixture app for Laravel {version!r}")
        if cache_store == "database":
            raise ValueError("the database cache store needs the app's migrated tables: use phpapp.PhpApp")
        self.version = version
        self.release = RELEASES[version]
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="laraq-py-"))
        if workdir is None:
            weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self.storage = self.workdir / "storage"
        for sub in ("framework/cache/data", "framework/sessions", "framework/views", "logs", "app"):
            (self.storage / sub).mkdir(parents=True, exist_ok=True)
        self.db_path = self.workdir / "database.sqlite"
        conn = sqlite3.connect(self.db_path)
        DatabaseUuidFailedJobStore(conn, dialect="sqlite").ensure_table()
        conn.commit()
        conn.close()
        self.log_path = self.workdir / "runs.jsonl"
        self.log_path.touch()
        self.redis_port = redis_port
        self.prefix = STOCK_PREFIX[version] if prefix is None else prefix
        self.cache_prefix = STOCK_CACHE_PREFIX[version] if cache_prefix is None else cache_prefix
        self.cache_store = cache_store
        self.queue = queue
        self.app_key = app_key
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(APP_ENV_PREFIXES)}
        env.update({  # the keys PhpApp gives its app, with the same values
            "APP_NAME": "Laravel",
            "APP_ENV": "testing",
            "APP_KEY": app_key,
            "LARAQ_LOG": str(self.log_path),
            "REDIS_HOST": "127.0.0.1",
            "REDIS_PORT": str(redis_port),
            "REDIS_PREFIX": self.prefix,
            "REDIS_QUEUE": queue,
            "REDIS_QUEUE_RETRY_AFTER": "null" if retry_after is None else str(retry_after),
            "REDIS_QUEUE_BLOCK_FOR": "",
            "CACHE_DRIVER": cache_store,
            "CACHE_STORE": cache_store,
            "CACHE_PREFIX": self.cache_prefix,
            "DB_CONNECTION": "sqlite",
            "DB_DATABASE": str(self.db_path),
            "QUEUE_CONNECTION": "redis",
        })
        env.update(extra_env or {})
        self.env = env
        self._client = redis.Redis(port=redis_port)
        weakref.finalize(self, self._client.close)
        self.dispatcher = Dispatcher(
            RedisQueue(self._client, connection_name="redis", default_queue=queue, prefix=self.prefix,
                       retry_after=retry_after, version=self.release),
            encrypter=Encrypter.from_app_key(app_key))

    @property
    def profile(self) -> LaravelVersion:
        """laraq's version profile of this app's exact release."""
        return LaravelVersion.parse(self.release)

    # -- jobs ------------------------------------------------------------------------------------------

    def prepare(self, kind: str, queue: str | None = None, index: int = 0, /, *, delay: int | None = None,
                **args: Any) -> PreparedJob:
        """The job ``tool.php dispatch <kind> --queue=<queue> [--delay=<delay>] --args=<args>`` pushes
        (``index``: its place under ``--count``, the ``n`` of a string job given no data)."""
        d = self.dispatcher
        where: dict[str, Any] = {"queue": queue, "connection": "redis", "delay": delay}
        if kind == "echo":
            settings = dict(args.get("settings") or {})
            options = {_ECHO_SETTINGS[name]: value for name, value in settings.items() if name in _ECHO_SETTINGS}
            return d.prepare_job(ECHO, echo_properties(args.get("args"), args.get("mode", "ok"),
                                                       args.get("seconds", 0), settings), **where, **options)
        if kind == "python":
            return d.prepare_job(PYTHON_JOB, {"document": args.get("document", "report.pdf"),
                                              "options": args.get("options", []),
                                              "\0*\0owner": args.get("owner", "ops"),
                                              f"\0{PYTHON_JOB}\0token": args.get("token", "t0k3n")}, **where)
        if kind == "plain":
            return d.prepare_job(PLAIN, _PLAIN_PROPERTIES, **where)
        if kind == "encrypted":
            return d.prepare_job(ENCRYPTED, {"secret": args.get("secret", "top secret ✓")}, encrypt=True, **where)
        if kind == "string":
            return d.prepare_string(STRING_JOB, args or {"n": index, **_STRING_DEFAULT}, queue=queue, delay=delay)
        raise ValueError(f"no job kind {kind!r} here (tool.php has more: use phpapp.PhpApp for those)")

    def dispatch(self, kind: str, queue: str | None = None, /, *, count: int = 1, delay: int | None = None,
                 **args: Any) -> list[str]:
        """Push ``count`` jobs of ``kind`` in order (``delay``: onto ``:delayed``), as ``tool.php dispatch``;
        returns their ids."""
        jobs = [self.prepare(kind, queue, i, delay=delay, **args) for i in range(count)]
        pushed = [self.dispatcher.push(jobs[0])] if count == 1 else self.dispatcher.bulk(jobs)
        return [str(p.id) for p in pushed]

    # -- what happened ---------------------------------------------------------------------------------

    def runs(self) -> list[dict[str, Any]]:
        """The jobs the Python handlers ran so far (one JSON line each, ``test_worker_support.record``)."""
        complete = self.log_path.read_text().split("\n")[:-1]  # a line still being written is read next time
        return [json.loads(line) for line in complete if line.strip()]

    def failed_rows(self) -> list[dict[str, Any]]:
        """The ``failed_jobs`` rows, oldest first."""
        conn = sqlite3.connect(self.db_path)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute("SELECT * FROM failed_jobs ORDER BY id")]
        finally:
            conn.close()
