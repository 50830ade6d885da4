"""The worker: ``php artisan queue:work``'s loop (``Illuminate\\Queue\\Worker``), built from objects.

:mod:`.worker` is the loop and its stop rules; it calls a reservation source (:mod:`.reservation`,
with :mod:`.leases`), an executor (:mod:`.execution`, tasks started by :mod:`.eager`, the event loop in
:mod:`.bridge`, a running job in :mod:`.running`) and the job lifecycle (:mod:`.lifecycle`), all over
one :mod:`.context`, and tells listeners what happened (:mod:`.events`, the console lines in :mod:`.output` and
:mod:`.linesink`). :mod:`.startup` opens what a worker needs, :mod:`.prefork` supervises worker
processes, :mod:`.exitcodes` turns a fault into one line and an exit code; :mod:`.timers` says how long
an idle worker sleeps. The loop's names below are imported when first read.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.worker.worker import (
        EXIT_ERROR,
        EXIT_MEMORY_LIMIT,
        EXIT_SUCCESS,
        EXIT_USAGE,
        CacheLike,
        JobExecutor,
        ReservationSource,
        UnhandledPolicy,
        Worker,
        WorkerOptions,
    )

__all__ = [
    "EXIT_ERROR",
    "EXIT_MEMORY_LIMIT",
    "EXIT_SUCCESS",
    "EXIT_USAGE",
    "CacheLike",
    "JobExecutor",
    "ReservationSource",
    "UnhandledPolicy",
    "Worker",
    "WorkerOptions",
]


def __getattr__(name: str) -> Any:
    """The loop's names, imported on first use: ``laraq work`` imports :mod:`.prefork` (and ``laraq`` its
    error texts from :mod:`.exitcodes`) without loading the whole worker (start-up, issue 33)."""
    if name not in __all__:
        raise AttributeError(f"module 'laraq.worker' has no attribute {name!r}")
    from laraq.worker import worker  # start-up: see above

    value = getattr(worker, name)
    globals()[name] = value
    return value
