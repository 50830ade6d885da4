"""Horizon's per-job records, written the way Horizon's own worker writes them.

One class, :class:`HorizonRecords`, owns every job-level key under the Horizon prefix. It mirrors:

* ``Laravel\\Horizon\\Repositories\\RedisJobRepository``: the job hash (``<id>``) moving
  pending → reserved → completed / failed with ``created_at``/``updated_at``/``reserved_at``/
  ``completed_at``/``failed_at``, the exception and its context, the EXPIREATs from ``horizon.trim``,
  and the ``recent_jobs``, ``pending_jobs``, ``completed_jobs``, ``silenced_jobs``, ``failed_jobs``,
  ``recent_failed_jobs`` and ``monitored_jobs`` sorted sets (score = −microtime); a retried job's
  ``retried_by`` entry on its parent;
* ``Laravel\\Horizon\\Repositories\\RedisTagRepository``: the ``monitoring`` set, the per-tag sorted
  sets of monitored tags and the temporary ``failed:<tag>`` sets;
* ``Laravel\\Horizon\\Repositories\\RedisMetricsRepository`` + ``LuaScripts::updateMetrics``: the
  per-queue (``queue:<name>``) and per-job (``job:<displayName>``) throughput and running-average
  runtime (milliseconds, rounded to 2 places like Horizon's ``Stopwatch``), with the
  ``measured_queues``/``measured_jobs`` sets. laraq runs its own script with the same arithmetic, so
  both workers update one average.

Which write happens on which worker event is Horizon's ``EventMap``: reserved → ``reserved``;
released → ``released``; deleted after success → ``completed`` + ``remember`` (when a tag is
monitored) + metrics; failed → ``completed(failed)`` then ``failed`` + ``failed:<tag>`` (no metrics).
Every record is keyed by ``JobPayload::id()`` (``uuid``, else ``id``) and carries the *reserved*
payload (the copy with the incremented ``attempts``), as Horizon's events do.

Times are PHP's ``(string) microtime(true)``: 14 significant digits, trailing zeros dropped
(:func:`php_microtime`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import redis

from laraq.protocol.phpjson import check_json_depth, json_loads

if TYPE_CHECKING:
    from laraq.horizon.settings import HorizonSettings

__all__ = ["HorizonPayload", "HorizonRecords", "php_float_string", "php_microtime"]

#: ``updateMetrics``'s arithmetic for each pair of keys in turn (KEYS[i] a metrics hash, KEYS[i + 1] the set
#: naming the measured hashes; ARGV[1] this job's runtime in ms): throughput + 1 and the running mean of
#: the runtime. One pair is one of Horizon's calls; the packed path updates the queue's and the job's
#: metrics (two pairs) in one call.
_METRICS_LUA = """
for i = 1, #KEYS, 2 do
    redis.call('hsetnx', KEYS[i], 'throughput', 0)
    redis.call('sadd', KEYS[i + 1], KEYS[i])
    local seen = redis.call('hmget', KEYS[i], 'throughput', 'runtime')
    local count = tonumber(seen[1])
    local mean = tonumber(ARGV[1])
    if seen[2] then
        mean = ((count * tonumber(seen[2])) + tonumber(ARGV[1])) / (count + 1)
    end
    redis.call('hmset', KEYS[i], 'throughput', count + 1, 'runtime', mean)
end
"""


#: ``MarkJobAsComplete``'s ``remember`` of a tagged job, decided in Redis (KEYS[1] ``monitoring``, KEYS[2]
#: ``monitored_jobs``, KEYS[3] the job hash; ARGV[1] the score, ARGV[2] the job id, ARGV[3] the EXPIREAT,
#: ARGV[4] the count n of the hash's fields and values that follow, then the job's tags): when a tag is
#: monitored (``array_intersect`` of the tags and ``SMEMBERS monitoring``), the writes of
#: ``RedisJobRepository::remember``. The packed path sends it in place of the ``SMEMBERS`` whose reply
#: decides, so the tagged job's records need no reply either.
_REMEMBER_LUA = """
local n = tonumber(ARGV[4])
for i = 5 + n, #ARGV do
    if redis.call('sismember', KEYS[1], ARGV[i]) == 1 then
        redis.call('zadd', KEYS[2], ARGV[1], ARGV[2])
        redis.call('hset', KEYS[3], unpack(ARGV, 5, 4 + n))
        redis.call('expireat', KEYS[3], ARGV[3])
        return 1
    end
