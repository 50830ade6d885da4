#!/usr/bin/env python3
"""A long differential fuzz of laraq's PHP readers: C build vs pure-Python vs the reference.

The suite (``tests/test_codec_differential.py``) runs a bounded, seeded slice of the same comparison on
every run; this script runs as many inputs as asked, for hunting. Each input is a wire-corpus command or a
random PHP value written by ``dumps``, damaged 1-3 times (bytes replaced, inserted, deleted, numbers
pushed to and past the 64-bit bounds). For each input every fast reader must give the reference's value
exactly (types, key order, float bits, sharing) or step aside, and ``loads``/``loads_php_arrays`` must give
the reference's value or raise ``PHPSerializeError`` - nothing else.

    python3 scripts/fuzz_codec.py --inputs 1000000 --seed 7

Prints the number of inputs run and every difference found (the first 20 in full); exits 1 on any.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _random_value(rng: random.Random, obj: type, depth: int) -> object:
    """A random PHP value: scalars at the 64-bit and float edges, lists, maps and objects."""
    kind = rng.randrange(9 if depth > 0 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), rng.randrange(-(2**63), 2**63)])
    if kind == 2:
        return rng.choice([0.0, -0.0, 0.1, 1e300, -1e-300, float("inf"), float("nan"), rng.random()])
    if kind == 3:
        return "".join(rng.choice('ab"; \x00\u00e9{}:') for _ in range(rng.randrange(8)))
    if kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(5)))
    if kind == 5:
        return rng.choice(["", "s:1:\"x\";", "i:1;"])
    n = rng.randrange(4)
    if kind == 6:
        return [_random_value(rng, obj, depth - 1) for _ in range(n)]
    if kind == 7:
        return {rng.choice([rng.randrange(-3, 9), f"k{rng.randrange(9)}"]): _random_value(rng, obj, depth - 1)
                for _ in range(n)}
    return obj(rng.choice(["A", "App\\Jobs\\J", "stdClass"]),
               {rng.choice(["x", "y", "\x00*\x00p", "\x00A\x00q"]): _random_value(rng, obj, depth - 1) for _ in range(n)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200_000, help="how many inputs to run (default 200000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = parser.parse_args()
    sys.setrecursionlimit(20_000)  # the comparison recurses through values up to max_depth (4096) deep

    import test_codec_differential as diff  # the suite's comparison, so both check the same thing

    from laraq.protocol.serializer import PHPObject, dumps

    if diff.C_LOADS is None:
        print("warning: no C build (or LARAQ_PURE_PYTHON=1): only the pure-Python readers are compared")
    rng = random.Random(args.seed)
    sources = [c for _, c in diff.COMMANDS]
    values = [dumps(_random_value(rng, PHPObject, 3)) for _ in range(500)]
    pool = sources + values + list(diff.EDGES)
    found: list[tuple[bytes, str]] = []
    started = time.monotonic()
    for n in range(1, args.inputs + 1):
        data = rng.choice(pool)
        for _ in range(rng.randint(0, 3)):
            data = diff.mutate(rng, data)
        try:
            diff.check(data)
        except AssertionError as exc:
            found.append((data, str(exc).splitlines()[0]))
            if len(found) <= 20:
                print(f"DIFFERENCE: {exc}".splitlines()[0][:400])
        except RecursionError:
            found.append((data, "RecursionError"))
        if n % 100_000 == 0:
            print(f"{n} inputs, {len(found)} differences, {time.monotonic() - started:.0f} s", flush=True)
    print(f"done: {args.inputs} inputs (seed {args.seed}), {len(found)} differences, "
          f"{time.monotonic() - started:.0f} s, C build {'on' if diff.C_LOADS else 'off'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
