"""Prometheus metrics for ``laraq work`` (``--metrics-port``) and the ``laraq metrics`` one-shot.

Built on the maintained ``prometheus_client`` library. :class:`Metrics` is a
:class:`~laraq.worker.events.WorkerListener`: per-job events bump counters and histograms labelled by queue
and job class, both from a bounded set (the worker's queues; the app's handler classes plus
``--metrics-jobs``; any other as ``other``), so a producer's job names cannot grow the page; queue gauges (pending, delayed, reserved, oldest pending age) are sampled by a daemon
thread every ``sample_interval`` seconds with one pipelined round of ``LLEN``/``ZCARD``/``LINDEX`` per
queue, never on a scrape and never with a key scan.

Several worker processes on one host: ``prometheus_client``'s multiprocess mode. Give every worker the
same ``--metrics-dir`` (or ``PROMETHEUS_MULTIPROC_DIR``) and the same ``--metrics-port``. Each process
writes its samples to memory-mapped files in that dir; whichever process holds the port serves the sum
over all of them, and the others keep trying to bind it, so the port survives the serving worker's exit.
Counters of exited workers stay in the sum (counters never go down); gauges of exited workers are
dropped (``mark_process_dead``). Without a dir each process serves its own numbers on its own port.

The environment variable must be set before ``prometheus_client`` is first imported (the library picks
its value class at import time), so before this module is: :mod:`laraq.production.multiproc` sets it
without loading the library, and the code that builds metrics (:mod:`laraq.production.listeners`,
``laraq metrics``) imports this module only after that.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)

from laraq.horizon.phpwait import read_php_waiting
from laraq.production.heartbeat import live_workers
from laraq.production.holders import STATES, reservations, running_counts
from laraq.production.multiproc import MULTIPROC_ENV, multiprocess_dir, use_multiprocess_dir
from laraq.protocol.discovery import expand, is_pattern
from laraq.protocol.queue import excerpts_from, member_fields
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobsOutOfReach,
    JobTimedOut,
    JobUnhandled,
    WorkerListener,
    WorkerStarting,
    WorkerStopping,
)

__all__ = ["OTHER", "Metrics", "QueueSampler", "sample_queues", "exposition", "multiprocess_dir", "use_multiprocess_dir",
           "reap_dead_processes", "MULTIPROC_ENV"]

log = logging.getLogger("laraq.production.metrics")

RUNTIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
DELAY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400)


def _pushed_at(job: Any) -> float | None:
    """When the job became available: Horizon's ``pushedAt``, else ``createdAt`` (+ ``delay``)."""
    payload = getattr(job, "payload", None)
    decoded = getattr(payload, "decoded", None)
    if not isinstance(decoded, dict):
        return None
    with contextlib.suppress(TypeError, ValueError):
        pushed = decoded.get("pushedAt")
        if pushed is not None:
            return float(str(pushed).replace(",", "."))
    created = decoded.get("createdAt")
    if not isinstance(created, int | float) or isinstance(created, bool):
        return None
    delay = decoded.get("delay")
    if isinstance(delay, int | float) and not isinstance(delay, bool) and delay > 0:
        created += delay
    return float(created)


#: The ``job`` (or ``queue``) label of every job whose class (or queue) is not in the metrics' known set.
OTHER = "other"


def _class_name(name: str) -> str:
    """A job class as the app registers it (``App\\Jobs\\X``: no leading backslash, no spaces around)."""
    return name.strip().lstrip("\\")


# -- queue sampling ---------------------------------------------------------------------------------------

def sample_queues(redis_queue: Any, queues: Iterable[str], *, now: float | None = None) -> dict[str, dict[str, Any]]:
    """Pending/delayed/reserved sizes and the oldest pending job's age of each queue, in one pipeline."""
    names = [q for q in dict.fromkeys(queues) if q]
    if not names:
        return {}
    client = redis_queue.client
    pipe = client.pipeline(transaction=False)
    for name in names:
        keys = redis_queue.keys(name)
        pipe.llen(keys.list)
        pipe.zcard(keys.delayed)
        pipe.zcard(keys.reserved)
        redis_queue.excerpts(keys.list, "list", 0, 0, client=pipe)  # the head, bounded whatever its size
    replies = pipe.execute()
    now = time.time() if now is None else now
    out: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        pending, delayed, reserved, head = replies[4 * i: 4 * i + 4]
        oldest = None
        heads = excerpts_from(head)
        if heads:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                decoded = member_fields(heads[0], ("pushedAt", "createdAt"))
                stamp = decoded.get("pushedAt") or decoded.get("createdAt")
                if stamp is not None:
                    oldest = max(0.0, now - float(str(stamp).replace(",", ".")))
        out[name] = {"pending": int(pending), "delayed": int(delayed), "reserved": int(reserved),
                     "oldest_pending_age": oldest}
    return out


