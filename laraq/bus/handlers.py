"""The handler registry's contract: one registered handler (:class:`Handler`), and what the worker asks of
a registry (:class:`HandlerRegistry`). :class:`laraq.app.App` is the registry users build; the worker
only sees this interface, as Laravel's ``Worker`` sees the container through ``Job::fire``.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.bus.models import ModelSchema
    from laraq.bus.rate_limiter import LimiterFunc
    from laraq.bus.schema import JobSchema
    from laraq.protocol.payload import Payload

__all__ = ["FailedFunc", "Handler", "HandlerFunc", "HandlerRegistry"]

#: ``handle(command_or_data, job)``, plain or ``async``.
HandlerFunc = Callable[[Any, "Job"], Any] | Callable[[Any, "Job"], Awaitable[Any]]
#: ``failed(command_or_data, job, exception)``, plain or ``async``.
FailedFunc = Callable[[Any, "Job", BaseException], Any]



@dataclass(frozen=True)
class Handler:
    """One registered handler."""

    name: str
    func: HandlerFunc
    kind: Literal["command", "string"]
    is_async: bool
    #: The class is ``ShouldBeUnique`` (``True``), ``ShouldBeUniqueUntilProcessing`` (``"until_processing"``),
    #: not unique (``False``), or ``None``: unique when the command has a ``uniqueId`` property.
    #: See :mod:`laraq.bus.callqueued` for how the lock is released.
    unique: bool | str | None = None
    #: Also run the PHP class's ``failed()`` method (in PHP) when the job fails.
    php_failed: bool = False
    #: The class's ``$deleteWhenMissingModels``: a job whose model row is gone is deleted silently
    #: instead of failed (None: what the payload says, i.e. Laravel 13's ``deleteWhenMissingModels``).
    delete_when_missing_models: bool | None = None
    #: how many Python middleware wrap ``func`` (:mod:`laraq.bus.handler_middleware`)
    python_middleware: int = 0


class HandlerRegistry(Protocol):
    """What the worker needs of an app: the handler for a payload, its ``failed`` callback, and the
    app's declarations that shape a job (backed enums, job schemas, models, named rate limiters)."""

    enums: dict[str, type[enum.Enum]]
    job_schemas: dict[str, JobSchema]
    model_schemas: dict[str, ModelSchema]
    rate_limiters: dict[str, LimiterFunc]

    def resolve(self, payload: Payload) -> Handler | None: ...

    def failed_callback(self, payload: Payload) -> FailedFunc | None: ...
