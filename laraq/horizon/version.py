"""Which Horizon an app runs, and what each release changed in the records laraq writes.

The version is read the way Composer records it: ``vendor/composer/installed.json`` (Composer 1's list
or Composer 2's ``{"packages": [...]}``), else ``composer.lock``; ``LARAQ_HORIZON_VERSION`` overrides
both. An app whose Horizon cannot be read is treated as the newest release laraq was checked against
(:data:`NEWEST`), which is what ``composer require laravel/horizon`` installs today.

The releases after 5.29 that change what a worker or a dispatcher writes (read in Horizon's source and
checked against the live 5.48.1 tree; ``compat-docs/horizon.md`` describes them):

* 5.34: ``silenced_tags`` in ``config/horizon.php`` (``JobPayload::shouldBeSilenced`` also silences a
  job carrying one of those tags);
* 5.42: ``JobPending`` fires *before* the push (``StoreJob`` listens to it), ``JobPushed`` after, so a
  fast worker's ``reserved``/``completed`` is never overwritten by a late ``pending``;
* 5.45.1: a ``delay`` field in the job hash, the release delay on ``MarkJobAsReleased`` and 0 when
  ``JobsMigrated`` moves due jobs back;
* 5.45.6: ``RedisQueue::later`` passes the delay to ``createPayload``, so on Laravel 12.11+ (whose
  payload has a ``delay`` key) a delayed dispatch carries its delay instead of ``null``;
* 5.46: Horizon on a Redis Cluster connection wraps its prefix in a hash tag (``{prefix}``) unless it
  already has one, so every Horizon key shares one slot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NEWEST", "HorizonVersion", "detect_horizon_version"]

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class HorizonVersion:
    """One Horizon release, e.g. ``HorizonVersion.parse("v5.48.1")``."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, text: str) -> HorizonVersion:
        m = _VERSION_RE.match(text.strip())
        if not m:
            raise ValueError(f"not a Horizon version: {text!r} (expected e.g. 5.29.1)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        return (self.major, self.minor, self.patch) >= (major, minor, patch)

    # -- what changed, by release ------------------------------------------------------------------

    @property
    def has_silenced_tags(self) -> bool:
        """5.34: ``horizon.silenced_tags``."""
        return self.at_least(5, 34)

    @property
    def pending_before_push(self) -> bool:
        """5.42: the pending record is written before the job is pushed."""
        return self.at_least(5, 42)

    @property
    def job_hash_delay(self) -> bool:
        """5.45.1: ``delay`` in the job hash (release delay; 0 on migrate)."""
        return self.at_least(5, 45, 1)

    @property
    def delay_in_delayed_payload(self) -> bool:
        """5.45.6: a delayed dispatch's payload carries its delay (Laravel 12.11+ payloads)."""
        return self.at_least(5, 45, 6)

    @property
    def cluster_hash_tag(self) -> bool:
        """5.46: on a Redis Cluster connection the prefix is wrapped in ``{}``."""
        return self.at_least(5, 46)


#: The oldest and newest Horizon releases laraq was proven against live.
OLDEST = HorizonVersion(5, 29, 1)
NEWEST = HorizonVersion(5, 48, 1)


def _from_packages(data: object) -> str | None:
    packages = data.get("packages", []) if isinstance(data, dict) else data
    for pkg in packages if isinstance(packages, list) else []:
        if isinstance(pkg, dict) and pkg.get("name") == "laravel/horizon":
            return str(pkg.get("version", ""))
    return None


def detect_horizon_version(env: Mapping[str, str], base_path: Path | None) -> tuple[HorizonVersion, str]:
    """The app's Horizon release and where it was read (``"assumed ..."`` when it could not be)."""
    override = env.get("LARAQ_HORIZON_VERSION")
    if override:
        return HorizonVersion.parse(override), "LARAQ_HORIZON_VERSION"
    if base_path is not None:
        for rel in ("vendor/composer/installed.json", "composer.lock"):
            try:
                data = json.loads((base_path / rel).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            text = _from_packages(data)
            if text:
                try:
                    return HorizonVersion.parse(text), rel
                except ValueError:
                    continue  # a branch alias such as dev-master: not a release
    return NEWEST, f"assumed {NEWEST} (no laravel/horizon in vendor/composer/installed.json or composer.lock)"
