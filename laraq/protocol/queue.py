"""Laravel's ``RedisQueue`` operations over redis-py: push, later, bulk, pop, release, delete, sizes.

:class:`RedisQueue` does what ``Illuminate\\Queue\\RedisQueue`` does, call for call, for the Laravel
version it is configured with (every version difference comes from :mod:`laraq.protocol.versions`):

* key names (:class:`~laraq.protocol.keys.QueueKeys`): ``<prefix>queues:<name>`` and its ``:delayed``,
  ``:reserved`` and ``:notify`` companions, plus laraq's own ``:poison`` dead-letter list; ``{name}``
  hash tags on cluster connections from 13.5;
* ``pop`` = migrate ``:delayed`` → list, migrate ``:reserved`` → list (unless ``retry_after`` is
  ``None``), the pop script, and optionally ``BLPOP :notify`` plus one retry: the same round trips as
  Laravel;
* the member written to ``:reserved`` by the pop script is kept in :class:`ReservedJob` and used byte
  for byte by :meth:`RedisQueue.delete_reserved` and :meth:`RedisQueue.release`; it is never rebuilt.

Redis is addressed with raw bytes: no serializer, no compression, ``decode_responses`` off. Unlike
Laravel, redis-py does not add a key prefix, so every key carries the prefix itself.

The operator commands read members through :meth:`RedisQueue.excerpts` (at most
:data:`~laraq.protocol.lua.EXCERPT_SIDE` bytes from each end of a member) and the top-level fields they
show with :func:`member_fields`, so a queue of huge members costs them a bounded read.

The worker's own operations on a queue (batch reserves, acks, lease renewals, give-backs, the unstarted
record), which Laravel has no counterpart for, are the queue's ``reserving``
(:class:`~laraq.protocol.reserve.Reserving`, :mod:`laraq.protocol.reserve`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, cast

import redis

from laraq.protocol.keys import QueueKeys, has_hash_tag
from laraq.protocol.lua import EXCERPT_SIDE, Excerpt, Scripts, excerpts_from
from laraq.protocol.payload import leading_uuid
from laraq.protocol.phpjson import PhpJsonError, check_json_depth, json_loads
from laraq.protocol.pooled import blocking
from laraq.protocol.redis_retry import fail_fast_on_auth
from laraq.protocol.reserve import Reserved, Reserving
from laraq.protocol.routing import QueueForwards, queue_name_of
from laraq.protocol.urls import describe_client, redact_url
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

log = logging.getLogger(__name__)

Delay = int | float | datetime | timedelta
PayloadLike = bytes | bytearray | memoryview | str | Any

# QueueKeys and has_hash_tag (keys.py) and redact_url (urls.py) are importable from here too.
__all__ = [
    "Excerpt",
    "QueueKeys",
    "RedisQueue",
    "ReservedJob",
    "excerpts_from",
    "has_hash_tag",
    "member_fields",
    "redact_url",
]

#: The most due members one migrate command moves (1-2 ms of Redis time on an idle host), however many are due.
#: Laravel 8.0-9.22 (and 9.23+ with ``migration_batch_size`` -1) move every due member in one script;
#: laraq moves them in commands of at most this many until none is left, with the same end state and
#: order (see ``compat-docs/performance-history.md``), so Redis is never held for long by one of them.
MIGRATE_BOUND = 500


# -- reserved jobs -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReservedJob:
    """A job reserved by :meth:`RedisQueue.pop`.

    ``body`` is the member as it was in the list (Laravel's ``getRawBody()``: payload accessors,
    ``failed_jobs.payload``); ``reserved`` is the re-encoded member now in ``:reserved``
    (``getReservedJob()``), the only string that deletes or releases this reservation.
    """

    queue: str
    body: bytes
    reserved: bytes


# -- helpers -------------------------------------------------------------------------------------

def _payload_bytes(payload: PayloadLike) -> bytes:
    """The bytes to store for a payload given as bytes, text, or a built payload object."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8")
    raw = getattr(payload, "raw", None)
    if isinstance(raw, bytes | bytearray):
        return bytes(raw)
    if isinstance(raw, str):
        return raw.encode("utf-8")
    if hasattr(payload, "__bytes__"):
        return bytes(payload)
    raise TypeError(f"cannot push a payload of type {type(payload).__name__}; give bytes or str")


def _payload_id(payload: bytes) -> str | None:
    """``json_decode($payload, true)['id'] ?? null``, as ``pushRaw`` returns it."""
    try:
        data = json_loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("id")
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "1" if value else ""
    return str(value)


