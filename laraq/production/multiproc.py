"""Prometheus' multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``), chosen before the library loads.

``prometheus_client`` reads the variable once, when it is first imported, to pick how its metrics store
values (in memory, or in memory-mapped files shared by the workers of a host). So ``laraq work
--metrics-dir`` sets it here, from a module that does not import the library, and only then imports
:mod:`laraq.production.metrics`.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MULTIPROC_ENV", "multiprocess_dir", "use_multiprocess_dir"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The multiprocess directory in effect (``PROMETHEUS_MULTIPROC_DIR``), if any."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


def use_multiprocess_dir(path: str | os.PathLike[str]) -> None:
    """Switch this process to multiprocess mode (before ``prometheus_client`` is imported)."""
    Path(path).mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(path)
