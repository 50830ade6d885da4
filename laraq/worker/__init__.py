"""The worker: ``php artisan queue:work``'s loop (``Illuminate\\Queue\\Worker``), built from objects.

:mod:`.worker` is the loop and its stop rules; it calls a reservation source (:mod:`.reservation`,
with :mod:`.leases`), an executor (:mod:`.execution`, tasks started by :mod:`.eager`, the event loop in
:mod:`.bridge`, a running job in :mod:`.running`) and the job lifecycle (:mod:`.lifecycle`), all over
one :mod:`.context`, and tells listeners what happened (:mod:`.events`, the console lines in :mod:`.output` and
:mod:`.linesink`). :mod:`.startup` opens what a worker needs, :mod:`.prefork` supervises worker
processes, :mod:`.exitcodes` turns a fault into one line and an exit code.
"""

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
