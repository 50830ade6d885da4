"""The worker: ``php artisan queue:work``'s loop (``Illuminate\\Queue\\Worker``), built from objects.

:mod:`.worker` is the loop and its stop rules; it calls a reservation source (:mod:`.reservation`,
with :mod:`.leases`), an executor (:mod:`.execution`) and the job lifecycle (:mod:`.lifecycle`), and
tells listeners what happened (:mod:`.events`, the console lines in :mod:`.output` and
:mod:`.linesink`). :mod:`.startup` opens what a worker needs, :mod:`.prefork` supervises worker
processes, :mod:`.exitcodes` turns a fault into one line and an exit code.
"""

from laraq.worker.worker import Worker, WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
