"""Laravel queue payloads: reading a job body the way Laravel's ``Job`` readers do, and building one
with exactly the bytes PHP's ``Queue::createPayload`` writes for a given Laravel version.

Reading (:class:`Payload`) refuses what PHP's ``json_decode`` refuses before decoding anything: a body
nested 512 levels deep or more (:func:`~laraq.protocol.phpjson.check_json_depth`) is a
:class:`PayloadError`, as is every other body that is not a JSON object with ``attempts``. It is
lenient about the shapes Redis's Lua ``cjson`` produces after a pop or a release: key order is
scrambled, empty arrays come back as ``{}``, large integers as floats such as
``1.2345678901235e+16``, and ``attempts`` may be a float or a numeric string. The original bytes are
kept in :attr:`Payload.raw` and never rebuilt.

Building (:func:`build_object_payload`, :func:`build_string_payload`) follows the per-version field
list from :class:`~laraq.protocol.versions.LaravelVersion` (``failOnTimeout``, ``deleteWhenMissingModels``,
``data.batchId``, ``createdAt``, the trailing ``delay``, unicode escaping) and PHP's ``json_encode``
byte rules from :mod:`laraq.protocol.phpjson`. ``tests/test_payload_corpus.py`` rebuilds every pushed payload
of the Laravel 8–13 wire corpus byte for byte.

:func:`reencode_like_php_retry` reproduces what ``queue:retry`` pushes back (``json_decode`` to arrays,
``attempts`` reset, ``json_encode`` without flags).
"""

from __future__ import annotations

import json
import math
import os
import re
import string
import time
import uuid as _uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson

from laraq.protocol.phpjson import (
    JSON_MAX_DEPTH,
    PhpJsonError,
    check_json_depth,
    php_float_repr,
    php_json_decode,
    php_json_encode,
    value_too_deep,
)
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
    "CALL_QUEUED_HANDLER",
    "Payload",
    "PayloadError",
    "UndefinedKeyError",
    "build_object_payload",
    "build_string_payload",
    "horizon_prepare",
    "is_queued_command",
    "leading_uuid",
    "log_context",
    "new_uuid",
    "parse_job_name",
    "php_int_cast",
    "random_id",
    "reencode_like_php_retry",
    "with_attempts",
]

#: The ``job`` of every object (class-based) payload.
CALL_QUEUED_HANDLER = "Illuminate\\Queue\\CallQueuedHandler@call"


def is_queued_command(job: Any) -> bool:
    """True when a payload's ``job`` is Laravel's ``CallQueuedHandler@call`` (surrounding spaces and a
    leading backslash aside): only then does PHP unserialize ``data.command``, and only then are
    ``data.commandName`` and ``displayName`` the class that runs it. For any other ``job`` (a
    ``Class@method`` string job) ``data`` is the array the app pushed, possibly keyed by its users, and
    is never read as a command: a ``commandName`` or ``command`` in it is plain data."""
    return type(job) is str and (job == CALL_QUEUED_HANDLER or job.strip().lstrip("\\") == CALL_QUEUED_HANDLER)

#: The payload key the Context hook (11.0+) writes.
LOG_CONTEXT_KEY = "illuminate:log:context"

_ALPHANUM = string.ascii_letters + string.digits
_INT_PREFIX = re.compile(r"[ \t\n\r\v\f]*([+-]?)(\d*)(\.\d*)?([eE][+-]?\d+)?")
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


_UUID_HEAD = re.compile(rb'^\{"uuid":"([^"\\]{1,200})"')


def leading_uuid(raw: bytes) -> str | None:
    """The ``uuid`` Laravel writes first in a payload, read from the body's first bytes without decoding it:
    the one identity a body that cannot be decoded may still give."""
    head = _UUID_HEAD.match(raw)
    return head.group(1).decode("utf-8", "replace") if head else None


