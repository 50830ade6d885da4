r"""The handler registry: which Python function runs which Laravel job.

::

    app = laraq.App()

    @app.handler("App\\Jobs\\GenerateReport")          # a class-based (ShouldQueue) job
    def generate(command, job):                         # command: the unserialized PHP object
        render(command.document, command.options)

    @app.handler("App\\Handlers\\Foo@bar")             # a string job: Queue::push("App\\Handlers\\Foo@bar", $data)
    async def foo_bar(data, job):                       # async handlers run on the worker's event loop
        ...

    @app.failed("App\\Jobs\\GenerateReport")           # the job's failed() method: called once, on failure
    def report_failed(command, job, exc): ...

    @app.schedule("*/5 * * * *", tz="Europe/Berlin", catch_up="once")   # a recurring Python function
    def tidy(): ...

    app.schedule_job("App\\Jobs\\Report", {"kind": "daily"}, cron="0 6 * * *", queue="reports")

    # the twin of PHP's RateLimiter::for('backups', fn ($job) => Limit::perMinute(10)->by($job->user->id)),
    # so jobs carrying RateLimited('backups') run in Python and share PHP's budget
    app.rate_limiter("backups", per_minute=10, by=lambda command, job: command.user.id)

Schedule entries are fired by :mod:`laraq.schedule.scheduler` (``laraq work --schedule`` / ``laraq schedule work``).

A payload is matched the way Laravel resolves the class that runs it: for object jobs
(``Illuminate\\Queue\\CallQueuedHandler@call``) by ``data.commandName``, then ``displayName``; for
string jobs by the ``job`` string (``Class@method``), then by the class alone when the method is the
default ``fire``. Names are compared without a leading backslash. A string job's data is never read for
a class name: ``commandName`` and ``displayName`` are trusted only when ``job`` is
``CallQueuedHandler@call``, as in Laravel, so a user-keyed array pushed as a string job cannot make laraq
treat it as a serialized command (``compat-docs/security.md``).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from laraq.bus.handler_middleware import compose
from laraq.bus.handlers import FailedFunc, Handler, HandlerFunc
from laraq.bus.models import ModelSchema, default_table, make_enum
from laraq.bus.rate_limiter import LimiterFunc, named_limiter
from laraq.bus.schema import JobSchema, declared_schema, handler_problems, load_schema_file
from laraq.bus.typed import (
    HandlerAnnotationError,
    drift,
    handler_annotation_problem,
    typed_class_of,
    typed_handler,
)
from laraq.protocol.payload import Payload, PayloadError
from laraq.schedule.entries import (
    CatchUp,
    FunctionTarget,
    JobTarget,
    as_timing,
    function_handler,
    function_job_name,
)
from laraq.schedule.entries import Entry as ScheduleEntry

if TYPE_CHECKING:
    from datetime import timedelta

__all__ = ["App", "Handler", "HandlerFunc", "FailedFunc"]

_NAME_TYPES = (str, type(None))


def _norm(name: str) -> str:
    return name.strip().lstrip("\\")


class App:
    """A registry of job handlers; ``laraq work --app module:app`` runs it."""

    def __init__(self, name: str = "laraq") -> None:
        self.name = name
        self._handlers: dict[str, Handler] = {}
        self._failed: dict[str, FailedFunc] = {}
        #: (job, commandName, displayName) -> handler or None: the lookup runs once per job shape
        self._resolved: dict[tuple[Any, Any, Any], Handler | None] = {}
        self._schedule: dict[str, ScheduleEntry] = {}
        #: model class -> where its rows are; PHP enum class -> Python enum (see :mod:`laraq.bus.models`)
        self.model_schemas: dict[str, ModelSchema] = {}
        self.enums: dict[str, type[enum.Enum]] = {}
        #: job class -> :class:`laraq.bus.schema.JobSchema` (what PHP's dispatch of it writes; see laraq.bus.schema)
        self.job_schemas: dict[str, JobSchema] = {}
        #: named rate limiters, twins of PHP's ``RateLimiter::for`` (see :mod:`laraq.bus.rate_limiter`)
        self.rate_limiters: dict[str, LimiterFunc] = {}
        #: job class -> the generated class its handler is annotated with (see :mod:`laraq.bus.typed`)
        self.typed_jobs: dict[str, type[Any]] = {}

    # -- registration ------------------------------------------------------------------------------

    def handler(self, job_name: str, *, unique: bool | str | None = None, php_failed: bool = False,
                delete_when_missing_models: bool | None = None,
                middleware: Sequence[Callable[..., Any]] = ()) -> Callable[[HandlerFunc], HandlerFunc]:
        """Decorator: run ``func`` for jobs named ``job_name`` (a class or ``Class@method``); ``middleware``:
        Python job middleware around it (see :mod:`laraq.bus.handler_middleware`)."""

        def decorate(func: HandlerFunc) -> HandlerFunc:
            self.register(job_name, func, unique=unique, php_failed=php_failed,
                          delete_when_missing_models=delete_when_missing_models, middleware=middleware)
            return func

        return decorate

    def register(self, job_name: str, func: HandlerFunc, *, unique: bool | str | None = None,
                 php_failed: bool = False, delete_when_missing_models: bool | None = None,
                 middleware: Sequence[Callable[..., Any]] = ()) -> Handler:
        """Register ``func`` for ``job_name``; a name can have only one handler."""
        name = _norm(job_name)
        if not name:
            raise ValueError("a handler needs a job class name such as 'App\\Jobs\\SendInvoice'")
        if name in self._handlers:
            raise ValueError(f"a handler for {name} is already registered")
        if not callable(func):
            raise TypeError(f"handler for {name} is not callable")
        kind: Literal["command", "string"] = "string" if "@" in name else "command"
        if unique not in (None, True, False, "until_processing"):
            raise ValueError(f"unique= for {name} is True, False, None or 'until_processing', not {unique!r}")
        is_async = inspect.iscoroutinefunction(func)
        problem = handler_annotation_problem(name, func) if kind == "command" else None
        if problem:
            raise HandlerAnnotationError(problem)
        typed = typed_class_of(func) if kind == "command" else None
        if typed is not None:  # the handler gets an instance of its generated class
            func = typed_handler(name, func, typed, is_async)
            self.typed_jobs[name] = typed
        if middleware:
            func = compose(name, func, middleware, is_async)
        handler = Handler(name, func, kind, is_async, unique, php_failed, delete_when_missing_models,
                          len(middleware))
        self._handlers[name] = handler
        self._resolved.clear()
        return handler

    def failed(self, job_name: str) -> Callable[[FailedFunc], FailedFunc]:
        """Decorator: call ``func(command_or_data, job, exc)`` when a job of ``job_name`` fails."""

        def decorate(func: FailedFunc) -> FailedFunc:
            self._failed[_norm(job_name)] = func
            return func

        return decorate

    def rate_limiter(self, name: str, func: LimiterFunc | None = None, *, per_second: int | None = None,
                     per_minute: int | None = None, per_hour: int | None = None, per_day: int | None = None,
                     by: Callable[[Any, Any], Any] | None = None) -> Any:
        """Declare the Python twin of PHP's ``RateLimiter::for(name, ...)``, so that jobs carrying
        ``RateLimited(name)`` run here and count in PHP's keys: ``per_minute=10, by=lambda command, job:
        command.user_id``, or ``func(command, job)`` returning a :class:`laraq.bus.rate_limiter.Limit`, a list
        of them or None (unlimited). Without ``func`` or ``per_*`` it is a decorator."""
        if func is None and by is None and all(v is None for v in (per_second, per_minute, per_hour, per_day)):
            def decorate(f: LimiterFunc) -> LimiterFunc:
                self.rate_limiter(name, f)
                return f

            return decorate
        self.rate_limiters[str(name)] = named_limiter(str(name), func, per_second=per_second,
                                                      per_minute=per_minute, per_hour=per_hour,
                                                      per_day=per_day, by=by)
        return self.rate_limiters[str(name)]

    # -- models and enums (see laraq.bus.models) -------------------------------------------------------

    def model(self, class_name: str, *, table: str | None = None, key: str = "id",
              connection: str | None = None) -> ModelSchema:
        """Declare where an Eloquent model's rows are (default: Laravel's table name, key ``id``, the
        connection the job serialized)."""
        name = _norm(class_name)
        schema = ModelSchema(name, table or default_table(name), key, connection)
        self.model_schemas[name] = schema
        return schema

    def enum(self, class_name: str, cases: dict[str, str | int]) -> type[enum.Enum]:
        """Declare a PHP backed enum (``{"Active": "active", ...}``); handlers get its Python members."""
        name = _norm(class_name)
        made = make_enum(name, cases)
        self.enums[name] = made
        return made

    def job_schema(self, class_name: str, *, properties: dict[str, Any] | None = None,
                   unique: bool | str | None = None, encrypt: bool = False, serializes_models: bool = False,
                   **settings: Any) -> JobSchema:
        """Declare a job class's defaults (``tries=3, backoff=[10, 60], unique=True, unique_for=3600``...),
        used when Python dispatches it (see :mod:`laraq.bus.schema`)."""
        schema = declared_schema(_norm(class_name), properties=properties, unique=unique, encrypt=encrypt,
                                 serializes_models=serializes_models, **settings)
        self.job_schemas[schema.class_name] = schema
        return schema

    def load_schema(self, path: str) -> None:
        """Load ``laraq schema --from APP``'s JSON: job classes (for dispatch) and backed enums."""
        jobs, enums = load_schema_file(path)
        self.job_schemas.update(jobs)
        for name, cases in enums.items():
            if name not in self.enums:
                self.enum(name, cases)

    def problems(self, version: Any = None) -> list[str]:
        """What the declared schemas say laraq cannot do for a registered handler (shown at ``--app``
        load; ``version``: the app's Laravel version, when known)."""
        return handler_problems(self.job_schemas, self._handlers, version) + drift(self.typed_jobs.values())

    # -- the schedule (see laraq.schedule.scheduler) ------------------------------------------------------------

    @property
    def schedule_entries(self) -> list[ScheduleEntry]:
        return list(self._schedule.values())

    def add_schedule_entry(self, entry: ScheduleEntry) -> ScheduleEntry:
        if entry.name in self._schedule:
            raise ValueError(f"a schedule entry named {entry.name} is already declared")
        self._schedule[entry.name] = entry
        return entry

    def schedule(self, cron: str | None = None, *, every: timedelta | int | None = None, tz: str = "UTC",
                 name: str | None = None, queue: str | None = None, catch_up: str | int = "skip", grace: int = 60,
                 overlap: bool = False, overlap_ttl: int = 86_400, offset: int = 0) -> Callable[[Any], Any]:
        """Decorator: run the function on a cron expression or an interval (queued on ``queue``)."""

        def decorate(func: Any) -> Any:
            entry_name = name or f"{func.__module__}.{func.__name__}"
            entry = ScheduleEntry(entry_name, as_timing(cron, every, tz, offset), FunctionTarget(func, queue),
                          CatchUp.parse(catch_up, grace), overlap, overlap_ttl)
            self.add_schedule_entry(entry)
            self.register(function_job_name(entry_name), function_handler(entry_name, func))
            return func

        return decorate

    def schedule_job(self, class_name: str, properties: dict[str, Any] | None = None, *, cron: str | None = None,
                     every: timedelta | int | None = None, tz: str = "UTC", name: str | None = None,
                     queue: str | None = None, connection: str | None = None, catch_up: str | int = "skip",
                     grace: int = 60, overlap: bool = False, overlap_ttl: int = 86_400, offset: int = 0,
                     **dispatch_options: Any) -> ScheduleEntry:
        """Dispatch a Laravel job on a schedule, with the payload ``laraq dispatch`` builds.

        ``dispatch_options`` are :meth:`laraq.bus.dispatch.Dispatcher.prepare_job`'s (``tries``,
        ``backoff``, ``protected``, ``private``, ``delay``, ``encrypt``, ...).
        """
        target = JobTarget(_norm(class_name), dict(properties or {}), queue, connection, dict(dispatch_options))
        entry_name = name or _norm(class_name).replace("\\", ".")
        entry = ScheduleEntry(entry_name, as_timing(cron, every, tz, offset), target, CatchUp.parse(catch_up, grace),
                      overlap, overlap_ttl)
        return self.add_schedule_entry(entry)

    # -- lookup ------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _norm(name) in self._handlers

    def candidates(self, payload: Payload) -> list[str]:
        """The names a payload may be registered under, most specific first."""
        try:
            job = payload.job
        except PayloadError:
            job = ""
        names: list[str] = []
        if payload.is_queued_command:
            names += [payload.command_name or "", payload.display_name or ""]
            job = ""  # the class runs, not CallQueuedHandler
        if job:
            names.append(job)
            cls, _, method = job.partition("@")
            if not method or method == "fire":
                names.append(cls)
        out: list[str] = []
        for n in names:
            n = _norm(n)
            if n and n not in out:
                out.append(n)
        return out

    def resolve(self, payload: Payload) -> Handler | None:
        """The handler for ``payload``, or ``None`` when Python has none (the unhandled policy applies)."""
        decoded = payload.decoded
        data = decoded.get("data")
        if isinstance(data, dict):
            shape = (decoded.get("job"), data.get("commandName"), decoded.get("displayName"))
        else:
            shape = (decoded.get("job"), None, decoded.get("displayName"))
        if type(shape[0]) is str and type(shape[1]) in _NAME_TYPES and type(shape[2]) in _NAME_TYPES:
            try:
                return self._resolved[shape]
            except KeyError:
                pass
        else:
            shape = None  # type: ignore[assignment]  # an odd payload: no caching
        found: Handler | None = None
        queued = payload.is_queued_command
        for name in self.candidates(payload):
            found = self._handlers.get(name)
            # a ``Class@method`` handler takes string jobs only; a class handler takes both (a string job
            # gets its data as the command, as PHP's ``fire($job, $data)`` does)
            if found is not None and (found.kind == "command" or not queued):
                break
            found = None
        if shape is not None:
            if len(self._resolved) >= 4096:
                self._resolved.clear()
            self._resolved[shape] = found
        return found

    def failed_callback(self, payload: Payload) -> FailedFunc | None:
        for name in self.candidates(payload):
            found = self._failed.get(name)
            if found is not None:
                return found
        return None


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (``attribute`` defaults to ``app``) and return the :class:`App`."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise ValueError(f"--app must look like 'package.module:app', got {spec!r}")
    # Like uvicorn and celery: the current directory is importable, so `--app myproject.jobs:app`
    # works from the project root even when laraq runs as an installed console script.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in (attr or "app").split("."):
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, App):
        obj = obj()
    if not isinstance(obj, App):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not a laraq.App")
    return obj
