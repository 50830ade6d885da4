"""Checks a move makes before it takes anything: a source that does not exist (a misspelt prefix or
queue), and reserved jobs whose attempts are spent (Laravel's ``MaxAttemptsExceededException`` rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laraq.ops.inspect import JobView, discover_prefixes, discover_queues

if TYPE_CHECKING:
    from laraq.ops.migrate import Transfer

__all__ = ["SpentReport", "missing_source", "spent_reserved"]


def _exists(client: object, base: str) -> bool:
    suffixes = ("", ":delayed", ":reserved", ":notify")
    return bool(client.exists(*(base + s for s in suffixes)))  # type: ignore[attr-defined]


def missing_source(transfer: Transfer) -> str | None:
    """Why the source looks misspelt, or None.

    A queue with no key at all (no list, delayed, reserved or notify key), no held journal, and no
    keys at the destination either (so it was not moved already) is most likely a typo: the message
    lists the queues under the prefix and the prefixes that hold queues."""
    src, dst = transfer.source, transfer.dest
    if _exists(src.client, transfer.src_keys.base) or transfer.count():
        return None
    if _exists(dst.client, transfer.dst_keys.base):
        return None
    names = discover_queues(src.client, src.prefix)
    prefixes = sorted(p for p in discover_prefixes(src.client) if p != src.prefix)
    here = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") if names else "none"
    other = ", ".join(repr(p) for p in prefixes[:10]) if prefixes else "none"
    return (f"no queue {transfer.source_name!r} under prefix {src.prefix!r} on {src.redacted_url()}: "
            f"queues under that prefix: {here}; other prefixes holding queues: {other}. Nothing was moved "
            "(check the queue name and --prefix/--env-file)")


class SpentReport:
    """Reserved jobs whose next run would be past their tries: ``spent`` (``attempts >= maxTries``
    from the payload) and ``unknown`` (no ``maxTries`` in the payload: the worker's ``--tries`` decides)."""

    def __init__(self) -> None:
        self.spent: list[str] = []
        self.unknown: int = 0
        self.highest_unknown_attempts: int = 0

    def warnings(self) -> list[str]:
        out = []
        if self.spent:
            named = ", ".join(self.spent[:5]) + (", ..." if len(self.spent) > 5 else "")
            out.append(f"{len(self.spent)} reserved job(s) have spent their attempts (attempts >= maxTries in the "
                       f"payload): {named}. Moved, they fail at their next pickup with "
                       "MaxAttemptsExceededException, as Laravel rules; leave out --include-reserved to keep them "
                       "in the source")
        if self.unknown:
            out.append(f"{self.unknown} reserved job(s) carry no maxTries: with a destination worker's --tries at "
                       f"or below their attempts (up to {self.highest_unknown_attempts}) they fail at their next "
                       "pickup")
        return out


def spent_reserved(transfer: Transfer) -> SpentReport:
    """Look at the reserved members the transfer would take (empty unless it takes ``reserved``)."""
    report = SpentReport()
    if "reserved" not in transfer.states:
        return report
    for member in transfer.members_of("reserved"):
        view = JobView.from_member(transfer.source_name, "reserved", member, with_properties=False)
        if view.attempts is None:
            continue
        if view.max_tries:
            if view.attempts >= view.max_tries:
                report.spent.append(f"{view.name or '?'} {view.uuid or view.id or '?'} "
                                    f"({view.attempts}/{view.max_tries})")
        elif view.attempts >= 1:
            report.unknown += 1
            report.highest_unknown_attempts = max(report.highest_unknown_attempts, view.attempts)
    return report
