"""``python -m laraq.cli``: the same as ``laraq`` (what bench/run.py falls back to)."""

from laraq.cli import main

main()
