"""Dispatching jobs that PHP's ``queue:work`` runs: Laravel's ``dispatch()`` written from Python.

:class:`Dispatcher` builds what ``Bus::dispatch($job)`` → ``RedisQueue::push``/``later`` writes:

* the command: ``serialize($job)`` of a class that uses ``Dispatchable, InteractsWithQueue,
  Queueable``. PHP writes the class's own properties (public ``name``, protected ``\\0*\\0name``,
  private ``\\0Class\\0name``), then ``InteractsWithQueue::$job`` (null), then the ``Queueable``
  properties in the order and with the defaults of the Laravel version
  (:meth:`~laraq.protocol.versions.LaravelVersion.queueable_properties`). ``connection`` and ``queue`` hold what
  ``onConnection()``/``onQueue()`` set, ``delay`` what ``delay()`` set (whole seconds). PHP's
  ``unserialize`` restores the real class with exactly these values. With ``skip_defaults=True``
  (a job using ``SerializesModels`` on 9.4+) Queueable properties still at their default are left
  out, as ``SerializesModels::__serialize`` does;
* ``ShouldBeEncrypted``: ``encrypt=True`` stores ``Encrypter::encrypt(serialize($job))`` instead;
* the payload for the version (:func:`laraq.protocol.payload.build_object_payload`): ``displayName``,
  ``maxTries``, ``maxExceptions``, ``failOnTimeout``, ``backoff``, ``timeout``, ``retryUntil``, ...,
  ``id`` and ``attempts`` (always present, so Laravel's pop script can reserve it);
* the push itself through :class:`~laraq.protocol.queue.RedisQueue` (the ``push`` script appends the
  ``:notify`` token; a delay goes to ``:delayed`` scored ``now + delay``).

The retry settings given to :meth:`Dispatcher.dispatch_job` (``tries``, ``backoff``, ...) go into the
*payload*, which is what PHP's worker reads. They are not added as command properties (a class may not
declare them); pass them in ``properties`` too if the job's own code reads ``$this->tries``.

A typed instance (a class ``laraq schema --python`` wrote, :mod:`laraq.bus.typed`) is dispatched by
:meth:`Dispatcher.dispatch`: the class's embedded schema gives PHP's defaults, order and settings, its
fields the values (enum cases, models as ``ModelIdentifier``, dates as Carbon).

String jobs (``Queue::push('Class@method', $data)``) are built by :meth:`Dispatcher.dispatch_string`.
:meth:`Dispatcher.bulk` pushes many prepared jobs in one MULTI/EXEC round trip.

Into a Horizon app (``horizon=`` a :class:`laraq.horizon.HorizonSettings`, which
:meth:`Dispatcher.from_app` finds in the app itself) the push is Horizon's ``RedisQueue``'s: ``id`` is
the ``uuid``, ``JobPayload::prepare`` adds ``type``, ``tags`` (given, else ``Class:key`` of each
``ModelIdentifier`` property, as Horizon tags models), ``silenced`` (given, else the class is silenced
in Horizon's config) and ``pushedAt``, and the pending record (``StoreJob``, ``StoreMonitoredTags``) is
written after the push (before it on Horizon 5.42+). The dispatcher knows Horizon only through
:class:`PushMonitor`, which :class:`laraq.horizon.HorizonSettings` implements.

``queue:retry`` lives in :mod:`laraq.bus.retry` (its names are importable from here too).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import orjson

from laraq.bus.retry import (
    RETRY_UNTIL_POLICIES,
    RetryOutcome,
    expand_retry_ids,
    retry_failed,
    retry_payload,
    time_now,
)
from laraq.bus.schema import SchemaError, debounce_key, load_schema_file, unique_lock_owner
from laraq.bus.schema import plan as schema_plan
from laraq.bus.typed import TypedJobError, is_typed_job, schema_of, wire_values
from laraq.protocol.payload import (
    build_object_payload,
    build_string_payload,
    horizon_prepare,
    log_context,
    new_uuid,
)
from laraq.protocol.phpjson import php_json_encode
from laraq.protocol.queue import RedisQueue, _payload_id
from laraq.protocol.routing import queue_name_of
from laraq.protocol.serializer import (
    ModelIdentifier,
    PHPEnum,
    PHPObject,
    PHPReference,
    dumps,
    is_model_identifier,
)
from laraq.protocol.versions import LaravelVersion

if TYPE_CHECKING:
    from laraq.protocol.encryption import Encrypter

__all__ = [
    "RETRY_UNTIL_POLICIES",
    "DispatchResult",
    "Dispatcher",
    "PreparedJob",
    "PushMonitor",
    "PushRecorder",
    "RetryOutcome",
    "expand_retry_ids",
    "retry_failed",
    "retry_payload",
    "serialize_command",
    "time_now",
]

Delay = int | float | datetime | timedelta
#: A class implementing it is silenced by Horizon as if listed in ``horizon.silenced`` (the interface
#: ships with the Horizon releases whose ``JobPayload`` checks it)
SILENCED_INTERFACE = "Laravel\\Horizon\\Contracts\\Silenced"
#: ``Queue::createPayloadUsing``'s callback: ``(connection, queue, payload) -> extra keys``
PayloadHook = Callable[[str, str, Mapping[str, Any]], Mapping[str, Any] | None]


# -- PHP serialize of the command --------------------------------------------------------------------

def _php_str(raw: bytes) -> bytes:
    return b's:%d:"%s";' % (len(raw), raw)


#: ``serialize()`` of the scalars bulk dispatch repeats in every job (``null``, the Queueable defaults,
#: the same flags): written once. Keyed by type too (``1``, ``True`` and ``1.0`` differ in PHP).
_SCALARS: dict[tuple[type, Any], bytes] = {}
_SCALAR_TYPES = (type(None), bool, int, str)
#: ``s:N:"name";`` of the property names seen (the same few names in every job of a bulk dispatch)
_NAMES: dict[bytes, bytes] = {}
#: The serialized ``job`` + Queueable properties per (version, connection, queue, delay, skip_defaults,
#: overrides): (bytes, how many properties, their names).
_TRAIT_CHUNKS: dict[tuple[Any, ...], tuple[bytes, int, frozenset[bytes]]] = {}


def _serialize_value(value: Any) -> bytes:
    """``serialize($value)`` for one property value (delegates to :mod:`laraq.protocol.serializer`)."""
    kind = type(value)
    cacheable = kind in _SCALAR_TYPES and (kind is not str or len(value) <= 64)
    if cacheable:
        cached = _SCALARS.get((kind, value))
        if cached is not None:
            return cached
    out = dumps(value)
    raw = out.encode("utf-8") if isinstance(out, str) else bytes(out)
    if cacheable:
        if len(_SCALARS) >= 4096:
            _SCALARS.clear()
        _SCALARS[(kind, value)] = raw
    return raw


@functools.lru_cache(maxsize=64)
def _queueable_properties(profile: LaravelVersion) -> tuple[tuple[str, Any], ...]:
    return tuple(profile.queueable_properties())


def _mangle(class_name: str, name: str, visibility: str) -> bytes:
    if visibility == "public":
        return name.encode("utf-8")
    if visibility == "protected":
        return b"\0*\0" + name.encode("utf-8")
    if visibility == "private":
        return b"\0" + class_name.encode("utf-8") + b"\0" + name.encode("utf-8")
    raise ValueError(f"unknown visibility {visibility!r}")


def serialize_command(
    class_name: str,
    properties: Mapping[str, Any] | None = None,
    *,
    protected: Mapping[str, Any] | None = None,
    private: Mapping[str, Any] | None = None,
    version: LaravelVersion | str = "13",
    connection: str | None = None,
    queue: str | None = None,
    delay: int | None = None,
    queueable: Mapping[str, Any] | None = None,
    queueable_defaults: bool = True,
    skip_defaults: bool = False,
) -> bytes:
    """``serialize($job)`` for a job class using ``Dispatchable, InteractsWithQueue, Queueable``.

    ``properties`` are public properties (a key may also be given already mangled, e.g.
    ``"\\0*\\0note"``, to control the order across visibilities), ``protected`` and ``private`` the
    others (private ones are declared by ``class_name``). Then come ``job`` and the Queueable
    properties of ``version`` (``queueable_defaults=False`` leaves all of them out; ``queueable``
    overrides single ones, e.g. ``{"afterCommit": True}``). ``skip_defaults`` drops trait properties
    still at their default, like ``SerializesModels`` on 9.4+.
    """
    profile = version if type(version) is LaravelVersion else LaravelVersion.parse(version)
    members: list[bytes] = []
    seen: set[bytes] = set()
    names = _NAMES
    # an enum case or object met in two properties is written once, then as PHP's r:n back reference,
    # numbered across the whole object: such a command is serialized in one piece
    shared = _has_objects((properties, protected, private, queueable))
    values: dict[str | bytes | int, Any] = {}

    def add(name: bytes, value: Any) -> None:
        if name in seen:
            raise ValueError(f"property {name!r} given twice")
        seen.add(name)
        if shared:
            values[name.decode("utf-8")] = value
            return
        key = names.get(name)
        if key is None:
            key = _php_str(name)
            if len(names) < 4096:
                names[name] = key
        members.append(key)
        members.append(_serialize_value(value))

    for name, value in (properties or {}).items():
        add(name.encode("utf-8"), value)  # public: the plain name (or a name given already mangled)
    for name, value in (protected or {}).items():
        add(_mangle(class_name, name, "protected"), value)
    for name, value in (private or {}).items():
        add(_mangle(class_name, name, "private"), value)

    chunk_key: tuple[Any, ...] | None = None
    if not shared and queueable_defaults and all(type(v) in _SCALAR_TYPES for v in (connection, queue, delay)) \
            and (not queueable or all(type(v) in _SCALAR_TYPES for v in queueable.values())):
        # typed, so that 1, True and 1.0 (equal in Python, not in PHP) never share a chunk; any other
        # override (a middleware list) is built each time
        chunk_key = (profile, skip_defaults, *((type(v), v) for v in (connection, queue, delay)),
                     *((k, type(v), v) for k, v in (queueable or {}).items()))
        chunk = _TRAIT_CHUNKS.get(chunk_key)
        if chunk is not None and seen.isdisjoint(chunk[2]):
            cls = class_name.encode("utf-8")
            return b'O:%d:"%s":%d:{%s%s}' % (len(cls), cls, len(members) // 2 + chunk[1], b"".join(members),
                                             chunk[0])
    if queueable_defaults:
        user_names = frozenset(seen)
        first_trait = len(members)
        overrides: dict[str, Any] = {"connection": connection, "queue": queue, "delay": delay}
        overrides.update(queueable or {})
        trait_props: list[tuple[str, Any, Any]] = [("job", None, None)]
        for name, default in _queueable_properties(profile):
            trait_props.append((name, default, overrides.get(name, default)))
        for name, default, value in trait_props:
            if name.encode() in seen:
                continue  # the class redeclares it (given above)
            if skip_defaults and value == default and type(value) is type(default):
                continue
            add(name.encode("utf-8"), value)
        trait_names = frozenset(name.encode() for name, _, _ in trait_props)
        if chunk_key is not None and not shared and user_names.isdisjoint(trait_names):
            # the same trait properties follow every job of this (version, connection, queue, delay):
            # kept as bytes for the next one whose own properties do not redeclare any of them
            if len(_TRAIT_CHUNKS) >= 256:
                _TRAIT_CHUNKS.clear()
            trait_members = members[first_trait:]
            _TRAIT_CHUNKS[chunk_key] = (b"".join(trait_members), len(trait_members) // 2, trait_names)

    if shared:
        return _serialize_value(PHPObject(class_name, values))
    cls = class_name.encode("utf-8")
    return b'O:%d:"%s":%d:{%s}' % (len(cls), cls, len(members) // 2, b"".join(members))


def _has_objects(groups: Iterable[Mapping[str, Any] | None]) -> bool:
    """Whether an enum case or object (which PHP may write as a back reference) is anywhere in the
    property groups' values (a scalar, the usual value, is passed over at once)."""
    for group in groups:
        if group:
            for value in group.values():
                if type(value) not in _PLAIN and _holds_object(value):
                    return True
    return False


