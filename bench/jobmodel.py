#!/usr/bin/env python3
"""The job model's per-job cost: each path laraq takes for PHP's part of a job, next to artisan's cost
for the same job, measured in one run on one Redis (Laravel 8 fixture app).

    python3 bench/jobmodel.py --quick     # about a minute
    python3 bench/jobmodel.py             # more jobs per case

For each case N jobs are dispatched by PHP and drained to the end; the number is wall time per job,
the drainer's start-up taken off: artisan's boot measured on an empty queue right before (best of two),
laraq's worker build and its PHP process' boot left out of the timing. Best of 2 (quick) or 3 rounds. Cases:

* ``plain``: EchoJobs with no chain or batch (the handler alone: the floor of every path);
* ``batch``: items of one batch with ``then``/``finally`` callbacks;
* ``chain``: two-step chains (the number is per step).

Paths: ``artisan`` (``queue:work --stop-when-empty``), ``in-process`` (laraq with ``--php-app``: the app's
``CallQueuedHandler`` steps in laraq's PHP process), ``hand-off`` (laraq without the app: data-only batch
counts, the rest as continuations, plus artisan's time to run those continuations). Ratios to artisan
are the result; absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import RedisServer  # noqa: E402
from phpapp import PhpApp  # noqa: E402
from test_jobmodel_inprocess import handlers  # noqa: E402

from laraq.cli.work import build_worker, default_params  # noqa: E402


def artisan(app: PhpApp, queues: str) -> float:
    started = time.perf_counter()
    app.artisan("queue:work", "redis", f"--queue={queues}", "--stop-when-empty", "--sleep=0", check=True, timeout=600)
    return time.perf_counter() - started


def laraq(app: PhpApp, queue: str, *, in_process: bool) -> float:
    extra: dict[str, Any] = {"php_app": str(app.path)} if in_process else {"php_queue": "php"}
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue=queue, **extra)
    worker = build_worker(params, env=app.env, app=handlers)
    try:
        if worker.callqueued.steps.php is not None:
            worker.callqueued.steps.php.ping()  # the boot is start-up, like artisan's
        started = time.perf_counter()
        worker.daemon()
    finally:
        if worker.callqueued.steps.php is not None:
            worker.callqueued.steps.php.close()
        worker.close()
    return time.perf_counter() - started


def dispatch(app: PhpApp, case: str, queue: str, n: int) -> int:
    """Dispatch ``n`` jobs of ``case``; returns how many jobs run (chain steps count one each)."""
    if case == "plain":
        app.tool("dispatch", "echo", f"--queue={queue}", f"--count={n}", "--args=" + json.dumps({"args": {"q": queue}}))
        return n
    if case == "batch":
        steps = [{"args": {"q": queue, "n": i}, "mode": "ok"} for i in range(n)]
        app.tool("batch-callbacks", f"--queue={queue}", "--steps=" + json.dumps(steps))
        return n
    for i in range(n // 2):
        steps = [{"args": {"q": queue, "n": 1, "c": i}, "mode": "ok"}, {"args": {"q": queue, "n": 2, "c": i}, "mode": "ok"}]
        app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(steps))
    return 2 * (n // 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs per case (300)")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    n = 300 if args.quick else 800
    rounds = 2 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="laraq-bench-jm-") as tmp:
        server = RedisServer(Path(tmp))
        try:
            app = PhpApp(server.port, version="8", workdir=Path(tmp) / "app")
            client = server.client()
            boot: dict[str, float] = {}
            results: dict[str, dict[str, float]] = {}
            for case in ("plain", "batch", "chain"):
                row: dict[str, list[float]] = {}
                for r in range(rounds):
                    # each drain next to an empty drain of the same path (start-up taken off; the machine is noisy)
                    empty = min(artisan(app, "empty"), artisan(app, "empty"))
                    jobs = dispatch(app, case, f"a{r}", n)
                    row.setdefault("artisan", []).append((artisan(app, f"a{r}") - empty) / jobs)
                    boot["artisan"] = min(boot.get("artisan", empty), empty)
                    empty = laraq(app, "empty", in_process=True)
                    jobs = dispatch(app, case, f"b{r}", n)
                    row.setdefault("in-process", []).append((laraq(app, f"b{r}", in_process=True) - empty) / jobs)
                    boot["in-process"] = min(boot.get("in-process", empty), empty)
                    empty_laraq = laraq(app, "empty", in_process=False)
                    empty_php = min(artisan(app, "empty"), artisan(app, "empty"))
                    jobs = dispatch(app, case, f"c{r}", n)
                    spent = laraq(app, f"c{r}", in_process=False) - empty_laraq
                    php_side = 0.0
                    while client.llen(app.prefix + "queues:php"):
                        php_side += artisan(app, "php") - empty_php
                        if client.llen(app.prefix + f"queues:c{r}"):  # chains: the next steps PHP queued
                            spent += laraq(app, f"c{r}", in_process=False) - empty_laraq
                    row.setdefault("hand-off (laraq)", []).append(spent / jobs)
                    row.setdefault("hand-off (+ PHP continuations)", []).append((spent + php_side) / jobs)
                    boot["hand-off"] = min(boot.get("hand-off", empty_laraq), empty_laraq)
                results[case] = {k: min(v) for k, v in row.items()}
        finally:
            server.proc.kill()
            server.proc.wait()
    print(f"per-job wall time, ms (n={n} per case, best of {rounds}; start-up taken off, fastest: "
          + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in boot.items()) + ")")
    columns = ["artisan", "in-process", "hand-off (laraq)", "hand-off (+ PHP continuations)"]
    print(f"{'case':8}" + "".join(f"{c:>32}" for c in columns))
    for case, row in results.items():
        cells = []
        for c in columns:
            ratio = row[c] / row["artisan"] if row["artisan"] > 0 else float("nan")
            cells.append(f"{row[c] * 1000:8.2f} ({ratio:4.2f}x artisan)")
        print(f"{case:8}" + "".join(f"{cell:>32}" for cell in cells))
    if args.json:
        Path(args.json).write_text(json.dumps({"n": n, "boot": boot, "per_job": results}, indent=2))


if __name__ == "__main__":
    main()
