"""laraq's handlers for the I/O-bound workload (``laraq work --app laraq_io:app``): the fixture's
``App\\Jobs\\EchoJob`` makes one request to the bench's 5 ms server (:mod:`iowait`).

``LARAQ_BENCH_SYNC=1`` registers a plain ``def`` handler that blocks on the socket (run on laraq's thread
pool at ``--concurrency`` above 1); otherwise an ``async def`` handler awaits it on the worker's loop.
"""

from __future__ import annotations

import os
from typing import Any

import iowait

from laraq import App

app = App("laraq-bench-peers")

if os.environ.get("LARAQ_BENCH_SYNC"):

    @app.handler("App\\Jobs\\EchoJob")
    def echo(command: Any, job: Any) -> None:
        iowait.io_sync()

else:

    @app.handler("App\\Jobs\\EchoJob")
    async def echo(command: Any, job: Any) -> None:
        await iowait.io_async()
