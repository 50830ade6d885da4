"""Eloquent models and backed enums in a command, restored before the handler runs, as PHP's
``unserialize`` does it for ``Illuminate\\Queue\\SerializesModels`` (``SerializesAndRestoresModelIdentifiers``)
and for PHP 8.1 backed enums.

``SerializesModels`` writes a ``ModelIdentifier`` (class, key, connection) in place of each model
property of a job. When PHP unserializes the job it loads the row again (``firstOrFail``, no global
scopes, so soft-deleted rows count) and a missing row throws ``ModelNotFoundException``
(``No query results for model [App\\Models\\Post].``) before ``handle()`` is reached; the job is then
failed at once, or deleted silently when the class says ``$deleteWhenMissingModels`` (13 carries it in
the payload; for 8 and 12 declare it: ``@app.handler(..., delete_when_missing_models=True)``).
A collection loads the rows it still finds, in the order of its keys; missing ones are dropped.

laraq does the same through the app's own ``DB_*`` settings (the connection named by the identifier,
else ``DB_CONNECTION``; SQLite, MySQL/MariaDB, PostgreSQL with :func:`laraq.stores.database.connect_database`).
The handler gets a :class:`Model`: the row's columns as attributes and items. The table is Laravel's
default (``snake_case`` plural of the class basename) unless declared with :meth:`laraq.app.App.model`.
Relations (``$relations``) are not loaded.

A backed enum case is serialized as ``E:`` with its class and case name only; declare the enum with
:meth:`laraq.app.App.enum` and the handler gets a Python :class:`enum.Enum` member with the backing
``value`` (undeclared enums stay :class:`~laraq.protocol.serializer.PHPEnum`).
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from laraq.protocol.serializer import (
    MODEL_IDENTIFIER_CLASS,
    PHPEnum,
    PHPObject,
    PHPReference,
    deref,
    is_model_identifier,
)
from laraq.stores.batches import BatchTable
from laraq.stores.database import dialect_of, locked_cursor

__all__ = [
    "Model",
    "ModelLoader",
    "ModelNotFoundError",
    "ModelSchema",
    "default_table",
    "make_enum",
    "restore_command",
]


class ModelNotFoundError(LookupError):
    """Laravel's ``ModelNotFoundException``, with its text (shown in ``failed_jobs``)."""

    php_class = "Illuminate\\Database\\Eloquent\\ModelNotFoundException"

    def __init__(self, model_class: str) -> None:
        self.model_class = model_class
        super().__init__(f"No query results for model [{model_class}].")


@dataclass(frozen=True)
class ModelSchema:
    """Where a model class lives: its table, primary key column and (optional) DB connection name."""

    class_name: str
    table: str
    key: str = "id"
    connection: str | None = None


class Model(Mapping[str, Any]):
    """A row loaded for a ``ModelIdentifier``: columns as items and attributes (``post.title``)."""

    __slots__ = ("_attributes", "class_name", "key_name", "table")

    def __init__(self, class_name: str, attributes: dict[str, Any], *, table: str, key_name: str = "id") -> None:
        self.class_name = class_name
        self.table = table
        self.key_name = key_name
        self._attributes = attributes

    @property
    def key(self) -> Any:
        return self._attributes.get(self.key_name)

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self._attributes)

    def __getitem__(self, name: str) -> Any:
        return self._attributes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._attributes)

    def __len__(self) -> int:
        return len(self._attributes)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._attributes[name]
        except KeyError:
            raise AttributeError(f"{self.class_name} has no attribute {name!r}") from None

    def __repr__(self) -> str:
        return f"<{self.class_name} {self.key_name}={self.key!r}>"


# -- Laravel's default table name ----------------------------------------------------------------

