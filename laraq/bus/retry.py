"""``php artisan queue:retry`` written from Python: a failed job's payload pushed back onto its queue.

Mirrors ``Illuminate\\Queue\\Console\\RetryCommand``: :func:`expand_retry_ids` is its ``getJobIds``
(ids, ``all``, ``--queue=``, ``--range=``), :func:`retry_payload` the payload it pushes back
(``attempts`` reset, ``retryUntil`` renewed), :func:`retry_failed` the whole command over a failed-job
store (:mod:`laraq.stores.failed`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laraq.protocol.payload import reencode_like_php_retry
from laraq.protocol.queue import RedisQueue
from laraq.protocol.serializer import PHPObject, loads
from laraq.stores.failed import FailedJobStore

if TYPE_CHECKING:
    from laraq.protocol.encryption import Encrypter

__all__ = [
    "RETRY_UNTIL_POLICIES",
    "RetryOutcome",
    "expand_retry_ids",
    "retry_failed",
    "retry_payload",
    "time_now",
]

#: How ``retryUntil`` is treated when a failed job is retried (see :func:`retry_payload`).
RETRY_UNTIL_POLICIES = ("auto", "keep", "window")


def _command_has_retry_until_property(payload: dict[str, Any], encrypter: Encrypter | None) -> bool | None:
    """True if the command object has a ``retryUntil`` *property* (PHP then keeps the value)."""
    data = payload.get("data")
    command = data.get("command") if isinstance(data, dict) else None
    if not isinstance(command, str):
        return None
    try:
        raw = command.encode("utf-8")
        if not command.startswith("O:"):
            if encrypter is None:
                return None
            raw = encrypter.decrypt(command)
        obj = loads(raw)
    except Exception:
        return None
    return isinstance(obj, PHPObject) and "retryUntil" in obj


def retry_payload(
    raw: bytes | str,
    *,
    now: float | None = None,
    retry_until: str = "auto",
    encrypter: Encrypter | None = None,
) -> bytes:
    """The bytes ``php artisan queue:retry`` pushes back for the stored failed ``raw`` payload.

    ``attempts`` is reset to 0 and the JSON re-encoded like PHP's ``json_encode`` without flags
    (:func:`laraq.protocol.payload.reencode_like_php_retry`): same ``uuid`` and ``id``, key order kept, unicode
    escaped, ``{}`` → ``[]``.

    PHP also calls the job's ``retryUntil()`` *method* again and stores the new deadline. Python
    cannot run PHP methods, so ``retry_until`` chooses:

    * ``"keep"``: leave ``retryUntil`` as it is (what PHP does for a ``$retryUntil`` property, or
      when there is no method);
    * ``"window"``: a non-null ``retryUntil`` becomes ``now + (retryUntil - createdAt)``, i.e. the
      same window the job had when it was dispatched; needs ``createdAt`` (12.11+ payloads);
    * ``"auto"`` (default): ``keep`` when the value is null, when the command declares a
      ``retryUntil`` property, or when the payload has no ``createdAt``; else ``window``.
    """
    if retry_until not in RETRY_UNTIL_POLICIES:
        raise ValueError(f"retry_until must be one of {RETRY_UNTIL_POLICIES}, got {retry_until!r}")
    decoded = json.loads(raw)
    new_deadline: int | None = None
    old = decoded.get("retryUntil") if isinstance(decoded, dict) else None
    created = decoded.get("createdAt") if isinstance(decoded, dict) else None
    if isinstance(old, int | float) and not isinstance(old, bool) and retry_until != "keep":
        has_property = _command_has_retry_until_property(decoded, encrypter)
        created_at = created if isinstance(created, int | float) and not isinstance(created, bool) else None
        if retry_until == "window" and created_at is None:
            raise ValueError("retry_until='window' needs the payload's createdAt (Laravel 12.11+)")
        if created_at is not None and (retry_until == "window" or not has_property):
            current = math.floor(time_now() if now is None else now)
            new_deadline = current + max(0, math.floor(old) - math.floor(created_at))
    return reencode_like_php_retry(raw, attempts=0, retry_until=new_deadline).encode("utf-8")


def time_now() -> float:
    return time.time()


@dataclass(frozen=True)
class RetryOutcome:
    """What happened to one failed-job id given to :func:`retry_failed`."""

    id: str
    status: str  # "pushed", "missing", "skipped"
    queue: str | None = None
    message: str = ""
    payload: bytes | None = field(default=None, repr=False)


def retry_failed(
    store: FailedJobStore,
    queue: RedisQueue,
    ids: Iterable[str | int],
    *,
    retry_until: str = "auto",
    encrypter: Encrypter | None = None,
    connection_name: str | None = None,
    forget: bool = True,
) -> list[RetryOutcome]:
    """``queue:retry``: for each id, find the failed job, push its retry payload to its queue, forget it.

    Jobs whose ``connection`` is not this queue's connection (``connection_name``, default
    ``queue.connection_name``) are skipped: laraq only writes to the Redis connection it was given.
    """
    conn = connection_name or queue.connection_name
    out: list[RetryOutcome] = []
    for ident in ids:
        failed = store.find(ident)
        if failed is None:
            out.append(RetryOutcome(str(ident), "missing", message=f"Unable to find failed job with ID [{ident}]."))
            continue
        if failed.connection != conn:
            out.append(RetryOutcome(str(ident), "skipped", failed.queue,
                                    f"failed job [{ident}] belongs to connection [{failed.connection}], not [{conn}]"))
            continue
        body = retry_payload(failed.payload, now=queue.clock(), retry_until=retry_until, encrypter=encrypter)
        queue.push_raw(body, failed.queue)
        if forget:
            store.forget(failed.id)
        out.append(RetryOutcome(str(ident), "pushed", failed.queue,
                                f"The failed job [{ident}] has been pushed back onto the queue!", body))
    return out


def expand_retry_ids(store: FailedJobStore, ids: Sequence[str], *, queue: str | None = None,
                     ranges: Sequence[str] = ()) -> list[str | int]:
    """``RetryCommand::getJobIds``: explicit ids, ``all``, ``--queue=`` and ``--range=1-5``."""
    result: list[str | int] = []
    if list(ids) == ["all"]:
        result.extend(store.ids())
    else:
        result.extend(ids)
    if queue:
        result.extend(store.ids(queue))
    for spec in ranges:
        lo, sep, hi = spec.partition("-")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"a range is FROM-TO, e.g. 1-5 (got {spec!r})")
        result.extend(range(int(lo), int(hi) + 1))
    seen: set[str] = set()
    unique: list[str | int] = []
    for item in result:
        if str(item) not in seen:
            seen.add(str(item))
            unique.append(item)
    return unique