end
return 0
"""

#: the RESP commands :meth:`HorizonRecords.pack_completed` and :meth:`~HorizonRecords.pack_reserved` fill in
#: with ``%`` (each bulk string as its length, then itself)
_HSET_COMPLETED = (b"*6\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n$6\r\nstatus\r\n$9\r\ncompleted\r\n"
                   b"$12\r\ncompleted_at\r\n$%d\r\n%s\r\n")
_EXPIREAT = b"*3\r\n$8\r\nEXPIREAT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
_SMEMBERS = b"*2\r\n$8\r\nSMEMBERS\r\n$%d\r\n%s\r\n"
#: ``EVALSHA sha 4`` before its four keys and the runtime
_EVALSHA_HEAD = b"*8\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n$1\r\n4\r\n"
#: ``ZADD key`` and ``ZREM key`` before their arguments; two bulk strings
_ZADD_HEAD = b"*4\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n"
_ZREM_HEAD = b"*3\r\n$4\r\nZREM\r\n$%d\r\n%s\r\n"
_BULK2 = b"$%d\r\n%s\r\n$%d\r\n%s\r\n"
_HSET_RESERVED = (b"*10\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n$6\r\nstatus\r\n$8\r\nreserved\r\n$7\r\npayload\r\n$%d\r\n%s\r\n"
                  b"$10\r\nupdated_at\r\n$%d\r\n%s\r\n$11\r\nreserved_at\r\n$%d\r\n%s\r\n")
_HSET_RESERVED_DELAY = b"*12" + _HSET_RESERVED[3:] + b"$5\r\ndelay\r\n$1\r\n0\r\n"


def resp(*args: bytes) -> bytes:
    """One command in RESP."""
    parts = [b"*%d\r\n" % len(args)]
    parts += [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]
    return b"".join(parts)


def php_float_string(value: float) -> str:
    """PHP's ``(string) $float`` (``precision`` = 14): ``1795351333.3019``, ``27.67``, ``5``."""
    text = format(value, ".14G")
    if "E" in text:  # PHP writes 1.0E+25 for huge values; never a timestamp or a runtime
        mantissa, exponent = text.split("E")
        text = f"{mantissa if '.' in mantissa else mantissa + '.0'}E{exponent[0]}{int(exponent[1:])}"
    return text


def php_microtime(now: float | None = None) -> str:
    """``str_replace(',', '.', microtime(true))``."""
    return php_float_string(time.time() if now is None else now)


@dataclass(frozen=True)
class HorizonPayload:
    """Horizon's ``JobPayload``: the raw bytes kept verbatim, plus the fields Horizon reads."""

    value: bytes
    decoded: dict[str, Any]

    @classmethod
    def parse(cls, raw: bytes | str) -> HorizonPayload:
        value = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        # orjson (strict JSON, which is all PHP and the reserve scripts write) after PHP's depth limit; the
        # standard parser decides what orjson refuses (NaN, a number out of its range, a lone surrogate)
        check_json_depth(value)
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            decoded = json_loads(value)
        if not isinstance(decoded, dict):
            raise ValueError("a job payload must be a JSON object")
        return cls(value, decoded)

    @property
    def id(self) -> str | None:
        value = self.decoded.get("uuid")
        if value is None:
            value = self.decoded.get("id")
        return None if value is None else str(value)

    @property
    def display_name(self) -> str:
        value = self.decoded.get("displayName")
        return "" if value is None else str(value)

    @property
    def tags(self) -> list[str]:
        """``tags`` (a ``{}`` left by Lua's cjson for an empty array counts as none)."""
        value = self.decoded.get("tags") or []
        if isinstance(value, dict):
            value = list(value.values())
        return [str(tag) for tag in value] if isinstance(value, list) else []

    @property
    def silenced(self) -> bool:
        return bool(self.decoded.get("silenced"))

    @property
    def attempts(self) -> int:
        """``attempts`` (the reserved copy counts this reservation)."""
        value = self.decoded.get("attempts")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def migrated(self) -> bool:
        """Whether this reserved copy reached the list through a migration (``migrateExpiredJobs``): a job
        reserved again came back from ``:delayed`` (released) or ``:reserved`` (expired), and a payload
        with a ``delay`` (``later()`` on Laravel 12.11+ with Horizon 5.45.6+, or laraq's dispatch) was
        pushed onto ``:delayed``. A delayed payload without the key (older Laravel, Horizon 5.45.1 to
        5.45.5) cannot be told from a plain push."""
        return self.attempts > 1 or self.decoded.get("delay") is not None

    @property
    def retry_of(self) -> str | None:
        value = self.decoded.get("retry_of")
        return None if value is None else str(value)


