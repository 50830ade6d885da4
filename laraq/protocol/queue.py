"""Laravel's ``RedisQueue`` operations over redis-py: push, later, bulk, pop, release, delete, sizes.

:class:`RedisQueue` does what ``Illuminate\\Queue\\RedisQueue`` does, call for call, for the Laravel
version it is configured with (every version difference comes from :mod:`laraq.protocol.versions`):

* key names (:class:`QueueKeys`): ``<prefix>queues:<name>`` and its ``:delayed``, ``:reserved`` and
  ``:notify`` companions, plus laraq's own ``:poison`` dead-letter list; ``{name}`` hash tags on
  cluster connections from 13.5;
* ``pop`` = migrate ``:delayed`` → list, migrate ``:reserved`` → list (unless ``retry_after`` is
  ``None``), the pop script, and optionally ``BLPOP :notify`` plus one retry: the same round trips as
  Laravel;
* the member written to ``:reserved`` by the pop script is kept in :class:`ReservedJob` and used byte
  for byte by :meth:`RedisQueue.delete_reserved` and :meth:`RedisQueue.release`; it is never rebuilt.

Redis is addressed with raw bytes: no serializer, no compression, ``decode_responses`` off. Unlike
Laravel, redis-py does not add a key prefix, so every key carries the prefix itself.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, cast
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from laraq.protocol.lua import RECLAIM_CHUNK, PendingCall, Scripts, blocking
from laraq.protocol.redis_retry import fail_fast_on_auth
from laraq.protocol.routing import QueueForwards, queue_name_of
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

log = logging.getLogger(__name__)

Delay = int | float | datetime | timedelta
PayloadLike = bytes | bytearray | memoryview | str | Any

__all__ = [
    "QueueKeys",
    "RedisQueue",
    "ReservedJob",
    "has_hash_tag",
    "redact_url",
]

#: The most due members one migrate command moves (1-2 ms of Redis time on an idle host), however many are due.
#: Laravel 8.0-9.22 (and 9.23+ with ``migration_batch_size`` -1) move every due member in one script;
#: laraq moves them in commands of at most this many until none is left, with the same end state and
#: order (see ``compat-docs/performance.md``), so Redis is never held for long by one of them.
MIGRATE_BOUND = 500

#: The most due members the worker's reserve script moves per call (at least the jobs it reserves,
#: so the list fills as fast as it drains): keeps one reserve call under 1 ms at the default --batch.
RESERVE_MIGRATE_BOUND = 32


#: The unstarted lease (seconds): how soon after a SIGKILL the jobs its worker had buffered, never
#: started, are given back (attempts not spent) by the next reserve of any laraq worker on the queue.
UNSTARTED_LEASE = 15.0


# -- key names -----------------------------------------------------------------------------------

def has_hash_tag(name: str) -> bool:
    """True if ``name`` holds a Redis Cluster hash tag: a ``{`` and, later, a ``}`` with text between.

    Like Redis' own slot rule, only the first ``{`` and the first ``}`` after it count.
    """
    opening = name.find("{")
    if opening < 0:
        return False
    closing = name.find("}", opening + 1)
    return closing > opening + 1


@dataclass(frozen=True)
class QueueKeys:
    """The Redis keys of one queue, prefix included (redis-py adds no prefix of its own)."""

    prefix: str
    name: str
    hash_tagged: bool = False

    @classmethod
    def for_queue(
        cls,
        name: str,
        *,
        prefix: str = "",
        version: LaravelVersion | str = DEFAULT_VERSION,
        cluster: bool = False,
    ) -> QueueKeys:
        """Keys as ``RedisQueue`` of ``version`` names them on a (cluster) connection.

        On a cluster connection 13.5+ wraps a name without a hash tag in braces (``queues:{name}``);
        older versions never do (users had to name the queue ``{name}`` themselves).
        """
        version = LaravelVersion.parse(version)
        tagged = bool(cluster and version.cluster_hash_tags and not has_hash_tag(name))
        return cls(prefix, name, tagged)

    @property
    def base(self) -> str:
        """The list key, e.g. ``laravel_database_queues:default``."""
        shown = "{" + self.name + "}" if self.hash_tagged else self.name
        return f"{self.prefix}queues:{shown}"

    @property
    def list(self) -> str:
        return self.base

    @property
    def delayed(self) -> str:
        return self.base + ":delayed"

    @property
    def reserved(self) -> str:
        return self.base + ":reserved"

    @property
    def notify(self) -> str:
        return self.base + ":notify"

    @property
    def unstarted(self) -> str:
        """laraq's record of reserved jobs not started yet (a ZSET, not Laravel's; see
        :data:`laraq.protocol.lua.UNSTARTED`)."""
        return self.base + ":laraq-unstarted"

    @property
    def poison(self) -> str:
        """laraq's dead-letter list for members the pop script could not reserve (not Laravel's)."""
        return self.base + ":poison"


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


@dataclass(frozen=True)
class PendingReserve:
    """A :meth:`RedisQueue.reserve_batch_send` whose reply is not read yet (``sent_at``: its ``now``)."""

    queue: str
    keys: QueueKeys
    call: PendingCall
    sent_at: int
    #: a selective reserve (``handled`` names given): its reply carries the count of members left alone
    selective: bool = False


# -- URLs ----------------------------------------------------------------------------------------

def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (user names are kept), safe to log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = quote(parts.username or "", safe="")
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _describe_client(client: Any) -> str:
    """A password-free URL-like description of an existing redis-py client."""
    if isinstance(client, redis.RedisCluster):
        nodes = ",".join(f"{n.host}:{n.port}" for n in client.get_nodes()[:3])
        return f"redis-cluster://{nodes}"
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:
        watchers = getattr(getattr(pool, "sentinel_manager", None), "sentinels", [])
        found = [c.connection_pool.connection_kwargs for c in watchers]
        sentinels = ",".join(f"{k.get('host')}:{k.get('port')}" for k in found)
        return f"redis-sentinel://{sentinels}/{service}"
    kwargs: dict[str, Any] = dict(getattr(pool, "connection_kwargs", {}) or {})
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "redis"
    conn_class = getattr(pool, "connection_class", None)
    if conn_class is not None and "SSL" in getattr(conn_class, "__name__", ""):
        scheme = "rediss"
    host = kwargs.get("host", "localhost")
    port = kwargs.get("port", 6379)
    auth = ""
    if kwargs.get("username"):
        auth = quote(str(kwargs["username"]), safe="")
    if kwargs.get("password"):
        auth += ":***"
    if auth:
        auth += "@"
    return f"{scheme}://{auth}{host}:{port}/{kwargs.get('db', 0)}"


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
        data = json.loads(payload)
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
        #: cuts a ``block_for`` wait short (the worker's :meth:`laraq.worker.timers.Timers.wait_for`: until
        #: the next delayed job is due; None from it: one is due now, do not wait). None: Laravel's wait.
        self.wait_bound: Callable[[float], float | None] | None = None
        #: the server refused a fractional ``BLPOP`` timeout (Redis before 6.0): waits are whole seconds
        self.whole_second_waits = False
        self.migration_batch_size = migration_batch_size
        #: seconds of the unstarted lease on each job a batch reserve takes (laraq's record of buffered
        #: jobs, reclaimed when its worker died; see :data:`laraq.protocol.lua.UNSTARTED`); 0: no record
        self.unstarted_lease = UNSTARTED_LEASE
        self.clock = clock
        self.scripts = Scripts(self.client)
        #: 11.27+: a queue after the first one yielded a job since the first queue was last polled.
        self.secondary_queue_had_job = False
        #: How many members the last pop moved to ``:poison``.
        self.last_poisoned = 0
        #: How many list members the last selective reserve looked at and left alone (no Python handler).
        self.last_skipped = 0
        self._keys: dict[str, QueueKeys] = {}

    # -- naming and time ---------------------------------------------------------------------------

    def redacted_url(self) -> str:
        """Where this queue connects, without any password (safe for logs and errors)."""
        if self._url is not None:
            return redact_url(self._url)
        return _describe_client(self.client)

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

    def pop(self, queue: str | None = None, index: int = 0) -> ReservedJob | None:
        """``pop``: migrate due jobs, reserve the next job, optionally block on ``:notify``.

        ``index`` is the position of ``queue`` in the worker's ``--queue`` list. From 11.27 only the
        first queue blocks, and only if no later queue yielded a job since the first queue was last
        polled (that state lives on this instance, as in Laravel). Before 11.27 every pop may block.
        """
        name = self.queue_name(queue)
        keys = self.keys(name)
        self.migrate(keys)

        first_queue_rule = self.version.blocks_only_on_first_queue
        block = (not self.secondary_queue_had_job and index == 0) if first_queue_rule else True

        job, reserved = self._retrieve_next_job(keys, block)

        if first_queue_rule and index == 0:
            self.secondary_queue_had_job = False
        if reserved is None or job is None:
            return None
        if first_queue_rule and index > 0:
            self.secondary_queue_had_job = True
        return ReservedJob(name, job, reserved)

    def _retrieve_next_job(self, keys: QueueKeys, block: bool) -> tuple[bytes | None, bytes | None]:
        result = self.scripts.pop(
            keys.list, keys.reserved, keys.notify, keys.poison, self.available_at(self.retry_after)
        )
        self.last_poisoned = result.poisoned
        if result.poisoned:
            log.warning(
                "moved %d unreadable member(s) of %s to %s (not JSON or no numeric attempts)",
                result.poisoned, keys.list, keys.poison,
            )
        if result.job is None and self.block_for is not None and block and self._wait_on(keys.notify):
            return self._retrieve_next_job(keys, False)
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
        self.last_poisoned = result.poisoned
        if result.poisoned:
            log.warning("moved %d unreadable member(s) of %s to %s", result.poisoned, keys.list, keys.poison)
        return [ReservedJob(name, job, reserved) for job, reserved in result.jobs]

    def reserve_batch(self, queue: str | None = None, count: int = 1,
                      acks: list[bytes] | tuple[bytes, ...] = (), *, handled: list[str] | None = None,
                      window: int = 100, record: bool = False) -> list[ReservedJob]:
        """The worker's fast path: in ONE script call, ``ZREM`` the ``acks`` (reserved members of
        finished jobs), run Laravel's ``migrate`` and reserve up to ``count`` jobs (never blocks).

        Each job is reserved exactly as :meth:`pop` reserves it, the migrate follows this version's
        rules (``LIMIT migration_batch_size`` from 9.23, no ``:reserved`` migrate when
        ``retry_after`` is ``None``). ``count`` may be 0 (acks and migrate only).

        ``handled`` (names with a Python handler): reserve only such jobs among the first ``window``
        list members and leave every other member where it is (a queue shared with PHP workers;
        :attr:`last_skipped` says how many were left alone).

        ``record``: the jobs go to a buffer, not straight to a handler: each is recorded as unstarted
        (:attr:`unstarted_lease`), and its record must be removed when it starts (:meth:`unstarted`).
        """
        name, keys, now, args, options = self._reserve_batch_call(queue, count, acks, record)
        return self._reserved(name, keys, self.scripts.reserve_batch(*args, **options, handled=handled,
                                                                     window=window))

    def reserve_batch_send(self, queue: str | None = None, count: int = 1,
                           acks: list[bytes] | tuple[bytes, ...] = (), *,
                           wait: float | None = None, handled: list[str] | None = None,
                           window: int = 100, record: bool = False) -> PendingReserve | None:
        """:meth:`reserve_batch`, sent now and read later with :meth:`reserve_batch_receive`: Redis reserves
        the next jobs while the worker runs the ones it has. None when this client cannot split a call
        (Redis Cluster): use :meth:`reserve_batch`.

        ``wait`` (seconds, 0 = forever): a ``BLPOP :notify`` with that timeout goes first on the same
        connection, so the reserve runs on Redis the moment a token arrives or the wait ends, as
        Laravel's pop retries at once after its ``BLPOP``, without the round trip between the two.
        Read whether a token came with :meth:`reserve_wait` first. The reservation's ``now`` (its
        expiry and the migrate's clock) is the send time, as with any call sent ahead: the worker
        renews a lease the wait made stale before the job starts."""
        name, keys, now, args, options = self._reserve_batch_call(queue, count, acks, record)
        first = None if wait is None else ("BLPOP", keys.notify, wait)
        pending = self.scripts.reserve_batch_send(*args, **options, first=first, handled=handled, window=window)
        return None if pending is None else PendingReserve(name, keys, pending, now, handled is not None)

    def reserve_wait(self, pending: PendingReserve) -> bool:
        """The ``BLPOP`` of a :meth:`reserve_batch_send` with ``wait``: True if a ``:notify`` token came,
        False if the wait timed out (blocks until one of the two). The reserve's reply is next."""
        return bool(self.scripts.receive_first(pending.call, self.block_for or 0))

    def wait_for_token(self, queue: str | None = None) -> bool:
        """``BLPOP :notify`` for ``block_for`` seconds (0: until a token comes); True if one came. The
        socket's read timeout is lengthened by the wait (see :meth:`Scripts.blocking`)."""
        return self._wait_on(self.keys(self.queue_name(queue)).notify)

    def block_timeout(self) -> float | None:
        """The ``BLPOP :notify`` timeout of the next wait (0: until a token comes): ``block_for``, cut
        short by :attr:`wait_bound`; None: a delayed job is due now, so no wait (pop again at once)."""
        block_for = self.block_for or 0
        if self.wait_bound is None:
            return block_for
        wait = self.wait_bound(block_for)
        if wait is None or wait == 0:
            return wait
        if self.whole_second_waits:
            wait = float(math.ceil(wait))
            return min(wait, block_for) if block_for > 0 else wait
        return max(0.01, round(wait, 3))

    def note_wait_refused(self, exc: BaseException) -> bool:
        """Was ``exc`` a server refusing a fractional ``BLPOP`` timeout? Then later waits are whole seconds."""
        if isinstance(exc, redis.exceptions.ResponseError) and "timeout" in str(exc).lower() \
                and not self.whole_second_waits and self.wait_bound is not None:
            self.whole_second_waits = True
            log.info("this Redis takes whole-second BLPOP timeouts only: block_for waits end on whole seconds")
            return True
        return False

    def _wait_on(self, notify_key: str) -> bool:
        timeout = self.block_timeout()
        if timeout is None:
            return True  # a delayed job is due: the pop that follows migrates it, as after a token
        try:
            return self._blpop(notify_key, timeout)
        except redis.exceptions.ResponseError as exc:
            if not self.note_wait_refused(exc):
                raise
            return self._wait_on(notify_key)

    def _blpop(self, notify_key: str, timeout: float) -> bool:
        command = ("BLPOP", notify_key, timeout)
        if not isinstance(self.client, redis.RedisCluster):
            return bool(blocking(self.client, command, timeout))
        node = self.client.get_redis_connection(self.client.get_node_from_key(notify_key))
        try:
            return bool(blocking(node, command, timeout))
        except (redis.exceptions.MovedError, redis.exceptions.AskError):  # the slot moved: the client follows it
            return bool(self.client.blpop([notify_key], timeout=timeout))

    def _reserve_batch_call(self, queue: str | None, count: int, acks: list[bytes] | tuple[bytes, ...],
                            record: bool = False) -> tuple[str, QueueKeys, int, tuple[str, ...], dict[str, Any]]:
        """The ``reserve_batch`` script's keys and arguments for a reserve made now, by this version's rules."""
        name = self.queue_name(queue)
        keys = self.keys(name)
        now = self.current_time()
        expiry = now if self.retry_after is None else now + int(self.retry_after)
        limit = self.reserve_migrate_limit(count)
        options: dict[str, Any] = {"expires_at": expiry, "count": count, "now": now, "migrate_limit": limit,
                                   "migrate_reserved": self.retry_after is not None, "acks": acks}
        lease = self.unstarted_seconds
        if lease > 0:  # expired records are reclaimed by every batch reserve, recording or not
            options.update(unstarted_key=keys.unstarted, unstarted_lease=lease if record else 0.0)
        return name, keys, now, (keys.list, keys.reserved, keys.notify, keys.poison, keys.delayed), options

    def reserve_batch_receive(self, pending: PendingReserve) -> list[ReservedJob]:
        """The jobs a :meth:`reserve_batch_send` reserved (raises what reading the reply raised)."""
        result = self.scripts.reserve_batch_result(self.scripts.receive(pending.call), selective=pending.selective)
        return self._reserved(pending.queue, pending.keys, result)

    def _reserved(self, name: str, keys: QueueKeys, result: Any) -> list[ReservedJob]:
        self.last_poisoned = result.poisoned
        self.last_skipped = result.skipped
        if result.poisoned:
            log.warning("moved %d unreadable member(s) of %s to %s", result.poisoned, keys.list, keys.poison)
        return [ReservedJob(name, job, reserved) for job, reserved in result.jobs]

    def ack(self, acks: dict[str, list[bytes]]) -> None:
        """``ZREM :reserved`` many finished jobs, one command per queue, in one pipeline."""
        if not acks:
            return
        pipe = self.client.pipeline(transaction=False)
        for name, members in acks.items():
            if members:
                pipe.zrem(self.keys(name).reserved, *members)
        pipe.execute()

    def renew(self, queue: str, members: list[bytes]) -> list[bool]:
        """Push the reservations of ``members`` forward by ``retry_after`` (``ZADD XX``); False = gone."""
        if self.retry_after is None or not members:
            return [True] * len(members)
        return self.scripts.renew(self.keys(queue).reserved, members, self.available_at(self.retry_after))

    def renew_send(self, queue: str, members: list[bytes]) -> tuple[PendingCall, int] | None:
        """:meth:`renew`, sent now (``Scripts.receive`` + ``Scripts.renew_result`` read it later): the
        call and the expiry it sets. None when this client cannot split a call or nothing needs it."""
        if self.retry_after is None or not members:
            return None
        expiry = self.available_at(self.retry_after)
        pending = self.scripts.renew_send(self.keys(queue).reserved, members, expiry)
        return None if pending is None else (pending, expiry)

    def give_back(self, queue: str, jobs: list[ReservedJob]) -> int:
        """Hand reserved, never-started jobs back to the head of the list (original bodies, attempts
        not burned, one ``:notify`` token each), in their order; only those still reserved by us.
        Their unstarted records go too."""
        keys = self.keys(queue)
        return self.scripts.give_back(keys.list, keys.reserved, keys.notify, [(j.reserved, j.body) for j in jobs],
                                      keys.unstarted)

    @property
    def unstarted_seconds(self) -> float:
        """The unstarted lease in effect: :attr:`unstarted_lease`, and at most a third of ``retry_after``
        (so that after a SIGKILL the reclaim comes before Laravel's migrate of the same jobs, which would
        bring them back with an attempt spent)."""
        lease = float(self.unstarted_lease or 0.0)
        return lease if self.retry_after is None else min(lease, self.retry_after / 3)

    def unstarted(self, queue: str, starting: Sequence[bytes], buffered: Sequence[bytes] = ()) -> list[bool]:
        """Remove the unstarted records (:func:`~laraq.protocol.lua.unstarted_member`) of ``starting``
        jobs and renew those of ``buffered`` ones by :attr:`unstarted_seconds`: True per record still there."""
        return self.scripts.unstarted(self.keys(queue).unstarted, self.unstarted_seconds, starting, buffered)

    def reclaim(self, queue: str | None = None) -> int:
        """Give back the jobs of dead workers' buffers (unstarted lease run out) to the head of the list,
        attempts not spent; how many were given back."""
        keys = self.keys(queue)
        total = 0
        while True:
            looked, given = self.scripts.reclaim(keys.list, keys.reserved, keys.notify, keys.unstarted)
            total += given
            if looked < RECLAIM_CHUNK:
                return total

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

    def reserve_migrate_limit(self, count: int) -> int:
        """The migrate ``LIMIT`` inside one reserve call: this version's ``migration_batch_size`` (9.23+,
        when set), never more than :data:`RESERVE_MIGRATE_BOUND` or ``count`` (whichever is larger).
        Due jobs left over move on the next calls, which come at once while jobs keep coming."""
        bound = max(int(count), RESERVE_MIGRATE_BOUND)
        configured = self.migration_batch_size if self.version.migrate_has_limit else -1
        return bound if configured < 0 else min(configured, bound)

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
        """``creationTimeOfOldestPendingJob``: ``createdAt`` of the list head (12.11+ payloads), or None."""
        head = self.client.lindex(self.keys(queue).list, 0)
        if not head:
            return None
        try:
            data = json.loads(head)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        created = data.get("createdAt")
        if isinstance(created, bool) or not isinstance(created, int | float):
            return None
        return created

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
