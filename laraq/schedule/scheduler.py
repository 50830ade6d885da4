r"""A scheduler with no leader: recurring jobs fired exactly once across any number of laraq instances.

This replaces Laravel's ``Illuminate\Console\Scheduling\Schedule`` / ``Event`` as driven by
``php artisan schedule:run`` from cron, together with ``Event::onOneServer()`` (a cache lock around
one host's cron tick) and ``Event::withoutOverlapping()`` (a cache mutex held while the task runs).

Every instance (``laraq work --schedule`` or ``laraq schedule work``) is equal; there is no election.
A Redis sorted set holds each entry's next due time. Each :meth:`Scheduler.tick`:

1. reads the entries whose due time is ``<= now``;
2. for each, computes in Python the due times to fire (the entry's catch-up policy), the next due
   time and the job payloads, built by :class:`laraq.bus.dispatch.Dispatcher` exactly as
   ``laraq dispatch`` builds them (a fresh uuid per firing);
3. runs ONE Lua script (:data:`laraq.schedule.store.CLAIM`) that checks the score is still the due
   time read in step 1 and the stored definition is this instance's (compare-and-set), then pushes
   the payloads onto the queue (``RPUSH`` + ``:notify``, or ``ZADD :delayed``), moves the score to
   the next due time and records who fired. Only the instance whose script changed the score has
   pushed anything: a crash between claiming and dispatching cannot happen.

A Python-function entry (``@app.schedule``) fires the same way: the claim pushes the string job
``Laraq\Schedule@<entry>`` onto the entry's queue, and a laraq worker runs the function. *Firing* is
exactly once; *running* has the queue's at-least-once semantics (a worker killed mid-run leaves the
job reserved, and it runs again after ``retry_after``), as for any queued Laravel job.

Definitions are installed at start: a new or changed definition (its hash differs) gets a first due
time after both ``now`` and its last firing, so a change never fires a due time twice; an instance
whose definition differs from the stored one never fires that entry. Every ``sync_interval`` an
instance re-adds its entries that are missing, but never overwrites another instance's definition. An
entry in Redis that no instance declares is removed once it has been overdue for ``orphan_grace``
seconds (a rolling deploy where old instances still declare it keeps it alive by firing it).

The clock is injectable (``clock=``); by default it is the Redis server's ``TIME``, so hosts with
skewed clocks still agree on when an entry is due.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue
from laraq.schedule.entries import Entry, JobTarget, Plan, ScheduledRun, function_handler, function_job_name
from laraq.schedule.store import ScheduleStore
from laraq.worker.events import WorkerListener, WorkerStarting, WorkerStopping

if TYPE_CHECKING:
    from laraq.protocol.encryption import Encrypter

__all__ = ["ClaimResult", "ScheduledRun", "Scheduler", "function_handler", "redis_clock"]

log = logging.getLogger("laraq.schedule.scheduler")


def redis_clock(client: Any) -> Callable[[], float]:
    """A clock reading the Redis server's ``TIME`` (one round trip per call)."""

    def now() -> float:
        seconds, micros = client.time()
        return seconds + micros / 1e6

    return now


def default_instance() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class ClaimResult:
    """What one claim did: ``fired`` (with the due times), ``lost``, ``paused``, ``overlap``, ``gone``,
    ``changed`` (another definition is stored), ``idle`` (nothing due) or ``error`` (the job could not
    be built; logged once, nothing written)."""

    name: str
    status: str
    due: list[int]
    skipped: int = 0
    uuids: tuple[str, ...] = ()


