"""Job class schemas: what PHP's ``dispatch()`` of a class writes that the Python caller does not say.

A Laravel job class carries defaults - ``$tries``, ``$backoff``, ``$timeout``, ``$maxExceptions``,
``$failOnTimeout``, ``$retryUntil``, ``$uniqueFor``, ``$deleteWhenMissingModels``, its other properties
and their defaults - and interfaces (``ShouldBeUnique``, ``ShouldBeUniqueUntilProcessing``,
``ShouldBeEncrypted``). ``Illuminate\\Queue\\Queue::createObjectPayload`` reads the settings from the
object into the payload, ``serialize()`` writes every property, and ``PendingDispatch`` takes the unique
lock (``Illuminate\\Bus\\UniqueLock::acquire``) or drops the job while it is held.

A :class:`JobSchema` gives :class:`laraq.bus.dispatch.Dispatcher` the same knowledge. Two sources:

* exported from the PHP app by reflection: ``laraq schema --from /path/to/app`` runs
  ``laraq/php/schema.php`` with the app's own autoloader and bootstrap and writes JSON (each job
  class's properties in ``serialize()`` order with their PHP-serialized defaults, interfaces, traits,
  methods and attributes, and each backed enum's cases). This is exact: the command is byte for byte
  PHP's;
* declared in Python: ``app.job_schema("App\\Jobs\\X", tries=3, backoff=[10, 60], unique_for=3600)``.
  Each setting is also the class's public property of that name (``public $tries = 3;``), written after
  ``properties`` in this order: ``tries, backoff, timeout, maxExceptions, failOnTimeout, uniqueFor,
  deleteWhenMissingModels``. PHP writes properties in the class's declaration order, so for byte
  fidelity declare them in ``properties`` in that order, or export the schema.

What a schema cannot say - a value only a PHP *method* computes (``tries()``, ``backoff()``,
``retryUntil()``, ``displayName()``, a unique ``uniqueId()``/``uniqueFor()``/``uniqueVia()``, a debounced
``debounceId()``/``debounceVia()``) or a 13.x queue attribute laraq does not honour - makes
:meth:`JobSchema.check` refuse the dispatch with the reason, unless the caller gives that value
explicitly (``tries=``, ``backoff=``, ``unique_id=``, ``debounce_id=``...). The 13.x queue attributes
(``#[Tries]``, ``#[Backoff]``, ``#[Queue]``, ``#[DebounceFor]``...) are exported resolved
(``queue_attributes``) and read as ``ReadsClassAttributes::getAttributeValue`` reads them.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laraq.protocol.serializer import PHPObject, loads

__all__ = [
    "JobSchema",
    "PropertySpec",
    "SchemaError",
    "debounce_key",
    "export_schema",
    "load_schema_file",
    "parse_schema",
    "unique_lock_owner",
]

SHOULD_BE_UNIQUE = "Illuminate\\Contracts\\Queue\\ShouldBeUnique"
UNTIL_PROCESSING = "Illuminate\\Contracts\\Queue\\ShouldBeUniqueUntilProcessing"
SHOULD_BE_ENCRYPTED = "Illuminate\\Contracts\\Queue\\ShouldBeEncrypted"
SERIALIZES_MODELS = "Illuminate\\Queue\\SerializesModels"
EXPORTER = Path(__file__).resolve().parent / "php" / "schema.php"
QUEUE_ATTRIBUTES = "Illuminate\\Queue\\Attributes\\"
#: the 13.x queue attributes a dispatch honours -> the property the exporter resolves each into
READ_ATTRIBUTES = {
    "Tries": "tries", "Backoff": "backoff", "Timeout": "timeout", "MaxExceptions": "maxExceptions",
    "FailOnTimeout": "failOnTimeout", "DeleteWhenMissingModels": "deleteWhenMissingModels",
    "UniqueFor": "uniqueFor", "Queue": "queue", "Connection": "connection", "Delay": "delay",
    "DebounceFor": "debounceFor",
}

#: Python keyword -> the class property PHP reads (in the order a declared schema writes them).
SETTINGS = {
    "tries": "tries", "backoff": "backoff", "timeout": "timeout", "max_exceptions": "maxExceptions",
    "fail_on_timeout": "failOnTimeout", "unique_for": "uniqueFor",
    "delete_when_missing_models": "deleteWhenMissingModels",
}


class SchemaError(ValueError):
    """A schema that cannot be read, or a dispatch it cannot make exactly as PHP would."""


@dataclass(frozen=True)
class PropertySpec:
    """One declared property: visibility, declaring class, and its default (``initialized`` False: a typed
    property without default, which ``serialize()`` leaves out until the job sets it)."""

    name: str
    visibility: str = "public"
    declaring_class: str = ""
    initialized: bool = True
    default: Any = None
    type: str | None = None
    #: the default is the property's own (``ReflectionProperty::hasDefaultValue``), which
    #: ``SerializesModels`` leaves out when the value still holds it; False for a promoted constructor
    #: parameter's default, which the constructor sets and ``serialize()`` always writes
    property_default: bool = True

    def key(self, job_class: str, *, serializes_models: bool = False) -> str:
        """The mangled wire name (``SerializesModels::__serialize`` mangles private ones with the job's class)."""
        if self.visibility == "public":
            return self.name
        if self.visibility == "protected":
            return "\0*\0" + self.name
        owner = job_class if serializes_models else (self.declaring_class or job_class)
        return f"\0{owner}\0{self.name}"


@dataclass
class JobSchema:
    """What a job class's ``dispatch()`` writes beyond the caller's values (see the module docstring)."""

    class_name: str
    #: in ``serialize()`` order (None: declared in Python, the Queueable trait's order is used)
    properties: list[PropertySpec] | None = None
    #: in ``ReflectionClass::getProperties()`` order (``SerializesModels`` writes this order)
    reflection_order: list[str] | None = None
    interfaces: frozenset[str] = frozenset()
    traits: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    attributes: tuple[str, ...] = ()
    #: 13.x queue attributes, resolved by the exporter: the property each names (``tries``, ``backoff``,
    #: ``queue``, ``debounceFor``...) -> the value the framework reads for an instance holding the defaults
    queue_attributes: dict[str, Any] = field(default_factory=dict)
    #: a Python-declared schema: public property defaults, in order
    declared: dict[str, Any] = field(default_factory=dict)
    #: a Python-declared schema: ``True``, ``"until_processing"`` or None
    unique: bool | str | None = None
    encrypt: bool = False
    serializes_models: bool = False

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def is_unique(self) -> bool:
        return bool(self.unique) or SHOULD_BE_UNIQUE in self.interfaces or UNTIL_PROCESSING in self.interfaces

    @property
    def should_be_encrypted(self) -> bool:
        return self.encrypt or SHOULD_BE_ENCRYPTED in self.interfaces

    @property
    def uses_serializes_models(self) -> bool:
        return self.serializes_models or SERIALIZES_MODELS in self.traits

    def defaults(self) -> dict[str, Any]:
        """Plain property name -> default (public ones, as ``$job->name`` reads them from outside)."""
        if self.properties is None:
            return dict(self.declared)
        return {p.name: p.default for p in self.properties if p.visibility == "public" and p.initialized}

    def check(self, given: Mapping[str, Any]) -> None:
        """Refuse what only PHP code could compute (``given``: the caller's explicit payload values)."""
        needs = {"tries": "tries", "backoff": "backoff", "retryUntil": "retry_until", "displayName": "display_name"}
        if self.is_unique:
            needs |= {"uniqueId": "unique_id", "uniqueFor": "unique_for", "uniqueVia": "unique_via"}
        missing = [f"{m}() (give {kw}=)" for m, kw in needs.items()
                   if m in self.methods and given.get(kw) is None]
        if "uniqueVia" in self.methods and self.is_unique:
            missing.append("uniqueVia() (a lock store laraq cannot choose)")
        resolved = self.queue_attributes
        unread = [a[len(QUEUE_ATTRIBUTES):] for a in self.attributes if a.startswith(QUEUE_ATTRIBUTES)
                  and READ_ATTRIBUTES.get(a[len(QUEUE_ATTRIBUTES):]) not in resolved]
        if unread:  # one laraq does not honour (WithoutRelations), or a schema exported without their values
            stale = all(name in READ_ATTRIBUTES for name in unread)
            missing.append("queue attributes " + ", ".join(unread)
                           + (" (a schema exported without their values: export it again)" if stale else ""))
        if "debounceFor" in resolved:
            if "debounceId" in self.methods and given.get("debounce_id") is None:
                missing.append("debounceId() (give debounce_id=)")
            if "debounceVia" in self.methods:
                missing.append("debounceVia() (a debounce store laraq cannot choose)")
            if "displayName" in self.methods:
                missing.append("displayName() (its debounce key is the name's xxh128 hash)")
            if self.is_unique:
                raise SchemaError(f"{self.class_name}: a debounced job cannot also be ShouldBeUnique "
                                  "(PHP's dispatch throws a LogicException)")
        if missing:
            raise SchemaError(f"{self.class_name}: PHP computes its payload from {', '.join(missing)}; "
                              "dispatch it from PHP, or give those values")


def unique_lock_owner(length: int = 16) -> str:
    """``Str::random(16)``: the owner a cache lock is taken with (``Str::random(40)``: a debounce owner)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def debounce_key(schema: JobSchema, values: Mapping[str, Any], debounce_id: str | None) -> str:
    """``DebounceLock::getKey``: ``laravel_debounced_job:{class}:{debounceId}`` (the id from the
    ``debounceId()`` method, given as ``debounce_id``, else the ``debounceId`` property, else empty)."""
    if debounce_id is None:
        raw = (schema.defaults() | dict(values)).get("debounceId")
        debounce_id = "" if raw is None or raw is False else "1" if raw is True else str(raw)
    return f"laravel_debounced_job:{schema.class_name}:{debounce_id}"


# -- the exported JSON ----------------------------------------------------------------------------------


def _default(raw: str | None) -> Any:
    if raw is None:
        return None
    value = loads(base64.b64decode(raw))
    return value


def _property(job: str, p: Mapping[str, Any]) -> PropertySpec:
    """One exported property. A promoted constructor parameter with a default is always set by the
    constructor, so ``serialize()`` writes that default when the caller does not give the value."""
    if not p["initialized"] and p.get("promoted") and p.get("ctor_default") is not None:
        return PropertySpec(p["name"], p["visibility"], p.get("class") or job, True, _default(p["ctor_default"]),
                            p.get("type"), property_default=False)
    return PropertySpec(p["name"], p["visibility"], p.get("class") or job, bool(p["initialized"]),
                        _default(p.get("default")), p.get("type"))


def parse_schema(data: Mapping[str, Any]) -> tuple[dict[str, JobSchema], dict[str, dict[str, str | int]]]:
    """Job schemas and backed enums from ``laraq schema``'s JSON."""
    jobs: dict[str, JobSchema] = {}
    for name, spec in (data.get("jobs") or {}).items():
        try:
            props = [_property(name, p) for p in spec.get("properties", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"schema of {name} is malformed: {exc}") from exc
        jobs[name] = JobSchema(
            name, props, list(spec.get("reflection_order") or []) or None,
            frozenset(spec.get("interfaces") or ()), frozenset(spec.get("traits") or ()),
            frozenset(spec.get("methods") or ()), tuple(a["name"] for a in spec.get("attributes") or ()),
            dict(spec.get("queue_attributes") or {}),
        )
    enums = {str(k): dict(v) for k, v in (data.get("enums") or {}).items()}
    return jobs, enums


def load_schema_file(path: str | Path) -> tuple[dict[str, JobSchema], dict[str, dict[str, str | int]]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SchemaError(f"cannot read the job schema {path}: {exc}") from exc
    return parse_schema(data)


def export_schema(app_path: str | Path, classes: Sequence[str] = (), *, php: str = "php",
                  env: Mapping[str, str] | None = None, timeout: float = 120) -> dict[str, Any]:
    """Run the exporter with the app's autoloader; returns its JSON (see the module docstring)."""
    base = Path(app_path).resolve()
    if not (base / "bootstrap" / "app.php").exists():
        raise SchemaError(f"{base} is not a Laravel app (no bootstrap/app.php)")
    try:
        proc = subprocess.run([php, str(EXPORTER), str(base), *classes], capture_output=True, text=True,
                              cwd=base, env=dict(env) if env is not None else None, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SchemaError(f"cannot run PHP for the schema of {base}: {exc}") from exc
    if proc.returncode != 0:
        raise SchemaError(f"the schema exporter failed on {base} (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-800:]}")
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise SchemaError(f"the schema exporter printed no JSON for {base}: {proc.stdout[:300]!r}") from exc


# -- building the command's properties --------------------------------------------------------------------


def command_properties(schema: JobSchema, values: Mapping[str, Any], version: Any, *,
                       queueable: Mapping[str, Any]) -> dict[str, Any]:
    """The command's properties (mangled name -> value) in PHP's order, for an exported schema.

    ``values``: the caller's values by plain property name; ``queueable``: the Queueable trait's values
    the dispatch sets (connection, queue, delay, uniqueLockOwner...).
    """
    assert schema.properties is not None
    unknown = set(values) - {p.name for p in schema.properties}
    if unknown:
        raise SchemaError(f"{schema.class_name} declares no propert{'y' if len(unknown) == 1 else 'ies'} "
                          f"{', '.join(sorted(unknown))}")
    by_name = {p.name: p for p in schema.properties}
    models = schema.uses_serializes_models
    order = [by_name[n] for n in schema.reflection_order or [] if n in by_name] if models else schema.properties
    if models and len(order) != len(schema.properties):
        order = schema.properties
    skip_defaults = models and version.serializes_models_skips_defaults
    out: dict[str, Any] = {}
    for prop in order:
        if prop.name in values:
            value, given = values[prop.name], True
        elif prop.name in queueable:
            value, given = queueable[prop.name], True
        else:
            value, given = prop.default, prop.initialized
        if not given:
            continue  # an uninitialized typed property: serialize() leaves it out
        if skip_defaults and prop.initialized and prop.property_default and _identical(value, prop.default):
            continue
        out[prop.key(schema.class_name, serializes_models=models)] = value
    return out


def _identical(a: Any, b: Any) -> bool:
    """PHP's ``===`` for the values a default can hold."""
    if type(a) is not type(b):
        if isinstance(a, dict) and isinstance(b, dict):
            return dict(a) == dict(b) and list(a) == list(b)
        if isinstance(a, list | tuple | dict) and isinstance(b, list | tuple | dict):
            return list(a.values() if isinstance(a, dict) else a) == list(b.values() if isinstance(b, dict) else b)
        return False
    if isinstance(a, PHPObject):
        return a is b
    return bool(a == b)


# -- a dispatch through a schema ------------------------------------------------------------------------


@dataclass
class Plan:
    """What :class:`laraq.bus.dispatch.Dispatcher` writes for one job of a schema'd class."""

    public: dict[str, Any]
    protected: dict[str, Any]
    private: dict[str, Any]
    queueable_defaults: bool
    skip_defaults: bool
    payload: dict[str, Any]
    encrypt: bool
    #: (job class, uniqueId, display name or None, uniqueFor seconds), when the class is unique
    unique: tuple[str, str, str | None, int] | None = None


def plan(schema: JobSchema, values: Mapping[str, Any], version: Any, *, explicit: Mapping[str, Any],
         queueable: Mapping[str, Any]) -> Plan:
    """Apply ``schema`` to a dispatch of ``values`` (plain property names): the command's properties and
    the payload settings PHP's ``createObjectPayload`` reads from the object (``$job->tries ?? null``,
    ``backoff`` joined with ``,``, ...), the caller's ``explicit`` settings winning."""
    schema.check(explicit)
    defaults = schema.defaults()
    state = defaults | dict(values)

    def setting(kw: str, prop: str, default: Any = None) -> Any:
        """``ReadsClassAttributes::getAttributeValue``: a value set apart from the class default wins
        over the class's attribute, which wins over the default."""
        if explicit.get(kw) is not None:
            return explicit[kw]
        value = state.get(prop)
        if prop in schema.queue_attributes and (value is None or _identical(value, defaults.get(prop))):
            value = schema.queue_attributes[prop]
        return default if value is None else value

    payload = {
        "tries": setting("tries", "tries"), "backoff": setting("backoff", "backoff"),
        "timeout": setting("timeout", "timeout"), "max_exceptions": setting("max_exceptions", "maxExceptions"),
        "fail_on_timeout": bool(setting("fail_on_timeout", "failOnTimeout", False)),
        "retry_until": setting("retry_until", "retryUntil"),
        "delete_when_missing_models": bool(setting("delete_when_missing_models", "deleteWhenMissingModels", False)),
        "display_name": explicit.get("display_name"),
    }
    if isinstance(payload["backoff"], Mapping):
        payload["backoff"] = list(payload["backoff"].values())
    unique = None
    if schema.is_unique:
        unique_id = setting("unique_id", "uniqueId", "")
        unique_for = int(setting("unique_for", "uniqueFor", 0) or 0)
        display = explicit.get("display_name") if "displayName" in schema.methods else None
        unique = (schema.class_name, str(unique_id) if not isinstance(unique_id, bool) else str(int(unique_id)),
                  display, unique_for)
    if schema.properties is None:  # declared in Python
        public = dict(schema.declared) | dict(values)
        return Plan(public, {}, {}, True, schema.uses_serializes_models and version.serializes_models_skips_defaults,
                    payload, schema.should_be_encrypted, unique)
    props = command_properties(schema, values, version, queueable=queueable)
    return Plan(props, {}, {}, False, False, payload, schema.should_be_encrypted, unique)


def declared_schema(class_name: str, *, properties: Mapping[str, Any] | None = None, unique: bool | str | None = None,
                    encrypt: bool = False, serializes_models: bool = False, **settings: Any) -> JobSchema:
    """A schema declared in Python (see the module docstring); ``settings`` are :data:`SETTINGS` keywords."""
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise SchemaError(f"job_schema({class_name!r}): unknown setting(s) {', '.join(sorted(unknown))} "
                          f"(known: {', '.join(SETTINGS)})")
    if unique not in (None, True, False, "until_processing"):
        raise SchemaError(f"job_schema({class_name!r}): unique is True, False, None or 'until_processing'")
    declared = dict(properties or {})
    for kw, prop in SETTINGS.items():
        if settings.get(kw) is not None and prop not in declared:
            declared[prop] = list(settings[kw]) if isinstance(settings[kw], tuple) else settings[kw]
    return JobSchema(class_name, declared=declared, unique=unique or None, encrypt=encrypt,
                     serializes_models=serializes_models)


# -- what a schema tells about a Python handler ------------------------------------------------------------


def handler_reason(schema: JobSchema | None, handler: Any) -> str | None:
    """Why a job of this class must go back to PHP although Python has a handler, or None: a
    ``middleware()`` *method* (PHP runs that middleware around ``handle()``; the payload does not show
    it) with no Python middleware declared on the handler to stand for it."""
    if schema is None or "middleware" not in schema.methods or getattr(handler, "python_middleware", None):
        return None
    return (f"{schema.class_name} has a middleware() method laraq cannot run (declare Python middleware on the "
            "handler to stand for it)")


def handler_problems(schemas: Mapping[str, JobSchema], handlers: Mapping[str, Any], version: Any) -> list[str]:
    """What ``--app`` load can already tell about the handlers, from the schemas it knows."""
    out = []
    for name, handler in sorted(handlers.items()):
        schema = schemas.get(name)
        reason = handler_reason(schema, handler)
        if reason:
            out.append(f"{reason}: its jobs go back to PHP")
        if schema is None or not schema.is_unique or getattr(handler, "unique", None) is not None:
            continue
        if "uniqueId" in schema.methods and (version is None or not version.since("11.39")):
            out.append(f"{name} is ShouldBeUnique with a uniqueId() method: declare unique=True (or "
                       "'until_processing') on its handler, or its lock is never released")
        elif UNTIL_PROCESSING in schema.interfaces:
            out.append(f"{name} is ShouldBeUniqueUntilProcessing: declare unique='until_processing' on its "
                       "handler, or its lock is released after the job instead of before it")
    return out
