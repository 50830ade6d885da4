"""Which Laravel a project runs: the framework version read from the project directory.

Mirrors what ``Illuminate\\Foundation\\Application::VERSION`` says for the app: read from
``vendor/laravel/framework`` (the constant), else ``composer.lock``, else from a framework the app's entry
scripts load by path (Debian's ``/usr/share/php/Illuminate``, a shared ``vendor/``).
:func:`detect_version` says where the version came from or why none was found.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from laraq.protocol.versions import LaravelVersion

__all__ = ["VersionDetection", "detect_laravel_version", "detect_version"]

_VERSION_CONST_RE = re.compile(r"const\s+VERSION\s*=\s*'([^']+)'")
#: a PHP string literal naming an autoload file, alone or after ``__DIR__.``
_AUTOLOAD_RE = re.compile(r"(__DIR__\s*\.\s*)?['\"]([^'\"]*(?:Illuminate|vendor)/autoload\.php)['\"]")
_FRAMEWORK_APP = "laravel/framework/src/Illuminate/Foundation/Application.php"


@dataclass(frozen=True)
class VersionDetection:
    """The outcome of looking for a project's framework: the version and where it was read, or why not."""

    version: LaravelVersion | None
    source: str

    def __bool__(self) -> bool:
        return self.version is not None


def _read_version_const(path: Path) -> LaravelVersion | None:
    try:
        m = _VERSION_CONST_RE.search(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    if not m:
        return None
    try:
        return LaravelVersion.parse(m.group(1).split("-")[0])
    except ValueError:
        return None


def _composer_lock_version(path: Path) -> LaravelVersion | None:
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for pkg in lock.get("packages", []) if isinstance(lock, dict) else []:
        if isinstance(pkg, dict) and pkg.get("name") == "laravel/framework":
            try:
                return LaravelVersion.parse(str(pkg.get("version", "")).split("-")[0])
            except ValueError:
                return None
    return None


def _autoload_targets(base: Path) -> list[Path]:
    """``Application.php`` files that the app's entry scripts load a framework from.

    An app on a system-wide framework (Debian's ``php-laravel-framework`` in ``/usr/share/php``, or a
    ``vendor/`` shared by several apps) has no ``vendor/laravel/framework`` of its own; its ``artisan``,
    ``bootstrap/*.php`` or ``public/index.php`` require that framework's ``autoload.php`` by path.
    """
    found: list[Path] = []
    scripts = [base / "artisan", base / "public" / "index.php", *sorted((base / "bootstrap").glob("*.php"))]
    for script in scripts:
        try:
            text = script.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in _AUTOLOAD_RE.finditer(text):
            raw = m.group(2)
            autoload = (script.parent / raw.lstrip("/")) if m.group(1) else Path(raw)
            if not autoload.is_absolute():
                autoload = script.parent / autoload
            root = autoload.parent
            if root.name == "Illuminate":
                found.append(root / "Foundation" / "Application.php")
            else:  # a vendor/autoload.php
                found.append(root / _FRAMEWORK_APP)
    return found


def detect_version(base_path: str | Path) -> VersionDetection:
    """Find the Laravel version of the project in ``base_path``, saying where it came from or why not.

    Looked at in order: ``vendor/laravel/framework`` (``Application::VERSION``), ``composer.lock``, and a
    framework that the entry scripts load by path (Debian's ``/usr/share/php/Illuminate``, a shared
    ``vendor/``).
    """
    base = Path(base_path)
    candidates = [base / "vendor" / _FRAMEWORK_APP, base / "vendor/php/Illuminate/Foundation/Application.php"]
    for candidate in candidates:
        v = _read_version_const(candidate)
        if v is not None:
            return VersionDetection(v, f"detected from {candidate}")
    lock = base / "composer.lock"
    v = _composer_lock_version(lock)
    if v is not None:
        return VersionDetection(v, f"detected from {lock}")
    for candidate in _autoload_targets(base):
        v = _read_version_const(candidate)
        if v is not None:
            return VersionDetection(v, f"detected from {candidate} (the framework {base} loads)")
    looked = "vendor/laravel/framework, composer.lock, the framework artisan/bootstrap load"
    if not (base / "artisan").exists() and not (base / "composer.json").exists():
        return VersionDetection(None, f"{base} is not a Laravel project (no artisan, no composer.json)")
    return VersionDetection(None, f"no Laravel framework found for {base} (looked at {looked})")


def detect_laravel_version(base_path: str | Path) -> LaravelVersion | None:
    """The installed framework version of a Laravel project dir (``Application::VERSION``), if found."""
    return detect_version(base_path).version
