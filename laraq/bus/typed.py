r"""Typed job classes: the PHP app's job classes as Python dataclasses, written by
``laraq schema --from APP --python jobs.py``.

The module it writes (:func:`generate_module`) holds, for each ``ShouldQueue`` class the exporter found,
a ``@dataclass(kw_only=True)`` with the class's own properties (the framework traits' ``connection``,
``queue``, ``delay``... are left out: :class:`laraq.bus.dispatch.Dispatcher` options carry them), typed
from the PHP declarations:

=========================  ==============================================================
PHP                        Python
=========================  ==============================================================
``int`` ``float``          ``int`` ``float``
``string`` ``bool``        ``str`` ``bool``
``array`` ``iterable``     ``list[Any] | dict[Any, Any]`` (a list when the keys are 0..n-1)
``?T`` / ``T|null``        ``T | None``
``A|B``                    ``A | B``
a backed enum              a generated :class:`enum.Enum` with the same cases and values
an Eloquent model          a generated :class:`ModelRef` subclass (``PostRef``): key, connection, row
an Eloquent collection     :class:`ModelCollection`
``DateTimeInterface``...   :class:`datetime.datetime`
untyped, ``mixed``, other  ``Any``
=========================  ==============================================================

Each class records its PHP name (``__php_class__``) and the exported schema (``__laraq_schema__``), so a
:class:`laraq.bus.dispatch.Dispatcher` given an instance writes what PHP's ``dispatch()`` writes. A
property PHP may leave unset (typed, no default, not set by the constructor) defaults to :data:`UNSET`:
left out, as ``serialize()`` leaves it out. A property with a default Python cannot spell is
:data:`UNSET` too, which dispatch writes as PHP's default.

A handler whose first parameter is annotated with a generated class gets an instance of it
(:func:`typed_handler`, applied by :meth:`laraq.app.App.register`, which first refuses an annotation
naming another job's class or a type the command never is: :func:`handler_annotation_problem`). The
conversion is strict: a property the class does not declare, a required one missing, or a value its
field's type excludes (:func:`check_value`: what PHP's typed property refuses) fails the job with one
:class:`TypedJobError` naming the job, the property and the PHP type, and whose mistake it is: the PHP
class changed since the module was written (regenerate it), or the job's dispatcher wrote a wrong value.
:func:`wire_values` refuses the same values at dispatch. A model ref's ``connection`` defaults to what a
fetched model serializes (its ``$connection``, else the app's default connection when the module was written).

The module also records each PHP source file's SHA-256 (jobs, their enums and models);
:func:`drift` compares them with the files now, and ``App.problems`` (shown by ``laraq doctor`` and
the worker's banner) reports the classes that changed.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import keyword
import logging
import pprint
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from laraq.bus.models import Model
from laraq.bus.schema import _default, parse_schema
from laraq.logtext import visible
from laraq.protocol.phpshapes import from_datetime, is_model_identifier, to_datetime
from laraq.protocol.serializer import DATE_CLASSES, ModelIdentifier, PHPEnum, PHPObject, deref

__all__ = [
    "UNSET",
    "ModelCollection",
    "ModelRef",
    "HandlerAnnotationError",
    "TypedJobError",
    "drift",
    "check_value",
    "from_command",
    "generate_module",
    "handler_annotation_problem",
    "is_typed_job",
    "typed_class_of",
    "typed_handler",
    "wire_values",
]


class _Unset:
    """The value of a property PHP leaves unset, or whose default Python cannot spell."""

    _instance: ClassVar[_Unset | None] = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


log = logging.getLogger("laraq.bus.typed")

#: Typed ``Any`` so that ``count: int | None = UNSET`` type-checks in a generated class.
UNSET: Any = _Unset()

#: The framework traits' properties (Queueable, InteractsWithQueue, Batchable, 8.0 to 13.x): never fields.
FRAMEWORK_PROPERTIES = frozenset({
    "job", "connection", "queue", "group", "messageGroup", "deduplicator", "debounceOwner", "uniqueLockOwner",
    "chainConnection", "chainQueue", "chainCatchCallbacks", "delay", "afterCommit", "middleware", "chained",
    "batchId", "fakeBatch",
})


class TypedJobError(ValueError):
    """A command that does not fit its typed class (or an instance that cannot be dispatched)."""


class HandlerAnnotationError(TypeError):
    """A handler whose first parameter is annotated with a type its job's command never is (said when it
    is registered, see :func:`handler_annotation_problem`)."""


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """An Eloquent model in a job (``SerializesModels``'s ``ModelIdentifier``): its key and connection.

    A handler's instance also carries the ``row`` the worker loaded (:class:`laraq.bus.models.Model`)."""

    __php_class__: ClassVar[str] = ""

    id: Any
    connection: str | None = None
    relations: tuple[str, ...] = ()
    row: Model | None = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class ModelCollection:
    """An Eloquent collection in a job: the model class and the keys, in order (and the rows loaded)."""

    class_name: str
    ids: tuple[Any, ...]
    connection: str | None = None
    relations: tuple[str, ...] = ()
    #: a custom collection class (9.26+ records it; None for Eloquent's own ``Collection``)
    collection_class: str | None = None
    rows: tuple[Model, ...] = dataclasses.field(default=(), compare=False, repr=False)


# -- what a generated class says about itself ------------------------------------------------------------


def is_typed_job(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls) and isinstance(
        getattr(cls, "__laraq_schema__", None), dict) and bool(getattr(cls, "__php_class__", ""))


def _fields(cls: type) -> dict[str, dict[str, Any]]:
    """Python field name -> its PHP property (``name``, ``visibility``, ``kind``, ``php_type``)."""
    return dict(cls.__laraq_fields__)  # type: ignore[attr-defined]


def _hints(cls: type) -> dict[str, Any]:
    cached = cls.__dict__.get("__laraq_hints__")
    if cached is None:
        module = __import__(cls.__module__, fromlist=["_"])
        cached = typing.get_type_hints(cls, vars(module))
        setattr(cls, "__laraq_hints__", cached)  # noqa: B010 - a cache on the generated class
    return dict(cached)


# -- PHP command -> instance (a handler's argument) ----------------------------------------------------------


def from_command(cls: type[Any], command: Any, job_name: str | None = None) -> Any:
    """An instance of the generated ``cls`` from the restored command a handler would get.

    Each value must fit its field's type as PHP's typed property would (:func:`check_value`): a value
    outside it fails the job with one :class:`TypedJobError` naming the class, the property and the type,
    and the handler is never called with it."""
    name = job_name or cls.__php_class__
    if not isinstance(command, PHPObject):
        raise TypedJobError(f"{name}: a typed handler needs a job object, got {type(command).__name__}")
    fields = _fields(cls)
    by_php = {spec["name"]: py for py, spec in fields.items()}
    framework = FRAMEWORK_PROPERTIES | set(cls.__laraq_framework__)
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for key, raw in command._props.items():
        plain = key.rsplit("\0", 1)[-1] if isinstance(key, str) else str(key)
        if plain in framework:
            continue
        py = by_php.get(plain)
        if py is None:
            raise TypedJobError(f"{name}: the job has a property {visible(plain)!r} that {cls.__name__} does not "
                                f"declare; {_whose(cls, cls.__php_class__)}")
        value = _incoming(deref(raw), hints.get(py), fields[py], name, cls)
        problem = check_value(value, hints.get(py), fields[py])
        if problem:
            raise TypedJobError(f"{name}: {fields[py]['name']} {problem}; {_whose(cls, cls.__php_class__)}")
        values[py] = value
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise TypedJobError(f"{name}: the job has no property {fields[missing[0]]['name']!r}, which "
                            f"{cls.__name__} requires; {_whose(cls, cls.__php_class__)}")
    return cls(**values)


def _whose(cls: type[Any], php_class: str) -> str:
    """Whose mistake a command that does not fit ``cls`` is: the PHP class changed since the module was
    written (regenerate), or it did not (the job was not written by PHP's dispatch() of the class)."""
    state = source_state(cls, php_class)
    if state == "changed":
        return (f"{php_class} changed since {cls.__module__} was written: regenerate it with "
                "laraq schema --from APP --python")
    if state == "same":
        return (f"{php_class} is unchanged since {cls.__module__} was written, so the job was not written by its "
                "dispatch(): its dispatcher wrote a wrong value")
    return (f"the job was not written by {php_class}'s dispatch(), or the class changed since {cls.__module__} "
            "was written (its PHP source is not here to tell)")


def source_state(cls: type[Any], php_class: str) -> str:
    """``"changed"``, ``"same"`` or ``"unknown"``: ``php_class``'s source now, against the SHA-256 the
    module of ``cls`` recorded."""
    module = sys.modules.get(cls.__module__)
    sources: Mapping[str, tuple[str, str]] = getattr(module, "__laraq_sources__", {}) or {}
    if php_class not in sources:
        return "unknown"
    path, sha = sources[php_class]
    root = getattr(module, "__laraq_app__", "") or "."
    file = Path(path) if Path(path).is_absolute() else Path(root) / path
    try:
        now = hashlib.sha256(file.read_bytes()).hexdigest()
    except OSError:
        return "unknown"
    return "same" if now == sha else "changed"


def _incoming(value: Any, hint: Any, spec: Mapping[str, Any], job: str, cls: type[Any]) -> Any:
    kind = spec.get("kind")
    if value is None:
        return None
    if kind == "enum" and isinstance(value, PHPEnum):
        target = _enum_class(hint)
        if target is not None:
            try:
                return target[value.case]
            except KeyError:
                php = getattr(target, "__php_class__", value.class_name)
                raise TypedJobError(f"{job}: {spec['name']} holds {visible(value.case)!r}, not a case of "
                                    f"{target.__name__}; {_whose(cls, php)}") from None
    if kind == "model":
        ref = _model_class(hint) or ModelRef
        if isinstance(value, Model):
            return ref(value.key, None, (), value)
        if is_model_identifier(value):
            mid = ModelIdentifier.from_php(value)
            return ref(mid.id, mid.connection, tuple(mid.relations))
    if kind == "collection":
        if isinstance(value, list):
            rows = tuple(r for r in value if isinstance(r, Model))
            return ModelCollection(rows[0].class_name if rows else "", tuple(r.key for r in rows), rows=rows)
        if is_model_identifier(value):
            mid = ModelIdentifier.from_php(value)
            ids = mid.id if isinstance(mid.id, list) else [mid.id]
            return ModelCollection(mid.class_name, tuple(ids), mid.connection, tuple(mid.relations),
                                   mid.collection_class)
    if kind == "date" and isinstance(value, PHPObject) and value.class_name in DATE_CLASSES:
        return to_datetime(value)
    if kind == "array" and isinstance(value, dict):
        is_list = all(k == i and type(k) is int for i, k in enumerate(value))
        return list(value.values()) if is_list else dict(value)
    return value


def _enum_class(hint: Any) -> type[enum.Enum] | None:
    for arg in (hint, *typing.get_args(hint)):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            return arg
    return None


def _model_class(hint: Any) -> type[ModelRef] | None:
    for arg in (hint, *typing.get_args(hint)):
        if isinstance(arg, type) and issubclass(arg, ModelRef):
            return arg
    return None


# -- instance -> the values PHP's dispatch() writes ---------------------------------------------------------


def wire_values(instance: Any, *, collection_class: bool = True) -> dict[str, Any]:
    """The instance's properties by plain PHP name, as wire values (enum cases as ``PHPEnum``, models as
    ``ModelIdentifier``, dates as Carbon); :data:`UNSET` ones are left out (PHP's default or unset).

    A value PHP's typed property would refuse (:func:`check_value`) raises :class:`TypedJobError` naming
    the class, the property and the PHP type; an ``int`` for a ``float`` property is written as the float
    PHP's property would hold."""
    cls = type(instance)
    hints = _hints(cls)
    out: dict[str, Any] = {}
    for py, spec in _fields(cls).items():
        value = getattr(instance, py)
        if value is UNSET:
            continue
        problem = check_value(value, hints.get(py), spec)
        if problem:
            raise TypedJobError(f"{cls.__php_class__}: {spec['name']} {problem}: PHP would refuse it "
                                f"(give {cls.__name__}.{py} a value of that type)")
        out[spec["name"]] = _outgoing(value, spec, cls.__php_class__, collection_class)
    return out


def php_type(spec: Mapping[str, Any], hint: Any) -> str:
    """The property's type as PHP spells it (``?string``, ``int|string``, ``App\\Enums\\Status``)."""
    types = [str(t) for t in spec.get("php_types") or []]
    if not types:
        return "mixed"
    nullable = type(None) in typing.get_args(hint) and "null" not in [t.lower() for t in types]
    if nullable and len(types) == 1:
        return "?" + types[0]
    return "|".join(types + (["null"] if nullable else []))


def check_value(value: Any, hint: Any, spec: Mapping[str, Any]) -> str | None:
    """Why PHP's typed property would refuse ``value`` (as ``unserialize()`` does: no coercion but
    ``int`` to ``float``), or None when it fits. ``hint``: the field's annotation, which mirrors the PHP
    type (see the module docstring)."""
    if hint is None or _fits(value, hint):
        return None
    if isinstance(value, PHPObject) and "iterable" in [str(t).lower() for t in spec.get("php_types") or []]:
        return None  # a Traversable object (a Collection) is iterable too
    shown = visible(repr(value))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"is {shown} ({_php_kind(value)}), not {php_type(spec, hint)}"


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list | tuple)
    if origin is dict:
        return isinstance(value, dict)
    if hint is bool:
        return type(value) is bool
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a form the generator does not write: not checked


