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
import threading
import time

try:
    from laraq import App
except ImportError:  # older trees export it from laraq.app only
    from laraq.app import App

app = App("laraq-bench")

_LOG = os.environ.get("LARAQ_LOG") or None


def _line(t: float, uuid, attempts, args, mode) -> str:
    return json.dumps({"runner": "python", "t": t, "uuid": uuid, "attempts": attempts, "args": args,
                       "mode": mode}) + "\n"


def _append(text: str) -> None:
    # open, append, close: the syscalls of the PHP fixture's file_put_contents(FILE_APPEND), without
    # Python's buffered text-file layers (the line is measured, not the file API)
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


#: LARAQ_LOG_BUFFERED=1 (``bench/timers.py --record memory``): a job only notes its start time and
#: facts in memory (about 1 µs), and a thread of the worker writes the lines every 100 ms. The file
#: append per job costs 30-50 µs on a small VM, which the jobs behind it in the same second wait for:
#: this measures the worker's own lateness, not the bench's logging.
_BUFFERED = bool(os.environ.get("LARAQ_LOG_BUFFERED"))
_pending: list[tuple] = []
_flusher: threading.Thread | None = None


def _flush_forever() -> None:
    while True:
        time.sleep(0.1)
        _flush()


def _flush() -> None:
    global _pending
    taken, _pending = _pending, []
    if taken:
        _append("".join(_line(*facts) for facts in taken))


def _record(command, job) -> None:
    t = time.time()
    if _BUFFERED:
        global _flusher
        _pending.append((t, job.uuid, job.attempts, command.get("args"), command.get("mode")))
        if _flusher is None:  # started in the worker process (a thread does not survive its fork)
            _flusher = threading.Thread(target=_flush_forever, name="bench-log", daemon=True)
            _flusher.start()
        return
    _append(_line(t, job.uuid, job.attempts, command.get("args"), command.get("mode")))


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