_UNCOUNTABLE = frozenset({
    "audio", "bison", "cattle", "chassis", "compensation", "coreopsis", "data", "deer", "education", "emoji",
    "equipment", "evidence", "feedback", "firmware", "fish", "furniture", "gold", "hardware", "information",
    "jedi", "kin", "knowledge", "love", "metadata", "money", "moose", "news", "nutrition", "offspring", "plankton",
    "pokemon", "police", "rain", "recommended", "related", "rice", "series", "sheep", "software", "species",
    "swine", "traffic", "wheat",
})
_IRREGULAR = {
    "person": "people", "man": "men", "woman": "women", "child": "children", "mouse": "mice", "goose": "geese",
    "foot": "feet", "tooth": "teeth", "ox": "oxen", "leaf": "leaves", "life": "lives", "wife": "wives",
    "knife": "knives", "half": "halves", "criterion": "criteria", "analysis": "analyses", "quiz": "quizzes",
    "index": "indices", "matrix": "matrices", "vertex": "vertices", "hero": "heroes", "potato": "potatoes",
    "tomato": "tomatoes", "cactus": "cacti", "focus": "foci", "fungus": "fungi", "octopus": "octopuses",
    "thesis": "theses", "crisis": "crises", "datum": "data", "medium": "media", "movie": "movies",
    "virus": "viri", "shelf": "shelves", "wolf": "wolves", "calf": "calves", "loaf": "loaves", "echo": "echoes",
    "axis": "axes", "bacterium": "bacteria", "stimulus": "stimuli", "syllabus": "syllabi", "alumnus": "alumni",
}


def _plural(word: str) -> str:
    lower = word.lower()
    if lower in _UNCOUNTABLE:
        return word
    if lower in _IRREGULAR:
        plural = _IRREGULAR[lower]
    elif re.search(r"[^aeiou]y$", lower):
        plural = lower[:-1] + "ies"
    elif re.search(r"(s|x|z|ch|sh)$", lower):
        plural = lower + "es"
    else:
        plural = lower + "s"
    if word.isupper():
        return plural.upper()
    return word[0] + plural[1:] if word[:1].isupper() else plural


def default_table(class_name: str) -> str:
    """Laravel's ``Model::getTable()`` default: ``snake(pluralStudly(class_basename))``, for common English
    words (declare anything else with :meth:`laraq.app.App.model`)."""
    base = class_name.rsplit("\\", 1)[-1]
    parts = re.split(r"(?<=.)(?=[A-Z])", base)
    studly = "".join(parts[:-1]) + _plural(parts[-1])
    return studly if studly.islower() else re.sub(r"(.)(?=[A-Z])", r"\1_", studly).lower()


# -- loading rows -------------------------------------------------------------------------------------


class ModelLoader:
    """Loads model rows through the app's database connections (opened on first use, kept, shared by
    the worker's threads one statement at a time)."""

    def __init__(self, connect: Callable[[str | None], Any], schemas: Mapping[str, ModelSchema] | None = None,
                 batching: BatchTable | None = None) -> None:
        #: ``connect(name)`` opens a DB-API connection for a Laravel connection name (None: the default)
        self._connect = connect
        #: the app's ``queue.batching`` (:mod:`laraq.stores.batches` reads and writes batch rows there)
        self.batching = batching or BatchTable()
        self.schemas: Mapping[str, ModelSchema] = schemas if schemas is not None else {}
        self._conns: dict[str | None, tuple[Any, threading.Lock]] = {}
        self._guard = threading.Lock()

    def schema(self, class_name: str) -> ModelSchema:
        found = self.schemas.get(class_name.lstrip("\\"))
        return found if found is not None else ModelSchema(class_name, default_table(class_name))

    def _conn(self, name: str | None) -> tuple[Any, threading.Lock]:
        with self._guard:
            entry = self._conns.get(name)
            if entry is None:
                entry = self._conns[name] = (self._connect(name), threading.Lock())
            return entry

    def connection(self, name: str | None) -> tuple[Any, threading.Lock]:
        """The DB-API connection of a Laravel connection name and the lock that serializes its use."""
        return self._conn(name)

    def select(self, connection: str | None, table: str, column: str, values: list[Any]) -> list[dict[str, Any]]:
        """``SELECT * FROM table WHERE column IN (values)`` on a Laravel connection (None: the default)."""
        conn, lock = self._conn(connection)
        dialect = dialect_of(conn)

        def q(ident: str) -> str:
            return "`" + ident.replace("`", "``") + "`" if dialect == "mysql" else '"' + ident.replace('"', '""') + '"'

        ph = "?" if dialect == "sqlite" else "%s"
        sql = f"SELECT * FROM {q(table)} WHERE {q(column)} IN ({', '.join([ph] * len(values))})"
        try:
            with locked_cursor(conn, lock) as cur:
                cur.execute(sql, list(values))
                columns = [d[0] for d in cur.description]
                return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
        except Exception:
            with self._guard:  # a broken connection is opened again next time
                if self._conns.get(connection, (None,))[0] is conn:
                    del self._conns[connection]
            raise

    def rows(self, class_name: str, connection: str | None, ids: list[Any]) -> dict[Any, Model]:
        """The rows whose key is in ``ids``, by key."""
        schema = self.schema(class_name)
        out: dict[Any, Model] = {}
        for attrs in self.select(schema.connection or connection, schema.table, schema.key, ids):
            model = Model(class_name, attrs, table=schema.table, key_name=schema.key)
            out[_key(model.key)] = model
        return out


