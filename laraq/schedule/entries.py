r"""Schedule entries: what fires, when, and what happens to due times missed while nothing ran.

An :class:`Entry` is one line of Laravel's ``Schedule`` (``$schedule->job(...)->everyFiveMinutes()``):

* its *timing*: :class:`Cron` (a five-field cron expression evaluated in a time zone by ``cronsim``,
  the cron library of Healthchecks.io) or :class:`Every` (a fixed interval in real seconds, aligned to
  the unix epoch plus an offset, independent of any time zone);
* its *target*: :class:`JobTarget` (a Laravel job class with properties, dispatched with exactly the
  payload ``laraq dispatch`` builds, :class:`laraq.bus.dispatch.Dispatcher`) or :class:`FunctionTarget`
  (a Python function, run by a laraq worker from an ordinary queued job: :func:`function_handler` is
  that job's handler, and a function that takes one argument receives a :class:`ScheduledRun`);
* its *catch-up policy* (:class:`CatchUp`): what a claim does with due times that passed while no
  instance was running: ``skip`` (only a due time at most ``grace`` seconds old fires), ``once`` (the
  missed times collapse into one firing) or ``all`` (each missed time fires, at most ``limit``, the
  most recent ones);
* overlap protection (``overlap=False``, Laravel's ``withoutOverlapping``): no new firing while the
  job of the previous one is still queued, delayed or reserved (so a catch-up fires at most one job).

Time zones follow cron's (cronie's) DST rules through ``cronsim``: a fixed time that does not exist
on a spring-forward day (02:30 in Europe/Berlin on the last Sunday of March) fires at the first
instant after the gap (03:00 local); a fixed time that happens twice on a fall-back day fires once
(the first); expressions whose hour field is ``*`` fire at every real occurrence.

:meth:`Entry.plan` is the pure part of a claim: from the stored due time and ``now`` it computes the
due times that fire, how many are skipped, and the next due time. It is what makes the Lua claim a
compare-and-set: Python computes, Redis checks that nobody moved the score in between.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

__all__ = [
    "CatchUp",
    "Cron",
    "Entry",
    "Every",
    "FunctionTarget",
    "JobTarget",
    "Plan",
    "ScheduleError",
    "ScheduledRun",
    "function_handler",
    "function_job_name",
]

#: Laravel's (and cron's) named frequencies, as five-field expressions.
ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

#: How many missed cron times one plan walks before it jumps straight to the next one after ``now``
#: (a year of a per-minute expression is about 525,000).
MAX_WALK = 1_000_000

#: At most this many jobs are pushed by one claim (one script call); a longer catch-up backlog is
#: fired by the following claims, oldest first.
MAX_PER_CLAIM = 500

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,199}$")


class ScheduleError(ValueError):
    """An entry that cannot be scheduled (bad expression, zone, name or policy)."""


def function_job_name(entry_name: str) -> str:
    """The string-job name (``Class@method``) of the queued job that runs a Python-function entry."""
    return f"Laraq\\Schedule@{entry_name}"


# -- timing ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cron:
    """A five-field cron expression (or an ``@daily``-style alias) evaluated in time zone ``tz``."""

    expr: str
    tz: str = "UTC"

    def __post_init__(self) -> None:
        expr = ALIASES.get(self.expr.strip().lower(), " ".join(self.expr.split()))
        object.__setattr__(self, "expr", expr)
        # start-up: zoneinfo and cronsim load with the first cron entry, not with every worker
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        from cronsim import CronSim, CronSimError  # start-up: as zoneinfo above

        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ScheduleError(f"unknown time zone {self.tz!r}") from exc
        object.__setattr__(self, "_zone", zone)
        try:
            CronSim(expr, datetime(2000, 1, 1, tzinfo=zone))
        except CronSimError as exc:
            raise ScheduleError(f"bad cron expression {self.expr!r}: {exc}") from exc

    def after(self, t: float) -> Any:
        """An iterator of due times (unix seconds) strictly after ``t``."""
        from cronsim import CronSim  # start-up: see __post_init__ (loaded there already)

        start = datetime.fromtimestamp(math.floor(t), self._zone)  # type: ignore[attr-defined]
        return (math.floor(d.timestamp()) for d in CronSim(self.expr, start))

    def next_after(self, t: float) -> int:
        return next(self.after(t))

    def describe(self) -> str:
        return f"{self.expr} ({self.tz})"

    def spec(self) -> dict[str, Any]:
        return {"cron": self.expr, "tz": self.tz}


@dataclass(frozen=True)
class Every:
    """Every ``seconds`` real seconds, at ``offset + k * seconds`` after the unix epoch."""

    seconds: int
    offset: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, int) or self.seconds < 1:
            raise ScheduleError(f"an interval is a whole number of seconds >= 1, got {self.seconds!r}")
        object.__setattr__(self, "offset", self.offset % self.seconds)

    def after(self, t: float) -> Any:
        k = math.floor((math.floor(t) - self.offset) / self.seconds) + 1
        while True:
            yield self.offset + k * self.seconds
            k += 1

    def next_after(self, t: float) -> int:
        return next(self.after(t))

    def describe(self) -> str:
        return f"every {self.seconds}s" + (f" +{self.offset}s" if self.offset else "")

    def spec(self) -> dict[str, Any]:
        return {"every": self.seconds, "offset": self.offset}


Timing = Cron | Every


# -- catch-up ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CatchUp:
    """What a claim fires when several due times have passed (downtime, a clock step)."""

    policy: Literal["skip", "once", "all"] = "skip"
    #: ``all``: at most this many missed times fire (the most recent ones).
    limit: int = 100
    #: ``skip``: a due time fires if it is at most this many seconds old.
    grace: int = 60

    def __post_init__(self) -> None:
        if self.policy not in ("skip", "once", "all"):
            raise ScheduleError(f"catch_up is 'skip', 'once', 'all' or a number, got {self.policy!r}")
        if self.limit < 1 or self.grace < 0:
            raise ScheduleError("catch-up limit must be >= 1 and grace >= 0")

    @classmethod
    def parse(cls, value: str | int | CatchUp, grace: int = 60) -> CatchUp:
        if isinstance(value, CatchUp):
            return value
        if isinstance(value, bool):
            raise ScheduleError(f"bad catch_up {value!r}")
        if isinstance(value, int):
            return cls("all", limit=value, grace=grace)
        text = str(value).strip().lower()
        if text.isdigit():
            return cls("all", limit=int(text), grace=grace)
        return cls(text, grace=grace)  # type: ignore[arg-type]

    def describe(self) -> str:
        return {"skip": f"skip (grace {self.grace}s)", "once": "once", "all": f"each up to {self.limit}"}[self.policy]


@dataclass(frozen=True)
class Plan:
    """The outcome of one claim: the due times that fire, how many are dropped, the next due time."""

    fire: list[int]
    skipped: int
    next_due: int


# -- targets ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobTarget:
    """A Laravel job dispatched like ``laraq dispatch`` / ``Dispatcher.prepare_job`` does."""

    class_name: str
    properties: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    connection: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return self.class_name

    def spec(self) -> dict[str, Any]:
        return {"job": self.class_name, "properties": dict(self.properties), "queue": self.queue,
                "connection": self.connection, "options": dict(self.options)}


@dataclass(frozen=True)
class FunctionTarget:
    """A Python function run by a laraq worker from the queued job ``Laraq\\Schedule@<entry>``."""

    func: Callable[..., Any]
    queue: str | None = None

    def describe(self) -> str:
        return f"{getattr(self.func, '__module__', '?')}.{getattr(self.func, '__qualname__', '?')}"

    def spec(self) -> dict[str, Any]:
        return {"function": self.describe(), "queue": self.queue}


# -- the entry ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One scheduled entry; build them with :meth:`laraq.App.schedule` / :meth:`laraq.App.schedule_job`."""

    name: str
    timing: Timing
    target: JobTarget | FunctionTarget
    catch_up: CatchUp = field(default_factory=CatchUp)
    #: ``withoutOverlapping``: no firing while the previous job is still queued or running.
    overlap: bool = False
    #: Seconds after which an overlap marker expires on its own (Laravel's default: 24 hours).
    overlap_ttl: int = 86_400

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ScheduleError(f"schedule entry name {self.name!r}: use letters, digits and _ . : - "
                                "(at most 200 characters, starting with a letter or digit)")
        if self.overlap_ttl < 1:
            raise ScheduleError("overlap_ttl must be >= 1 second")

    @property
    def kind(self) -> str:
        return "job" if isinstance(self.target, JobTarget) else "function"

    def spec(self) -> dict[str, Any]:
        """Everything that defines the entry (its hash decides whether a stored definition changed)."""
        return {"name": self.name, "kind": self.kind, "timing": self.timing.spec(), "target": self.target.spec(),
                "catch_up": [self.catch_up.policy, self.catch_up.limit, self.catch_up.grace],
                "overlap": self.overlap, "overlap_ttl": self.overlap_ttl}

    def definition_hash(self) -> str:
        text = json.dumps(self.spec(), sort_keys=True, default=repr, ensure_ascii=True)
        return hashlib.sha1(text.encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        """What ``laraq schedule list`` shows without the app loaded."""
        return {"kind": self.kind, "target": self.target.describe(), "timing": self.timing.describe(),
                "catch_up": self.catch_up.describe(), "overlap": self.overlap,
                "queue": self.target.queue}

    def first_due(self, now: float, last_fired: float | None = None) -> int:
        """The first due time of a new or changed definition: after ``now`` and after the last firing."""
        return self.timing.next_after(max(now, last_fired or now))

    def plan(self, due: int, now: float) -> Plan:
        """The claim of the stored due time ``due`` at ``now``: which due times fire, the next one.

        ``due`` itself counts as a due time (it is the committed score), then every time of the timing
        after it up to ``now``.
        """
        now = math.floor(now)
        if due > now:
            return Plan([], 0, due)
        policy = self.catch_up
        keep = policy.limit if policy.policy == "all" else 1
        recent: deque[int] = deque([due], maxlen=keep)
        count = 1
        timing = self.timing
        if isinstance(timing, Every):
            first = timing.next_after(due)
            if first <= now:
                last = now - (now - timing.offset) % timing.seconds
                extra = (last - first) // timing.seconds + 1
                count += extra
                start = max(first, last - (keep - 1) * timing.seconds)
                recent.extend(range(start, last + 1, timing.seconds))
            next_due = timing.next_after(now)
        else:
            it = timing.after(due)
            t = next(it)
            while t <= now:
                recent.append(t)
                count += 1
                if count >= MAX_WALK:
                    t = timing.next_after(now)
                    break
                t = next(it)
            next_due = t
        if policy.policy == "skip":
            fire = [recent[-1]] if now - recent[-1] <= policy.grace else []
        else:
            fire = list(recent)
        if self.overlap and len(fire) > 1:  # no two jobs of an overlap-protected entry at once
            fire = fire[-1:]
        if len(fire) > MAX_PER_CLAIM:  # a long backlog: fire it in bounded claims, oldest first
            return Plan(fire[:MAX_PER_CLAIM], count - len(fire), fire[MAX_PER_CLAIM])
        return Plan(fire, count - len(fire), next_due)


def as_timing(cron: str | None, every: timedelta | int | float | None, tz: str, offset: int = 0) -> Timing:
    """``cron=`` or ``every=`` (exactly one) as a timing."""
    if (cron is None) == (every is None):
        raise ScheduleError("give exactly one of cron= (an expression) and every= (a timedelta or seconds)")
    if cron is not None:
        return Cron(cron, tz)
    seconds = every.total_seconds() if isinstance(every, timedelta) else float(every)  # type: ignore[arg-type]
    if seconds != int(seconds):
        raise ScheduleError(f"every= must be whole seconds, got {seconds}")
    return Every(int(seconds), offset)


@dataclass(frozen=True)
class ScheduledRun:
    """What a Python-function entry receives if it takes one argument."""

    name: str
    due: datetime
    job: Any


def function_handler(entry_name: str, func: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    """The worker handler of ``Laraq\\Schedule@<entry>``: calls ``func()`` or ``func(run)``."""
    wants_run = len(inspect.signature(func).parameters) > 0

    def argument(data: Any, job: Any) -> tuple[Any, ...]:
        if not wants_run:
            return ()
        due = data.get("due") if isinstance(data, dict) else None
        when = datetime.fromtimestamp(due, UTC) if isinstance(due, int | float) else datetime.now(UTC)
        return (ScheduledRun(entry_name, when, job),)

    if inspect.iscoroutinefunction(func):
        async def run_async(data: Any, job: Any) -> Any:
            return await func(*argument(data, job))

        return run_async

    def run(data: Any, job: Any) -> Any:
        return func(*argument(data, job))

    return run
