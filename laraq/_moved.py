"""Where laraq's modules lived before they were grouped into subpackages, and the import hook that keeps
those paths working (``from laraq.dispatch import Dispatcher`` is ``laraq.bus.dispatch`` now).

An old path imports the very module object of the new one (so patching either patches both) and warns
once with :class:`DeprecationWarning`, naming the new path. ``laraq.worker`` and ``laraq.config`` kept
their names as packages that export the old modules' public names; ``laraq.production`` is now the
package of production pieces, and the old module's one function is ``laraq.production.listeners.attach_listeners``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

#: old module (under ``laraq.``) -> its new place
MOVED: dict[str, str] = {
    "versions": "protocol.versions",
    "serializer": "protocol.serializer",
    "phparray": "protocol.phparray",
    "phpjson": "protocol.phpjson",
    "encryption": "protocol.encryption",
    "payload": "protocol.payload",
    "lua": "protocol.lua",
    "queue": "protocol.queue",
    "routing": "protocol.routing",
    "listing": "protocol.listing",
    "sentinel": "config.sentinel",
    "cluster": "config.cluster",
    "cache": "stores.cache",
    "cache_stores": "stores.cache_stores",
    "failed": "stores.failed",
    "batches": "stores.batches",
    "job": "bus.job",
    "callqueued": "bus.callqueued",
    "handoff": "bus.handoff",
    "middleware": "bus.middleware",
    "handler_middleware": "bus.handler_middleware",
    "rate_limiter": "bus.rate_limiter",
    "models": "bus.models",
    "schema": "bus.schema",
    "dispatch": "bus.dispatch",
    "reservation": "worker.reservation",
    "leases": "worker.leases",
    "execution": "worker.execution",
    "lifecycle": "worker.lifecycle",
    "events": "worker.events",
    "output": "worker.output",
    "linesink": "worker.linesink",
    "startup": "worker.startup",
    "prefork": "worker.prefork",
    "exitcodes": "worker.exitcodes",
    "scheduler": "schedule.scheduler",
    "schedule_entries": "schedule.entries",
    "schedule_store": "schedule.store",
    "metrics": "production.metrics",
    "heartbeat": "production.heartbeat",
    "logs": "production.logs",
    "inspect": "ops.inspect",
    "migrate": "ops.migrate",
    "poison": "ops.poison",
    "doctor": "ops.doctor",
}


class _Alias:
    """Loads an old path by putting the new module in its place in ``sys.modules``. (A loader and a finder
    need only these methods; deriving from ``importlib.abc`` would import ``importlib.resources`` and
    more, about 5 ms of every start.)"""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        warnings.warn(f"{module.__name__} moved to {self.target}; import it from there", DeprecationWarning,
                      stacklevel=2)
        # the import system returns what sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _MovedFinder:
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.partition(".")
        if prefix != "laraq" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", _Alias("laraq." + MOVED[name])))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``laraq/__init__`` calls it)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