#: Redis's Lua cjson refuses documents nested deeper than this (``decode_max_depth``).
CJSON_MAX_DEPTH = 1000

# A top-level field with a scalar value, as PHP's json_encode writes it, in the last bytes of a member
_TAIL_FIELD = re.compile(rb'[,{]"([A-Za-z]{1,32})":(-?[0-9][0-9.eE+-]{0,40}|"[^"\\]{0,64}"|null|true|false)(?=[,}])')


def member_fields(excerpt: Excerpt, names: tuple[str, ...]) -> dict[str, Any]:
    """The top-level fields ``names`` of a member read by :meth:`RedisQueue.excerpts`, as decoded.

    A whole member is decoded (:func:`~laraq.protocol.phpjson.json_loads`; nothing when it is not a JSON
    object). Of a cut one only the scalar fields in its last bytes are read, the last match of each name:
    where ``createdAt``, ``id``, ``attempts`` and Horizon's ``pushedAt`` stand, after ``data``."""
    whole = excerpt.whole
    if whole is not None:
        try:
            decoded = json_loads(whole)
        except ValueError:
            return {}
        return {n: decoded[n] for n in names if n in decoded} if isinstance(decoded, dict) else {}
    found: dict[str, Any] = {}
    wanted = {n.encode("ascii") for n in names}
    for match in _TAIL_FIELD.finditer(excerpt.tail):
        if match.group(1) in wanted:
            try:
                found[match.group(1).decode("ascii")] = json_loads(match.group(2))
            except ValueError:
                continue
    return found


def _describe_parked(excerpt: Excerpt) -> str:
    """A parked member in a few words: its uuid or its size and first bytes, and a depth that explains it."""
    uuid = leading_uuid(excerpt.head)
    name = f"uuid {uuid}" if uuid else f"{excerpt.length:,} bytes starting {excerpt.head[:40]!r}"
    try:
        check_json_depth(excerpt.head, CJSON_MAX_DEPTH + 1)
    except PhpJsonError:
        return f"{name}, nested more than {CJSON_MAX_DEPTH} levels deep"
    return name


# -- the queue -----------------------------------------------------------------------------------

