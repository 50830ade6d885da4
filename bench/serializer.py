"""PHP serializer speed (the numbers tests never assert): corpus commands per second and a 1 MB round trip.

    python3 bench/serializer.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    commands = corpus_commands()
    start = time.perf_counter()
    for _ in range(args.rounds):
        for command in commands:
            loads(command)
    per = (time.perf_counter() - start) / max(1, args.rounds * len(commands))
    print(f"corpus: {len(commands)} commands, {per * 1e6:.1f} µs per command")
    big = dumps({"rows": [{"id": i, "name": f"row {i}", "ratio": i / 7, "tags": ["a", "b"]} for i in range(20000)]})
    start = time.perf_counter()
    assert dumps(loads(big)) == big
    print(f"round trip of {len(big) / 1e6:.1f} MB: {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