def _loads_fast(raw: bytes) -> Any:
    """``orjson.loads`` straight from the bytes: no text copy, about 3x ``json.loads`` on a typical body
    (strict RFC 8259 JSON and valid UTF-8, which is all PHP writes; the same values, last duplicate key
    wins in both). ``None`` (the standard path then decides, with its exact error messages) when orjson
    refuses the input (``NaN``, a number out of range, a lone surrogate...)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


class PayloadError(ValueError):
    """A job body that Laravel could not use (not JSON, not an object, bad ``attempts``, ...)."""


def _check_depth(raw: bytes) -> None:
    """PHP's ``json_decode`` depth of a body, before a parser recurses into it (:func:`check_json_depth`;
    its first test inlined: two counts, and the usual body has fewer openers than levels allowed)."""
    if raw.count(b"[") + raw.count(b"{") >= JSON_MAX_DEPTH:
        try:
            check_json_depth(raw)
        except PhpJsonError as exc:
            raise PayloadError(f"job payload is not valid JSON: {exc}") from None


class UndefinedKeyError(PayloadError):
    """A payload without a key ``Illuminate\\Queue\\Jobs\\Job::fire`` reads (``job``, ``data``).

    PHP reads ``$payload['job']`` unchecked; the warning becomes an ``ErrorException`` with the message
    ``Undefined array key "job"`` (Laravel's error handler), and the job fails. Shown in ``failed_jobs``
    as PHP names it.
    """

    php_class = "ErrorException"

    def __init__(self, key: str) -> None:
        super().__init__(f'Undefined array key "{key}"')
        self.key = key


# -- small PHP semantics helpers ------------------------------------------------------------------

def php_int_cast(value: Any) -> int:
    """PHP's ``(int)`` cast for the scalar types a payload can hold (``"5s"`` → 5, ``""`` → 0)."""
    if value is None or value is False:
        return 0
    if value is True:
        return 1
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return 0
        return max(_INT64_MIN, min(_INT64_MAX, int(value)))
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        m = _INT_PREFIX.match(text)
        assert m is not None  # the pattern can match the empty string
        sign, whole, frac, exp = m.groups()
        if not whole and not (frac and len(frac) > 1):
            return 0
        if frac is None and exp is None:
            number = int(sign + whole)
            return max(_INT64_MIN, min(_INT64_MAX, number))
        return php_int_cast(float(sign + (whole or "0") + (frac or "") + (exp or "")))
    raise PayloadError(f"cannot cast {type(value).__name__} to int")


def _php_truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value not in ("", "0")
    if isinstance(value, (list, dict)):
        return bool(value)
    return bool(value)


def _php_empty(value: Any) -> bool:
    return value is None or not _php_truthy(value)


def parse_job_name(job: str) -> tuple[str, str]:
    """Split ``Class@method`` like Laravel's ``JobName::parse`` (the method defaults to ``fire``)."""
    if "@anonymous\0" in job:
        if job.count("@") > 1:
            head, _, tail = job.rpartition("@")
            return head, tail
        return job, "fire"
    if "@" in job:
        head, _, tail = job.partition("@")
        return head, tail
    return job, "fire"


def _seconds_until(value: int | float | datetime | timedelta, now: float | None = None) -> int:
    """Laravel's ``secondsUntil``: a DateTime/interval becomes seconds from now (never negative)."""
    current = int(time.time() if now is None else now)
    if isinstance(value, timedelta):
        return max(0, int(current + value.total_seconds()) - current)
    if isinstance(value, datetime):
        return max(0, int(value.timestamp()) - current)
    return php_int_cast(value)


def _timestamp(value: int | datetime) -> int:
    return int(value.timestamp()) if isinstance(value, datetime) else int(value)


# -- reading --------------------------------------------------------------------------------------

class Payload:
    """The parsed view of one job body, with Laravel's ``Jobs/Job.php`` readers.

    Create it with :meth:`parse`. ``version`` selects version-dependent reading rules (the 8.x
    ``timeoutAt`` fallback); without it :data:`~laraq.protocol.versions.DEFAULT_VERSION` applies.
    """

    __slots__ = ("raw", "decoded", "version", "is_queued_command", "command", "is_encrypted_command")

    def __init__(self, raw: bytes, decoded: dict[str, Any], version: LaravelVersion) -> None:
        self.raw = raw
        self.decoded = decoded
        self.version = version
        #: a queued job object (see :func:`is_queued_command`): the ``command*`` fields are None for any
        #: other job (read once: ``job`` is never rewritten)
        job = decoded.get("job")
        self.is_queued_command = job == CALL_QUEUED_HANDLER or is_queued_command(job)
        data = decoded.get("data")
        command = data.get("command") if self.is_queued_command and isinstance(data, dict) else None
        #: ``data.command`` of a queued command, untouched: a PHP-serialized job, or an encrypted one (read
        #: once: a body is never rewritten in place)
        self.command: str | None = command if isinstance(command, str) else None
        #: True when ``data.command`` is not a serialized object (``O:``), i.e. must be decrypted
        self.is_encrypted_command = self.command is not None and not self.command.startswith("O:")

    @classmethod
    def parse(cls, raw: bytes | str, *, version: LaravelVersion | str | int | None = None) -> Payload:
        """Decode ``raw`` and check it is a job Laravel's Lua pop script could reserve."""
        raw_bytes = raw if type(raw) is bytes else raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        # PHP's json_decode depth: with the C build, asked of what orjson built (its own limit keeps a
        # deeper body from recursing); otherwise, and before the standard parser, of the body's brackets
        walk = value_too_deep
        if walk is None:
            _check_depth(raw_bytes)
        decoded = _loads_fast(raw_bytes)
        if decoded is not None and walk is not None and walk(decoded, JSON_MAX_DEPTH):
            raise PayloadError(f"job payload is not valid JSON: Maximum stack depth exceeded (arrays and "
                               f"objects nested {JSON_MAX_DEPTH} levels deep or more)")
        if decoded is None:
            if walk is not None:
                _check_depth(raw_bytes)
            try:
                text = raw_bytes.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PayloadError(f"job payload is not valid UTF-8 (byte {exc.start})") from None
            try:
                decoded = json.loads(text)
            except json.JSONDecodeError as exc:
                raise PayloadError(f"job payload is not valid JSON: {exc.msg} at position {exc.pos}") from None
            except RecursionError:  # within the depth allowed, but the caller's stack was already deep
                raise PayloadError("job payload is not valid JSON: Maximum stack depth exceeded") from None
            except ValueError as exc:  # a number with more digits than Python converts
                raise PayloadError(f"job payload is not valid JSON: {exc}") from None
            del text
        if not isinstance(decoded, dict):
            raise PayloadError(f"job payload must be a JSON object, got {type(decoded).__name__}")
        attempts = decoded.get("attempts")
        if attempts is None:
            raise PayloadError("job payload has no 'attempts' field")
        if type(attempts) is not int:  # an int (not a bool) is the usual case: nothing to check
            _read_attempts(attempts)
        profile = DEFAULT_VERSION if version is None else \
            version if type(version) is LaravelVersion else LaravelVersion.parse(version)
        return cls(raw_bytes, decoded, profile)

    def __repr__(self) -> str:
        return f"<Payload {self.resolve_name!r} uuid={self.uuid!r} attempts={self.attempts}>"

    # -- generic access

    def get(self, key: str, default: Any = None) -> Any:
        """The top-level field ``key`` as decoded (``default`` when absent)."""
        return self.decoded.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.decoded

    def _int_field(self, key: str) -> int | None:
        return _optional_int(self.decoded.get(key), key)

    # -- identity

    @property
    def uuid(self) -> str | None:
        value = self.decoded.get("uuid")
        return None if value is None else str(value)

    @property
    def id(self) -> str | None:
        value = self.decoded.get("id")
        return value if type(value) is str or value is None else str(value)

    @property
    def display_name(self) -> str | None:
        value = self.decoded.get("displayName")
        return None if value is None else str(value)

    @property
    def job(self) -> str:
        """The ``Class@method`` handler string (``payload.job``)."""
        value = self.decoded.get("job")
        if not isinstance(value, str) or not value:
            raise PayloadError("job payload has no 'job' handler string")
        return value

    def unrunnable(self) -> PayloadError | None:
        """Why PHP's ``Job::fire`` would fail this payload before any handler runs, or ``None``.

        ``fire`` reads ``$payload['job']`` and ``$payload['data']`` and resolves the class named before
        ``@``: a missing key fails with ``ErrorException: Undefined array key "job"`` (or ``"data"``), a
        ``job`` that is not a non-empty string names no class the container can build. The worker fails
        such a job instead of running it (``compat-docs/protocol.md``).
        """
        decoded = self.decoded
        if self.is_queued_command and "data" in decoded:  # the usual job: ``job`` names CallQueuedHandler
            return None
        if "job" not in decoded:
            return UndefinedKeyError("job")
        job = decoded["job"]
        if not isinstance(job, str) or not job or job.startswith("@"):
            return PayloadError(f"the payload's 'job' ({json.dumps(job)[:80]}) names no handler class: PHP's "
                                "Job::fire cannot resolve it")
        if "data" not in decoded:
            return UndefinedKeyError("data")
        return None

    @property
    def job_class(self) -> str:
        return parse_job_name(self.job)[0]

    @property
    def job_method(self) -> str:
        return parse_job_name(self.job)[1]

    @property
    def resolve_name(self) -> str:
        """``displayName`` when it is not PHP-empty, else ``job`` (Laravel's ``resolveName``)."""
        display = self.decoded.get("displayName")
        if type(display) is str:  # the usual case, read on every console and log line
            if display and display != "0":
                return display
        elif not _php_empty(display):
            return str(display)
        value = self.decoded.get("job")
        return "" if value is None else str(value)

    # -- counters and limits

    @property
    def attempts(self) -> int:
        """``payload.attempts`` as stored (Laravel's ``attempts()`` is this plus one)."""
        return _read_attempts(self.decoded.get("attempts"))

    @property
    def max_tries(self) -> int | None:
        return self._int_field("maxTries")

    @property
    def max_exceptions(self) -> int | None:
        return self._int_field("maxExceptions")

    @property
    def fail_on_timeout(self) -> bool:
        return _php_truthy(self.decoded.get("failOnTimeout", False))

    @property
    def timeout(self) -> int | None:
        return self._int_field("timeout")

    @property
    def retry_until(self) -> int | None:
        """``retryUntil``; Laravel 8.x falls back to the legacy ``timeoutAt``."""
        value = self.decoded.get("retryUntil")
        if value is None and self.version.retry_until_falls_back_to_timeout_at:
            value = self.decoded.get("timeoutAt")
        return _optional_int(value, "retryUntil")

    @property
    def backoff(self) -> str | int | float | None:
        """Raw ``payload.backoff ?? payload.delay`` (the ``delay`` fallback is live from 12.11)."""
        value = self.decoded.get("backoff")
        if value is None and self.version.backoff_falls_back_to_delay:
            value = self.decoded.get("delay")
        return value

    def backoff_seconds(self, attempts: int, default_backoff: str | int | Sequence[int] | None = 0) -> int:
        """Laravel's ``Worker::calculateBackoff``: seconds to wait before the job is retried.

        ``attempts`` is the job's attempt count as Laravel's ``attempts()`` reports it (1 on the first
        run). The payload backoff wins; else ``default_backoff`` (the ``--backoff`` option).
        """
        value: Any = self.backoff
        if value is None:
            value = default_backoff
        return backoff_for_attempt(value, attempts)

    @property
    def delete_when_missing_models(self) -> bool:
        """``deleteWhenMissingModels`` (written from 13.0; false when absent)."""
        return _php_truthy(self.decoded.get("deleteWhenMissingModels", False))

    @property
    def created_at(self) -> int | None:
        return self._int_field("createdAt")

    @property
    def delay(self) -> int | None:
        return self._int_field("delay")

    # -- data

    @property
    def data(self) -> dict[str, Any] | list[Any] | Any:
        """``payload.data``; an empty ``[]`` (PHP) or ``{}`` (cjson) is returned as ``{}``."""
        value = self.decoded.get("data")
        if value == [] or value is None:
            return {}
        return value

    def _command_field(self, key: str) -> Any:
        """``data[key]`` of a queued command; None for a string job, whose data is not a command."""
        data = self.decoded.get("data")
        return data.get(key) if self.is_queued_command and isinstance(data, dict) else None

    @property
    def command_name(self) -> str | None:
        """``data.commandName`` of a queued command: the class PHP runs."""
        value = self._command_field("commandName")
        return None if value is None else str(value)

    @property
    def batch_id(self) -> str | None:
        value = self._command_field("batchId")
        return None if value is None else str(value)


def _read_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PayloadError(f"job payload 'attempts' must be numeric, got {type(value).__name__}")
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise PayloadError(f"job payload 'attempts' must be numeric, got {value!r}") from None
        value = number
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise PayloadError(f"job payload 'attempts' must be finite, got {value!r}")
        return int(value)
    return value


def _optional_int(value: Any, key: str) -> int | None:
    """An integer field that may be null, an int, an integral float (cjson) or a numeric string."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise PayloadError(f"job payload {key!r} must be finite, got {value!r}")
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value.strip())) if value.strip() else None
        except ValueError:
            raise PayloadError(f"job payload {key!r} must be numeric, got {value!r}") from None
    raise PayloadError(f"job payload {key!r} must be numeric, got {type(value).__name__}")


def backoff_for_attempt(backoff: Any, attempts: int) -> int:
    """``(int) (explode(',', $backoff)[$attempts - 1] ?? last(...))``."""
    if isinstance(backoff, (list, tuple)):
        parts = [_php_string(b) for b in backoff] or [""]
    else:
        parts = _php_string(backoff).split(",")
    index = attempts - 1
    chosen = parts[index] if 0 <= index < len(parts) else parts[-1]
    return php_int_cast(chosen)


def _php_string(value: Any) -> str:
    """PHP string conversion of a scalar, as ``explode`` would see it."""
    if value is None or value is False:
        return ""
    if value is True:
        return "1"
    if isinstance(value, float):
        return php_float_repr(value)
    return str(value)


# -- building -------------------------------------------------------------------------------------

def random_id() -> str:
    """``Str::random(32)``: 32 cryptographically random characters from ``[A-Za-z0-9]``.

    One ``os.urandom`` call per id (not one per character): each byte below 248 (= 4 x 62) maps
    uniformly onto the 62-character alphabet, bytes 248-255 are rejected, as ``secrets.choice``
    rejection-samples; the rare shortfall is topped up from a further read.
    """
    out = b""
    while len(out) < 32:
        # C speed: bytes.translate maps each byte to its character and drops the rejected ones
        out += os.urandom(40).translate(_RANDOM_TABLE, _RANDOM_REJECT)
    return out[:32].decode("ascii")


_RANDOM_TABLE = bytes(ord(_ALPHANUM[b % 62]) if b < 248 else 0 for b in range(256))
_RANDOM_REJECT = bytes(range(248, 256))


def new_uuid() -> str:
    """``Str::uuid()``: a random (v4) UUID, lowercase and hyphenated."""
    return str(_uuid.uuid4())


def log_context(data: Mapping[str, str] | None = None, hidden: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The value of the Context hook's ``illuminate:log:context`` key.

    Values must already be PHP-serialized strings (the hook stores ``serialize($value)``); an empty
    side is written ``[]`` as PHP does.
    """
    return {"data": dict(data) if data else [], "hidden": dict(hidden) if hidden else []}


def _backoff_string(backoff: int | str | Sequence[int | str | datetime] | None, now: float | None) -> str | None:
    if backoff is None:
        return None
    items: Sequence[Any] = backoff if isinstance(backoff, (list, tuple)) else [backoff]
    return ",".join(
        str(_seconds_until(item, now)) if isinstance(item, (datetime, timedelta)) else _php_string(item)
        for item in items
    )


def _finish(
    version: LaravelVersion,
    payload: dict[str, Any],
    *,
    created_at: int | datetime | None,
    context: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
    id: str | None,
    attempts: int,
    delay: int | float | datetime | timedelta | None,
    now: float | None,
    unescaped_unicode: bool | None,
) -> str:
    if version.payload_has_created_at_and_delay:
        payload["createdAt"] = _timestamp(created_at) if created_at is not None else int(
            time.time() if now is None else now
        )
    hooks: dict[str, Any] = {}
    if context is not None:
        if not version.payload_has_context_hook:
            raise ValueError(f"Laravel {version} has no Context payload hook ({LOG_CONTEXT_KEY})")
        hooks[LOG_CONTEXT_KEY] = dict(context)
    if extra:
        hooks.update(extra)
    # array_merge: existing keys are overwritten in place, new keys are appended.
    for key, value in hooks.items():
        payload[key] = value
    payload["id"] = random_id() if id is None else id
    payload["attempts"] = attempts
    if version.payload_has_created_at_and_delay:
        payload["delay"] = None if delay is None else _seconds_until(delay, now)
    raw_unicode = version.payload_unescaped_unicode if unescaped_unicode is None else unescaped_unicode
    try:
        return php_json_encode(payload, unescaped_unicode=raw_unicode)
    except PhpJsonError as exc:
        raise PayloadError(f"Unable to JSON encode payload: {exc}") from exc


def build_object_payload(
    version: LaravelVersion | str | int,
    *,
    command_name: str,
    command: str,
    display_name: str | None = None,
    max_tries: int | None = None,
    max_exceptions: int | None = None,
    fail_on_timeout: bool = False,
    backoff: int | str | Sequence[int | str | datetime] | None = None,
    timeout: int | float | None = None,
    retry_until: int | datetime | None = None,
    delete_when_missing_models: bool = False,
    batch_id: str | None = None,
    created_at: int | datetime | None = None,
    delay: int | float | datetime | timedelta | None = None,
    uuid: str | None = None,
    id: str | None = None,
    attempts: int = 0,
    context: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    job: str = CALL_QUEUED_HANDLER,
    unescaped_unicode: bool | None = None,
    now: float | None = None,
) -> str:
    """The JSON text Laravel's ``RedisQueue`` pushes for a queued job object of ``command_name``.

    ``command`` is the PHP-serialized (or encrypted) job, used verbatim. ``display_name`` defaults to
    ``command_name``. ``backoff`` may be an int, a string or a list (joined with ``,``; datetimes become
    seconds-until). ``context`` is the Context hook's value (see :func:`log_context`; 11.0+) and
    ``extra`` any further hook keys, merged in order before ``id`` like ``createPayloadUsing`` hooks.
    Random fields (``uuid``, ``id``) and ``created_at`` default to fresh values. ``delay`` only appears
    in the payload from 12.11. ``unescaped_unicode`` overrides the version's escaping rule (Horizon
    escapes unicode). ``now`` is the clock used for defaults and datetime conversions.
    """
    profile = LaravelVersion.parse(version)
    payload: dict[str, Any] = {
        "uuid": new_uuid() if uuid is None else uuid,
        "displayName": command_name if display_name is None else display_name,
        "job": job,
        "maxTries": max_tries,
        "maxExceptions": max_exceptions,
    }
    if profile.payload_has_fail_on_timeout:
        payload["failOnTimeout"] = fail_on_timeout
    payload["backoff"] = _backoff_string(backoff, now)
    payload["timeout"] = timeout
    payload["retryUntil"] = None if retry_until is None else _timestamp(retry_until)
    if profile.payload_has_delete_when_missing_models:
        payload["deleteWhenMissingModels"] = delete_when_missing_models
    data: dict[str, Any] = {"commandName": command_name, "command": command}
    if profile.payload_has_batch_id:
        data["batchId"] = batch_id
    payload["data"] = data
    return _finish(
        profile, payload, created_at=created_at, context=context, extra=extra, id=id,
        attempts=attempts, delay=delay, now=now, unescaped_unicode=unescaped_unicode,
    )


def build_string_payload(
    version: LaravelVersion | str | int,
    job: str,
    data: Any = "",
    *,
    max_tries: int | None = None,
    max_exceptions: int | None = None,
    fail_on_timeout: bool = False,
    backoff: int | str | Sequence[int | str | datetime] | None = None,
    timeout: int | float | None = None,
    created_at: int | datetime | None = None,
    delay: int | float | datetime | timedelta | None = None,
    uuid: str | None = None,
    id: str | None = None,
    attempts: int = 0,
    context: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    unescaped_unicode: bool | None = None,
    now: float | None = None,
) -> str:
    """The JSON text of ``Queue::push('Class@method', $data)`` (Laravel's ``createStringPayload``).

    ``displayName`` is the part of ``job`` before ``@``. ``data`` is encoded as given: Python ``dict``
    → JSON object, ``list`` → array (pass ``[]`` for PHP's empty array). String payloads never have
    ``retryUntil`` nor ``deleteWhenMissingModels``. The other options behave as in
    :func:`build_object_payload`.
    """
    profile = LaravelVersion.parse(version)
    payload: dict[str, Any] = {
        "uuid": new_uuid() if uuid is None else uuid,
        "displayName": job.split("@", 1)[0],
        "job": job,
        "maxTries": max_tries,
        "maxExceptions": max_exceptions,
    }
    if profile.payload_has_fail_on_timeout:
        payload["failOnTimeout"] = fail_on_timeout
    payload["backoff"] = _backoff_string(backoff, now)
    payload["timeout"] = timeout
    payload["data"] = data
    return _finish(
        profile, payload, created_at=created_at, context=context, extra=extra, id=id,
        attempts=attempts, delay=delay, now=now, unescaped_unicode=unescaped_unicode,
    )


# -- re-encoding ----------------------------------------------------------------------------------

def _php_decode_object(raw: bytes | str) -> dict[str, Any]:
    try:
        decoded = php_json_decode(raw)
    except PhpJsonError as exc:
        raise PayloadError(f"job payload is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise PayloadError(f"job payload must be a JSON object, got {type(decoded).__name__}")
    return decoded


def _php_encode_arrays(value: dict[str, Any], unescaped_unicode: bool) -> str:
    try:
        return php_json_encode(value, unescaped_unicode=unescaped_unicode, php_arrays=True)
    except PhpJsonError as exc:
        raise PayloadError(f"Unable to JSON encode payload: {exc}") from exc


def reencode_like_php_retry(
    raw: bytes | str, *, attempts: int = 0, retry_until: int | datetime | None = None
) -> str:
    """What ``queue:retry`` pushes back for a stored failed payload.

    PHP decodes the payload to arrays, sets ``attempts`` (when present and not null), optionally sets
    ``retryUntil`` (when the job has a ``retryUntil()`` method: pass its new value), and encodes with
    no flags: key order is kept, unicode becomes ``\\uXXXX`` and empty ``{}`` becomes ``[]``.
    """
    payload = _php_decode_object(raw)
    if payload.get("attempts") is not None:
        payload["attempts"] = attempts
    if retry_until is not None:
        payload["retryUntil"] = _timestamp(retry_until)
    return _php_encode_arrays(payload, unescaped_unicode=False)


def with_attempts(raw: bytes | str, attempts: int, *, unescaped_unicode: bool = False) -> bytes:
    """``raw`` with ``attempts`` set, re-encoded PHP-style (``json_decode($raw, true)`` + ``json_encode``).

    The default (no ``JSON_UNESCAPED_UNICODE``) matches Laravel's ``queue:retry``.
    """
    payload = _php_decode_object(raw)
    payload["attempts"] = attempts
    return _php_encode_arrays(payload, unescaped_unicode=unescaped_unicode).encode("utf-8")


# -- Horizon ---------------------------------------------------------------------------------------------

def horizon_prepare(
    raw: bytes | str, *, tags: Sequence[str] = (), silenced: bool = False, job_type: str = "job",
    pushed_at: str | None = None, null_delay: bool = False,
) -> str:
    """Horizon's ``JobPayload::prepare``: ``type``, ``tags``, ``silenced``, ``pushedAt`` merged into the payload.

    Like Horizon, the payload is decoded to PHP arrays, the four keys are set (in place when present,
    else appended in that order), and the result is re-encoded with ``json_encode``'s default flags
    (``\\uXXXX`` unicode, ``\\/``, an empty ``{}`` becomes ``[]``). ``tags`` are appended to any
    ``tags`` the payload already has; ``pushed_at`` is ``(string) microtime(true)`` (default: now).
    """
    payload = _php_decode_object(raw)
    before = payload.get("tags")
    merged = (list(before.values()) if isinstance(before, dict) else list(before or [])) + list(tags)
    payload["type"] = job_type
    payload["tags"] = merged
    payload["silenced"] = silenced
    if pushed_at is None:
        pushed_at = format(time.time(), ".14G")
    payload["pushedAt"] = pushed_at
    if null_delay and "delay" in payload:  # Horizon < 5.45.6's later(): a payload built without the delay
        payload["delay"] = None
    return _php_encode_arrays(payload, unescaped_unicode=False)