_PLAIN = frozenset({type(None), bool, int, float, str, bytes})


def _holds_object(value: Any) -> bool:
    if isinstance(value, PHPObject | PHPEnum | PHPReference):
        return True
    if isinstance(value, Mapping):
        return any(type(v) not in _PLAIN and _holds_object(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(type(v) not in _PLAIN and _holds_object(v) for v in value)
    return False


# -- results -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PreparedJob:
    """A built payload waiting to be pushed: where to and when."""

    payload: bytes
    queue: str
    delay: Delay | None = None
    #: a ShouldBeUnique job whose lock is held: not pushed, as PHP's ``PendingDispatch`` drops it
    skipped: bool = False

    @property
    def id(self) -> str | None:
        return _payload_id(self.payload)


@dataclass(frozen=True)
class DispatchResult:
    """What one dispatch wrote: the payload ``id``/``uuid``, the queue, and when it is due."""

    id: str | None
    uuid: str | None
    queue: str
    available_at: int | None
    payload: bytes = field(repr=False)
    #: not pushed: a ShouldBeUnique job whose lock is held (PHP drops it the same way)
    skipped: bool = False


def _seconds(delay: Delay, now: float) -> int:
    """Whole seconds from now until ``delay`` (Laravel's ``secondsUntil``), never negative."""
    if isinstance(delay, datetime):
        return max(0, math.floor(delay.timestamp()) - math.floor(now))
    if isinstance(delay, timedelta):
        return max(0, math.floor(now + delay.total_seconds()) - math.floor(now))
    return max(0, math.floor(delay))


def _timestamp(value: int | float | datetime | timedelta, now: float) -> int:
    if isinstance(value, datetime):
        return math.floor(value.timestamp())
    if isinstance(value, timedelta):
        return math.floor(now + value.total_seconds())
    return math.floor(value)


# -- what a monitored app (Horizon) adds -------------------------------------------------------------

class PushRecorder(Protocol):
    """Records each job the dispatcher pushed (Horizon's ``JobPushed`` listeners)."""

    def record_pushed(self, connection: str, queue: str, payload: bytes) -> None:
        """Note that ``payload`` was pushed onto ``queue`` of ``connection``."""
        ...


class PushMonitor(Protocol):
    """What the dispatcher needs of a monitored app: which classes are silenced, and where a pushed job
    is recorded. :class:`laraq.horizon.HorizonSettings` implements it."""

    def is_silenced(self, class_name: str, tags: Sequence[str] = ()) -> bool:
        """Whether jobs of ``class_name`` (or with one of ``tags``) are kept off the monitor's lists."""
        ...

    def push_recorder(self, client: Any) -> PushRecorder:
        """The recorder writing through the redis-py ``client`` of the queue."""
        ...


# -- the dispatcher ---------------------------------------------------------------------------------------

class Dispatcher:
    """Dispatch jobs to a Laravel Redis queue so that PHP workers run them.

    ``version`` defaults to the queue's. ``encrypter`` (a :class:`laraq.protocol.encryption.Encrypter` built
    from the app's ``APP_KEY``) is needed for ``encrypt=True``.
    """

    #: ``Queue::createPayloadUsing`` callbacks, shared by every dispatcher (see :meth:`create_payload_using`)
    payload_hooks: ClassVar[list[PayloadHook]] = []

    @classmethod
    def create_payload_using(cls, callback: PayloadHook | None) -> None:
        """Laravel's ``Queue::createPayloadUsing``: ``callback(connection, queue, payload)`` returns keys
        added to every payload (where PHP merges them: after the job's keys, before ``id``/``attempts``);
        ``None`` removes them all. A key the payload already has is refused (PHP would overwrite it).
        :mod:`laraq.production.otel` uses it to carry the trace context."""
        if callback is None:
            cls.payload_hooks.clear()
        else:
            cls.payload_hooks.append(callback)

    def _with_hooks(self, payload: str, queue: str | None) -> str:
        if not self.payload_hooks:
            return payload
        decoded = orjson.loads(payload)
        extra: dict[str, Any] = {}
        for hook in list(self.payload_hooks):
            extra.update(hook(self.queue.connection_name, queue or "default", {**decoded, **extra}) or {})
        clash = sorted(set(extra) & set(decoded))
        if clash:
            raise ValueError(f"a payload hook sets {', '.join(clash)}, which the payload already has")
        if not extra:
            return payload
        at = payload.rfind(',"id":')
        text = "".join(f",{php_json_encode(str(k))}:{php_json_encode(v)}" for k, v in extra.items())
        return payload[:at] + text + payload[at:] if at > 0 else payload[:-1] + text + "}"

    def __init__(
        self,
        queue: RedisQueue,
        version: LaravelVersion | str | None = None,
        encrypter: Encrypter | None = None,
        horizon: PushMonitor | None = None,
        *,
        schemas: Mapping[str, Any] | None = None,
        cache: Any = None,
        horizon_client: Any = None,
    ) -> None:
        self.queue = queue
        self.version = queue.version if version is None else LaravelVersion.parse(version)
        self.encrypter = encrypter
        #: :class:`laraq.horizon.HorizonSettings` when the app runs Horizon (see the module docstring).
        self.horizon = horizon
        #: the redis-py client on Horizon's connection (``horizon.use``) when it is not the queue's
        self.horizon_client = horizon_client
        self._records: PushRecorder | None = None
        #: class -> :class:`laraq.bus.schema.JobSchema`: dispatch such a class with its PHP defaults and lock
        self.schemas: dict[str, Any] = dict(schemas or {})
        #: the app's cache (:class:`laraq.stores.cache.LaravelCache`), where a unique class's lock is taken
        self.cache = cache

    @classmethod
    def from_app(cls, env_file: str | None = None, app_path: str | None = None, connection: str | None = None,
                 *, app_config: str | None = None, horizon: PushMonitor | bool | None = None,
                 env: Mapping[str, str] | None = None, schema: str | None = None) -> Dispatcher:
        """A dispatcher onto the app's queue connection (its default, or ``connection``), with the app's
        ``APP_KEY`` and cache store, from the app's own configuration as ``laraq work`` reads it
        (:func:`laraq.config.effective.effective_settings`).

        On an app that uses Horizon (``config/horizon.php``, ``vendor/laravel/horizon``, a ``horizon``
        prefix in its configuration: :func:`laraq.horizon.settings.app_horizon`, as ``laraq work``
        decides it) the push is Horizon's, with its payload fields and pending record for the app's
        Horizon release. ``horizon=False`` writes Laravel's plain payload; ``True`` forces Horizon;
        a :class:`PushMonitor` is used as given.

        ``schema``: the app's job classes as ``laraq schema --from APP -o FILE`` exported them (default:
        ``LARAQ_SCHEMA``), so that :meth:`dispatch_job` of those classes writes what PHP's ``dispatch()``
        writes (their defaults, ``SerializesModels``' layout, their settings and unique lock)."""
        # start-up: the settings machinery is loaded only by a dispatcher made from the app
        from laraq.config.effective import effective_settings
        from laraq.config.settings import make_redis  # start-up: as above
        from laraq.horizon.settings import app_horizon, records_client  # start-up: as above
        from laraq.protocol.encryption import Encrypter  # start-up: as above
        from laraq.stores.cache import make_cache  # start-up: as above

        settings = effective_settings(env, env_file=env_file, app_path=app_path, app_config=app_config,
                                      connection=connection)
        queue = RedisQueue(make_redis(settings, settings.redis_queue_connection),
                           connection_name=connection or settings.connection_name,
                           default_queue=settings.redis_queue, prefix=settings.redis_prefix,
                           retry_after=settings.retry_after, version=settings.version)
        encrypter = (Encrypter.from_app_key(settings.app_key, previous_keys=settings.app_previous_keys)
                     if settings.app_key else None)
        try:
            cache = make_cache(settings)
        except Exception:  # a store laraq cannot open: only unique jobs need it, and they say so
            cache = None
        schema = schema or (settings.env or {}).get("LARAQ_SCHEMA") or None
        schemas = load_schema_file(schema)[0] if schema else None
        if horizon is not None and not isinstance(horizon, bool):
            return cls(queue, encrypter=encrypter, horizon=horizon, cache=cache, schemas=schemas)
        found = app_horizon(settings, horizon)
        return cls(queue, encrypter=encrypter, horizon=found, cache=cache, schemas=schemas,
                   horizon_client=None if found is None else records_client(settings, found, queue.client))

    def _horizon_payload(self, payload: str, *, tags: Sequence[str] | None,
                         silenced: bool, class_name: str | None) -> str:
        if self.horizon is None:
            return payload
        if silenced is False:
            silenced = self.horizon.is_silenced(class_name or "", list(tags or ()))
        # Horizon before 5.45.6 built a delayed job's payload without its delay (null)
        keep_delay = getattr(self.horizon, "delay_in_delayed_payload", True)
        return horizon_prepare(payload, tags=list(tags or ()), silenced=silenced, null_delay=not keep_delay)

    def _record_pushed(self, jobs: Sequence[PreparedJob]) -> None:
        """``JobPushed``: Horizon's pending record of each pushed job."""
        if self.horizon is None:
            return
        if self._records is None:
            self._records = self.horizon.push_recorder(self.horizon_client or self.queue.client)
        for job in jobs:
            if job.skipped:
                continue
            self._records.record_pushed(self.queue.connection_name, job.queue, job.payload)

    # -- building -------------------------------------------------------------------------------

    def prepare_job(
        self,
        class_name: str,
        properties: Mapping[str, Any] | None = None,
        *,
        protected: Mapping[str, Any] | None = None,
        private: Mapping[str, Any] | None = None,
        queue: str | None = None,
        connection: str | None = None,
        delay: Delay | None = None,
        tries: int | None = None,
        backoff: int | str | Sequence[int] | None = None,
        timeout: int | None = None,
        retry_until: int | datetime | timedelta | None = None,
        max_exceptions: int | None = None,
        fail_on_timeout: bool = False,
        display_name: str | None = None,
        encrypt: bool = False,
        queueable_defaults: bool = True,
        queueable: Mapping[str, Any] | None = None,
        skip_defaults: bool = False,
        delete_when_missing_models: bool = False,
        tags: Sequence[str] | None = None,
        silenced: bool = False,
        unique_id: str | None = None,
        unique_for: int | None = None,
        debounce_id: str | None = None,
    ) -> PreparedJob:
        """Build the payload :meth:`dispatch_job` would push, without pushing it.

        ``tags`` and ``silenced`` are Horizon's (used only with ``horizon=``). A class with a schema
        (``schemas=``, :mod:`laraq.bus.schema`) gets its class defaults, and a unique class its lock:
        ``unique_id``/``unique_for`` give what a ``uniqueId()``/``uniqueFor()`` method would. When the
        lock is held the job is not pushed (``PreparedJob.skipped``), as PHP drops it. ``queue`` may be an enum
        case, stored as ``onQueue()`` stores it (its ``enum_value``).

        A 13.x class's queue attributes apply as PHP's bus applies them: ``#[Queue]``/``#[Delay]`` choose
        where and when it is pushed when ``queue``/``delay`` are not given (the command keeps its own
        ``queue``/``delay`` unset), ``#[Connection]`` must name this dispatcher's connection, and
        ``#[DebounceFor]`` stores a fresh owner in the app's cache under the job's debounce key
        (``debounce_id`` gives what a ``debounceId()`` method would), writes it as ``debounceOwner`` and
        delays the job by the debounce time, as ``PendingDispatch::acquireDebounceLock`` does.
        """
        queue = queue_name_of(queue)
        now = self.queue.clock()
        delay_seconds = None if delay is None else _seconds(delay, now)
        #: where and when it is pushed (a queue attribute may choose them; the command keeps the caller's)
        route_queue, route_delay = queue, delay
        context: dict[str, Any] | None = None
        schema = self.schemas.get(class_name.lstrip("\\"))
        if schema is not None:
            if protected or private:
                raise ValueError(f"{class_name} has a schema: give its properties by plain name in properties=")
            if self.horizon is not None and tags is None and "tags" in schema.methods:
                raise SchemaError(f"{schema.class_name}: Horizon tags its jobs from its tags() method, which only PHP "
                                  "runs; dispatch it from PHP, or give tags=")
            if SILENCED_INTERFACE in schema.interfaces:  # Horizon's JobPayload::shouldBeSilenced
                silenced = True
            owner = self._unique_owner() if schema.is_unique else None
            queueable_values: dict[str, Any] = {"connection": connection, "queue": queue, "delay": delay_seconds}
            if owner is not None and self.version.since("13.24"):
                queueable_values["uniqueLockOwner"] = owner
            queueable_values.update(queueable or {})
            explicit = {
                "tries": tries, "backoff": backoff, "timeout": timeout, "max_exceptions": max_exceptions,
                "fail_on_timeout": fail_on_timeout or None, "display_name": display_name,
                "delete_when_missing_models": delete_when_missing_models or None,
                "unique_id": unique_id, "unique_for": unique_for, "debounce_id": debounce_id,
                "retry_until": None if retry_until is None else _timestamp(retry_until, now),
            }
            schema.check(explicit)
            attrs = schema.queue_attributes
            routed_connection = attrs.get("connection")
            if connection is None and routed_connection not in (None, self.queue.connection_name):
                raise SchemaError(f"{schema.class_name}: its #[Connection] attribute pushes it to connection "
                                  f"{routed_connection!r}; dispatch it with a Dispatcher of that connection")
            debounce_writes = None
            if "debounceFor" in attrs:
                owner_token, exceeded, debounce_writes = self._debounce_lock(
                    debounce_key(schema, properties or {}, debounce_id), int(attrs["debounceFor"]),
                    attrs.get("debounceMaxWait"), now)
                queueable_values["debounceOwner"] = owner_token
                if delay_seconds is None:  # the job's delay, set on the command as PHP sets it
                    delay_seconds = 0 if exceeded else int(attrs["debounceFor"])
                    queueable_values["delay"] = route_delay = delay_seconds
            if queue is None and attrs.get("queue") is not None:
                route_queue = str(attrs["queue"])
            if route_delay is None and attrs.get("delay") is not None:
                route_delay = int(attrs["delay"])
            p = schema_plan(schema, properties or {}, self.version, queueable=queueable_values, explicit=explicit)
            if debounce_writes is not None:  # a debounced class is never unique (check() refuses it)
                debounce_writes()
            if p.unique is not None and not self._take_unique_lock(p.unique, owner):
                return PreparedJob(b"", self.queue.queue_name(route_queue), route_delay, skipped=True)
            if p.unique is not None and self.version.since("11.39"):
                context = self._unique_context(p.unique, owner)
            properties, queueable_defaults, skip_defaults = p.public, p.queueable_defaults, p.skip_defaults
            queueable = queueable_values if p.queueable_defaults else None
            encrypt = encrypt or p.encrypt
            tries, backoff, timeout = p.payload["tries"], p.payload["backoff"], p.payload["timeout"]
            max_exceptions, fail_on_timeout = p.payload["max_exceptions"], p.payload["fail_on_timeout"]
            delete_when_missing_models = p.payload["delete_when_missing_models"]
            retry_until = p.payload["retry_until"]
        command = serialize_command(
            class_name, properties, protected=protected, private=private, version=self.version,
            connection=connection, queue=queue, delay=delay_seconds, queueable=queueable,
            queueable_defaults=queueable_defaults, skip_defaults=skip_defaults,
        )
        if encrypt:
            if self.encrypter is None:
                raise ValueError("encrypt=True needs an Encrypter (the app's APP_KEY)")
            command_text = self.encrypter.encrypt(command, serialize=True)
        else:
            command_text = command.decode("utf-8")
        horizon_id = self._horizon_id()
        payload = build_object_payload(
            self.version,
            command_name=class_name,
            command=command_text,
            display_name=display_name,
            max_tries=tries,
            max_exceptions=max_exceptions,
            fail_on_timeout=fail_on_timeout,
            backoff=list(backoff) if isinstance(backoff, list | tuple) else backoff,
            timeout=timeout,
            retry_until=None if retry_until is None else _timestamp(retry_until, now),
            delete_when_missing_models=delete_when_missing_models,
            delay=None if route_delay is None else _seconds(route_delay, now),
            now=now,
            context=context,
            uuid=horizon_id,
            id=horizon_id,
        )
        payload = self._with_hooks(payload, route_queue)
        if self.horizon is not None:
            if tags is None:
                tags = _model_tags([properties, protected, private])
            payload = self._horizon_payload(payload, tags=tags, silenced=silenced, class_name=class_name)
        return PreparedJob(payload.encode("utf-8"), self.queue.queue_name(route_queue), route_delay)

    def _unique_owner(self) -> str | None:
        return unique_lock_owner()

    def _unique_context(self, unique: tuple[str, str, str | None, int], owner: str | None) -> dict[str, Any]:
        """11.39+: ``PendingDispatch`` puts the lock's store, key (and 13.24+ owner) into hidden Context,
        so the worker can free the lock of a job whose models are gone."""
        def ser(value: str) -> str:
            return _serialize_value(value).decode("utf-8")

        hidden = {
            "laravel_unique_job_cache_store": ser(str(getattr(self.cache, "store_name", None) or "redis")),
            "laravel_unique_job_key": ser(self.version.unique_lock_key(unique[0], unique[1], unique[2])),
        }
        if self.version.since("13.24"):
            hidden["laravel_unique_job_lock_owner"] = ser(owner or "")
        return log_context(hidden=hidden)

    def _take_unique_lock(self, unique: tuple[str, str, str | None, int], owner: str | None) -> bool:
        """``UniqueLock::acquire`` in the app's cache (needs ``cache=``)."""
        acquire = getattr(self.cache, "unique_lock_acquire", None)
        if acquire is None:
            store = getattr(self.cache, "driver", None)
            raise SchemaError(f"{unique[0]} is ShouldBeUnique: its lock is taken in the app's cache, which laraq "
                              + ("was not given (Dispatcher(cache=...))" if self.cache is None
                                 else f"cannot lock in (store {store!r}; redis only)"))
        return bool(acquire(unique[0], unique[1], unique[2], unique[3], owner or ""))

    def _debounce_lock(self, key: str, debounce_for: int, max_wait: int | None,
                       now: float) -> tuple[str, bool, Callable[[], None]]:
        """``DebounceLock::acquire`` in the app's cache (needs ``cache=``): a fresh 40-character owner to
        store under ``key`` for ``max(debounce_for * 10, 300)`` seconds (the newest dispatch owns it),
        whether ``max_wait`` seconds have passed since the first dispatch of the series (then it runs at
        once), and the cache writes, made once the dispatch is known to go ahead: the owner, and the
        series' first time stored (first dispatch) or cleared (wait exceeded)."""
        if self.cache is None or not hasattr(self.cache, "put"):
            raise SchemaError(f"{key.split(':')[1]} is debounced: its owner is stored in the app's cache, which "
                              "laraq was not given (Dispatcher(cache=...))")
        cache, ttl, owner = self.cache, max(debounce_for * 10, 300), unique_lock_owner(40)
        first_key = key + ":first_dispatched_at"
        first = None if max_wait is None else cache.get(first_key)
        exceeded = max_wait is not None and first is not None and math.floor(now) - int(first) >= max_wait

        def write() -> None:
            cache.put(key, owner, ttl)
            if max_wait is not None and first is None:
                cache.put(first_key, math.floor(now), ttl)
            elif exceeded:
                cache.forget(first_key)

        return owner, exceeded, write

    def _horizon_id(self) -> str | None:
        """Horizon's ``createPayloadArray``: ``id`` is the ``uuid`` (None: the payload makes its own)."""
        if self.horizon is None:
            return None
        return new_uuid()

    def prepare_string(
        self,
        job: str,
        data: Any = "",
        *,
        queue: str | None = None,
        delay: Delay | None = None,
        tries: int | None = None,
        backoff: int | str | Sequence[int] | None = None,
        timeout: int | None = None,
        max_exceptions: int | None = None,
        fail_on_timeout: bool = False,
    ) -> PreparedJob:
        """Build the payload of ``Queue::push('Class@method', $data)`` (or ``later``)."""
        if "@" not in job:
            raise ValueError(f"a string job is 'Class@method', got {job!r}")
        now = self.queue.clock()
        delay_seconds = None if delay is None else _seconds(delay, now)
        horizon_id = self._horizon_id()
        payload = build_string_payload(
            self.version, job, data,
            max_tries=tries, max_exceptions=max_exceptions, fail_on_timeout=fail_on_timeout,
            backoff=list(backoff) if isinstance(backoff, list | tuple) else backoff,
            timeout=timeout, delay=delay_seconds, now=now, uuid=horizon_id, id=horizon_id,
        )
        payload = self._with_hooks(payload, queue)
        # Horizon prepares a string job with no tags, not silenced.
        payload = self._horizon_payload(payload, tags=(), silenced=False, class_name=None)
        return PreparedJob(payload.encode("utf-8"), self.queue.queue_name(queue), delay)

    # -- pushing -------------------------------------------------------------------------------------

    def push(self, job: PreparedJob) -> DispatchResult:
        """Push one prepared job (``later`` when it has a delay)."""
        if job.skipped:
            return _result(job, None)
        first = self._pending_first()  # Horizon 5.42+ writes the pending record before the push
        if first:
            self._record_pushed([job])
        if job.delay is None:
            self.queue.push_raw(job.payload, job.queue)
            available = None
        else:
            available = self.queue.available_at(job.delay)
            self.queue.later(job.delay, job.payload, job.queue)
        if not first:
            self._record_pushed([job])
        return _result(job, available)

    def prepare(self, job: Any, **options: Any) -> PreparedJob:
        """Build the payload of a typed job instance (see :meth:`dispatch`) without pushing it."""
        cls = type(job)
        if not is_typed_job(cls):
            raise TypedJobError(f"{cls.__name__} is not a typed job class (write one with laraq schema --python)")
        name = cls.__php_class__
        if name not in self.schemas:  # the class's own schema, learnt once
            self.schemas[name] = schema_of(cls)
        values = wire_values(job, collection_class=self.version.since("9.26"))
        return self.prepare_job(name, values, **options)

    def dispatch(self, job: Any, **options: Any) -> DispatchResult:
        """Dispatch a typed job instance (``OrderShipped(order=OrderRef(5), ...)``) as PHP's ``dispatch()``
        of the class writes it; the options are :meth:`prepare_job`'s (``queue``, ``connection``, ``delay``...)."""
        return self.push(self.prepare(job, **options))

    def _pending_first(self) -> bool:
        return self.horizon is not None and bool(getattr(self.horizon, "pending_before_push", False))

    def dispatch_job(self, class_name: str, properties: Mapping[str, Any] | None = None, **options: Any) -> DispatchResult:
        """Dispatch one job object; see :meth:`prepare_job` for the options."""
        return self.push(self.prepare_job(class_name, properties, **options))

    def dispatch_string(self, job: str, data: Any = "", **options: Any) -> DispatchResult:
        """Dispatch ``Class@method`` with plain JSON ``data``; see :meth:`prepare_string`."""
        return self.push(self.prepare_string(job, data, **options))

    def bulk(self, jobs: Iterable[PreparedJob]) -> list[DispatchResult]:
        """Push many prepared jobs (any queues, delayed or not) in one MULTI/EXEC round trip.

        Unlike Laravel 8.0–9.6's ``bulk``, a delay is always honoured.
        """
        items = list(jobs)
        if not items:
            return []
        q = self.queue
        if q.cluster:  # one transaction per hash slot: fall back to one call per job
            return [self.push(job) for job in items]
        pipe = q.client.pipeline(transaction=True)
        results: list[DispatchResult] = []
        push_text, later_text = q.scripts.text("push"), q.scripts.text("later")
        for job in items:
            if job.skipped:
                results.append(_result(job, None))
                continue
            keys = q.keys(job.queue)
            if job.delay is None:
                pipe.eval(push_text, 2, keys.list, keys.notify, job.payload)
                results.append(_result(job, None))
            else:
                score = q.available_at(job.delay)
                if self.version.later_uses_script:
                    pipe.eval(later_text, 1, keys.delayed, score, job.payload)
                else:
                    pipe.zadd(keys.delayed, {job.payload: score})
                results.append(_result(job, score))
        first = self._pending_first()
        if first:
            self._record_pushed(items)
        pipe.execute()
        if not first:
            self._record_pushed(items)
        return results


def _model_tags(groups: Sequence[Mapping[str, Any] | None]) -> list[str]:
    """Horizon's automatic tags: ``Class:key`` for each model (``ModelIdentifier``) property."""
    tags: list[str] = []
    for group in groups:
        for value in (group or {}).values():
            if is_model_identifier(value):  # as a typed instance or a schema'd dispatch writes it
                if not value._props.get("class"):
                    continue  # an empty collection: no model, no tag
                value = ModelIdentifier.from_php(value)
            if isinstance(value, ModelIdentifier):
                keys = value.id if isinstance(value.id, list) else [value.id]
                tags += [f"{value.class_name}:{key}" for key in keys]
    return tags


def _result(job: PreparedJob, available_at: int | None) -> DispatchResult:
    if job.skipped:
        return DispatchResult(id=None, uuid=None, queue=job.queue, available_at=None, payload=b"", skipped=True)
    decoded = orjson.loads(job.payload)  # laraq's own payload (valid JSON); the same values json.loads gives
    return DispatchResult(
        id=decoded.get("id"), uuid=decoded.get("uuid"), queue=job.queue,
        available_at=available_at, payload=job.payload,
    )
