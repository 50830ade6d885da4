"""Whole-stack moves: every queue under a prefix (or a list of queues) in one command with one report,
and the optional check of the jobs' classes against the destination app before anything moves.

:class:`StackMove` builds one :class:`laraq.ops.migrate.Transfer` per queue and runs them in turn
after checking them all (destination credentials, held journals, payloads the destination's Laravel
cannot run). :func:`known_classes` reads the destination app's job classes from a ``laraq schema``
export (:func:`laraq.bus.schema.load_schema_file`) or from the app itself (:func:`export_schema`, which
runs PHP); a job whose class is not among them would fail there as an incomplete object, so it stays in
the source (listed by class and count) unless ``include_unknown``. Framework classes
(``Illuminate\\...``: queued closures, listeners, mailables, notifications, broadcasts) exist in every app.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laraq.bus.schema import export_schema, load_schema_file, parse_schema
from laraq.ops.inspect import JobView
from laraq.ops.migrate import Transfer, TransferSummary
from laraq.ops.transfer_report import NOT_CHECKED
from laraq.protocol.queue import RedisQueue

__all__ = ["StackMove", "StackReport", "job_class", "known_classes"]


def known_classes(*, schema_file: str | Path | None = None, app_path: str | Path | None = None,
                  php: str = "php") -> set[str]:
    """The job classes of the destination app: from a ``laraq schema`` file, or by running its exporter."""
    if schema_file is not None:
        jobs, _ = load_schema_file(schema_file)
    elif app_path is not None:
        jobs, _ = parse_schema(export_schema(app_path, php=php))
    else:
        raise ValueError("give a schema file or an app path")
    return set(jobs)


def job_class(member: bytes) -> str | None:
    """The PHP class a payload needs: ``data.commandName`` for a queued command, else the class of a
    ``Class@method`` job; None for an unreadable member."""
    view = JobView.from_member("", "pending", member, with_properties=False)
    if view.error:
        return None
    if view.job and "CallQueuedHandler" not in view.job:
        return view.job.split("@", 1)[0]
    return view.name


def unknown_class(name: str | None, known: set[str]) -> bool:
    """Whether a job of class ``name`` cannot run in an app whose job classes are ``known``."""
    return _unknown(name, known)


def _unknown(name: str | None, known: set[str]) -> bool:
    if not name:
        return False  # not a job payload: the move takes it as it is (doctor names such members)
    return not (name in known or name.startswith("Illuminate\\"))


@dataclass
class StackReport:
    """One report for every queue of a stack move."""

    summaries: list[TransferSummary] = field(default_factory=list)
    #: class -> jobs left in the source because the destination app lacks the class
    unknown: Counter[str] = field(default_factory=Counter)
    include_unknown: bool = False
    warnings: list[str] = field(default_factory=list)
    #: whether the destination app's classes were checked (``--to-app``/``--to-schema``); None: the same app
    classes_checked: bool | None = None
    dry_run: bool = False

    def totals(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for s in self.summaries:
            out.update(s.transferred)
        return dict(out)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "classes_checked": self.classes_checked,
                "queues": [s.to_dict() for s in self.summaries], "transferred": self.totals(),
                "unknown_classes": dict(self.unknown), "unknown_moved": self.include_unknown,
                "warnings": self.warnings}

    def describe(self, *, dry_run: bool = False) -> str:
        total = sum(self.totals().values())
        mode = self.summaries[0].mode if self.summaries else "move"
        verb = ("would " + mode) if dry_run else ("copied" if mode == "copy" else "moved")
        parts = ", ".join(f"{n} {s}" for s, n in self.totals().items() if n) or "nothing"
        lines = [f"{verb} {total} jobs ({parts}) from {len(self.summaries)} queue(s)"]
        for summary in self.summaries:
            lines.extend("  " + line for line in summary.describe(dry_run=dry_run).splitlines())
        if self.unknown:
            listed = ", ".join(f"{cls} ({n})" for cls, n in self.unknown.most_common())
            if self.include_unknown:
                lines.append(f"  taken although the destination app has no such class (--include-unknown): {listed}")
            else:
                lines.append(f"  left in the source, their class is not in the destination app: {listed} "
                             "(--include-unknown takes them anyway)")
        if self.classes_checked is False:
            lines.append(NOT_CHECKED)
        return "\n".join(lines)


class StackMove:
    """Transfers of several queues from ``source`` to ``dest`` (same queue names), checked together first."""

    def __init__(self, source: RedisQueue, dest: RedisQueue, names: Iterable[str], *, move: bool = True,
                 states: Iterable[str] = ("pending", "delayed"), class_filter: str | None = None,
                 allow_duplicates: bool = False, known: set[str] | None = None, include_unknown: bool = False) -> None:
        self.known, self.include_unknown = known, include_unknown
        self.transfers = [Transfer(source, name, dest, name, move=move, states=states, class_filter=class_filter,
                                   allow_duplicates=allow_duplicates) for name in names]
        self.report = StackReport(include_unknown=include_unknown, classes_checked=True if known is not None else None)
        if known is not None:
            for transfer in self.transfers:
                self._classify(transfer, known)

    def _classify(self, transfer: Transfer, known: set[str]) -> None:
        """Count the unknown classes; unless ``include_unknown``, the transfer leaves those jobs in place."""
        for state in transfer.states:
            for member in transfer.members_of(state):
                name = job_class(member)
                if _unknown(name, known):
                    self.report.unknown[name or "?"] += 1
        if not self.include_unknown:
            transfer.keep = lambda member: _unknown(job_class(member), known)

    def preflight(self) -> None:
        for transfer in self.transfers:
            transfer.preflight()

    def incompatible(self) -> list[str]:
        return [f"{t.source_name}: {problem}" for t in self.transfers for problem in t.incompatible()]

    def run(self, progress: Callable[[int], Any] | None = None, *, dry_run: bool = False) -> StackReport:
        self.report.dry_run = dry_run
        for transfer in self.transfers:
            self.report.summaries.append(transfer.plan() if dry_run else transfer.run(progress=progress))
        return self.report

    def count(self) -> int:
        return sum(t.count() for t in self.transfers)
