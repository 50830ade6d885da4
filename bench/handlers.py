"""Python handlers for the benchmark: the same work PHP's fixture jobs do (``laraq work --app handlers:app``).

* ``App\\Jobs\\EchoJob`` (the fixture's job): mode ``ok`` does nothing, mode ``sleep`` waits
  ``seconds`` without blocking the worker (``asyncio.sleep``: the I/O-bound workload, run with
  ``--concurrency``). Like the fixture's ``RecordsRuns::record()``, it appends one JSON line to
  ``$LARAQ_LOG`` per job only when that variable is set (the latency runs); the throughput runs unset it
  on both sides, so neither PHP nor Python writes anything.
* ``App\\Jobs\\BenchHashJob`` (``bench/php/BenchHashJob.php``): a chain of ``rounds`` SHA-256 digests,
  the CPU-light workload, byte for byte the PHP loop.

``LARAQ_BENCH_SYNC=1`` registers ``EchoJob`` as a plain (sync) function instead, to measure what the
async hand-off costs per job.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time

try:
    from laraq import App
except ImportError:  # older trees export it from laraq.app only
    from laraq.app import App

app = App("laraq-bench")

_LOG = os.environ.get("LARAQ_LOG") or None


def _record(command, job) -> None:
    line = {
        "runner": "python",
        "t": time.time(),
        "uuid": job.uuid,
        "attempts": job.attempts,
        "args": command.get("args"),
        "mode": command.get("mode"),
    }
    # open, append, close: the syscalls of the PHP fixture's file_put_contents(FILE_APPEND), without
    # Python's buffered text-file layers (the line is measured, not the file API)
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


if os.environ.get("LARAQ_BENCH_SYNC"):  # the "sync handler" variant: a plain function, like PHP's handle()

    @app.handler("App\\Jobs\\EchoJob")
    def echo(command, job) -> None:
        if _LOG is not None:
            _record(command, job)
        if command.get("mode") == "sleep":
            time.sleep(float(command.get("seconds") or 0))

else:

    @app.handler("App\\Jobs\\EchoJob")
    async def echo(command, job) -> None:
        if _LOG is not None:
            _record(command, job)
        if command.get("mode") == "sleep":
            await asyncio.sleep(float(command.get("seconds") or 0))


@app.handler("App\\Jobs\\BenchHashJob")
def bench_hash(command, job) -> None:
    h = str(command.get("seed")).encode()
    for _ in range(int(command.get("rounds"))):
        h = hashlib.sha256(h).digest()
