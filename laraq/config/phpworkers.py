"""PHP workers on laraq's queues: the Horizon supervisors that work a queue laraq takes Python jobs from.

Horizon's ``RedisSupervisorRepository`` keeps one hash per live supervisor (``<horizon prefix>supervisor:<name>``,
listed in the ``supervisors`` sorted set, scored by its last update and expiring 30 s after it) whose
``processes`` field maps ``"<connection>:<queue[,queue]>"`` to a process count and whose ``options`` hold the
supervisor's ``connection`` and ``queue``. A PHP worker that pops a Python job first hands it to the class's
``pythonQueue()`` when the PHP class uses the ``RunsInPython`` trait (then it runs once, in Python, if laraq
works that queue), and runs the PHP class's ``handle()`` when it does not. The banner and ``laraq doctor``
say so when such a supervisor shares one of laraq's queues. laraq's own supervisors
(``<master>:laraq-<name>``) are not PHP workers. Plain ``php artisan queue:work`` processes leave no record
in Redis and cannot be seen.

Horizon keeps those records on the Redis connection its ``horizon.use`` names, which can be another server
(or database) than the queue's: when the app's config names one, they are read there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laraq.config.settings import make_redis
from laraq.protocol.versions import _slug

if TYPE_CHECKING:
    from laraq.config.settings import LaravelSettings

__all__ = ["PhpSupervisor", "horizon_prefix", "php_supervisors", "php_worked_queues", "shared_queue_warnings"]

#: Horizon reads supervisors updated within this many seconds as alive (their hashes expire after 30 s).
ALIVE = 30


@dataclass(frozen=True)
class PhpSupervisor:
    """A live Horizon supervisor and the ``(connection, queue)`` pairs it works."""

    name: str
    queues: tuple[tuple[str, str], ...]


def horizon_prefix(settings: LaravelSettings) -> str:
    """Horizon's key prefix: the app's ``horizon.prefix`` when read, else ``HORIZON_PREFIX``, else
    Horizon's default (``slug(APP_NAME, '_')_horizon:``)."""
    if settings.horizon_prefix is not None:
        return settings.horizon_prefix
    return settings.env.get("HORIZON_PREFIX") or _slug(settings.env.get("APP_NAME") or "laravel", "_") + "_horizon:"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def php_supervisors(client: Any, prefix: str, *, now: float | None = None) -> list[PhpSupervisor]:
    """The live PHP (not laraq) Horizon supervisors under Horizon's ``prefix``."""
    now = time.time() if now is None else now
    out = []
    for raw in client.zrangebyscore(f"{prefix}supervisors", now - ALIVE, "+inf"):
        name = _text(raw)
        if name.rsplit(":", 1)[-1].startswith("laraq-"):
            continue
        record = client.hgetall(f"{prefix}supervisor:{name}")
        if not record:
            continue
        fields = {_text(k): _text(v) for k, v in record.items()}
        pairs: set[tuple[str, str]] = set()
        try:
            processes = json.loads(fields.get("processes") or "{}")
        except ValueError:
            processes = {}
        for key in processes if isinstance(processes, dict) else ():
            connection, _, queues = str(key).partition(":")
            pairs.update((connection, q) for q in queues.split(",") if q)
        try:
            options = json.loads(fields.get("options") or "{}")
        except ValueError:
            options = {}
        if isinstance(options, dict) and options.get("queue"):
            queue_opt = options["queue"]
            names = queue_opt if isinstance(queue_opt, list) else str(queue_opt).split(",")
            pairs.update((str(options.get("connection") or "redis"), str(q)) for q in names if q)
        out.append(PhpSupervisor(name, tuple(sorted(pairs))))
    return out


def _horizon_client(client: Any, settings: LaravelSettings) -> Any:
    """A client on the connection Horizon stores on: ``client`` (the queue's) unless the app's config was read
    and its ``horizon.use`` names another connection."""
    use = settings.horizon_use
    if settings.horizon_prefix is None or not use or use == settings.redis_queue_connection:
        return client
    try:
        return make_redis(settings, use, socket_connect_timeout=2, socket_timeout=2)
    except ValueError:  # the app's config has no such connection: Horizon itself would not boot
        return client


def php_worked_queues(client: Any, settings: LaravelSettings) -> set[tuple[str, str]] | None:
    """The ``(connection, queue)`` pairs live PHP Horizon supervisors work, read where Horizon stores them
    (``None`` when Horizon's records cannot be read)."""
    horizon_client = _horizon_client(client, settings)
    try:
        return {pair for sup in php_supervisors(horizon_client, horizon_prefix(settings)) for pair in sup.queues}
    except Exception:  # a server not reachable, a cluster without that slot: nothing known
        return None
    finally:
        if horizon_client is not client:
            horizon_client.close()


def shared_queue_warnings(client: Any, settings: LaravelSettings, connection: str,
                          queues: Iterable[str]) -> list[str]:
    """One warning per PHP supervisor that works one of ``queues`` on ``connection`` (none when Horizon's
    records cannot be read)."""
    wanted = set(queues)
    horizon_client = _horizon_client(client, settings)
    try:
        supervisors = php_supervisors(horizon_client, horizon_prefix(settings))
    except Exception:  # no Horizon, a server not reachable, a cluster without that slot: nothing to say
        return []
    finally:
        if horizon_client is not client:
            horizon_client.close()
    out = []
    for sup in supervisors:
        shared = sorted(q for c, q in sup.queues if c == connection and q in wanted)
        if shared:
            out.append(
                f"PHP workers (Horizon supervisor {sup.name}) work queue(s) {', '.join(shared)} that laraq takes "
                "Python jobs from: a PHP worker that pops a Python job first hands it to its pythonQueue() "
                "(python by default) if its PHP class uses the RunsInPython trait, so run laraq on that queue "
                "too; a class without the trait is run by its PHP handle() instead (compat-docs/config.md, "
                "Sharing a queue with PHP workers)")
    return out
