"""redis-py's command retry, minus refused logins (:func:`fail_fast_on_auth` installs it on a client), and
the retry of a write whose outcome is already decided (:func:`retrying`).

redis-py (8.x) retries a command that hit a ``ConnectionError`` ten times with a backoff, and its
``AuthenticationError`` is a ``ConnectionError``: left to it, when the password changes under a running
worker and the connections are killed, every command spends seconds reconnecting with a password Redis
has already refused, and the worker's own bounded retry of refused credentials takes minutes instead of
the documented ~15 s. A refused login is an answer, not a lost connection: :class:`AuthFailFastRetry` keeps
redis-py's retry for everything else and raises a refused login at once (after dropping the connection).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.retry import Retry

__all__ = ["REDIS_DOWN", "AuthFailFastRetry", "fail_fast_on_auth", "retrying"]

log = logging.getLogger("laraq.worker.worker")

#: The errors that mean "Redis is unreachable right now" (retry, never lose the outcome).
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

T = TypeVar("T")


class _Refused(Exception):
    """Carries a refused login past ``Retry`` (not one of its retried errors)."""

    def __init__(self, error: redis.AuthenticationError) -> None:
        super().__init__(str(error))
        self.error = error


class AuthFailFastRetry(Retry):
    """redis-py's ``Retry``, except that a refused login (``AuthenticationError``) is never retried.

    Works with the ``call_with_retry`` of every redis-py from 5.0 (whose signature grew over time): the
    refused login is carried out of the retry loop, the connection is dropped through redis-py's own
    failure handler, and the original error is raised.
    """

    def call_with_retry(self, do: Callable[[], T], fail: Any, *args: Any, **kwargs: Any) -> T:
        def guarded() -> T:
            try:
                return do()
            except redis.AuthenticationError as exc:
                raise _Refused(exc) from exc

        try:
            return super().call_with_retry(guarded, fail, *args, **kwargs)
        except _Refused as refused:
            with contextlib.suppress(Exception):  # redis-py's handler drops the connection (and re-raises)
                try:
                    fail(refused.error)
                except TypeError:  # a handler that also takes the failure count
                    fail(refused.error, 1)
            raise refused.error from None


def fail_fast_on_auth(client: Any) -> None:
    """Install :class:`AuthFailFastRetry` on a ``redis.Redis`` client, keeping its backoff and retry count
    (a cluster client, or anything else, is left as it is)."""
    if not isinstance(client, redis.Redis) or not hasattr(client, "set_retry"):
        return
    current = client.get_retry()
    if current is None or isinstance(current, AuthFailFastRetry):
        return
    backoff = getattr(current, "_backoff", None)
    retries = getattr(current, "_retries", None)
    errors = getattr(current, "_supported_errors", None)
    if backoff is None or retries is None or errors is None:
        return
    client.set_retry(AuthFailFastRetry(backoff, retries, errors))


def retrying(action: Callable[[], T], attempts: int = 4) -> T | None:
    """Run a Redis write whose outcome is decided (an ack, a release, a failure's bookkeeping), retrying
    while Redis is unreachable (0.5 s, then doubling); after ``attempts`` it is logged and given up: the
    job then stays reserved until ``retry_after``, as a killed worker's would."""
    delay = 0.5
    for attempt in range(attempts):
        try:
            return action()
        except REDIS_DOWN as exc:
            if attempt == attempts - 1:
                log.error("Redis write failed after %d attempts (%s): the job stays reserved until retry_after",
                          attempts, exc)
                return None
            time.sleep(delay)
            delay *= 2
    return None