def _key(value: Any) -> Any:
    """Keys compare as PHP's loose array keys do: ``5`` and ``"5"`` are the same row."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value)


# -- restoring a command ------------------------------------------------------------------------------


def make_enum(class_name: str, cases: Mapping[str, str | int]) -> type[enum.Enum]:
    """A Python enum mirroring a PHP backed enum (``str`` or ``int`` mixin, so members compare with values)."""
    values = list(cases.values())
    if not values:
        raise ValueError(f"enum {class_name} declares no cases")
    if all(isinstance(v, str) for v in values):
        mixin: type = str
    elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        mixin = int
    else:
        raise ValueError(f"enum {class_name}: backing values are all strings or all integers, as in PHP")
    base = class_name.rsplit("\\", 1)[-1]
    made = enum.Enum(base, dict(cases), type=mixin)  # type: ignore[misc]
    made.php_class = class_name  # type: ignore[attr-defined]
    made.__str__ = _value_text  # type: ignore[method-assign, assignment]
    return made


def _value_text(member: enum.Enum) -> str:
    """``str()`` of a PHP enum case: its backing value, as PHP's string interpolation of ``->value``."""
    return str(member.value)


def needs_restoring(command: Any, enums: Mapping[str, type[enum.Enum]], text: str | None = None) -> bool:
    """Does the command hold a model (a top-level property, where ``SerializesModels`` puts them) or a
    declared enum (anywhere; only searched when enums are declared)?

    ``text``: the command as serialized (not encrypted), when the caller has it: a model identifier's
    class name is then in it wherever the object is, so its absence answers "no" without a walk.
    """
    if not isinstance(command, PHPObject):
        return False
    if text is not None and not enums and MODEL_IDENTIFIER_CLASS not in text:
        return False
    values = [deref(v) for v in command._props.values()]
    if any(is_model_identifier(v) for v in values):
        return True
    return bool(enums) and any(_has_enum(v, enums, 0) for v in values)


