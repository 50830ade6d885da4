"""``python -m laraq``: the ``laraq`` command, for an environment whose scripts directory is not on PATH."""

from laraq.cli import main

main()
