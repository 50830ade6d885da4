"""The data of each dashboard page, read through laraq's own readers and returned as plain values.

Nothing here sends a Redis command of its own except the read of Horizon's master and supervisor
records (``masters``/``supervisors`` sorted sets and their hashes, as Horizon's
``RedisMasterSupervisorRepository`` and ``RedisSupervisorRepository`` keep them):

* :func:`overview` - ``laraq status``'s snapshot (:func:`laraq.cli.status_cmd.snapshot`): counters, failed
  counts, paused state, parked failures, held transfers;
* :func:`jobs` / :func:`job_detail` - :func:`laraq.ops.inspect.list_jobs`, :func:`~laraq.ops.inspect.find_job`
  and :func:`~laraq.ops.inspect.find_job_near` (paged, filtered by class, searched by id or uuid, every
  read bounded; a job's page reads where the list saw it first, and also finds it in the failed-job store),
  reservations with their holders
  (:func:`laraq.production.holders.reservations`); an encrypted command is never decrypted here;
* :func:`failed` - the failed-job store through :func:`laraq.bus.retry.select_failed` (the filter of
  ``laraq retry``);
* :func:`workers` - heartbeats (:func:`laraq.production.heartbeat.live_workers`), Horizon's records, and the
  queues with jobs that no live worker lists;
* :func:`batches` - :func:`laraq.stores.batches.recent_batches` on the app's ``queue.batching`` table;
* :func:`schedule` and :func:`transfers` - :class:`laraq.schedule.store.ScheduleStore` and
  :func:`laraq.ops.transfers.find_held`.

Secrets stay out: a URL's password is masked (:func:`mask_url`), no setting is shown but the prefix and
the connection name.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

from laraq.bus.retry import RetryFilter, parse_moment, select_failed
from laraq.cli.common import Ops, human_age
from laraq.cli.inspect_cmds import BODY_PREVIEW, DECODE_BUDGET, preview
from laraq.cli.status_cmd import snapshot
from laraq.config.phpworkers import horizon_prefix
from laraq.dashboard.history import History, chart
from laraq.ops.inspect import STATES, find_failed, find_job, find_job_near, list_jobs, queue_status
from laraq.ops.transfers import find_held
from laraq.production.heartbeat import _redis_now, live_workers
from laraq.production.holders import reservations
from laraq.schedule.store import ScheduleStore
from laraq.stores.batches import recent_batches
from laraq.stores.database import connect_database

__all__ = ["PAGE_SIZE", "FailedQuery", "batches", "failed", "job_detail", "jobs", "mask_url", "overview", "schedule",
           "transfers", "workers"]

#: jobs or failed rows per page
PAGE_SIZE = 50
#: how many members of each state a search by id or uuid reads (``laraq show`` reads them all)
SEARCH_LIMIT = 10_000
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def mask_url(text: str) -> str:
    """``redis://user:secret@host`` -> ``redis://user:***@host`` (any URL in ``text``)."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def overview(ops: Ops, history: History | None = None) -> dict[str, Any]:
    """Per queue: pending, delayed, reserved, oldest wait, due, expired, poison, failed, paused, and with a
    ``history``: jobs taken and failed per minute and the last hour's charts."""
    snap = snapshot(ops, [], None, max_size=None)
    recent = history.recent(ops) if history is not None else None
    rows = []
    for s in snap.statuses:
        taken, failed_rate = recent.per_minute(s.queue) if recent is not None else (None, None)
        rows.append({**s.to_dict(), "oldest": human_age(s.oldest_pending_age),
                     "failed": None if snap.failed is None else snap.failed.get(s.queue, 0),
                     "paused": None if snap.paused is None else snap.paused.get(s.queue, False),
                     "taken_per_minute": _rate(taken), "failed_per_minute": _rate(failed_rate)})
    charts = {}
    if recent is not None and recent.samples:
        now = recent.samples[-1].at
        charts = {what: chart(recent.series(what), now) for what in ("depth", "throughput", "wait")}
    return {"charts": charts, "prefix": snap.prefix, "connection": ops.settings.connection_name, "queues": rows,
            "failed_total": snap.failed_total, "notes": [mask_url(n) for n in snap.notes],
            "transfers": len(snap.transfers), "can_pause": ops.settings.version.has_queue_pause,
            "laravel": str(ops.settings.version)}