def _php_kind(value: Any) -> str:
    """What PHP would call the value's type (``Cannot assign string to ...``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple | dict):
        return "array"
    if isinstance(value, enum.Enum):
        return getattr(type(value), "__php_class__", None) or type(value).__name__
    if isinstance(value, ModelRef):
        return type(value).__php_class__ or "ModelRef"
    return type(value).__name__


def _outgoing(value: Any, spec: Mapping[str, Any], job: str, collection_class: bool) -> Any:
    if isinstance(value, enum.Enum):
        php = getattr(type(value), "__php_class__", None) or getattr(type(value), "php_class", None)
        if not php:
            raise TypedJobError(f"{job}: {spec['name']} holds {value!r}, an enum with no PHP class")
        return PHPEnum(php, value.name)
    if isinstance(value, ModelRef):
        php = type(value).__php_class__
        if not php:
            raise TypedJobError(f"{job}: {spec['name']} holds a ModelRef with no PHP model class")
        return ModelIdentifier(php, value.id, list(value.relations), value.connection).to_php(
            include_collection_class=collection_class)
    if isinstance(value, ModelCollection):
        return ModelIdentifier(value.class_name, list(value.ids), list(value.relations), value.connection,
                               value.collection_class).to_php(include_collection_class=collection_class)
    if isinstance(value, datetime):
        names = [t for t in spec.get("php_types", []) if t in DATE_CLASSES]
        return from_datetime(value, names[0] if names else "Illuminate\\Support\\Carbon")
    if isinstance(value, tuple):
        return list(value)
    if type(value) is int and "float" in spec.get("php_types", []) and "int" not in spec.get("php_types", []):
        return float(value)  # PHP's float property holds the int as a float
    return value


# -- handlers annotated with a generated class ------------------------------------------------------------


def typed_class_of(func: Callable[..., Any]) -> type[Any] | None:
    """The generated class a handler's first parameter is annotated with, or None."""
    annotation = _first_annotation(func)
    return annotation if is_typed_job(annotation) else None