class Scheduler:
    """One scheduler instance; any number may run against the same Redis."""

    def __init__(
        self,
        entries: Iterable[Entry] | Any,
        queue: RedisQueue,
        *,
        clock: Callable[[], float] | None = None,
        instance: str | None = None,
        encrypter: Any = None,
        history: int = 1000,
        orphan_grace: int = 300,
        sync_interval: float = 60.0,
        sweep_interval: float = 5.0,
        poll: float = 1.0,
    ) -> None:
        if hasattr(entries, "schedule_entries"):
            entries = entries.schedule_entries
        self.entries: dict[str, Entry] = {e.name: e for e in entries}
        if queue.cluster:
            raise ValueError("the scheduler needs one Redis (or Sentinel): a claim writes the schedule keys and "
                             "the queue's keys in one script, which Redis Cluster cannot do across slots")
        self.queue = queue
        self.store = ScheduleStore(queue.client, queue.prefix)
        self.clock = clock or redis_clock(queue.client)
        self.instance = instance or default_instance()
        self.dispatcher = Dispatcher(queue, encrypter=encrypter)
        self.history = history
        self.orphan_grace = orphan_grace
        self.sync_interval = sync_interval
        self.sweep_interval = sweep_interval
        self.poll = poll
        self._hashes = {name: e.definition_hash() for name, e in self.entries.items()}
        self._last_sync: float | None = None
        self._last_sweep = -math.inf
        self._warned: set[tuple[str, str]] = set()
        self.stop_event = threading.Event()
        for entry in self.entries.values():
            if entry.kind == "function" and entry.target.queue is None:
                log.warning("schedule entry %s (a Python function) is queued on the default queue %r: a PHP worker "
                            "on that queue would fail it; give it queue= a queue only laraq works",
                            entry.name, queue.queue_name(None))

    # -- definitions -----------------------------------------------------------------------------------

    def sync(self, now: float | None = None, *, overwrite: bool | None = None) -> dict[str, str]:
        """Install this instance's definitions (new ones added, changed ones re-planned).

        The first sync of an instance (``overwrite``) replaces a different stored definition: the
        instance started last wins, as a deploy of new code should. Later periodic syncs only add
        entries that are missing; they never fight over a definition another instance installed.
        """
        now = self.clock() if now is None else now
        if overwrite is None:
            overwrite = self._last_sync is None
        outcome: dict[str, str] = {}
        for name, entry in self.entries.items():
            outcome[name] = self._sync_one(entry, now, overwrite)
        self._last_sync = now
        return outcome

    def _sync_one(self, entry: Entry, now: float, overwrite: bool = True) -> str:
        status = "retry"
        for _ in range(5):
            stored = self.store.entry(entry.name)
            if not overwrite and stored.get("hash") and stored["hash"] != self._hashes[entry.name]:
                return "other"
            last = float(stored["last_due"]) if stored.get("last_due") else None
            first = entry.first_due(now, last)
            status = self.store.sync(entry.name, self._hashes[entry.name], stored.get("hash", ""), first,
                                     entry.describe(), now)
            if status != "retry":
                break
        if status in ("added", "changed"):
            log.info("schedule entry %s %s; first due %s", entry.name, status, _iso(first))
        return status

    # -- the tick ----------------------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> list[ClaimResult]:
        """Claim and fire every entry due at ``now`` (default: the clock)."""
        now = self.clock() if now is None else now
        if self._last_sync is None or abs(now - self._last_sync) >= self.sync_interval:
            self.sync(now)
        if time.monotonic() - self._last_sweep >= self.sweep_interval:
            self._last_sweep = time.monotonic()
            self.sweep()
        results = []
        for name, score in self.store.due_now(now):
            entry = self.entries.get(name)
            if entry is None:
                if score <= now - self.orphan_grace and self.store.forget(name, score):
                    log.warning("schedule entry %s is declared by no running instance: removed", name)
                continue
            try:
                results.append(self.claim(entry, score, now))
            except (ValueError, TypeError) as exc:  # this entry cannot build its job: the others still fire
                key = (name, f"build:{exc}")
                if key not in self._warned:
                    self._warned.add(key)
                    log.error("schedule entry %s cannot build its job and is not fired: %s", name, exc)
                results.append(ClaimResult(name, "error", []))
        return results

    def claim(self, entry: Entry, score: int, now: float) -> ClaimResult:
        """Try to fire ``entry`` for its stored due time ``score`` (compare-and-set in one script)."""
        plan = entry.plan(score, now)
        if plan.next_due == score:
            return ClaimResult(entry.name, "idle", [])
        return self._run_claim(entry, plan, now, expected=score)

    def fire_now(self, name: str, now: float | None = None) -> ClaimResult:
        """``laraq schedule run NAME``: fire once now; the schedule itself is untouched."""
        entry = self.entries.get(name)
        if entry is None:
            raise KeyError(f"no schedule entry named {name!r} in this app (known: {', '.join(sorted(self.entries)) or 'none'})")
        now = self.clock() if now is None else now
        if not self.store.entry(name).get("hash"):  # not installed yet: install it (never overwrite another)
            self._sync_one(entry, now)
        when = math.floor(now)
        return self._run_claim(entry, Plan([when], 0, when), now, expected=None)

    def _run_claim(self, entry: Entry, plan: Plan, now: float, expected: int | None) -> ClaimResult:
        payloads, uuids, queue_name, available_at = self._build(entry, plan.fire)
        keys = self.queue.keys(queue_name)
        marker = f"{uuids[-1]} {queue_name}" if uuids else ""
        status, detail = self.store.claim(
            entry.name, expected=expected, next_due=plan.next_due, definition=self._hashes[entry.name], now=now,
            instance=self.instance, times=plan.fire, payloads=payloads, uuids=uuids, queue_keys=keys,
            available_at=available_at, overlap_ttl=entry.overlap_ttl if entry.overlap else 0, marker=marker,
            skipped=plan.skipped, history=self.history)
        if status == "fired":
            if plan.fire:
                log.info("fired %s for %s (%d job%s)", entry.name, ", ".join(_iso(t) for t in plan.fire),
                         len(plan.fire), "" if len(plan.fire) == 1 else "s")
            return ClaimResult(entry.name, status, list(plan.fire), plan.skipped, tuple(uuids))
        if status == "gone":
            self._sync_one(entry, now)
        elif status == "changed" and (entry.name, detail or "") not in self._warned:
            self._warned.add((entry.name, detail or ""))
            log.warning("schedule entry %s: another instance installed a different definition; this instance "
                        "does not fire it until it runs the same definition", entry.name)
        return ClaimResult(entry.name, status, [], plan.skipped)

    def _build(self, entry: Entry, times: list[int]) -> tuple[list[bytes], list[str], str, int | None]:
        target = entry.target
        payloads: list[bytes] = []
        uuids: list[str] = []
        queue_name = self.queue.queue_name(target.queue)
        available_at: int | None = None
        for due in times:
            if isinstance(target, JobTarget):
                prepared = self.dispatcher.prepare_job(
                    target.class_name, dict(target.properties), queue=target.queue,
                    connection=target.connection, **dict(target.options))
            else:
                prepared = self.dispatcher.prepare_string(
                    function_job_name(entry.name), {"entry": entry.name, "due": due}, queue=target.queue)
            queue_name = prepared.queue
            if prepared.delay is not None:
                available_at = self.queue.available_at(prepared.delay)
            payloads.append(prepared.payload)
            uuids.append(str(json.loads(prepared.payload).get("uuid") or prepared.id or ""))
        return payloads, uuids, queue_name, available_at

    # -- overlap markers ----------------------------------------------------------------------------------

    def sweep(self) -> int:
        """Clear the overlap markers whose job has left its queue (finished or failed)."""
        cleared = 0
        for name, entry in self.entries.items():
            if not entry.overlap:
                continue
            marker = self.store.marker(name)
            if not marker:
                continue
            uuid, _, queue_name = marker.partition(" ")
            if uuid and self.store.release_if_done(name, marker, self.queue.keys(queue_name or None), uuid):
                cleared += 1
        return cleared

    # -- running -------------------------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event | None = None) -> None:
        """Tick until ``stop`` (default :attr:`stop_event`) is set; Redis errors are logged and retried."""
        stop = stop or self.stop_event
        failures = 0
        while not stop.is_set():
            try:
                now = self.clock()
                self.tick(now)
                failures = 0
                upcoming = self.store.next_due()
                wait = self.poll if upcoming is None else min(self.poll, max(0.0, upcoming - self.clock()))
            except Exception as exc:  # a Redis outage must not end the scheduler
                failures += 1
                wait = min(30.0, 0.5 * 2 ** min(failures, 6))
                log.warning("scheduler tick failed (%s); retrying in %.1fs", exc, wait)
            stop.wait(max(0.02, wait))

    def start(self) -> threading.Thread:
        """Run :meth:`run_forever` in a daemon thread (``laraq work --schedule``)."""
        thread = threading.Thread(target=self.run_forever, name="laraq-scheduler", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stop_event.set()


def attach_to_worker(worker: Any, encrypter: Encrypter | None = None) -> Scheduler:
    """``laraq work --schedule``: run the worker's app's schedule in a thread of the worker process.

    Hooked on the worker's event seam (:class:`laraq.worker.events.WorkerListener`): the thread starts with
    ``worker_starting`` and stops with ``worker_stopping``. A worker killed by SIGKILL takes its
    scheduler with it; the other instances keep firing, and every claim it made is complete or never
    happened.
    """
    scheduler = Scheduler(worker.context.app, worker.queue, encrypter=encrypter)
    if not scheduler.entries:
        log.warning("--schedule: the app declares no schedule entries")
        return scheduler

    class ScheduleListener(WorkerListener):
        def worker_starting(self, event: WorkerStarting) -> None:
            scheduler.start()

        def worker_stopping(self, event: WorkerStopping) -> None:
            scheduler.stop()

    worker.add_listener(ScheduleListener())
    return scheduler


def _iso(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

