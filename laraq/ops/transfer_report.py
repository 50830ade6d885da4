"""What a ``move``/``copy`` run reports (:class:`TransferSummary`): per state what the destination
acknowledged, what was read back there, and one line per thing left undone with how to do it.
Only what was measured is said (see ``compat-docs/migrate.md``, "Warnings before harm").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NOT_CHECKED", "TransferSummary"]


#: Said once when a move or copy to another app did not look at that app's job classes.
NOT_CHECKED = ("  the destination app's job classes were not checked: --to-app DIR (or --to-schema FILE) leaves "
               "behind, and names, the jobs whose class it lacks")


def _count(counts: dict[str, int]) -> int:
    return sum(counts.values())


def _parts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "nothing"


@dataclass
class TransferSummary:
    """What a transfer did (or, for a dry run, would do), per state.

    ``transferred`` counts the members the destination acknowledged writing (its script returned 1);
    ``verified`` counts those found at the destination when the run ended (fewer only when workers
    there took some meanwhile). ``existing`` counts members a copy skipped because a job with the same
    uuid/id already sits at the destination; ``left_reserved`` the reserved members left in the source
    because ``reserved`` was not asked for.
    """

    mode: str
    source: str
    destination: str
    transferred: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    recovered: int = 0
    existing: dict[str, int] = field(default_factory=dict)
    verified: dict[str, int] | None = None
    left_reserved: int = 0
    #: of ``left_reserved``, how many have a reservation that has already expired (score in the past)
    left_reserved_expired: int = 0
    #: ``Class uuid`` of the first reserved members left (at most 5), to name them.
    left_reserved_jobs: list[str] = field(default_factory=list)
    retry_after: int | None = None
    #: of the jobs written but not found back, how many are reserved at the destination (measured)
    running_there: int = 0
    #: warnings given before the transfer (e.g. reserved jobs whose attempts are spent)
    warnings: list[str] = field(default_factory=list)
    #: a plan (``--dry-run``): nothing was written nor removed
    dry_run: bool = False
    #: False: bound for another app whose job classes were not looked at (None: not said here)
    classes_checked: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "dry_run": self.dry_run, "source": self.source, "destination": self.destination,
                "transferred": self.transferred, "verified_at_destination": self.verified,
                "skipped_by_filter": self.skipped, "already_at_destination": self.existing,
                "left_reserved": self.left_reserved, "left_reserved_expired": self.left_reserved_expired,
                "left_reserved_jobs": self.left_reserved_jobs,
                "recovered": self.recovered, "reserved_at_destination": self.running_there,
                "warnings": self.warnings, "classes_checked": self.classes_checked}

    def describe(self, *, dry_run: bool = False) -> str:
        """One summary line, then one line per thing left undone and how to do it."""
        done = _count(self.transferred)
        verb = ("would " + self.mode) if dry_run else ("copied" if self.mode == "copy" else "moved")
        lines = [f"{verb} {done} jobs ({_parts(self.transferred)}) from {self.source} to {self.destination}"]
        if self.verified is not None and done:
            seen = _count(self.verified)
            if seen == done:
                lines.append(f"  verified at the destination: {_parts(self.verified)}")
            else:
                gone = done - seen
                line = f"  {seen} of them are in the destination's queue keys now ({_parts(self.verified)})"
                if self.running_there:
                    line += f"; {self.running_there} are reserved there (workers there took them and are running them)"
                rest = gone - self.running_there
                if rest > 0:
                    line += (f"; {rest} were written and acknowledged by the destination and have left its ready "
                             "and delayed keys since (taken by a worker or another client there: laraq did not "
                             "remove them)")
                lines.append(line)
        if self.recovered:
            lines.append(f"  {self.recovered} of them were recovered from an interrupted run")
        if _count(self.existing) and self.mode == "move":
            lines.append(f"  {_count(self.existing)} {'are' if dry_run else 'were'} already at the destination (a job "
                         f"with the same uuid/id is there: {_parts(self.existing)}): not written again, "
                         f"{'would be ' if dry_run else ''}removed from the source, so each is in one place once")
        elif _count(self.existing):
            lines.append(f"  {_count(self.existing)} {'would be' if dry_run else 'were'} skipped: a job with the same "
                         f"uuid/id is already at the destination ({_parts(self.existing)}); "
                         "--allow-duplicates copies them anyway")
        if _count(self.skipped):
            lines.append(f"  {_count(self.skipped)} left in place (--filter, or a class the destination app lacks)")
        if self.left_reserved:
            wait = f"{self.retry_after} s" if self.retry_after is not None else "its timeout"
            named = ", ".join(self.left_reserved_jobs) + (", ..." if self.left_reserved > len(self.left_reserved_jobs)
                                                          else "")
            running = self.left_reserved - self.left_reserved_expired
            if not running:
                lines.append(f"  {self.left_reserved} reserved jobs left in the source ({named}) whose reservations "
                             "have all expired: no worker is running them, and only a worker of the source puts "
                             "them back in the queue (at its next pop); with none left there, --include-reserved "
                             "takes them")
            else:
                expired = (f"; {self.left_reserved_expired} of them have expired reservations (a worker of the "
                           "source puts those back at its next pop, or --include-reserved takes them)"
                           if self.left_reserved_expired else "")
                lines.append(f"  {self.left_reserved} reserved jobs left in the source (workers may be running "
                             f"them: {named}): --include-reserved takes them too, or re-run after retry_after "
                             f"({wait}), when the unfinished ones are back in the queue{expired}")
        if self.classes_checked is False:
            lines.append(NOT_CHECKED)
        return "\n".join(lines)
