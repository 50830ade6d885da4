"""Shared pieces of the Horizon tests: snapshots of Horizon's keys, normalised for comparison, and the
Python handlers of the Horizon fixture jobs (``TaggedJob``, ``SilencedJob``: ``EchoJob`` modes).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from conftest import require
from phpapp import PhpApp, live_missing
from test_worker_support import _echo, echo, laraq_env, popen_laraq

from laraq.app import App
from laraq.bus.job import Job
from laraq.horizon import HorizonSettings
from laraq.protocol.serializer import PHPObject

HORIZON_PREFIX = "laravel_horizon:"
#: The Laravel lines that ship Horizon in ../shared/laravel-live: 9 to 13 with Horizon 5.29.1, and
#: ``13-h548`` (Laravel 13 with Horizon 5.48.1 and its published config). ``LARAQ_HORIZON_LINES=12,13-h548``
#: narrows a local run.
ALL_HORIZON_LINES = ["9", "10", "11", "12", "13", "13-h548"]
_ONLY = [v for v in os.environ.get("LARAQ_HORIZON_LINES", "").split(",") if v]
HORIZON_LINES = [v for v in ALL_HORIZON_LINES if v in _ONLY] if _ONLY else ALL_HORIZON_LINES
#: Both Horizon releases (5.29.1 on 13, 5.48.1 on 13-h548), for the costlier tests.
HORIZON_RELEASE_LINES = [v for v in ("13", "13-h548") if v in HORIZON_LINES]


def horizon_app(version: str, redis_port: int, **extra_env: str) -> PhpApp:
    """The fixture app of a live line with Horizon registered (skips locally, fails in CI without it)."""
    reason = live_missing(version)
    require(reason is None, reason or "")
    return PhpApp(redis_port, version=version, horizon=True, extra_env=extra_env or None)


def popen_horizon_laraq(hz: PhpApp, *args: str) -> subprocess.Popen[str]:
    """``laraq work --horizon`` on the Horizon fixture app, told where the app is (``LARAQ_BASE_PATH``, as
    ``--env-file`` tells it in production), so it reads the app's Horizon release."""
    return popen_laraq(hz, "--horizon", *args, app_spec="horizon_support:app",
                       env=laraq_env(hz, LARAQ_BASE_PATH=str(hz.path)))


def laraq_horizon_settings(hz: PhpApp) -> HorizonSettings:
    """The Horizon settings laraq reads from the app (config/horizon.php, the Horizon release)."""
    return HorizonSettings.from_app(hz.laravel_env, hz.path)

app = App("horizon-tests")
app.handler("App\\Jobs\\EchoJob")(echo)


@app.handler("App\\Jobs\\TaggedJob")
def tagged(command: PHPObject, job: Job) -> None:
    time.sleep(_echo(command, job))


@app.handler("App\\Jobs\\SilencedJob")
def silenced(command: PHPObject, job: Job) -> None:
    time.sleep(_echo(command, job))


def snapshot(client: Any) -> dict[bytes, tuple[bytes, int]]:
    """Every key with its DUMP and PTTL, to restore the exact same state later."""
    return {k: (client.dump(k), client.pttl(k)) for k in client.keys("*")}


def restore(client: Any, snap: dict[bytes, tuple[bytes, int]]) -> None:
    client.flushdb()
    for key, (blob, pttl) in snap.items():
        client.restore(key, max(pttl, 0), blob)


def horizon_state(client: Any, ids: dict[str, str], prefix: str = HORIZON_PREFIX) -> dict[str, Any]:
    """Horizon's keys with job ids replaced by names, times by their presence, scores by rank, TTLs
    rounded to 10 s and runtimes by a flag: what both workers must agree on."""

    def name(text: str) -> str:
        for job_id, label in ids.items():
            text = text.replace(job_id, label)
        return text

    state: dict[str, Any] = {}
    for raw in sorted(client.keys(prefix + "*")):
        key = name(raw.decode()[len(prefix):])
        kind = client.type(raw).decode()
        ttl = client.ttl(raw)
        if kind == "hash":
            fields = {k.decode(): v for k, v in client.hgetall(raw).items()}
            value: Any = {}
            for field, v in sorted(fields.items()):
                text = v.decode("utf-8", "replace")
                if field.endswith("_at"):
                    value[field] = "<time>" if text else ""
                elif field == "runtime":
                    value[field] = "<ms>" if float(text) > 0 else text
                elif field == "exception":
                    value[field] = text.split(" in ", 1)[0] if text else ""
                else:
                    value[field] = name(text)
        elif kind == "zset":
            value = [name(m.decode()) for m in client.zrange(raw, 0, -1)]
        elif kind == "set":
            value = sorted(name(m.decode()) for m in client.smembers(raw))
        elif kind == "list":
            value = [name(m.decode()) for m in client.lrange(raw, 0, -1)]
        else:
            value = name(client.get(raw).decode())
        state[key] = (kind, value, -1 if ttl < 0 else round(ttl / 10))
    return state
