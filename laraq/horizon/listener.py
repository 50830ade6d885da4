"""The worker listener that makes a ``laraq work`` process visible in Horizon.

It maps laraq's job lifecycle onto Horizon's ``EventMap`` (see :mod:`laraq.horizon.records`):

============================  ================================================================
laraq event                   Horizon listener it stands in for
============================  ================================================================
``job_reserved``              ``MarkJobAsReserved`` (+ ``StartTimingJob``: laraq times the job)
``job_released``              ``MarkJobAsReleased``
``job_processed``             ``MarkJobAsComplete`` + ``UpdateJobMetrics`` with laraq's runtime
``job_failed``                ``MarkJobAsComplete`` (failed) → ``MarkJobAsFailed`` + ``StoreTagsForFailedJob``
``job_unhandled`` (requeue)   ``MarkJobAsReleased`` with the untouched body put back for PHP
``worker_starting``/looping   ``MasterSupervisor``/``Supervisor`` ``persist`` + their command queues,
                              and the master's trims while no PHP master is alive
``worker_stopping``           ``RedisMasterSupervisorRepository::forget``
============================  ================================================================

Horizon commands reach the worker as the signals Horizon itself would send (SIGUSR2 pause, SIGCONT
continue, SIGTERM terminate), so there is one code path for both. A master-level command read from the
master's list is sent to the ``laraq work`` process that forwards signals to every worker process
(each reads the shared list, one of them takes the command); a supervisor-level one to the worker itself.
Supervisor-level ones (``horizon:pause-supervisor``/``continue-supervisor`` signal the supervisor
record's pid, a :class:`~laraq.horizon.relay.SupervisorRelay`; or the supervisor's own command list)
pause the worker too, but the master record keeps saying ``running``.

Writes: the ``reserved`` write is held back and sent with the job's outcome, or on the next loop
(within about a second) once the job is running. A prefetched job that laraq hands back unstarted at
shutdown never shows as reserved. A successful job whose record no reply decides (not a retry, whose
parent's ``retried_by`` is read first; a tagged job's ``remember`` is decided in Redis) has its records
packed in RESP
(:meth:`~laraq.horizon.records.HorizonRecords.pack_completed`) and written without waiting for Redis'
answer (:class:`~laraq.horizon.pipe.RecordPipe`); on the loop's thread they are held by the acks' rule
(:mod:`laraq.protocol.acks`): sent before the loop starts its next job or waits, so a SIGKILL loses no
record Horizon's PHP worker, which writes them synchronously, would have written. When the acks are
written on a connection of the records' client, the records ride in the acks' write (:meth:`HorizonListener.ride`):
one ``send()`` for both; else they go on their own connection just before. Every other write (release,
failure, timeout, retried jobs, Redis Cluster) is synchronous, after the records sent so far
have been answered, so it cannot overtake them.

``reserved_at`` is when the job starts. Horizon's dashboard shows a job's runtime as ``completed_at −
reserved_at``, and PHP's worker runs a job the moment it pops it; laraq reserves several jobs at once
and runs them one after another, so the time of the batch's reserve would add the wait of every job
ahead. A job that never starts (handed back, failed before its handler) keeps its reservation's time.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from laraq.horizon.pipe import RecordPipe
from laraq.horizon.records import HorizonPayload, HorizonRecords
from laraq.horizon.relay import SupervisorRelay
from laraq.horizon.settings import HorizonSettings
from laraq.horizon.supervisors import NO_SIGNAL_PID, HorizonMaster, shared_master_name
from laraq.horizon.trimming import Trimmer
from laraq.stores.failed import format_exception
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobReserved,
    JobTimedOut,
    JobUnhandled,
    Looping,
    WorkerListener,
    WorkerStarting,
    WorkerStopping,
)

if TYPE_CHECKING:
    from laraq.protocol.acks import Acks, Ride

__all__ = ["HorizonListener"]

log = logging.getLogger("laraq.horizon")

_SIGNALS = {"pause": signal.SIGUSR2, "continue": signal.SIGCONT, "terminate": signal.SIGTERM,
            "restart": signal.SIGTERM}


class HorizonListener(WorkerListener):
    """Writes Horizon's job, master and supervisor records for one worker.

    ``client`` is a redis-py client on Horizon's Redis (no key prefix); ``signal_pid`` is the pid
    Horizon may signal (see :mod:`laraq.horizon.supervisors`): ``None`` = this process,
    :data:`~laraq.horizon.supervisors.NO_SIGNAL_PID` = none. ``trim`` = ``False`` never trims.
    ``forward_pid``: the ``laraq work`` process that forwards signals to every worker process (this
    worker's parent; ``None`` = this process), which names the shared master; ``slot`` of ``slots``:
    this worker process among them (its supervisor).
    """

    def __init__(self, client: Any, settings: HorizonSettings, *, signal_pid: int | None = None,
                 trim: bool = True, forward_pid: int | None = None, slot: int = 0, slots: int = 1) -> None:
        self.client = client
        self.settings = settings
        self.records = HorizonRecords(client, settings)
        self.trimmer = Trimmer(client, settings) if trim else None
        self.signal_pid = signal_pid
        self.forward_pid = forward_pid
        self.slot = slot
        self.slots = max(1, slots)
        self.master: HorizonMaster | None = None
        self._lock = threading.Lock()
        #: reserved writes not sent yet: job key -> (the job's payload, its reserved_at, started)
        self._held: dict[int, tuple[HorizonPayload, float, bool]] = {}
        #: the supervisor record's own pid (none under --no-horizon-signals)
        self.relay: SupervisorRelay | None = None
        #: the worker was paused at the supervisor level (the master still runs)
        self._supervisor_paused = False
        #: the records written without waiting for Redis' answer (None: Redis Cluster, every write waits)
        self.pipe = RecordPipe(client, self.records.load_scripts) if RecordPipe.usable(client) else None
        #: the loop thread's packed records held until its next start or wait: bytes, reply count, metrics calls
        self._out: list[bytes] = []
        self._out_replies = 0
        self._out_metrics: list[tuple[int, Any]] = []
        #: the worker loop's thread (told in worker_starting): records finished there are held, see _send
        self._loop_thread: int | None = None
        #: the worker's acks, when the held records ride in their writes (see :meth:`ride`)
        self._acks: Acks | None = None
        #: rides taken by the acks whose replies have not come back yet
        self._riding = 0

    def _take(self, job: Any) -> list[tuple[str, dict[str, Any]]]:
        self._settle_pipe()
        with self._lock:
            held = self._held.pop(id(job), None)
        return [] if held is None else [self.records.reserved_write(held[0], held[1])]

    def _flush_started(self) -> None:
        with self._lock:
            ready = [k for k, (_, _, started) in self._held.items() if started]
            taken = [self._held.pop(k) for k in ready]
        if not taken:
            return
        if self.pipe is None:
            self.records.write([self.records.reserved_write(payload, at) for payload, at, _ in taken])
            return
        self._send(b"".join(self.records.pack_reserved(payload, at) for payload, at, _ in taken), len(taken), ())

    # -- the record pipe ---------------------------------------------------------------------------------

    def _send(self, packed: bytes, replies: int, metrics: Any) -> None:
        """Records packed for the pipe: held when this is the loop's thread (sent with the others finished
        before its next start or wait: :meth:`flush`, :meth:`job_processing`), else written now."""
        if threading.get_ident() == self._loop_thread:
            with self._lock:
                base = self._out_replies
                self._out.append(packed)
                self._out_replies = base + replies
                if metrics:
                    self._out_metrics.extend((base + at, args) for at, args in metrics)
            return
        self._write_out()  # held records go first
        assert self.pipe is not None
        self.pipe.write(packed, (replies, tuple(metrics)))

    def _write_out(self) -> None:
        """Write the held records (one send)."""
        with self._lock:
            if not self._out:
                return
            out, self._out = self._out, []
            replies, self._out_replies = self._out_replies, 0
            metrics, self._out_metrics = self._out_metrics, []
            assert self.pipe is not None
            self.pipe.write(out[0] if len(out) == 1 else b"".join(out), (replies, tuple(metrics)))

    def _settle_pipe(self) -> None:
        """Before a write on another connection: everything packed is sent and run by Redis (its replies
        read), so that write cannot overtake it."""
        pipe = self.pipe
        if pipe is not None:
            if self._acks is not None and (self._out or self._riding):
                self._acks.flush(force=True)  # the held records ride with the held acks
            if self._out:
                self._write_out()
            if pipe.unconfirmed:
                pipe.collect(wait=True)

    def flush(self) -> None:
        """The worker is about to wait or yield: the held records go (riding on the acks: with the held acks,
        which the worker sends before it waits or starts a job)."""
        if self._out and self._acks is None:
            self._write_out()

    # -- riding on the acks' writes (laraq.protocol.acks.Rider) -------------------------------------------

    def ride(self, acks: Acks) -> None:
        """Hold the loop's records for ``acks``' writes (one ``send()`` for both), when the acks are written on
        a connection of the records' own client (the usual Horizon app: ``horizon.use`` is the queue's
        connection); else the records keep their own connection."""
        ack_pipe = acks.pipe
        if self.pipe is None or ack_pipe is None or ack_pipe.queue.client is not self.client:
            return
        self._acks = acks
        acks.rider = self

    @property
    def holding(self) -> bool:
        return bool(self._out)

    def take(self) -> Ride | None:
        with self._lock:
            if not self._out:
                return None
            out, self._out = self._out, []
            replies, self._out_replies = self._out_replies, 0
            metrics, self._out_metrics = self._out_metrics, []
            self._riding += 1
        return (self, out[0] if len(out) == 1 else b"".join(out), replies, tuple(metrics))

    def _landed(self) -> None:
        with self._lock:
            self._riding -= 1

    def replies(self, token: Any, replies: list[Any]) -> None:
        self._landed()
        assert self.pipe is not None
        self.pipe.answered(token, replies)

    def unsent(self, ride: Ride) -> None:
        self._landed()
        assert self.pipe is not None
        self.pipe.write(ride[1], (ride[2], ride[3]))

    def lost(self, token: Any) -> None:
        self._landed()
        log.warning("horizon records: the connection broke before Redis answered; some records may be missing")

    # -- the worker -------------------------------------------------------------------------------------

    def worker_starting(self, event: WorkerStarting) -> None:
        opts = event.options
        self._loop_thread = threading.get_ident()
        supervisor_pid = None
        if self.signal_pid != NO_SIGNAL_PID:
            self.relay = SupervisorRelay()
            supervisor_pid = self.relay.start()
        else:
            supervisor_pid = NO_SIGNAL_PID
        self.master = HorizonMaster(
            self.client, self.settings, connection=event.connection, queues=",".join(event.queues),
            processes=max(1, int(opts.concurrency)), signal_pid=self.signal_pid, supervisor_pid=supervisor_pid,
            worker_name=opts.name, name=shared_master_name(self._forwarder()), slot=self.slot, slots=self.slots,
            options={"backoff": opts.backoff, "force": opts.force, "tries": opts.max_tries,
                     "max_time": opts.max_time, "max_jobs": opts.max_jobs, "memory": opts.memory,
                     "sleep": opts.sleep, "timeout": opts.timeout, "rest": opts.rest},
        )
        self.master.flush_commands()
        gone = self.master.forget_dead_laraq_masters()
        if gone:
            log.info("horizon: removed stale laraq masters %s", ", ".join(gone))
        self._persist(paused=False)
        pid = "none" if self.master.signal_pid == NO_SIGNAL_PID else self.master.signal_pid
        sup_pid = "none" if self.master.supervisor_pid == NO_SIGNAL_PID else self.master.supervisor_pid
        log.info("horizon: master %s (signals to pid %s), supervisor %s (signals to pid %s); Horizon %s (%s)",
                 self.master.name, pid, self.master.supervisor, sup_pid, self.settings.version,
                 self.settings.version_source)

    def _persist(self, *, paused: bool) -> None:
        assert self.master is not None
        if not paused:
            self._supervisor_paused = False  # resumed, at whichever level
        self.master.persist(paused=paused, supervisor_only=paused and self._supervisor_paused)

    def _forwarder(self) -> int:
        """The process whose signals reach every worker process of this ``laraq work``: the parent that
        forwards them while it is still that parent, else this process."""
        forward = self.forward_pid
        return forward if forward and forward == os.getppid() else os.getpid()

    def _obey(self, action: str, *, supervisor: bool, source: str) -> None:
        log.info("horizon: %s requested through %s", action, source)
        if action == "pause":
            self._supervisor_paused = supervisor
        os.kill(os.getpid() if supervisor else self._forwarder(), _SIGNALS[action])

    def _relay_actions(self) -> list[str]:
        relay, master = self.relay, self.master
        if relay is None or master is None:
            return []
        if relay.pid is None:  # it died: a new one, so the recorded pid is never a stranger's
            actions = relay.actions()
            new_pid = relay.start()
            master.supervisor_pid = master.signal_pid if new_pid is None else new_pid
            log.warning("horizon: the supervisor relay ended; supervisor %s now signals pid %s",
                        master.supervisor, master.supervisor_pid)
            return actions
        return relay.actions()

    def worker_looping(self, event: Looping) -> None:
        master = self.master
        if master is None:
            return
        # the worker's state as of the event, then as each action obeyed here leaves it (its signal is seen
        # by the worker after this call)
        paused = event.paused
        for signalled in self._relay_actions():
            self._obey(signalled, supervisor=True, source=f"a signal to supervisor {master.supervisor}")
            paused = {"pause": True, "continue": False}.get(signalled, paused)
        for command in master.pending_commands():
            action = command.action
            if action is None:
                log.warning("horizon: laraq does not run Horizon command %s (ignored)", command.command)
                continue
            self._obey(action, supervisor=command.supervisor, source=command.command)
            paused = {"pause": True, "continue": False}.get(action, paused)
        self._flush_started()
        self._persist(paused=paused)
        if self.trimmer is not None and not master.php_master_alive():
            self.trimmer.tick()

    def worker_stopping(self, event: WorkerStopping) -> None:
        # jobs that never started were handed back to the queue: their records stay pending
        self._flush_started()
        with self._lock:
            self._held.clear()
        if self.pipe is not None:
            self._write_out()
            self.pipe.close()
        if self.master is not None:
            self.master.forget()
        if self.relay is not None:
            self.relay.stop()

    # -- jobs ---------------------------------------------------------------------------------------------

    @staticmethod
    def _payload(job: Any, *, body: bool = False) -> HorizonPayload:
        """The reserved payload as Horizon reads it (``body``: the original one). The reserved copy is the
        body the worker parsed with ``attempts`` + 1 (the reserve script's only change to the fields Horizon
        reads), so with a string ``uuid`` it is not parsed again."""
        if body:
            return HorizonPayload.parse(job.body)
        cached = getattr(job, "_horizon_payload", None)
        if cached is None:
            decoded = job.payload.decoded
            if isinstance(decoded.get("uuid"), str):
                view = dict(decoded)
                view["attempts"] = job.attempts
                cached = HorizonPayload(bytes(job.reserved_job.reserved), view)
            else:
                cached = HorizonPayload.parse(job.reserved_job.reserved)
            job._horizon_payload = cached
        return cached

    def job_reserved(self, event: JobReserved) -> None:
        job = event.job
        payload = self._payload(job)
        with self._lock:
            self._held[id(job)] = (payload, time.time(), False)

    def job_processing(self, event: JobProcessing) -> None:
        if self._out and self._acks is None:  # a job starts: the records held on the loop go first
            self._write_out()
        job = event.job
        now = time.time()  # reserved_at: when the job starts (see the module docstring)
        with self._lock:
            held = self._held.get(id(job))
            if held is not None:
                self._held[id(job)] = (held[0], now, True)

    def job_timed_out(self, event: JobTimedOut) -> None:
        job = event.job
        self.records.write(self._take(job))

    def job_released(self, event: JobReleased) -> None:
        job, delay = event.job, event.delay
        self.records.released(job.connection_name, job.queue, self._payload(job), before=self._take(job),
                              delay=delay)

    def job_processed(self, event: JobProcessed) -> None:
        job, runtime = event.job, event.runtime
        # A job that released itself was never deleted: Horizon's JobDeleted (completion, metrics)
        # does not fire for it; a failed one is recorded by job_failed.
        if job.is_released or job.has_failed:
            return
        payload = self._payload(job)
        if self.pipe is not None and self.records.pipes_completed(payload):
            with self._lock:
                held = self._held.pop(id(job), None)
            before = b"" if held is None else self.records.pack_reserved(held[0], held[1])
            packed, replies, metrics = self.records.pack_completed(job.connection_name, job.queue, payload,
                                                                   runtime * 1000.0, before, 0 if held is None else 1)
            self._send(packed, replies, metrics)
            return
        self.records.completed(job.connection_name, job.queue, self._payload(job), runtime * 1000.0,
                               before=self._take(job))

    def job_failed(self, event: JobFailed) -> None:
        job, exc = event.job, event.exception
        text = "" if exc is None else format_exception(exc, job_name=getattr(job, "name", None))
        context = None
        ctx = getattr(exc, "context", None)
        if callable(ctx):
            try:
                context = json.dumps(ctx(), separators=(",", ":"), default=str)
            except Exception:  # a broken context() must not hide the failure itself
                context = None
        self.records.failed(job.connection_name, job.queue, self._payload(job), text, context,
                            before=self._take(job))

    def job_unhandled(self, event: JobUnhandled) -> None:
        job, action = event.job, event.action
        if action not in ("requeue", "release"):  # "fail": job_failed follows; keep the reservation for it
            with self._lock:
                held = self._held.get(id(job))
                if held is not None:
                    self._held[id(job)] = (held[0], held[1], True)
            return
        before = self._take(job)
        if action == "requeue":  # the original body went back on the list for PHP
            self.records.released(job.connection_name, job.queue, self._payload(job, body=True), before=before)
        else:
            self.records.released(job.connection_name, job.queue, self._payload(job), before=before)
