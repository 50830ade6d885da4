r"""A handler app that imports nothing but :class:`laraq.app.App`, for ``tests/test_worker_lean.py``.

``App\Jobs\Probe`` writes what its worker process has loaded (``sys.modules``), its pid, its parent's
pid, its command line and its parent's (once the parent runs the ``python -S`` supervisor, waiting up
to 30 s for ``laraq work``'s exec) to ``$LARAQ_PROBE`` as JSON, so a test can see what a worker imports when
nothing it runs needs more.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from laraq.app import App

app = App("lean-tests")


@app.handler("App\\Jobs\\Probe")
def probe(command: Any, job: Any) -> None:
    modules = sorted(sys.modules)
    parent = _cmdline(os.getppid())
    deadline = time.monotonic() + 30
    while "-S" not in parent and time.monotonic() < deadline and os.environ.get("LARAQ_PROBE_PARENT"):
        time.sleep(0.01)
        parent = _cmdline(os.getppid())
    with open(os.environ["LARAQ_PROBE"], "w") as fh:
        json.dump({"modules": modules, "pid": os.getpid(), "ppid": os.getppid(), "cmdline": _cmdline(os.getpid()),
                   "parent_cmdline": parent}, fh)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [part.decode() for part in fh.read().split(b"\0") if part]
    except OSError:
        return []
