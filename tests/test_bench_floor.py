"""``bench/drain.py`` with its ``floor`` variant: the worker and ``bench/floor.py`` (the default's Redis
traffic from a bare loop) each drain every job and leave no reservation or unstarted record behind.

Nothing is timed; the bench itself exits 1 when a run leaves anything in the queue's keys.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_floor_and_worker_drain_everything() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "drain.py"), "--jobs", "500", "--rounds", "1", "--",
                           "", "floor"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = [line.split()[0] for line in proc.stdout.splitlines() if " exit 0 " in line]
    assert rows == ["default", "floor"], proc.stdout
