"""How the bench turns runs into numbers: several runs of one row combined, rows run in interleaved
rounds, the best and median of a row's rounds, quantiles, and the p99 difference of two latency samples
with its bootstrap interval. No I/O here: :mod:`run` measures, this module only counts."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any


def combine_runs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two runs of one row as one: jobs/s over the work time of both (``work_s``, else ``seconds``),
    every other number the mean of the two (the largest for memory), and each run's jobs/s kept under
    ``runs_jobs_per_s``."""
    out: dict[str, Any] = {}
    for key, value in a.items():
        other = b.get(key)
        if key in ("jobs", "rc", "left", "error", "concurrency", "breakdown_per_job", "batch"):
            out[key] = value if key != "rc" else (value or other)
        elif isinstance(value, (int, float)) and isinstance(other, (int, float)):
            out[key] = max(value, other) if "rss" in key else (value + other) / 2
        else:
            out[key] = value
    seconds = a.get("work_s", a.get("seconds", 0.0)) + b.get("work_s", b.get("seconds", 0.0))
    out["jobs_per_s"] = (a["jobs"] + b["jobs"]) / seconds if seconds > 0 else 0.0
    out["runs_jobs_per_s"] = [*a.get("runs_jobs_per_s", [a["jobs_per_s"]]), b["jobs_per_s"]]
    if "error" in b:
        out["error"] = b["error"]
    return out


def interleaved_rounds(items: list[tuple[str, Callable[[], dict]]], rounds: int,
                       say: Callable[[str], None]) -> dict[str, list[dict]]:
    """Run every measurement ``rounds`` times, in rounds that change the order each time.

    On a shared host the load moves while the rows run; one run per row in a fixed order lets the load
    of one moment, or a row's place in the sequence, decide a ratio. The rounds come in pairs: one in
    the list's order from some start, then the same sequence backwards, so for any two rows each runs
    first equally often and a load that rises or falls steadily through a pair weighs on both alike
    (a rotation alone keeps every pair in one order, and in the 03:58 run a load falling through each
    round favoured whichever row came later). Each pair starts ``len(items) / pairs`` further along the
    list, moving every row through the sequence. Each row's runs are kept so that ratios can use the
    best run of each side (noise only ever slows a run down) and the median beside it. Returns each
    key's runs, in the order they ran.
    """
    runs: dict[str, list[dict]] = {key: [] for key, _ in items}
    for round_no, order in enumerate(round_orders(len(items), rounds)):
        for index in order:
            key, measure = items[index]
            row = measure()
            runs[key].append(row)
            say(f"{key} (round {round_no + 1}/{rounds}): {row['jobs_per_s']:.0f} jobs/s")
    return runs


def round_orders(count: int, rounds: int) -> list[list[int]]:
    """The order of ``count`` rows in each of ``rounds`` rounds (see :func:`interleaved_rounds`)."""
    if count <= 0:
        return [[] for _ in range(max(0, rounds))]
    pairs = max(1, (rounds + 1) // 2)
    step = max(1, count // pairs)
    orders = []
    for round_no in range(max(0, rounds)):
        start = (round_no // 2 * step) % count
        order = [(start + i) % count for i in range(count)]
        orders.append(order if round_no % 2 == 0 else order[::-1])
    return orders


def round_stats(row: dict | None) -> tuple[float, float] | None:
    """(best, median) jobs/s of a row's interleaved rounds; None when it has none."""
    values = (row or {}).get("rounds_jobs_per_s")
    if not values:
        return None
    return max(values), statistics.median(values)


def p99_difference(mine: list[float], theirs: list[float], resamples: int = 2000) -> dict:
    """``mine``'s p99 minus ``theirs`` (ms), and the 95 % bootstrap interval of that difference.

    A p99 of a few hundred samples is an order statistic: for a polling worker it mostly says where
    the random pushes fell in each worker's sleep, and it moves by about half a millisecond from run to
    run on that alone. The interval says whether a difference is larger than that."""
    def p99(values: list[float]) -> float:
        return quantile(sorted(values), 0.99)

    rng = random.Random(99)
    diffs = sorted(p99(rng.choices(mine, k=len(mine))) - p99(rng.choices(theirs, k=len(theirs)))
                   for _ in range(resamples))
    return {"diff": p99(mine) - p99(theirs), "low": diffs[int(0.025 * resamples)],
            "high": diffs[int(0.975 * resamples) - 1]}


def quantile(ordered: list[float], p: float) -> float:
    """The ``p`` quantile of sorted values: the smallest value with at least ``p`` of them at or below it."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def pct(values: list[float]) -> dict:
    if not values:
        return {}
    v = sorted(values)
    return {"p50_ms": quantile(v, 0.50) * 1000, "p90_ms": quantile(v, 0.90) * 1000,
            "p99_ms": quantile(v, 0.99) * 1000, "max_ms": v[-1] * 1000, "mean_ms": statistics.fmean(v) * 1000}
