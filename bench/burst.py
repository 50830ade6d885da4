"""Burst: every timer due in the same second; ``bench/timers.py --burst`` with its options.

    python3 bench/burst.py --quick     # 20,000 due together, laraq then artisan
    python3 bench/burst.py             # 100,000 due together
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timers import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--burst", *sys.argv[1:]]))