def _first_annotation(func: Callable[..., Any]) -> Any:
    """The resolved annotation of a handler's first parameter (``inspect.Parameter.empty`` when there is none,
    or when a string annotation does not resolve: said once)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return inspect.Parameter.empty
    if not params:
        return inspect.Parameter.empty
    annotation = params[0].annotation
    if isinstance(annotation, str):
        try:
            annotation = typing.get_type_hints(func).get(params[0].name, inspect.Parameter.empty)
        except Exception as exc:  # an annotation that does not resolve: said once, then not a typed handler
            log.warning("handler %s: the annotation %r of its first parameter cannot be resolved (%s: %s); "
                        "if it is a typed job class, import it at module level: the handler gets the PHP object "
                        "as it is", getattr(func, "__qualname__", func), annotation, type(exc).__name__, exc)
            return inspect.Parameter.empty
    return annotation


def handler_annotation_problem(job_name: str, func: Callable[..., Any]) -> str | None:
    """Why a class job's handler cannot take the command as its first parameter is annotated, or None.

    It may be unannotated, ``Any``, ``object``, :class:`laraq.protocol.serializer.PHPObject` (the command
    as PHP restored it) or the generated class of ``job_name`` itself; a generated class of another job,
    or any other type, is the handler's own mistake, said when it is registered."""
    annotation = _first_annotation(func)
    if annotation is inspect.Parameter.empty or annotation in (Any, object, PHPObject):
        return None
    where = f"handler {getattr(func, '__qualname__', func)} of {job_name}"
    if is_typed_job(annotation):
        if annotation.__php_class__.lstrip("\\") == job_name:
            return None
        return (f"{where}: its first parameter is annotated {annotation.__name__}, the typed class of "
                f"{annotation.__php_class__}: annotate it with the class generated for {job_name}")
    shown = getattr(annotation, "__qualname__", None) or repr(annotation)
    return (f"{where}: its first parameter is annotated {shown}, which the command never is: annotate it with "
            f"the class laraq schema --python generated for {job_name}, PHPObject or Any")