class QueueSampler:
    """The queue gauges, refreshed from :func:`sample_queues` on demand (``laraq metrics``) or by a thread."""

    def __init__(self, registry: CollectorRegistry | None = None, *, multiprocess: bool = False) -> None:
        target = REGISTRY if registry is None else registry
        # several processes: the freshest live process's sample ("all", the library's default, otherwise)
        mode: Literal["livemax", "all"] = "livemax" if multiprocess else "all"
        self.size = Gauge("laraq_queue_jobs", "Jobs in a queue by state (pending, delayed, reserved), sampled.",
                          ["queue", "state"], registry=target, multiprocess_mode=mode)
        self.oldest = Gauge("laraq_queue_oldest_pending_age_seconds",
                            "Age of the oldest pending job (from pushedAt/createdAt), sampled.",
                            ["queue"], registry=target, multiprocess_mode=mode)
        self.length = Gauge("laraq_queue_length",
                            "Jobs under each Redis key of a queue (state ready, delayed or reserved; key: the "
                            "app's real key, prefix included), sampled.",
                            ["queue", "state", "key"], registry=target, multiprocess_mode=mode)
        self.reservations = Gauge("laraq_reserved_jobs",
                                  "Reserved jobs by holder: held (a live laraq worker), unattributed (a PHP worker "
                                  "or an orphan), expired (an orphan whose lease ended), sampled.",
                                  ["queue", "state"], registry=target, multiprocess_mode=mode)
        self.php_waiting = Gauge("laraq_php_only_jobs_waiting",
                                 "Jobs only PHP can run (no Python handler) among the first --scan-window of a "
                                 "queue no PHP worker works (no PHP Horizon supervisor alive), as laraq work "
                                 "last saw them; 0 when PHP works the queue or none wait, sampled.",
                                 ["queue"], registry=target, multiprocess_mode=mode)
        self.sampled_at = Gauge("laraq_queue_sampled_timestamp_seconds",
                                "When the queue gauges were last sampled.", registry=target, multiprocess_mode=mode)

    def update(self, redis_queue: Any, queues: Iterable[str]) -> dict[str, dict[str, Any]]:
        found = sample_queues(redis_queue, queues)
        for name, row in found.items():
            for state in ("pending", "delayed", "reserved"):
                self.size.labels(name, state).set(row[state])
            self.oldest.labels(name).set(row["oldest_pending_age"] or 0)
            keys = redis_queue.keys(name)
            for state, key, value in (("ready", keys.list, row["pending"]), ("delayed", keys.delayed, row["delayed"]),
                                      ("reserved", keys.reserved, row["reserved"])):
                self.length.labels(name, state, key).set(value)
        counts = running_counts(reservations(redis_queue, list(found))) if any(
            row["reserved"] for row in found.values()) else {}
        for name in found:
            for state in STATES:
                self.reservations.labels(name, state).set(counts.get((name, state), 0))
        try:
            waiting = {w.queue: w.jobs for w in read_php_waiting(redis_queue.client, redis_queue.prefix)
                       if w.connection == redis_queue.connection_name}
        except Exception:  # a server refusing HGETALL (ACL): the other gauges still count
            waiting = {}
        for name in found:
            self.php_waiting.labels(name).set(waiting.get(name, 0))
        self.sampled_at.set(time.time())
        return found


# -- the listener -----------------------------------------------------------------------------------------

