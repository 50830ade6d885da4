"""``bench/redis_cost.py`` runs every mode to the end: each worker drains all its jobs and exits 0.

Nothing here is timed: the bench's figures are read from its JSON only for what does not depend on the
host (every job gone, counters that moved, Horizon's records adding commands to each job).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, require_laravel


def test_every_mode_drains_its_jobs(tmp_path: Path) -> None:
    require_laravel("8")
    require_laravel("13")
    out = tmp_path / "cost.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "redis_cost.py"), "--jobs", "300", "--rounds", "1",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    runs = {run["mode"]: run for run in result["runs"]}
    assert set(runs) == {"default", "batched", "l13", "horizon", "horizon-batched", "artisan", "artisan-13",
                         "horizon-php"}
    for mode, run in runs.items():
        assert (run["exit_code"], run["left"]) == (0, 0), mode
        assert run["calls"] > run["jobs"] and run["redis_cpu_s"] > 0, mode
    # Horizon's job records and metrics are commands of their own on top of the queue's
    assert runs["horizon"]["calls"] > runs["default"]["calls"] + 5 * runs["horizon"]["jobs"]
    assert result["medians"]["default"]["redis_core_jobs_per_s"] > 0