def typed_handler(name: str, func: Callable[..., Any], cls: type[Any], is_async: bool) -> Callable[..., Any]:
    """``func`` called with an instance of ``cls`` in place of the command."""
    if is_async:
        @functools.wraps(func)
        async def run_async(command: Any, job: Any, *rest: Any) -> Any:
            return await func(from_command(cls, command, name), job, *rest)

        return run_async

    @functools.wraps(func)
    def run(command: Any, job: Any, *rest: Any) -> Any:
        return func(from_command(cls, command, name), job, *rest)

    return run


# -- the generated module ---------------------------------------------------------------------------------

_SCALARS = {"int": "int", "float": "float", "string": "str", "bool": "bool", "false": "bool", "true": "bool",
            "array": "list[Any] | dict[Any, Any]", "iterable": "list[Any] | dict[Any, Any]", "null": "None"}
_ANY = {"mixed", "object", "callable", "self", "static"}


def _ident(text: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in text) or "_"
    if out[0].isdigit():
        out = "_" + out
    return out + "_" if keyword.iskeyword(out) else out


def fingerprint(data: Mapping[str, Any]) -> str:
    """SHA-256 over the exported classes (jobs and enums) a module was written from."""
    canon = json.dumps({"jobs": data.get("jobs") or {}, "enums": data.get("enums") or {}}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()


class _Names:
    """Python names for PHP classes: the basename, namespaced when two share it."""

    def __init__(self, classes: Iterable[str], suffix: dict[str, str]) -> None:
        self.map: dict[str, str] = {}
        taken: set[str] = set()
        for cls in classes:
            base = _ident(cls.rsplit("\\", 1)[-1]) + suffix.get(cls, "")
            name = base if base not in taken else _ident(cls.replace("\\", "_")) + suffix.get(cls, "")
            taken.add(name)
            self.map[cls] = name


def _annotation(prop: Mapping[str, Any], kinds: Mapping[str, str], names: _Names) -> tuple[str, str | None]:
    """(Python annotation, kind) of one property."""
    types = [str(t) for t in prop.get("types") or []]
    if not types or any(t.lower() in _ANY for t in types):
        return "Any", None
    parts: list[str] = []
    kind_of: list[str] = []
    for t in types:
        low = t.lower()
        if low in _SCALARS:
            parts.append(_SCALARS[low])
            kind_of.append("array" if low in ("array", "iterable") else "scalar")
            continue
        kind = kinds.get(t, "object")
        kind_of.append(kind)
        if kind in ("enum", "model"):
            parts.append(names.map[t])
        elif kind == "collection":
            parts.append("ModelCollection")
        elif kind == "date":
            parts.append("datetime")
        else:
            return "Any", None
    if prop.get("nullable") and "None" not in parts:
        parts.append("None")
    special = [k for k in kind_of if k not in ("scalar",)]
    return " | ".join(dict.fromkeys(parts)), special[0] if special else None


def _literal(value: Any, kind: str | None, names: _Names) -> str | None:
    """Python source for a PHP default, or None when Python cannot spell it (the field is UNSET)."""
    if value is None or isinstance(value, bool | int | str) or type(value) is float:
        return repr(value)
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, PHPEnum) and value.class_name in names.map:
        return f"{names.map[value.class_name]}.{value.case}"
    if isinstance(value, list):
        value = dict(enumerate(value))
    if isinstance(value, dict) and all(isinstance(v, bool | int | str | float | type(None)) for v in value.values()):
        if all(k == i and type(k) is int for i, k in enumerate(value)):
            return f"dataclasses.field(default_factory=lambda: {list(value.values())!r})"
        return f"dataclasses.field(default_factory=lambda: {dict(value)!r})"
    return None