class Metrics(WorkerListener):
    """Prometheus metrics of one worker process (a :class:`WorkerListener`).

    ``port``: serve ``/metrics`` there (``None``: only record, e.g. for tests or a textfile dump), on
    ``addr`` (loopback unless told otherwise). ``registry``: a ``CollectorRegistry`` (default: the library's
    global one). ``jobs``: the job classes labelled by name (the app's handlers and ``--metrics-jobs``);
    every other name, which comes from the payload and so from whoever pushed it, is counted as ``other``,
    so the number of series stays bounded. Queues: those the worker serves, any other as ``other``.
    """

    def __init__(self, *, port: int | None = None, addr: str = "127.0.0.1", sample_interval: float = 15.0,
                 registry: CollectorRegistry | None = None, queue: Any = None, jobs: Iterable[str] = (),
                 handoff: Any = None) -> None:
        #: the queue connection whose queues are sampled (the worker's), None: no sampling
        self.queue = queue
        self.jobs = frozenset(_class_name(name) for name in jobs)
        self.port = port
        self.addr = addr
        self.sample_interval = sample_interval
        self.multiprocess = multiprocess_dir() is not None
        self.registry = registry if registry is not None else REGISTRY
        reg = self.registry
        labels = ["queue", "job"]
        self.processed = Counter("laraq_jobs_processed", "Jobs that ran successfully.", labels, registry=reg)
        self.failed = Counter("laraq_jobs_failed", "Jobs marked failed.", labels, registry=reg)
        self.released = Counter("laraq_jobs_released", "Jobs released back to their queue.", labels, registry=reg)
        self.timed_out = Counter("laraq_jobs_timed_out", "Jobs that exceeded their timeout.", labels, registry=reg)
        self.unhandled = Counter("laraq_jobs_unhandled", "Jobs without a Python handler, by the action taken.",
                                 [*labels, "action"], registry=reg)
        self.runtime = Histogram("laraq_job_runtime_seconds", "Handler run time.", labels,
                                 buckets=RUNTIME_BUCKETS, registry=reg)
        self.pickup = Histogram("laraq_job_pickup_delay_seconds",
                                "Time from push (pushedAt/createdAt + delay) to the handler starting.",
                                ["queue"], buckets=DELAY_BUCKETS, registry=reg)
        # several processes: the sum over the live ones ("all", the library's default, otherwise)
        live: Literal["livesum", "all"] = "livesum" if self.multiprocess else "all"
        self.up = Gauge("laraq_worker_up", "Worker processes running (1 per process).", registry=reg,
                        multiprocess_mode=live)
        self.in_flight = Gauge("laraq_jobs_in_flight", "Jobs being run now.", registry=reg, multiprocess_mode=live)
        self.out_of_reach = Gauge("laraq_jobs_out_of_reach",
                                  "Python jobs too far inside a long shared list to take (the last whole look).",
                                  ["queue"], registry=reg,
                                  multiprocess_mode="livemax" if self.multiprocess else "all")
        self.sampler = QueueSampler(self.registry, multiprocess=self.multiprocess)
        self._handoff_gauges(handoff)
        self._queues: list[str] | None = None
        #: the worker's --queue patterns: the queues they match are labelled and sampled by name
        self._patterns: list[str] = []
        self._running: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._bind_warned = False

    def _handoff_gauges(self, handoff: Any) -> None:
        """``laraq_handoff_missing{job}``: 1 per Python job class whose PHP class lacks RunsInPython while a
        PHP worker shares its queue; ``laraq_handoff_unchecked``: 1 when the app could not be asked
        (:class:`laraq.bus.handoffcheck.HandoffCheck`; no check at all: both absent)."""
        if handoff is None:
            return
        mode: Literal["max", "all"] = "max" if self.multiprocess else "all"
        missing = Gauge("laraq_handoff_missing", "Python job classes whose PHP class lacks the RunsInPython "
                        "hand-off while a PHP worker works their queue.", ["job"], registry=self.registry,
                        multiprocess_mode=mode)
        for name in handoff.missing:
            missing.labels(job=name).set(1)
        unchecked = Gauge("laraq_handoff_unchecked", "1: a PHP worker shares a queue and the app could not be "
                          "asked whether the Python jobs' PHP classes use RunsInPython.", registry=self.registry,
                          multiprocess_mode=mode)
        unchecked.set(1 if handoff.unchecked else 0)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def worker_starting(self, event: WorkerStarting) -> None:
        self._queues = [q for q in event.queues if not is_pattern(q)]
        self._patterns = [q for q in event.queues if is_pattern(q)]
        if self.multiprocess:
            reap_dead_processes(multiprocess_dir() or "")
        self.up.set(1)
        self.in_flight.set(0)
        self._try_serve()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="laraq-metrics", daemon=True)
        self._thread.start()

    def worker_stopping(self, event: WorkerStopping) -> None:
        self.up.set(0)
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        if self.multiprocess:
            with contextlib.suppress(Exception):
                multiprocess.mark_process_dead(os.getpid())
        self.close()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(Exception):
                server.shutdown()
                server.server_close()

    # -- job events ----------------------------------------------------------------------------------------

    def _job_labels(self, job: Any) -> tuple[str, str]:
        """``(queue, job)`` labels from a bounded set: the known queues and classes, else ``other``."""
        queue = str(getattr(job, "queue", "") or "")
        if self._queues is not None and queue not in self._queues \
                and not any(fnmatch.fnmatchcase(queue, p) for p in self._patterns):
            queue = OTHER  # a queue a --queue pattern matches keeps its own label
        try:
            name = _class_name(str(getattr(job, "name", None) or ""))
        except Exception:
            name = ""
        return queue, name if name in self.jobs else OTHER

    def _running_changed(self, job: Any, running: bool) -> None:
        with self._lock:
            if running:
                self._running.add(id(job))
            else:
                self._running.discard(id(job))
            self.in_flight.set(len(self._running))

    def job_processing(self, event: JobProcessing) -> None:
        job = event.job
        self._running_changed(job, True)
        pushed = _pushed_at(job)
        if pushed is not None:
            self.pickup.labels(self._job_labels(job)[0]).observe(max(0.0, time.time() - pushed))

    def job_processed(self, event: JobProcessed) -> None:
        job, runtime = event.job, event.runtime
        labels = self._job_labels(job)
        self.processed.labels(*labels).inc()
        self.runtime.labels(*labels).observe(runtime)
        self._running_changed(job, False)

    def job_released(self, event: JobReleased) -> None:
        job, exc = event.job, event.exception
        self.released.labels(*self._job_labels(job)).inc()
        if exc is not None:  # a handler's own release is followed by job_processed
            self._running_changed(job, False)

    def job_failed(self, event: JobFailed) -> None:
        job, runtime = event.job, event.runtime
        labels = self._job_labels(job)
        self.failed.labels(*labels).inc()
        if runtime is not None:
            self.runtime.labels(*labels).observe(runtime)
        self._running_changed(job, False)

    def job_timed_out(self, event: JobTimedOut) -> None:
        job = event.job
        self.timed_out.labels(*self._job_labels(job)).inc()
        self._running_changed(job, False)

    def job_unhandled(self, event: JobUnhandled) -> None:
        job, action = event.job, event.action
        self.unhandled.labels(*self._job_labels(job), action).inc()

    def jobs_out_of_reach(self, event: JobsOutOfReach) -> None:
        queue = event.queue if self._queues is None or event.queue in self._queues else OTHER
        self.out_of_reach.labels(queue).set(event.count)

    # -- serving and sampling ---------------------------------------------------------------------------------

    def _serving_registry(self) -> Any:
        if not self.multiprocess:
            return self.registry
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry

    def _try_serve(self) -> None:
        if self.port is None or self._server is not None:
            return
        try:
            self._server, _thread = start_http_server(self.port, addr=self.addr, registry=self._serving_registry())
        except OSError as exc:
            if not self.multiprocess:
                raise
            if not self._bind_warned:
                log.info("metrics: port %s is served by another worker (%s); this one writes to %s", self.port,
                         exc.strerror or exc, multiprocess_dir())
                self._bind_warned = True
            return
        log.info("metrics: serving http://%s:%s/metrics%s", self.addr, self.port,
                 " (all workers of " + str(multiprocess_dir()) + ")" if self.multiprocess else "")

    def _sample(self) -> None:
        if self.queue is None or self._queues is None:
            return
        try:
            queues = self._queues + (expand(self.queue, self._patterns) if self._patterns else [])
            self.sampler.update(self.queue, queues)  # a pattern's queues as found now, each its own labels
        except Exception as exc:
            log.debug("metrics: queue sampling failed: %s", exc)

    def _run(self) -> None:
        self._sample()  # Redis I/O only on this thread, never on the worker's
        while not self._stop.wait(self.sample_interval):
            self._try_serve()
            self._sample()