def _has_enum(value: Any, enums: Mapping[str, type[enum.Enum]], depth: int) -> bool:
    if depth > 32:
        return False
    if isinstance(value, PHPEnum):
        return value.class_name in enums
    if isinstance(value, PHPObject):
        return any(_has_enum(deref(v), enums, depth + 1) for v in value._props.values())
    if isinstance(value, dict):
        return any(_has_enum(deref(v), enums, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_enum(deref(v), enums, depth + 1) for v in value)
    return False


def restore_command(command: PHPObject, loader: ModelLoader | None,
                    enums: Mapping[str, type[enum.Enum]]) -> PHPObject:
    """A copy of ``command`` with its model properties loaded and its declared enum cases valued.

    Raises :class:`ModelNotFoundError` for a missing single model, as ``firstOrFail`` does, and
    ``RuntimeError`` when a model is needed but no database is configured (``loader`` None).
    Only the command's own properties are models (``SerializesModels`` restores those); enums are
    valued anywhere in the object graph (PHP's ``unserialize`` does).
    """
    props: dict[Any, Any] = {}
    for name, raw in command._props.items():
        value = deref(raw)
        if is_model_identifier(value):
            props[name] = _load(value, loader)
        else:
            props[name] = raw if isinstance(raw, PHPReference) else _enums(value, enums, 0)
    return PHPObject(command.class_name, props)


def _load(identifier: PHPObject, loader: ModelLoader | None) -> Any:
    class_name = str(identifier.get("class") or "")
    ids = identifier.get("id")
    connection = identifier.get("connection")
    connection = connection if isinstance(connection, str) else None
    if isinstance(ids, dict):
        ids = list(ids.values())
    if isinstance(ids, list):  # an Eloquent collection
        if not class_name or not ids:
            return []
        if loader is None:
            raise RuntimeError(f"{class_name} models must be loaded, but no database is configured (DB_*)")
        found = loader.rows(class_name, connection, ids)
        return [found[_key(i)] for i in ids if _key(i) in found]
    if loader is None:
        raise RuntimeError(f"a {class_name} model must be loaded, but no database is configured (DB_*)")
    model = loader.rows(class_name, connection, [ids]).get(_key(ids))
    if model is None:
        raise ModelNotFoundError(class_name)
    return model


def _enums(value: Any, enums: Mapping[str, type[enum.Enum]], depth: int) -> Any:
    if not enums or depth > 32:
        return value
    if isinstance(value, PHPEnum):
        declared = enums.get(value.class_name)
        if declared is None:
            return value
        try:
            return declared[value.case]
        except KeyError:
            raise ValueError(f"{value.class_name} has no case {value.case!r} in the enum declared to laraq "
                             f"(cases: {', '.join(declared.__members__)})") from None
    if isinstance(value, PHPObject):
        return PHPObject(value.class_name, {k: _enums(deref(v), enums, depth + 1) for k, v in value._props.items()})
    if isinstance(value, dict):  # PHPArray stays PHPArray
        return type(value)({k: _enums(deref(v), enums, depth + 1) for k, v in value.items()})
    if isinstance(value, list):
        return [_enums(deref(v), enums, depth + 1) for v in value]
    return value


# -- the worker's step ------------------------------------------------------------------------------


def prepare(job: Any, loader: ModelLoader | None, enums: Mapping[str, type[enum.Enum]], *,
            php_settles: bool) -> str | None:
    """Restore ``job.command`` for its handler (before it runs). Returns why the job must go back to
    PHP instead, or None. A missing model (or a database error) is kept in ``job.restore_error`` for
    the worker to settle after its max-attempts check, where PHP meets it.

    ``php_settles``: the job has a unique lock or a batch, which Laravel 12+ settles for a missing
    model from PHP-only state (the lock via Context, the batch as a success): PHP gets such a job.
    """
    command = job.command
    payload = job.payload
    text = None if payload.is_encrypted_command else payload.command
    if not needs_restoring(command, enums, text):
        return None
    try:
        job.command = restore_command(command, loader, enums)
    except ModelNotFoundError as exc:
        if php_settles:
            return f"its {exc.model_class} model is missing and PHP settles the unique lock or batch of such a job"
        job.restore_error = exc
    except RuntimeError as exc:  # no database configured: PHP loads it
        return str(exc)
    except ValueError as exc:  # an enum case laraq's declaration lacks
        return str(exc)
    except Exception as exc:  # the database failed: a job exception, as PHP's QueryException would be
        job.restore_error = exc
    return None


def delete_when_missing(job: Any, schema: Any = None) -> bool:
    """The class's ``$deleteWhenMissingModels``: the handler's declaration, else the payload's (13+), else
    the class's exported schema (its property default or 12's ``#[DeleteWhenMissingModels]``)."""
    declared = getattr(job.handler, "delete_when_missing_models", None)
    if declared is not None:
        return bool(declared)
    if job.payload.decoded.get("deleteWhenMissingModels"):
        return True
    if schema is not None:
        if "Illuminate\\Queue\\Attributes\\DeleteWhenMissingModels" in schema.attributes:
            return True
        return bool(schema.defaults().get("deleteWhenMissingModels"))
    return False


def settle(job: Any, schema: Any) -> None:
    """After the max-attempts check, for a job whose restore failed: a missing model deletes the job
    (``deleteWhenMissingModels``) or fails it at once and raises; a database error is raised as a job
    exception like any other (released with its backoff)."""
    error = job.restore_error
    if not isinstance(error, ModelNotFoundError):
        raise error
    if delete_when_missing(job, schema):
        job.delete()
        return
    job.fail(error)
    raise error