def generate_module(data: Mapping[str, Any], *, source: str = "") -> str:
    """The Python module of typed classes for ``laraq schema``'s JSON (see the module docstring)."""
    jobs: Mapping[str, Any] = data.get("jobs") or {}
    enums: Mapping[str, Mapping[str, Any]] = data.get("enums") or {}
    kinds: dict[str, str] = {str(k): str(v) for k, v in (data.get("kinds") or {}).items()}
    for name in enums:
        kinds.setdefault(name, "enum")
    models = sorted(k for k, v in kinds.items() if v == "model")
    names = _Names([*sorted(enums), *models, *sorted(jobs)], {m: "Ref" for m in models})
    lines = [
        f'"""Typed job classes of the Laravel app{" at " + source if source else ""} (Laravel '
        f'{data.get("laravel", "?")}), written by `laraq schema --python`.',
        "",
        "Do not edit: regenerate it when the PHP classes change (laraq doctor and the worker's banner say so).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import dataclasses",
        "import enum",
        "from datetime import datetime",
        "from typing import Any, ClassVar",
        "",
        "from laraq.bus.typed import UNSET, ModelCollection, ModelRef",
        "",
        "__all__ = [" + ", ".join(repr(names.map[c]) for c in [*sorted(enums), *models, *sorted(jobs)]) + "]",
        "",
        f"__laraq_fingerprint__ = {fingerprint(data)!r}",
        "#: the app's directory: where the relative source paths below are",
        f"__laraq_app__ = {source!r}",
        "#: PHP class -> (source file, its SHA-256 when this module was written)",
        "__laraq_sources__: dict[str, tuple[str, str]] = " + pprint.pformat(
            {k: (v["path"], v["sha256"]) for k, v in sorted((data.get("sources") or {}).items()) if v}, width=110),
    ]
    for name in sorted(enums):
        lines += ["", "", f"class {names.map[name]}(enum.Enum):", f"    __php_class__ = {name!r}", ""]
        for case, value in enums[name].items():
            lines.append(f"    {_ident(case)} = {value!r}")
    connections = data.get("connections") or {}
    for name in models:
        lines += ["", "", "@dataclasses.dataclass(frozen=True)", f"class {names.map[name]}(ModelRef):",
                  f"    __php_class__: ClassVar[str] = {name!r}"]
        if connections.get(name) is not None:  # what a fetched model's identifier holds
            lines += ["", f"    connection: str | None = {str(connections[name])!r}"]
    for name in sorted(jobs):
        lines += _job_class(name, jobs[name], kinds, names)
    return "\n".join(lines) + "\n"


