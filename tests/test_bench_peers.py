"""``bench/peers/run.py --quick``: every peer ``bench/peers/setup.sh`` installed, laraq and artisan each
complete all their jobs by their own counters, and the JSON holds the rows. No timing is asserted.

Without the peers directory (``$LARAQ_PEERS_DIR``, default ``~/.cache/laraq-bench-peers``) the test skips
locally and fails under CI, where ``.ci/run`` runs the setup; under CI a peer the setup could not install
fails it too, with the setup's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IN_CI, require

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = Path(os.environ.get("LARAQ_PEERS_DIR") or Path.home() / ".cache" / "laraq-bench-peers")

pytestmark = pytest.mark.php  # the artisan rows run queue:work


def _status() -> dict[str, str]:
    path = PEERS_DIR / "status.txt"
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        name, _, rest = line.partition(" ")
        out[name] = rest
    return out


def test_quick_run_completes_every_job(tmp_path: Path) -> None:
    status = _status()
    require(bool(status), f"the peers are not set up in {PEERS_DIR}: bash bench/peers/setup.sh")
    missing = {name: why for name, why in status.items() if not why.startswith("ok")}
    if missing and IN_CI:
        pytest.fail(f"peers the setup could not install: {missing}")
    installed = {name for name, why in status.items() if why.startswith("ok")} | {"laraq"}
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, "bench/peers/run.py", "--quick", "--json", str(out),
                           "--keep", str(tmp_path / "logs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    runs = data["runs"]
    for run in runs:
        assert run["complete"], f"{run['system']} {run['mode']} ({run['kind']}): {run}"
        assert run["completed"] == run["jobs"] and run["failed"] == 0 and run["left"] == 0
    noop = {r["system"] for r in data["summary"] if r["kind"] == "noop"}
    assert noop == installed, (noop, installed)
    io = {r["system"] for r in data["summary"] if r["kind"] != "noop"}
    assert io == installed - {"rq", "artisan"}, io
    assert {r["kind"] for r in runs} == {"noop", "io_async", "io_sync"}
    assert set(data["skipped"]) == set(missing) | {f"{k} (I/O)" for k in ("rq", "artisan") if k not in missing}
    assert data["loadavg_before"] and data["loadavg_after"]
    assert proc.returncode == 0, proc.stderr[-3000:]
