"""laraq: Laravel's Redis queue, spoken natively by Python.

The names most programs need are importable from here; ARCHITECTURE.md maps every module.

* consume: :class:`App` (handler registry for ``laraq work --app module:app``), :class:`Job`;
* dispatch to PHP: :class:`Dispatcher`;
* the protocol: :class:`RedisQueue`, :class:`Payload`, :class:`LaravelVersion`;
* PHP values: :func:`loads` / :func:`dumps`, :class:`PHPObject`, :class:`PHPEnum`;
* settings: :class:`LaravelSettings` (a Laravel app's env / ``.env``).

Each name is imported from its module the first time it is read (PEP 562), so ``import laraq`` (and
with it every ``laraq.x`` import and the ``laraq`` command) loads only what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from laraq._version import __version__

if TYPE_CHECKING:
    from laraq.app import App
    from laraq.bus.dispatch import Dispatcher
    from laraq.bus.job import Job
    from laraq.bus.rate_limiter import Limit
    from laraq.config.settings import LaravelSettings
    from laraq.protocol.payload import Payload, PayloadError
    from laraq.protocol.queue import RedisQueue, ReservedJob
    from laraq.protocol.serializer import PHPEnum, PHPObject, PHPSerializeError, dumps, loads
    from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "DEFAULT_VERSION": "laraq.protocol.versions",
    "App": "laraq.app",
    "Dispatcher": "laraq.bus.dispatch",
    "Job": "laraq.bus.job",
    "LaravelSettings": "laraq.config.settings",
    "LaravelVersion": "laraq.protocol.versions",
    "Limit": "laraq.bus.rate_limiter",
    "PHPEnum": "laraq.protocol.serializer",
    "PHPObject": "laraq.protocol.serializer",
    "PHPSerializeError": "laraq.protocol.serializer",
    "Payload": "laraq.protocol.payload",
    "PayloadError": "laraq.protocol.payload",
    "RedisQueue": "laraq.protocol.queue",
    "ReservedJob": "laraq.protocol.queue",
    "dumps": "laraq.protocol.serializer",
    "loads": "laraq.protocol.serializer",
}

__all__ = [
    "__version__",
    "DEFAULT_VERSION",
    "App",
    "Dispatcher",
    "Job",
    "LaravelSettings",
    "LaravelVersion",
    "Limit",
    "PHPEnum",
    "PHPObject",
    "PHPSerializeError",
    "Payload",
    "PayloadError",
    "RedisQueue",
    "ReservedJob",
    "dumps",
    "loads",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'laraq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