def _job_class(name: str, spec: Mapping[str, Any], kinds: Mapping[str, str], names: _Names) -> list[str]:
    fields: dict[str, dict[str, Any]] = {}
    framework: list[str] = []
    body: list[str] = []
    for prop in spec.get("properties") or []:
        if prop.get("framework"):
            framework.append(prop["name"])
            continue
        py = _ident(prop["name"])
        annotation, kind = _annotation(prop, kinds, names)
        fields[py] = {"name": prop["name"], "visibility": prop.get("visibility", "public"), "kind": kind,
                      "php_types": list(prop.get("types") or [])}
        if prop.get("initialized"):
            literal = _literal(_default(prop.get("default")), kind, names)
        elif prop.get("promoted") and prop.get("ctor_default") is not None:
            literal = _literal(_default(prop["ctor_default"]), kind, names)
        elif prop.get("promoted"):
            literal = ""  # the constructor requires it
        else:
            literal = None  # typed, no default, may be left unset
        note = "" if prop.get("visibility", "public") == "public" else f"  # {prop['visibility']} in PHP"
        if literal == "":
            body.append(f"    {py}: {annotation}{note}")
        else:
            body.append(f"    {py}: {annotation} = {literal if literal is not None else 'UNSET'}{note}")
    def block(value: Any) -> str:
        return pprint.pformat(value, width=100, sort_dicts=False).replace("\n", "\n        ")

    return [
        "", "", "@dataclasses.dataclass(kw_only=True)", f"class {names.map[name]}:",
        f"    __php_class__: ClassVar[str] = {name!r}",
        "",
        *body,
        "",
        "    # what laraq needs to convert and dispatch it (the PHP property of each field, the exported schema)",
        "    __laraq_fields__: ClassVar[dict[str, dict[str, Any]]] = (\n        " + block(fields) + ")",
        f"    __laraq_framework__: ClassVar[tuple[str, ...]] = {tuple(framework)!r}",
        "    __laraq_schema__: ClassVar[dict[str, Any]] = (\n        " + block(dict(spec)) + ")",
    ]


