"""PHP codec speed (the numbers tests never assert): corpus commands per reader, and a 1 MB round trip.

    python3 bench/serializer.py [--rounds N] [--repeat R]

Rows, per corpus command (best of ``--repeat`` runs of ``--rounds`` passes, the rows interleaved):

* ``loads``: the public reader (the pure-Python fast reader, then the reference where it steps aside);
* ``reference``: the reference reader alone (``phpread.decode(fast=False)``);
* ``loads_php_arrays``: what the worker runs per job (C when built and ``LARAQ_PURE_PYTHON`` is unset);
* ``... PHPArray, pure``: the same without C, with and without the fast reader.

The gap between ``reference`` and ``loads`` is what keeps the fast reader (see ``laraq/protocol/phpread.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from laraq.protocol import phparray, phpread  # noqa: E402
from laraq.protocol.phparray import PHPArray, loads_php_arrays  # noqa: E402
from laraq.protocol.serializer import dumps, loads  # noqa: E402


def corpus_commands() -> list[bytes]:
    found = []
    for path in sorted((ROOT / "fixtures" / "laravel-payloads").rglob("*.json")):
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            continue
        command = doc.get("data", {}).get("command") if isinstance(doc, dict) and isinstance(doc.get("data"), dict) \
            else None
        if isinstance(command, str) and command.startswith("O:"):
            found.append(command.encode())
    return found


def readers() -> dict[str, Callable[[bytes], Any]]:
    rows: dict[str, Callable[[bytes], Any]] = {
        "loads": loads,
        "reference": lambda d: phpread.decode(d, fast=False),
        "loads_php_arrays" + (" (C)" if phparray._c_pairs_loads is not None else " (pure)"): loads_php_arrays,
        "PHPArray, pure, fast reader + reference": lambda d: phpread.decode(d, array=PHPArray),
        "PHPArray, pure, reference alone": lambda d: phpread.decode(d, array=PHPArray, fast=False),
    }
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    commands = corpus_commands()
    rows = readers()
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(args.repeat):
        for name, read in rows.items():
            start = time.perf_counter()
            for _ in range(args.rounds):
                for command in commands:
                    read(command)
            best[name] = min(best[name], (time.perf_counter() - start) / max(1, args.rounds * len(commands)))
    print(f"corpus: {len(commands)} commands, {sum(map(len, commands)) / max(1, len(commands)):.0f} bytes on average")
    for name, seconds in best.items():
        print(f"  {name:45} {seconds * 1e6:6.1f} µs per command")
    big = dumps({"rows": [{"id": i, "name": f"row {i}", "ratio": i / 7, "tags": ["a", "b"]} for i in range(20000)]})
    start = time.perf_counter()
    assert dumps(loads(big)) == big
    print(f"round trip of {len(big) / 1e6:.1f} MB: {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