class RedisQueue:
    """One Laravel Redis queue connection (``config/queue.php`` → ``connections.redis``).

    ``client`` is a redis-py client (``decode_responses`` must be off) or a URL: ``redis://``,
    ``rediss://`` (TLS; CA and client-certificate options go in the query string, e.g.
    ``?ssl_ca_certs=/path/ca.pem``), ``redis://user:password@host:port/db`` for ACL users,
    ``redis://:password@…`` for ``requirepass``. With ``cluster=True`` a URL builds a
    :class:`redis.RedisCluster`, and key names follow the version's cluster rules.

    ``prefix`` is the Redis connection's key prefix (``database.redis.options.prefix``); ``None``
    takes the stock prefix of ``version`` for ``app_name``. ``retry_after``, ``block_for`` and
    ``migration_batch_size`` mean what they mean in the queue connection config. ``clock`` returns
    unix time as a float; every score is derived from it in whole seconds, like Laravel.
    """

    def __init__(
        self,
        client: redis.Redis | Any | str,
        *,
        connection_name: str = "redis",
        default_queue: str = "default",
        prefix: str | None = None,
        app_name: str = "Laravel",
        retry_after: int | None = 90,
        block_for: int | float | None = None,
        migration_batch_size: int = -1,
        version: LaravelVersion | str = DEFAULT_VERSION,
        cluster: bool | None = None,
        clock: Callable[[], float] = time.time,
        forwards: QueueForwards | Mapping[str, Any] | str | None = None,
    ) -> None:
        self.version = LaravelVersion.parse(version)
        #: 13.26+ ``Queue::forward`` routes (see :mod:`laraq.protocol.routing`); none before 13.26.
        self.forwards = QueueForwards.of(forwards) if self.version.since("13.26") else QueueForwards()
        # None: a cluster connection if the client is a redis.RedisCluster
        self.cluster = isinstance(client, redis.RedisCluster) if cluster is None else cluster
        if isinstance(client, str):
            self._url: str | None = client
            factory = redis.RedisCluster if cluster else redis.Redis
            self.client = factory.from_url(client, decode_responses=False)
        else:
            self._url = None
            self.client = client
        fail_fast_on_auth(self.client)  # a refused login is raised at once, not retried for seconds
        self.connection_name = connection_name
        self.default_queue = default_queue
        self.prefix = self.version.default_redis_prefix(app_name) if prefix is None else prefix
        self.retry_after = retry_after
        self.block_for = block_for
        #: the server refused a fractional ``BLPOP`` timeout (Redis before 6.0): waits are whole seconds
        self.whole_second_waits = False
        self.migration_batch_size = migration_batch_size
        self.clock = clock
        self.scripts = Scripts(self.client)
        #: 11.27+: a queue after the first one yielded a job since the first queue was last polled.
        self.secondary_queue_had_job = False
        self._keys: dict[str, QueueKeys] = {}
        #: the worker's batch reserve, renewals, give-backs and unstarted records on this queue
        self.reserving = Reserving(self)

    # -- naming and time ---------------------------------------------------------------------------

    def redacted_url(self) -> str:
        """Where this queue connects, without any password (safe for logs and errors)."""
        if self._url is not None:
            return redact_url(self._url)
        return describe_client(self.client)

    def queue_name(self, queue: str | Enum | None = None) -> str:
        """The unprefixed queue name (``enum_value(queue) ?: default``)."""
        return queue_name_of(queue) or self.default_queue

    def keys(self, queue: str | Enum | None = None) -> QueueKeys:
        """The keys of ``queue`` (default queue when empty; 13.26+ forwards applied)."""
        name = self.queue_name(queue)
        found = self._keys.get(name)
        if found is None:
            routed = self.forwards.resolve(name, self.connection_name) if self.forwards else name
            found = QueueKeys.for_queue(routed, prefix=self.prefix, version=self.version, cluster=self.cluster)
            self._keys[name] = found
        return found

    def current_time(self) -> int:
        """Laravel's ``currentTime()``: unix seconds, truncated."""
        return math.floor(self.clock())

    def available_at(self, delay: Delay | None = 0) -> int:
        """Laravel's ``availableAt()``: a datetime's timestamp, else now plus the delay, in whole seconds.

        ``None`` counts as no delay (Carbon adds nothing for a null amount; this is the reservation
        expiry Laravel computes when ``retry_after`` is null).
        """
        if isinstance(delay, datetime):
            return math.floor(delay.timestamp())
        if isinstance(delay, timedelta):
            return math.floor(self.clock() + delay.total_seconds())
        if delay is None:
            return self.current_time()
        if isinstance(delay, int):
            return self.current_time() + delay
        return math.floor(self.current_time() + float(delay))

    # -- writing -----------------------------------------------------------------------------------

    def push_raw(self, payload: bytes | str, queue: str | None = None) -> str | None:
        """``pushRaw``: append a payload and a notify token; returns its ``id`` if it has one."""
        data = _payload_bytes(payload)
        keys = self.keys(queue)
        self.scripts.push(keys.list, keys.notify, data)
        return _payload_id(data)

    def push(self, payload: PayloadLike, queue: str | None = None) -> str | None:
        """Push a built payload (bytes, text, or an object with ``raw`` bytes or ``__bytes__``)."""
        return self.push_raw(_payload_bytes(payload), queue)

    def later(self, delay: Delay, payload: PayloadLike, queue: str | None = None) -> str | None:
        """``laterRaw``: ``ZADD :delayed availableAt(delay) payload`` (no notify token).

        12.45+ does it through the ``later`` script; before, with a plain ``ZADD``.
        """
        data = _payload_bytes(payload)
        keys = self.keys(queue)
        score = self.available_at(delay)
        if self.version.later_uses_script:
            self.scripts.later(keys.delayed, score, data)
        else:
            self.client.zadd(keys.delayed, {data: score})
        return _payload_id(data)

    def bulk(
        self, payloads: Iterable[tuple[PayloadLike, Delay | None]], queue: str | None = None
    ) -> list[str | None]:
        """``bulk``: push many payloads in one MULTI/EXEC pipeline (a single round trip).

        A payload with a delay goes through ``later`` on 9.7+; Laravel 8.x–9.6 ignore the delay in
        ``bulk`` and push every job immediately, and so does laraq for those versions. The scripts
        are sent with ``EVAL`` here (like Laravel), so that a flushed script cache can never make
        half of a transaction fail.
        """
        keys = self.keys(queue)
        pipe = self._bulk_pipeline()
        ids: list[str | None] = []
        for payload, delay in payloads:
            data = _payload_bytes(payload)
            if delay is not None and self.version.bulk_honours_delay:
                score = self.available_at(delay)
                if self.version.later_uses_script:
                    pipe.execute_command("EVAL", self.scripts.text("later"), 1, keys.delayed, score, data)
                else:
                    pipe.zadd(keys.delayed, {data: score})
            else:
                pipe.execute_command("EVAL", self.scripts.text("push"), 2, keys.list, keys.notify, data)
            ids.append(_payload_id(data))
        if ids:
            pipe.execute()
        else:
            pipe.reset()
        return ids

    def _bulk_pipeline(self) -> Any:
        if not self.cluster:
            return self.client.pipeline(transaction=True)
        try:
            return self.client.pipeline(transaction=True)
        except Exception:  # older redis-py cluster pipelines cannot do MULTI/EXEC
            return self.client.pipeline()

    # -- reading -----------------------------------------------------------------------------------

    def pop(self, queue: str | None = None, index: int = 0,
            wait_bound: Callable[[float], float | None] | None = None) -> ReservedJob | None:
        """``pop``: migrate due jobs, reserve the next job, optionally block on ``:notify``.

        ``index`` is the position of ``queue`` in the worker's ``--queue`` list: whether it may block
        follows :meth:`blocks_at`. ``wait_bound`` cuts a ``block_for`` wait short (see :meth:`block_timeout`).
        """
        name = self.queue_name(queue)
        keys = self.keys(name)
        self.migrate(keys)
        job, reserved = self._retrieve_next_job(keys, self.blocks_at(index), wait_bound)
        took = reserved is not None and job is not None
        self.popped_at(index, took)
        return ReservedJob(name, job, reserved) if took else None  # type: ignore[arg-type]

    def blocks_at(self, index: int) -> bool:
        """May a pop of the ``index``-th queue of the worker's list block on ``:notify``? From 11.27 only the
        first queue, and only if no later queue yielded a job since the first was last polled (that state
        lives on this instance, as in Laravel); before 11.27 every pop may block."""
        if not self.version.blocks_only_on_first_queue:
            return True
        return not self.secondary_queue_had_job and index == 0

    def popped_at(self, index: int, took: bool) -> None:
        """A pop (or a worker's reserve) of the ``index``-th queue ran: keep 11.27+'s first-queue state."""
        if not self.version.blocks_only_on_first_queue:
            return
        if index == 0:
            self.secondary_queue_had_job = False
        elif took:
            self.secondary_queue_had_job = True

    def _retrieve_next_job(self, keys: QueueKeys, block: bool,
                           wait_bound: Callable[[float], float | None] | None) -> tuple[bytes | None, bytes | None]:
        result = self.scripts.pop(
            keys.list, keys.reserved, keys.notify, keys.poison, self.available_at(self.retry_after)
        )
        if result.poisoned:
            self._report_poisoned(keys, result.poisoned)
        if result.job is None and self.block_for is not None and block and self._wait_on(keys.notify, wait_bound):
            return self._retrieve_next_job(keys, False, wait_bound)
        return result.job, result.reserved

    def pop_many(self, queue: str | None = None, count: int = 1) -> list[ReservedJob]:
        """Migrate due jobs, then reserve up to ``count`` jobs in one script call (never blocks).

        Each job is reserved exactly as :meth:`pop` reserves it. Not a Laravel operation: a faster
        path for workers that run several jobs at once.
        """
        name = self.queue_name(queue)
        keys = self.keys(name)
        self.migrate(keys)
        result = self.scripts.pop_many(
            keys.list, keys.reserved, keys.notify, keys.poison, self.available_at(self.retry_after), count
        )
        if result.poisoned:
            self._report_poisoned(keys, result.poisoned)
        return [ReservedJob(name, job, reserved) for job, reserved in result.jobs]

    def reserved_from(self, name: str, keys: QueueKeys, result: Any) -> Reserved:
        """What a batch reserve's reply (:mod:`laraq.protocol.reserve`) took and counted."""
        if result.poisoned:
            self._report_poisoned(keys, result.poisoned)
        return Reserved([ReservedJob(name, job, reserved) for job, reserved in result.jobs], result.skipped,
                        result.poisoned, result.cursor, result.depth, result.beyond)

    def _report_poisoned(self, keys: QueueKeys, count: int) -> None:
        """One warning line for the members the pop script just parked in ``:poison`` (its last ``count``),
        naming each (its ``uuid``, else its size and first bytes) and, when its first bytes show it, why."""
        try:
            length = int(self.client.llen(keys.poison))
            parked = self.excerpts(keys.poison, "list", max(0, length - min(count, 5)), max(0, length - 1),
                                   side=4096)
        except redis.RedisError:  # the warning still goes out, without the names
            parked = []
        shown = "; ".join(_describe_parked(e) for e in parked)
        more = f" and {count - 5} more" if count > 5 and shown else ""
        log.warning("moved %d unreadable member(s) of %s to %s (Redis's cjson cannot read them as a JSON object "
                    "with numeric attempts)%s%s", count, keys.list, keys.poison, f": {shown}" if shown else "", more)

    def wait_for_token(self, queue: str | None = None,
                       wait_bound: Callable[[float], float | None] | None = None) -> bool:
        """``BLPOP :notify`` for ``block_for`` seconds (0: until a token comes); True if one came. The
        socket's read timeout is lengthened by the wait (see :func:`laraq.protocol.pooled.blocking`)."""
        return self._wait_on(self.keys(self.queue_name(queue)).notify, wait_bound)

    def block_timeout(self, wait_bound: Callable[[float], float | None] | None = None) -> float | None:
        """The ``BLPOP :notify`` timeout of the next wait (0: until a token comes): ``block_for``, cut
        short by ``wait_bound`` (the worker's :meth:`laraq.protocol.timers.Timers.wait_for`: until the next
        delayed job is due); None: a delayed job is due now, so no wait (pop again at once)."""
        block_for = self.block_for or 0
        wait = block_for if wait_bound is None else wait_bound(block_for)
        if wait is None or wait == 0:
            return wait
        if self.whole_second_waits:
            wait = float(math.ceil(wait))
            return min(wait, block_for) if block_for > 0 else wait
        return max(0.01, round(wait, 3))

    def note_wait_refused(self, exc: BaseException) -> bool:
        """Was ``exc`` a server refusing a fractional ``BLPOP`` timeout? Then later waits are whole seconds."""
        if isinstance(exc, redis.exceptions.ResponseError) and "timeout" in str(exc).lower() \
                and not self.whole_second_waits:
            self.whole_second_waits = True
            log.info("this Redis takes whole-second BLPOP timeouts only: block_for waits end on whole seconds")
            return True
        return False

    def _wait_on(self, notify_key: str, wait_bound: Callable[[float], float | None] | None) -> bool:
        timeout = self.block_timeout(wait_bound)
        if timeout is None:
            return True  # a delayed job is due: the pop that follows migrates it, as after a token
        try:
            return self._blpop(notify_key, timeout)
        except redis.exceptions.ResponseError as exc:
            if not self.note_wait_refused(exc):
                raise
            return self._wait_on(notify_key, wait_bound)

    def _blpop(self, notify_key: str, timeout: float) -> bool:
        command = ("BLPOP", notify_key, timeout)
        if not isinstance(self.client, redis.RedisCluster):
            return bool(blocking(self.client, command, timeout))
        node = self.client.get_redis_connection(self.client.get_node_from_key(notify_key))
        try:
            return bool(blocking(node, command, timeout))
        except (redis.exceptions.MovedError, redis.exceptions.AskError):  # the slot moved: the client follows it
            return bool(self.client.blpop([notify_key], timeout=timeout))

    def migrate(self, keys: QueueKeys | str | None = None) -> None:
        """Laravel's ``migrate``: due ``:delayed`` jobs, then expired ``:reserved`` ones (if
        ``retry_after`` is not ``None``), onto the tail of the list."""
        if not isinstance(keys, QueueKeys):
            keys = self.keys(keys)
        self.migrate_expired_jobs(keys.delayed, keys.list, keys.notify)
        if self.retry_after is not None:
            self.migrate_expired_jobs(keys.reserved, keys.list, keys.notify)

    def migrate_expired_jobs(self, from_key: str, to_key: str, notify_key: str | None = None) -> list[bytes]:
        """``migrateExpiredJobs``: move members of ``from_key`` scored <= now to ``to_key``.

        Keys are full Redis keys (prefix included). 9.23+ moves at most ``migration_batch_size`` (when
        set); older versions, and -1, move every due member. Either way the members go in commands of at
        most :data:`MIGRATE_BOUND`, all at the same ``now``, until the amount is reached or none is due.
        """
        configured = self.migration_batch_size if self.version.migrate_has_limit else -1
        notify = notify_key or f"{to_key}:notify"
        now = self.current_time()
        moved: list[bytes] = []
        while True:  # the version's one unbounded (or large) migrate, as bounded commands at the same `now`
            want = MIGRATE_BOUND if configured < 0 else min(MIGRATE_BOUND, configured - len(moved))
            if want <= 0:
                return moved
            chunk = self.scripts.migrate(from_key, to_key, notify, now, want)
            moved.extend(chunk)
            if len(chunk) < want:
                return moved

    # -- finishing a job -----------------------------------------------------------------------------

    def delete_reserved(self, job: ReservedJob) -> int:
        """``deleteReserved``: ``ZREM :reserved <reserved>``; returns how many members went (0 or 1)."""
        return int(self.client.zrem(self.keys(job.queue).reserved, job.reserved))

    def release(self, job: ReservedJob, delay: Delay = 0) -> None:
        """``deleteAndRelease``: remove the reservation and schedule the reserved member in ``:delayed``.

        Like Laravel, the member is added to ``:delayed`` even if the reservation had already expired
        and been migrated back (the job then exists twice).
        """
        keys = self.keys(job.queue)
        self.scripts.release(keys.delayed, keys.reserved, job.reserved, self.available_at(delay))

    # -- inspection and maintenance ---------------------------------------------------------------

    def size(self, queue: str | None = None) -> int:
        """``size``: pending + delayed + reserved (the ``size`` script)."""
        keys = self.keys(queue)
        return int(self.scripts.size(keys.list, keys.delayed, keys.reserved))

    def pending_size(self, queue: str | None = None) -> int:
        """``pendingSize``: ``LLEN`` of the list."""
        return int(self.client.llen(self.keys(queue).list))

    def delayed_size(self, queue: str | None = None) -> int:
        """``delayedSize``: ``ZCARD :delayed``."""
        return int(self.client.zcard(self.keys(queue).delayed))

    def reserved_size(self, queue: str | None = None) -> int:
        """``reservedSize``: ``ZCARD :reserved``."""
        return int(self.client.zcard(self.keys(queue).reserved))

    def creation_time_of_oldest_pending_job(self, queue: str | None = None) -> int | float | None:
        """``creationTimeOfOldestPendingJob``: ``createdAt`` of the list head (12.11+ payloads), or None.

        The head is read with :meth:`excerpts` (:func:`member_fields`): a huge head costs a bounded read."""
        head = self.excerpts(self.keys(queue).list, "list", 0, 0)
        if not head:
            return None
        created = member_fields(head[0], ("createdAt",)).get("createdAt")
        if isinstance(created, bool) or not isinstance(created, int | float):
            return None
        return created

    def excerpts(self, key: str, kind: str, start: int, stop: int, *, side: int = EXCERPT_SIDE,
                 client: Any = None) -> Any:
        """Members ``start``..``stop`` of the list or ZSET ``key`` (``kind``), each whole when at most
        ``2 * side`` bytes long, else its first and last ``side`` bytes (:class:`Excerpt`). With a pipeline
        as ``client`` the call is queued there: read its reply with :func:`excerpts_from`."""
        return self.scripts.excerpts(key, kind, start, stop, side=side, client=client)

    def oldest_pending_age(self, queue: str | None = None) -> float | None:
        """Seconds since the list head was created (None if empty or it has no ``createdAt``)."""
        created = self.creation_time_of_oldest_pending_job(queue)
        if created is None:
            return None
        return max(0.0, self.clock() - float(created))

    def clear(self, queue: str | None = None) -> int:
        """``clear``: delete the list, ``:delayed`` and ``:reserved`` (and ``:notify`` from 8.9);
        returns how many jobs they held. laraq's ``:poison`` list is left alone."""
        keys = self.keys(queue)
        notify = keys.notify if self.version.clear_deletes_notify else None
        return int(self.scripts.clear(keys.list, keys.delayed, keys.reserved, notify))

    def poison_size(self, queue: str | None = None) -> int:
        """How many members the pop script has parked in ``:poison``."""
        return int(self.client.llen(self.keys(queue).poison))

    def poison_members(self, queue: str | None = None, start: int = 0, end: int = -1) -> list[bytes]:
        """The parked members, oldest first, byte for byte as they were in the list."""
        # the client answers bytes (built without decode_responses); redis-py's types also allow str
        return list(cast("list[bytes]", self.client.lrange(self.keys(queue).poison, start, end)))

    def clear_poison(self, queue: str | None = None) -> int:
        """Delete the ``:poison`` list; returns how many members it held."""
        key = self.keys(queue).poison
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(key)
        pipe.delete(key)
        count, _ = pipe.execute()
        return int(count)
