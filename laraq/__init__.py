"""laraq: Laravel's Redis queue, spoken natively by Python.

The names most programs need are importable from here; ARCHITECTURE.md maps every module.

* consume: :class:`App` (handler registry for ``laraq work --app module:app``), :class:`Job`;
* dispatch to PHP: :class:`Dispatcher`;
* the protocol: :class:`RedisQueue`, :class:`Payload`, :class:`LaravelVersion`;
* PHP values: :func:`loads` / :func:`dumps`, :class:`PHPObject`, :class:`PHPEnum`;
* settings: :class:`LaravelSettings` (a Laravel app's env / ``.env``).
"""

from laraq.app import App
from laraq.config import LaravelSettings
from laraq.dispatch import Dispatcher
from laraq.job import Job
from laraq.payload import Payload, PayloadError
from laraq.queue import RedisQueue, ReservedJob
from laraq.rate_limiter import Limit
from laraq.serializer import PHPEnum, PHPObject, PHPSerializeError, dumps, loads
from laraq.versions import DEFAULT_VERSION, LaravelVersion

__all__ = [
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
__version__ = "0.1.0"