def reap_dead_processes(path: str | os.PathLike[str]) -> list[int]:
    """Drop the live gauges of worker processes that died without saying so (SIGKILL, OOM).

    ``prometheus_client`` names live-gauge files ``gauge_live*_<pid>.db``; a pid that no longer exists
    is passed to ``mark_process_dead``. Returns the pids reaped.
    """
    reaped: set[int] = set()
    for file in Path(path).glob("gauge_live*_*.db"):
        try:
            pid = int(file.stem.rsplit("_", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid in reaped or pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, str(path))
            reaped.add(pid)
        except PermissionError:
            pass
    return sorted(reaped)


# -- one-shot exposition ------------------------------------------------------------------------------------

def exposition(redis_queue: Any, queues: Iterable[str], *, heartbeat_prefix: str | None = None,
               metrics_dir: str | None = None) -> bytes:
    """Prometheus text for ``laraq metrics``: queue gauges now, live workers, and a multiprocess dir's sums."""
    registry = CollectorRegistry()
    if not metrics_dir:  # with a dir, the workers' own samples (livemax) are the queue gauges
        QueueSampler(registry).update(redis_queue, queues)
    if heartbeat_prefix is not None:
        records = live_workers(redis_queue.client, heartbeat_prefix)
        live = Gauge("laraq_workers_live", "Workers with a fresh heartbeat record, by host.", ["host"],
                     registry=registry)
        for record in records:
            live.labels(record.host).inc()
    if metrics_dir:
        multiprocess.MultiProcessCollector(registry, path=metrics_dir)
    return generate_latest(registry)