class HorizonRecords:
    """Writes Horizon's job records, tags and metrics for jobs laraq pushes and runs.

    ``client`` is a redis-py client on Horizon's Redis (no key prefix of its own: every key is
    prefixed here with :attr:`HorizonSettings.prefix`). ``clock`` returns Unix time as a float.
    """

    def __init__(self, client: Any, settings: HorizonSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self._metrics_sha: str | None = None
        self._remember_sha: str | None = None
        self._bkeys: dict[str, bytes] = {}
        #: per (queue, display name, silenced): the RESP heads and metrics keys pack_completed repeats
        self._pack_keys: dict[tuple[str, str, bool], tuple[bytes, bytes, bytes, bytes, tuple[bytes, ...]]] = {}

    # -- the metrics script (EVALSHA inside the job's pipeline, loaded once) ---------------------------

    def load_metrics_script(self) -> str:
        """Load the metrics script (again) into Redis; its SHA1."""
        self._metrics_sha = self.client.script_load(_METRICS_LUA)
        return self._metrics_sha

    def load_scripts(self) -> None:
        """Load the scripts :meth:`pack_completed` calls (again) into Redis (a SHA1 is the script's own: the
        calls packed before stay valid)."""
        self.load_metrics_script()
        self._remember_sha = self.client.script_load(_REMEMBER_LUA)

    def _metrics_args(self, queue: str, payload: HorizonPayload, runtime: str) -> list[tuple[str, str, str]]:
        return [(self._k("queue:" + queue), self._k("measured_queues"), runtime),
                (self._k("job:" + payload.display_name), self._k("measured_jobs"), runtime)]

    def _run_with_metrics(self, pipe: Any, metrics: list[tuple[str, str, str]]) -> list[Any]:
        """Execute ``pipe`` with the metrics calls appended; reload the script once if Redis lost it."""
        if self._metrics_sha is None:
            self._metrics_sha = self.client.script_load(_METRICS_LUA)
        for key, group, runtime in metrics:
            pipe.evalsha(self._metrics_sha, 2, key, group, runtime)
        results = pipe.execute(raise_on_error=False)
        tail = results[len(results) - len(metrics):] if metrics else []
        if any(isinstance(r, redis.exceptions.NoScriptError) for r in tail):
            self._metrics_sha = self.client.script_load(_METRICS_LUA)
            retry = self.client.pipeline(transaction=False)
            for (key, group, runtime), r in zip(metrics, tail, strict=True):
                if isinstance(r, redis.exceptions.NoScriptError):
                    retry.evalsha(self._metrics_sha, 2, key, group, runtime)
            retry.execute()
        errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, redis.exceptions.NoScriptError)]
        if errors:
            raise errors[0]
        return results

    @staticmethod
    def _apply(pipe: Any, before: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        for key, mapping in before:
            pipe.hset(key, mapping=dict(mapping))

    # -- packed in RESP, for a RecordPipe ------------------------------------------------------------------

    def _bk(self, name: str) -> bytes:
        """``_k(name)`` as bytes (cached: the queue and job names repeat)."""
        key = self._bkeys.get(name)
        if key is None:
            if len(self._bkeys) > 4096:
                self._bkeys.clear()
            key = self._bkeys[name] = (self.settings.prefix + name).encode("utf-8")
        return key

    def pack_reserved(self, payload: HorizonPayload, at: float) -> bytes:
        """:meth:`reserved_write` as one ``HSET`` in RESP."""
        now = php_microtime(at).encode()
        job_key = self._bk(_require_id(payload))
        value = payload.value
        if self.settings.version.job_hash_delay and payload.migrated:
            return _HSET_RESERVED_DELAY % (len(job_key), job_key, len(value), value, len(now), now, len(now), now)
        return _HSET_RESERVED % (len(job_key), job_key, len(value), value, len(now), now, len(now), now)

    @staticmethod
    def pipes_completed(payload: HorizonPayload) -> bool:
        """Can :meth:`pack_completed` write this job's completion (no reply decides a further write: not a
        retry, whose parent's ``retried_by`` is read first)?"""
        return payload.decoded.get("retry_of") is None

    def pack_completed(self, connection: str, queue: str, payload: HorizonPayload, runtime_ms: float | None,
                       before: bytes = b"", replies: int = 0) -> tuple[bytes, int, tuple[Any, ...]]:
        """:meth:`completed` of a job :meth:`pipes_completed` accepts, in RESP after ``before`` (``replies``
        commands): the bytes, their reply count, and the script calls among them (reply index, ``EVALSHA``'s
        arguments) to send again on a ``NOSCRIPT`` answer. A tagged job's ``remember`` is decided in Redis
        (:data:`_REMEMBER_LUA`)."""
        sha = self._metrics_sha
        if sha is None or self._remember_sha is None:
            self.load_scripts()
            sha = self._metrics_sha
            assert sha is not None
        job_id = _require_id(payload)
        bid = job_id.encode("utf-8")
        now = self.clock()
        stamp = php_microtime(now).encode()
        score = b"-" + stamp  # php_microtime(-now): the same digits (now > 0)
        expire = b"%d" % (int(now) + self.settings.trim.completed * 60)
        silenced = payload.silenced
        name = payload.display_name
        keys = self._pack_keys.get((queue, name, silenced))
        if keys is None:
            if len(self._pack_keys) > 1024:
                self._pack_keys.clear()
            zset = self._bk("silenced_jobs" if silenced else "completed_jobs")
            pending = self._bk("pending_jobs")
            monitoring = self._bk("monitoring")
            measured: tuple[bytes, ...] = (self._bk("queue:" + queue), self._bk("measured_queues"),
                                           self._bk("job:" + name), self._bk("measured_jobs"))
            keys = self._pack_keys[(queue, name, silenced)] = (
                _ZADD_HEAD % (len(zset), zset), _ZREM_HEAD % (len(pending), pending),
                _SMEMBERS % (len(monitoring), monitoring),
                b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in measured), measured,
            )
        zadd_head, zrem_head, smembers, measured_resp, metrics_keys = keys
        job_key = self._bk(job_id)
        runtime = php_float_string(round(runtime_ms or 0.0, 2)).encode()
        bsha = sha.encode()
        tags = payload.tags
        remember: tuple[Any, ...] = ()
        if tags:  # in place of the SMEMBERS: the remember decided in Redis
            remember_sha = self._remember_sha
            assert remember_sha is not None
            fields = (b"id", bid, b"connection", connection.encode("utf-8"), b"queue", queue.encode("utf-8"),
                      b"name", name.encode("utf-8"), b"status", b"completed", b"payload", payload.value,
                      b"completed_at", stamp)
            monitored_expire = b"%d" % (int(now) + self.settings.trim.monitored * 60)
            remember = (remember_sha.encode(), b"3", self._bk("monitoring"), self._bk("monitored_jobs"), job_key,
                        score, bid, monitored_expire, b"%d" % len(fields), *fields,
                        *(tag.encode("utf-8") for tag in tags))
            smembers = resp(b"EVALSHA", *remember)
        packed = b"".join((
            before,
            zadd_head, _BULK2 % (len(score), score, len(bid), bid),
            zrem_head, b"$%d\r\n%s\r\n" % (len(bid), bid),
            _HSET_COMPLETED % (len(job_key), job_key, len(stamp), stamp),
            _EXPIREAT % (len(job_key), job_key, len(expire), expire),
            smembers,
            _EVALSHA_HEAD % (len(bsha), bsha), measured_resp, b"$%d\r\n%s\r\n" % (len(runtime), runtime),
        ))
        metrics = (replies + 5, (bsha, b"4", *metrics_keys, runtime))
        if remember:
            return packed, replies + 6, ((replies + 4, remember), metrics)
        return packed, replies + 6, (metrics,)

    # -- helpers -----------------------------------------------------------------------------------

    def _k(self, name: str) -> str:
        return self.settings.prefix + name

    def _expire_at(self, minutes: int) -> int:
        return int(self.clock()) + minutes * 60

    def _reference(self, pipe: Any, zset: str, job_id: str) -> None:
        """``storeJobReference``: newest first, scored by −microtime."""
        pipe.zadd(self._k(zset), {job_id: php_microtime(-self.clock())})

    def monitoring(self) -> set[str]:
        """``RedisTagRepository::monitoring``: the tags someone watches in the dashboard."""
        return {m.decode() if isinstance(m, bytes) else m for m in self.client.smembers(self._k("monitoring"))}

    def monitored(self, tags: Sequence[str], watched: set[str] | None = None) -> list[str]:
        """``RedisTagRepository::monitored`` (``array_intersect``: order and repeats of ``tags`` kept)."""
        watched = self.monitoring() if watched is None else watched
        return [tag for tag in tags if tag in watched]

    # -- push ------------------------------------------------------------------------------------------

    def record_pushed(self, connection: str, queue: str, payload: bytes) -> None:
        """:meth:`pushed` for the raw bytes a dispatcher pushed (:class:`laraq.bus.dispatch.PushRecorder`)."""
        self.pushed(connection, queue, HorizonPayload.parse(payload))

    def pushed(self, connection: str, queue: str, payload: HorizonPayload) -> None:
        """``JobPushed``: ``StoreJob`` (``pushed``) and ``StoreMonitoredTags``."""
        job_id = _require_id(payload)
        now = php_microtime(self.clock())
        pipe = self.client.pipeline(transaction=False)
        self._reference(pipe, "recent_jobs", job_id)
        self._reference(pipe, "pending_jobs", job_id)
        pipe.hset(self._k(job_id), mapping={
            "id": job_id, "connection": connection, "queue": queue, "name": payload.display_name,
            "status": "pending", "payload": payload.value, "created_at": now, "updated_at": now,
        })
        pipe.expireat(self._k(job_id), self._expire_at(self.settings.trim.pending))
        pipe.smembers(self._k("monitoring"))
        watched = {m.decode() if isinstance(m, bytes) else m for m in pipe.execute()[-1]}
        tags = self.monitored(payload.tags, watched)
        if tags:
            self.add_tags(job_id, tags)

    def add_tags(self, job_id: str, tags: Sequence[str]) -> None:
        """``RedisTagRepository::add``."""
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zadd(self._k(tag), {job_id: php_microtime(self.clock())})
        pipe.execute()

    # -- the worker's events ---------------------------------------------------------------------------

    def reserved_write(self, payload: HorizonPayload, at: float | None = None) -> tuple[str, dict[str, Any]]:
        """``JobReserved`` → ``MarkJobAsReserved``: the hash write (status ``reserved``, the reserved
        payload, ``reserved_at`` = ``at``), for :meth:`reserved` or to send with a later pipeline."""
        now = php_microtime(self.clock() if at is None else at)
        fields: dict[str, Any] = {
            "status": "reserved", "payload": payload.value, "updated_at": now, "reserved_at": now,
        }
        if self.settings.version.job_hash_delay and payload.migrated:
            # The job came to the list through a migration, where Horizon 5.45.1+'s JobsMigrated listener
            # (``RedisJobRepository::migrated``) sets ``delay`` to 0. laraq's pop migrates without that
            # event, so the reservation writes it.
            fields["delay"] = 0
        return self._k(_require_id(payload)), fields

    def reserved(self, connection: str, queue: str, payload: HorizonPayload) -> None:
        """``MarkJobAsReserved`` now."""
        key, mapping = self.reserved_write(payload)
        self.client.hset(key, mapping=mapping)

    def write(self, writes: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Send buffered hash writes (see :meth:`reserved_write`) in one round trip."""
        if writes:
            pipe = self.client.pipeline(transaction=False)
            self._apply(pipe, writes)
            pipe.execute()

    def released(self, connection: str, queue: str, payload: HorizonPayload,
                 before: Sequence[tuple[str, Mapping[str, Any]]] = (), delay: int = 0) -> None:
        """``JobReleased`` → ``MarkJobAsReleased`` (also ``JobsMigrated``): back to ``pending``; Horizon
        5.45.1+ also records the release ``delay`` (seconds).

        ``before``: buffered writes of this job to send first, in the same round trip.
        """
        pipe = self.client.pipeline(transaction=False)
        self._apply(pipe, before)
        fields: dict[str, Any] = {
            "status": "pending", "payload": payload.value, "updated_at": php_microtime(self.clock()),
        }
        if self.settings.version.job_hash_delay:
            fields["delay"] = int(delay or 0)
        pipe.hset(self._k(_require_id(payload)), mapping=fields)
        pipe.execute()

    def completed(self, connection: str, queue: str, payload: HorizonPayload, runtime_ms: float | None,
                  before: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> None:
        """``JobDeleted`` after success: ``MarkJobAsComplete`` (+ ``remember``) and ``UpdateJobMetrics``.

        ``runtime_ms`` is the job's runtime as measured by the worker (Horizon's ``Stopwatch``);
        ``None`` counts as 0, as Horizon does for a job it did not time. One round trip (two when a
        tag is monitored).
        """
        self._retry_status(payload, failed=False)
        job_id = _require_id(payload)
        pipe = self.client.pipeline(transaction=False)
        self._apply(pipe, before)
        self._completed_writes(pipe, payload, job_id)
        pipe.smembers(self._k("monitoring"))
        runtime = php_float_string(round(runtime_ms or 0.0, 2))
        metrics = self._metrics_args(queue, payload, runtime)
        results = self._run_with_metrics(pipe, metrics)
        members = results[len(results) - len(metrics) - 1]
        watched = {m.decode() if isinstance(m, bytes) else m for m in members}
        if self.monitored(payload.tags, watched):
            self.remember(connection, queue, payload)

    def remember(self, connection: str, queue: str, payload: HorizonPayload) -> None:
        """``RedisJobRepository::remember``: a completed job with a monitored tag, kept ``trim.monitored``."""
        job_id = _require_id(payload)
        pipe = self.client.pipeline(transaction=False)
        self._reference(pipe, "monitored_jobs", job_id)
        pipe.hset(self._k(job_id), mapping={
            "id": job_id, "connection": connection, "queue": queue, "name": payload.display_name,
            "status": "completed", "payload": payload.value, "completed_at": php_microtime(self.clock()),
        })
        pipe.expireat(self._k(job_id), self._expire_at(self.settings.trim.monitored))
        pipe.execute()

    def failed(self, connection: str, queue: str, payload: HorizonPayload, exception: str,
               context: str | None = None, before: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> None:
        """A failed job: what Horizon's worker writes when ``Job::fail`` deletes and then reports it.

        ``JobDeleted`` with ``hasFailed()`` → ``completed`` (into ``completed_jobs``/``silenced_jobs``,
        no metrics); then ``JobFailed`` → ``MarkJobAsFailed`` (``failed``) and
        ``StoreTagsForFailedJob`` (``failed:<tag>``, expiring after ``trim.failed``). ``exception`` is
        PHP's ``(string) $e`` text; ``context`` the JSON of ``$e->context()`` (empty when none).
        """
        self._retry_status(payload, failed=True)
        job_id = _require_id(payload)
        trim = self.settings.trim
        pipe = self.client.pipeline(transaction=False)
        self._apply(pipe, before)
        self._completed_writes(pipe, payload, job_id)
        pipe.smembers(self._k("monitoring"))  # Horizon's MarkJobAsComplete reads it even for failures
        self._reference(pipe, "failed_jobs", job_id)
        self._reference(pipe, "recent_failed_jobs", job_id)
        for zset in ("pending_jobs", "completed_jobs", "silenced_jobs"):
            pipe.zrem(self._k(zset), job_id)
        pipe.hset(self._k(job_id), mapping={
            "id": job_id, "connection": connection, "queue": queue, "name": payload.display_name,
            "status": "failed", "payload": payload.value, "exception": exception,
            "context": "" if context is None else context, "failed_at": php_microtime(self.clock()),
        })
        pipe.expireat(self._k(job_id), self._expire_at(trim.failed))
        for tag in payload.tags:
            pipe.zadd(self._k("failed:" + tag), {job_id: php_microtime(self.clock())})
            pipe.expire(self._k("failed:" + tag), trim.failed * 60)
        pipe.execute()

    def _completed_writes(self, pipe: Any, payload: HorizonPayload, job_id: str) -> None:
        """``RedisJobRepository::completed``'s pipeline."""
        self._reference(pipe, "silenced_jobs" if payload.silenced else "completed_jobs", job_id)
        pipe.zrem(self._k("pending_jobs"), job_id)
        pipe.hset(self._k(job_id), mapping={"status": "completed", "completed_at": php_microtime(self.clock())})
        pipe.expireat(self._k(job_id), self._expire_at(self.settings.trim.completed))

    def _retry_status(self, payload: HorizonPayload, *, failed: bool) -> None:
        """``updateRetryInformationOnParent``: mark this retry completed/failed on the original job."""
        parent = payload.retry_of
        if parent is None:
            return
        raw = self.client.hget(self._k(parent), "retried_by")
        if not raw:
            return
        try:
            retries = json.loads(raw)
        except ValueError:
            return
        if not isinstance(retries, list):
            return
        for retry in retries:
            if isinstance(retry, dict) and retry.get("id") == payload.id:
                retry["status"] = "failed" if failed else "completed"
        # PHP's json_encode: compact, "\/" for slashes.
        text = json.dumps(retries, separators=(",", ":")).replace("/", "\\/")
        self.client.hset(self._k(parent), "retried_by", text)


def _require_id(payload: HorizonPayload) -> str:
    job_id = payload.id
    if not job_id:
        raise ValueError("the job payload has neither uuid nor id: Horizon cannot record it")
    return job_id