def _view_row(v: Any) -> dict[str, Any]:
    d = v.to_dict()
    shown = v.properties if v.properties is not None else v.data
    if isinstance(shown, dict) and shown.get("@class") in (v.name, v.job):
        shown = {k: item for k, item in shown.items() if k != "@class"}
    text = "" if v.error or shown in (None, {}, []) else json.dumps(shown, ensure_ascii=False, default=str)
    d["summary"] = text if len(text) <= 120 else text[:119] + "…"
    d["ident"] = v.uuid or v.id
    # where the list page saw it: the job page reads there first
    d["at"] = {"state": v.state, "position": v.index if v.score is None else repr(v.score)}
    return d


def _state_size(ops: Ops, queue: str, state: str) -> int:
    status = queue_status(ops.queue, queue)
    return {"pending": status.pending, "delayed": status.delayed, "reserved": status.reserved,
            "poison": status.poison}[state]


def jobs(ops: Ops, queue: str, state: str, *, page: int = 1, class_filter: str | None = None,
         ident: str | None = None) -> dict[str, Any]:
    """One page of ``queue``'s jobs in ``state`` (or the matches of ``ident``, an id or uuid)."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r} (one of {', '.join(STATES)})")
    page = max(1, page)
    searched = None
    if ident:
        views = [v for v in find_job(ops.queue, ident, [queue], max_elements=DECODE_BUDGET, scan_limit=SEARCH_LIMIT)
                 if v.state in STATES]
        more = False
        if max(_state_size(ops, queue, s) for s in STATES) > SEARCH_LIMIT:
            searched = SEARCH_LIMIT
    else:
        # a class filter reads SEARCH_LIMIT members past the page's start at most (a class absent from a big
        # queue must not read all of it)
        reach = (page - 1) * PAGE_SIZE + SEARCH_LIMIT if class_filter else None
        views = list_jobs(ops.queue, queue, state, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE + 1,
                          class_filter=class_filter or None, scan_limit=reach)
        more = len(views) > PAGE_SIZE
        views = views[:PAGE_SIZE]
        if reach is not None and len(views) < PAGE_SIZE and _state_size(ops, queue, state) > reach:
            searched = reach
    rows = [_view_row(v) for v in views]
    held: list[dict[str, Any]] = []
    if state == "reserved":
        now = float(ops.queue.current_time())
        for r in reservations(ops.queue, [queue], retry_after=ops.settings.retry_after):
            d = r.to_dict(now)
            d["for"] = "-" if r.since is None else ("~" if r.since_estimated else "") + human_age(now - r.since)
            d["lease"] = ("ended " + human_age(now - r.lease_ends_at) + " ago" if r.lease_ends_at <= now
                          else "in " + human_age(r.lease_ends_at - now))
            d["holder"] = (f"laraq {r.host} pid {r.pid}" if r.worker else
                           "unknown (expired)" if r.state == "expired" else "not a laraq worker (PHP or Horizon)")
            held.append(d)
    return {"queue": queue, "state": state, "states": STATES, "page": page, "more": more, "rows": rows,
            "class_filter": class_filter or "", "ident": ident or "", "reservations": held, "searched": searched}


def job_detail(ops: Ops, queue: str, ident: str, *, state: str | None = None,
               position: float | None = None) -> dict[str, Any]:
    """The job(s) of ``queue`` whose id or uuid is ``ident``, decoded as ``laraq show`` decodes them
    (the command of an encrypted job stays closed), read in bounded steps: with a ``state`` of
    :data:`STATES` and the ``position`` the list page saw it at (list index or ZSET score), the members
    around that position (:func:`find_job_near`); else, or when it left that place, the first
    :data:`SEARCH_LIMIT` members of that state (of each state without one), the unfinished moves, and the
    failed-job store. ``searched`` is the limit when a state holds more than the search read."""
    found = []
    searched = None
    if state in STATES and position is not None:
        found = find_job_near(ops.queue, ident, queue, state, position, max_elements=DECODE_BUDGET)
    if not found and state != "failed":
        states = [state] if state in STATES else list(STATES)
        found = find_job(ops.queue, ident, [queue], max_elements=DECODE_BUDGET, scan_limit=SEARCH_LIMIT,
                         states=states)
        if max(_state_size(ops, queue, s) for s in states) > SEARCH_LIMIT:
            searched = SEARCH_LIMIT
    if not found or state == "failed":
        # the failed-job store too, as `laraq show` searches it (by its id; the payloads only when Redis had
        # no match); a store that is down must not hide the Redis matches
        with contextlib.suppress(Exception):
            found += [v for v in find_failed(ops.failed_store(), ident, max_elements=DECODE_BUDGET,
                                             scan_payloads=not found) if v.queue == queue]
    out = []
    for v in found:
        d = v.to_dict(raw=True)
        view = v.properties if v.properties is not None else v.data
        d["label"] = "properties" if v.properties is not None else "data"
        d["pretty"] = json.dumps(preview(view), ensure_ascii=False, indent=2, default=str)
        body = d.get("body") or d.get("body_b64") or ""
        d["body_preview"] = body[:BODY_PREVIEW] + (f"… ({len(v.raw):,} bytes in all)" if len(body) > BODY_PREVIEW
                                                   else "")
        out.append(d)
    return {"found": out, "searched": None if out else searched}


@dataclass(frozen=True)
class FailedQuery:
    """The failed page's filter: the fields of ``laraq retry``'s bulk filter, as typed in the form."""

    job_class: str = ""
    queue: str = ""
    exception: str = ""
    after: str = ""
    before: str = ""

    @classmethod
    def from_mapping(cls, data: Any) -> FailedQuery:
        return cls(*(str(data.get(k) or "").strip() for k in ("class", "queue", "exception", "after", "before")))

    def retry_filter(self) -> RetryFilter:
        """The :class:`RetryFilter` (ValueError naming a date or age that does not parse)."""
        return RetryFilter((self.job_class,) if self.job_class else (), (self.queue,) if self.queue else (),
                           parse_moment(self.after) if self.after else None,
                           parse_moment(self.before) if self.before else None, self.exception or None)

    def as_params(self) -> dict[str, str]:
        return {"class": self.job_class, "queue": self.queue, "exception": self.exception, "after": self.after,
                "before": self.before}


def failed(ops: Ops, query: FailedQuery, *, page: int = 1) -> dict[str, Any]:
    """The failed jobs matching ``query``, newest first, one page of them."""
    error = None
    try:
        flt = query.retry_filter()
    except ValueError as exc:
        error, flt = str(exc), RetryFilter()
    matched = select_failed(ops.failed_store(), flt)
    matched.sort(key=lambda j: str(j.failed_at), reverse=True)
    page = max(1, page)
    shown = matched[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    rows = [{"id": j.id, "uuid": j.uuid, "connection": j.connection, "queue": j.queue, "class": j.display_name,
             "failed_at": j.failed_at, "exception": (j.exception or "").splitlines()[0][:200] if j.exception else ""}
            for j in shown]
    return {"rows": rows, "count": len(matched), "page": page, "more": page * PAGE_SIZE < len(matched),
            "query": query.as_params(), "error": error}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: seconds within which Horizon counts a master (``MasterSupervisorRepository::names``: 14) and a
#: supervisor (``SupervisorRepository::names``: 29) as alive
_HORIZON_ALIVE = {"masters": 14, "supervisors": 29}


def _horizon(ops: Ops) -> dict[str, list[dict[str, str]]]:
    """Horizon's live masters and supervisors (their records' hashes, names added), on the queue's connection
    under Horizon's prefix (:func:`laraq.config.phpworkers.horizon_prefix`)."""
    prefix = horizon_prefix(ops.settings)
    client = ops.queue.client
    now = _redis_now(client)
    out: dict[str, list[dict[str, str]]] = {}
    for kind, single in (("masters", "master"), ("supervisors", "supervisor")):
        names = [_text(n) for n in client.zrangebyscore(prefix + kind, now - _HORIZON_ALIVE[kind], "+inf")]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(f"{prefix}{single}:{name}")
        records = []
        for name, data in zip(names, pipe.execute() if names else [], strict=True):
            if data:
                records.append({"name": name, **{_text(k): _text(v) for k, v in data.items()}})
        out[kind] = records
    return out


