"""laraq: Laravel's Redis queue, spoken natively by Python.

The names most programs need are importable from here; ARCHITECTURE.md maps every module.

* consume: :class:`App` (handler registry for ``laraq work --app module:app``), :class:`Job`;
* dispatch to PHP: :class:`Dispatcher`;
* the protocol: :class:`RedisQueue`, :class:`Payload`, :class:`LaravelVersion`;
* PHP values: :func:`loads` / :func:`dumps`, :class:`PHPObject`, :class:`PHPEnum`;
* settings: :class:`LaravelSettings` (a Laravel app's env / ``.env``).
"""

from laraq import _moved
from laraq._version import __version__
from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.bus.job import Job
from laraq.bus.rate_limiter import Limit
from laraq.config.settings import LaravelSettings
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.queue import RedisQueue, ReservedJob
from laraq.protocol.serializer import PHPEnum, PHPObject, PHPSerializeError, dumps, loads
from laraq.protocol.versions import DEFAULT_VERSION, LaravelVersion

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

_moved.install()
