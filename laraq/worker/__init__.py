"""The worker: ``php artisan queue:work`` (``Illuminate\\Queue\\Worker``), built from a few objects.

One job from reserve to ack: the loop (:mod:`.worker`) takes a batch from the reserver (:mod:`.reserver`,
with :mod:`.leases` and :mod:`.unstarted`), starts each job on the executor (:mod:`.executor`: tasks by
:mod:`.eager`, the event loop in :mod:`.bridge`, a running job in :mod:`.running`), which runs it through
``Worker::process`` (:mod:`.process`) to an outcome that the settle step carries out (:mod:`.settle`); the
stop rules (:mod:`.stoprules`) answer each round. All of them read one :mod:`.context` and tell
listeners what happened (:mod:`.events`). The loop's names below are imported when first read, so that
a listener module importing :mod:`.events` does not load the whole worker.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from laraq.worker.context import CacheLike, UnhandledPolicy, WorkerOptions
    from laraq.worker.worker import Worker

__all__ = ["CacheLike", "UnhandledPolicy", "Worker", "WorkerOptions"]


def __getattr__(name: str) -> Any:
    """The loop's names, imported on first use."""
    if name not in __all__:
        raise AttributeError(f"module 'laraq.worker' has no attribute {name!r}")
    from laraq.worker import context, worker  # start-up: see the module's docstring

    value = getattr(worker if name == "Worker" else context, name)
    globals()[name] = value
    return value