def _supervisor_queues(record: dict[str, str]) -> list[str]:
    try:
        options = json.loads(record.get("options") or "{}")
    except ValueError:
        return []
    queues = options.get("queue") if isinstance(options, dict) else None
    return [q for q in str(queues or "").split(",") if q]


def workers(ops: Ops) -> dict[str, Any]:
    """laraq workers by heartbeat with the jobs each runs now, Horizon's masters and supervisors, and the
    queues with pending jobs that no live worker lists."""
    client = ops.queue.client
    records = live_workers(client, ops.queue.prefix)
    now = _redis_now(client)
    snap = overview(ops, None)
    names = [q["queue"] for q in snap["queues"]]
    running: dict[str, list[dict[str, Any]]] = {}
    for r in reservations(ops.queue, names, retry_after=ops.settings.retry_after, records=records):
        if r.worker:
            running.setdefault(r.worker, []).append({"queue": r.queue, "job": r.job, "id": r.id,
                                                     "for": "-" if r.since is None else human_age(now - r.since)})
    rows = [{**r.as_dict(), "up": human_age(now - r.started), "beat_age": f"{now - r.beat:.1f}s",
             "running_jobs": running.get(r.id, [])} for r in records]
    horizon = _horizon(ops)
    for sup in horizon["supervisors"]:
        sup["queues"] = ",".join(_supervisor_queues(sup))
    worked = {q for r in records for q in r.queues}
    worked |= {q for s in horizon["supervisors"] for q in _supervisor_queues(s)}
    idle = [q["queue"] for q in snap["queues"] if q["pending"] and q["queue"] not in worked]
    return {"workers": rows, "masters": horizon["masters"], "supervisors": horizon["supervisors"],
            "unworked": idle}