# -- has the PHP app changed since? ------------------------------------------------------------------------


def drift(classes: Iterable[type[Any]], base: str | Path | None = None) -> list[str]:
    """One line per PHP class whose source changed (or vanished) since its typed module was written.

    ``base``: the app's directory, for sources recorded relative to it (default: the module's
    ``__laraq_app__``, where ``laraq schema`` ran).
    Sources that cannot be found at all (a deployment without the PHP code) are not reported."""
    out: list[str] = []
    seen: set[str] = set()
    for cls in classes:
        module = __import__(cls.__module__, fromlist=["_"])
        sources: Mapping[str, tuple[str, str]] = getattr(module, "__laraq_sources__", {}) or {}
        if cls.__module__ in seen:
            continue
        seen.add(cls.__module__)
        root = base if base is not None else getattr(module, "__laraq_app__", "") or "."
        for php_class, (path, sha) in sorted(sources.items()):
            file = Path(path) if Path(path).is_absolute() else Path(root) / path
            try:
                now = hashlib.sha256(file.read_bytes()).hexdigest()
            except FileNotFoundError:
                continue
            except OSError as exc:
                out.append(f"typed module {cls.__module__}: cannot read {file} ({exc})")
                continue
            if now != sha:
                out.append(f"{php_class} changed since {cls.__module__} was written: regenerate it with "
                           "laraq schema --from APP --python")
    return out


def schema_of(cls: type[Any]) -> Any:
    """The :class:`laraq.bus.schema.JobSchema` a generated class embeds."""
    jobs, _ = parse_schema({"jobs": {cls.__php_class__: cls.__laraq_schema__}})
    return jobs[cls.__php_class__]
