r"""Shared pieces of the worker tests: Python handlers that mirror the fixture app's PHP jobs, and helpers
that run ``laraq work`` as a real process next to ``php artisan queue:work``.

The handlers append one JSON line per run to ``$LARAQ_LOG`` - the file the PHP jobs write to - with
``runner: python``, so ``PhpApp.runs()`` lists what both languages ran, in order. ``EchoJob`` is
mirrored mode for mode (ok / fail / release / sleep / fail-until), so the same job with the same
flags can be run by artisan and by laraq and the outcomes compared.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from laraq.app import App
from laraq.bus.job import Job
from laraq.bus.rate_limiter import Limit
from laraq.protocol.phparray import PHPArray
from laraq.protocol.serializer import PHPEnum, PHPObject, to_datetime

ROOT = Path(__file__).resolve().parent.parent


def record(job: Job, **extra: Any) -> None:
    path = os.environ.get("LARAQ_LOG")
    if not path:
        return
    line = {"runner": "python", "class": job.payload.command_name or job.name, "uuid": job.uuid,
            "attempts": job.attempts, "queue": job.queue, "pid": os.getpid(), **extra}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


def plain(value: Any) -> Any:
    """PHP values as JSON-friendly Python (enums as ``Class::Case``, objects by class)."""
    if isinstance(value, PHPEnum):
        return str(value)
    if isinstance(value, PHPObject):
        return {"class": value.class_name}
    if isinstance(value, PHPArray) and value.is_list:  # handlers get PHPArray (laraq.protocol.phparray)
        return [plain(v) for v in value.values()]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _echo(command: PHPObject, job: Job, **extra: Any) -> float:
    """Record an EchoJob run and apply its mode; returns seconds to sleep for mode=sleep."""
    record(job, args=plain(command.args), mode=command.mode, note=command.note, hidden=command.hidden, **extra)
    mode, seconds = command.mode, command.seconds
    if mode == "fail":
        raise RuntimeError("echo job failed on purpose")
    if mode == "release":
        job.release(int(seconds))
    if mode == "fail-until" and job.attempts < int(seconds):
        raise RuntimeError(f"not yet: attempt {job.attempts}")
    return float(seconds) if mode == "sleep" else 0.0


app = App("tests")

# the Python twins of the fixture apps' RateLimiter::for (fixtures/laravel8/app/Providers/RateLimitsServiceProvider)
app.rate_limiter("per-key", per_minute=2,
                 by=lambda command, job: (plain(command.args) or {}).get("k", "") if command.args else "")


@app.rate_limiter("pair")
def _pair(command: PHPObject, job: Job) -> list[Limit]:
    return [Limit.per_minute(2).by("p"), Limit.per_minute(3).by("p")]


app.rate_limiter("open", lambda command, job: Limit.none())


@app.handler("App\\Jobs\\EchoJob")
def echo(command: PHPObject, job: Job) -> None:
    time.sleep(_echo(command, job))


@app.handler("App\\Jobs\\BatchEchoJob")  # EchoJob in a batch: the bookkeeping is laraq's (PHP's) part
def batch_echo(command: PHPObject, job: Job) -> None:
    time.sleep(_echo(command, job, cancelled=job.batch_cancelled()))


@app.handler("App\\Jobs\\FailedHookJob", php_failed=True)  # the class's failed() runs in PHP
def failed_hook(command: PHPObject, job: Job) -> None:
    record(job, reason=command.reason)
    raise RuntimeError(command.reason)


@app.handler("App\\Jobs\\PythonJob")
def python_job(command: PHPObject, job: Job) -> None:
    record(job, document=command.document, options=plain(command.options), owner=command.owner,
           token=command.token)
    if os.environ.get("LARAQ_TEST_FAIL_PYTHON"):
        raise RuntimeError(f"python job failed on purpose: {command.document}")


@app.handler("App\\Jobs\\EncryptedJob")
def encrypted(command: PHPObject, job: Job) -> None:
    record(job, secret=command.secret)


@app.handler("App\\Jobs\\RichJob")
def rich(command: PHPObject, job: Job) -> None:
    record(job, status=plain(command.status), priority=plain(command.priority), suit=plain(command.suit),
           statuses=plain(command.statuses), when=to_datetime(command.when).isoformat(),
           immutable=to_datetime(command.immutable).isoformat())


@app.handler("App\\Handlers\\Foo@bar")
def foo_bar(data: Any, job: Job) -> None:
    record(job, data=data)


def _unique_run(command: PHPObject, job: Job, unique_id: str) -> None:
    """The fixture's ``UniqueRun``: record whether the job's own lock is held now, then ok or fail."""
    version = job.redis_queue.version
    # the fixtures' stock cache prefixes: 8 "laravel_cache", 9 to 11 "laravel_cache_", 12+ "laravel-cache-"
    cache_prefix = "laravel_cache" if version.major < 9 else "laravel_cache_" if version.major < 12 else "laravel-cache-"
    name = version.unique_lock_key(command.class_name, unique_id, None)
    lock = job.redis_queue.prefix + version.cache_key(cache_prefix, name)
    held = bool(job.redis_queue.client.exists(lock))
    record(job, lock="held" if held else "free", mode=command.mode)
    if command.mode == "fail":
        raise RuntimeError("unique job failed on purpose")


@app.handler("App\\Jobs\\UniquePropertyJob")  # unique=None: the uniqueId property says it all
def unique_property(command: PHPObject, job: Job) -> None:
    _unique_run(command, job, command.uniqueId)


@app.handler("App\\Jobs\\UniqueMethodJob", unique=True)  # uniqueId() is a method: PHP releases the lock
def unique_method(command: PHPObject, job: Job) -> None:
    _unique_run(command, job, "m-" + command.key)


@app.handler("App\\Jobs\\UntilProcessingJob", unique="until_processing")
def until_processing(command: PHPObject, job: Job) -> None:
    _unique_run(command, job, command.uniqueId)


# SerializesModels: laraq loads the rows through the app's DB_* settings; the enum is declared here
Status = app.enum("App\\Enums\\Status", {"Active": "active", "Archived": "archived"})
app.model("App\\Models\\Post")  # Laravel's default table (posts) and key (id)


def _post(command: PHPObject, job: Job) -> None:
    assert isinstance(command.status, Status)
    record(job, post=command.post.id, title=command.post.title, status=command.status.value,
           others=[p.title for p in command.others])


app.register("App\\Jobs\\PostJob", _post)
app.register("App\\Jobs\\PostJobDeleteMissing", _post, delete_when_missing_models=True)


#: The same EchoJob semantics with an ``async def`` handler (cancellable at its timeout).
async_app = App("tests-async")


@async_app.handler("App\\Jobs\\EchoJob")
async def echo_async(command: PHPObject, job: Job) -> None:
    await asyncio.sleep(_echo(command, job))


# -- running laraq as a process --------------------------------------------------------------------

LARAQ = [sys.executable, "-c", "from laraq.cli import main; main()", "work"]


def laraq_env(php: Any, **extra: str) -> dict[str, str]:
    env = dict(php.env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def laraq_args(*args: str, app_spec: str = "test_worker_support:app", laravel: str = "8") -> list[str]:
    return [*LARAQ, "--app", app_spec, "--laravel", laravel, "--sleep", "0", *args]


def _release(php: Any) -> str:
    """The Laravel release of a fixture app handle (``PhpApp.release``), for ``--laravel``."""
    return getattr(php, "release", "8")


def run_laraq(php: Any, *args: str, app_spec: str = "test_worker_support:app", timeout: float = 60,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(laraq_args(*args, app_spec=app_spec, laravel=_release(php)), env=env or laraq_env(php),
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def popen_laraq(php: Any, *args: str, app_spec: str = "test_worker_support:app",
                env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(laraq_args(*args, app_spec=app_spec, laravel=_release(php)),
                            env=env or laraq_env(php), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate: Any, timeout: float = 60, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


def free_port_url() -> str:
    """A Redis URL where nothing listens (for connection-loss tests)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"