def batches(ops: Ops, *, page: int = 1) -> dict[str, Any]:
    """The newest batches of the app's ``job_batches`` (``queue.batching``), one page of them."""
    page = max(1, page)
    try:
        conn = connect_database(ops.settings.database(ops.settings.batch_database))
    except Exception as exc:  # a database that cannot be opened is named on the page, not a crash
        return {"rows": [], "page": page, "more": False, "error": f"cannot open the batches database: {exc}"}
    try:
        rows = recent_batches(conn, ops.settings.batch_table, limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
    except Exception as exc:
        return {"rows": [], "page": page, "more": False,
                "error": f"cannot read {ops.settings.batch_table!r}: {type(exc).__name__}: {exc}"}
    finally:
        conn.close()
    return {"rows": rows[:PAGE_SIZE], "page": page, "more": len(rows) > PAGE_SIZE, "error": None}


def schedule(ops: Ops) -> list[dict[str, Any]]:
    """laraq's recurring entries with their next and last runs (``laraq schedule list``'s rows)."""
    return ScheduleStore(ops.queue.client, ops.queue.prefix).status()


def transfers(ops: Ops) -> list[dict[str, Any]]:
    """Jobs held by unfinished moves, with the commands that finish or undo them (passwords masked)."""
    prefix = ops.queue.prefix
    out = []
    for held in find_held(ops.queue.client, prefix):
        d = held.to_dict(prefix)
        out.append({k: mask_url(v) if isinstance(v, str) else v for k, v in d.items()})
    return out
