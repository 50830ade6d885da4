"""celery's side: the app and tasks (``celery -A t_celery worker``), ``python t_celery.py enqueue N KIND``
(``apply_async`` on one producer) and ``python t_celery.py stats`` (the workers' own task totals, through
celery's remote control ``inspect().stats()``, as JSON). No result backend: results are not kept.
"""

from __future__ import annotations

import json
import os
import sys

import iowait
from celery import Celery

QUEUE = os.environ["PEERS_QUEUE"]
app = Celery("t_celery", broker=os.environ["PEERS_REDIS_URL"])
app.conf.update(task_default_queue=QUEUE, task_ignore_result=True, broker_connection_retry_on_startup=True,
                worker_hijack_root_logger=False)


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="io_sync")
def io_sync() -> None:
    iowait.io_sync()


if __name__ == "__main__":
    if sys.argv[1] == "stats":
        stats = app.control.inspect(timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 2.0).stats() or {}
        print(json.dumps({name: s.get("total", {}) for name, s in stats.items()}))
    else:
        task = {"noop": noop, "io_sync": io_sync}[sys.argv[3]]
        with app.producer_or_acquire() as producer:
            for _ in range(int(sys.argv[2])):
                task.apply_async(producer=producer)
