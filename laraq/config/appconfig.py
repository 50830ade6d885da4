"""The app's own configuration (``config()``), found the way Laravel finds it.

Laravel's ``LoadConfiguration`` bootstrapper uses the cached config (``bootstrap/cache/config.php``, or
``APP_CONFIG_CACHE``; ``Application::getCachedConfigPath``) when it exists, and otherwise runs every
``config/*.php`` file, whose ``env()`` calls read ``.env`` and the environment. laraq reads the same
values, in this order (:func:`load_app_config`):

1. the cached config, parsed without running PHP (:mod:`laraq.config.varexport`);
2. the app booted once by ``php`` (the console kernel's bootstrappers, as ``artisan`` runs them), which
   prints the subtrees laraq needs as JSON; the result is kept for the life of the process;
3. a file exported where the app lives (``laraq config --from APP -o FILE``; :func:`export_app_config`),
   given as ``--app-config FILE`` / ``LARAQ_APP_CONFIG``.

:class:`AppConfig` holds those subtrees (``app``, ``database``, ``queue``, ``cache``, ``horizon``) and
says where they came from. :mod:`laraq.config.effective` lays them over the ``.env`` settings.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laraq.config.varexport import VarExportError, read_var_export_file

__all__ = ["SUBTREES", "AppConfig", "AppConfigError", "boot_app_config", "cached_config_path",
           "export_app_config", "find_app_path", "load_app_config", "read_cached_config", "read_exported_config"]

#: The ``config()`` subtrees laraq reads (nothing else is kept, so secrets of other services never travel).
SUBTREES = ("app", "database", "queue", "cache", "horizon")
#: ``laraq config --from``'s file format marker.
EXPORT_FORMAT = "laraq-app-config/1"
#: Source labels (shown by the banner, ``laraq config`` and ``doctor``).
CACHED, BOOTED, EXPORTED = "cached config", "booted app", "exported file"

_MISSING = object()
_APP_KEYS = ("name", "env", "timezone", "key", "previous_keys", "maintenance")


class AppConfigError(ValueError):
    """The app's configuration could not be read (the message says which file or command and why)."""


@dataclass(frozen=True)
class AppConfig:
    """A subset of the app's ``config()`` and where it was read."""

    values: Mapping[str, Any] = field(repr=False)
    #: :data:`CACHED`, :data:`BOOTED` or :data:`EXPORTED`
    source: str
    #: the file or app directory it was read from
    location: str
    #: things worth saying about how it was found (e.g. a boot that failed before an exported file was used)
    notes: tuple[str, ...] = ()

    def get(self, dotted: str, default: Any = None) -> Any:
        """``config('a.b.c')``: the value at a dotted path, or ``default``."""
        node: Any = self.values
        for part in dotted.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return default
        return node

    def has(self, dotted: str) -> bool:
        return self.get(dotted, _MISSING) is not _MISSING

    @property
    def label(self) -> str:
        return f"{self.source} ({self.location})"


def _subset(config: Any, where: str) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise AppConfigError(f"{where}: the configuration is not an array of config files")
    out = {name: config[name] for name in SUBTREES if isinstance(config.get(name), Mapping)}
    if "app" in out:  # only what laraq reads of app.php (no service keys and the like)
        out["app"] = {k: v for k, v in out["app"].items() if k in _APP_KEYS}
    return out


# -- where the app is ---------------------------------------------------------------------------------------

def find_app_path(env_file: str | Path | None, app_path: str | Path | None,
                  env: Mapping[str, str]) -> Path | None:
    """The Laravel app directory: ``--app-path``/``LARAQ_APP_PATH``, else the ``--env-file``'s directory when an
    ``artisan`` file sits beside it. Raises :class:`AppConfigError` for an explicit path that is no app."""
    explicit = app_path or env.get("LARAQ_APP_PATH") or None
    if explicit:
        path = Path(explicit).resolve()
        if not (path / "artisan").is_file() and not (path / "bootstrap" / "app.php").is_file():
            raise AppConfigError(f"{path} is not a Laravel app (no artisan or bootstrap/app.php)")
        return path
    if env_file is not None:
        here = Path(env_file).resolve().parent
        if (here / "artisan").is_file():
            return here
    return None


def cached_config_path(app_path: Path, env: Mapping[str, str]) -> Path:
    """``Application::getCachedConfigPath()``: ``APP_CONFIG_CACHE`` (absolute, or under the app) else
    ``bootstrap/cache/config.php``. Only the real environment counts: Laravel looks before reading ``.env``."""
    raw = env.get("APP_CONFIG_CACHE")
    if raw:
        p = Path(raw)
        return p if p.is_absolute() else app_path / p
    return app_path / "bootstrap" / "cache" / "config.php"


# -- 1. the cached config -----------------------------------------------------------------------------------

def read_cached_config(app_path: Path, env: Mapping[str, str]) -> AppConfig | None:
    """The cached config when ``config:cache`` has been run (None otherwise)."""
    path = cached_config_path(app_path, env)
    if not path.is_file():
        return None
    try:
        data = read_var_export_file(path)
    except VarExportError as exc:
        raise AppConfigError(str(exc)) from exc
    except OSError as exc:
        raise AppConfigError(f"cannot read the cached config {path}: {exc}") from exc
    return AppConfig(_subset(data, str(path)), CACHED, str(path))


# -- 2. the booted app --------------------------------------------------------------------------------------

_AUTOLOAD_RE = re.compile(r"require(?:_once)?\s*\(?\s*__DIR__\s*\.\s*'([^']*autoload\.php)'")

#: Boots the app like ``artisan`` (its autoloader, ``bootstrap/app.php``, the console kernel's bootstrappers)
#: and prints the subtrees as JSON between markers (a provider may print something of its own).
_BOOT_PHP = r"""
$base = $argv[1]; $autoload = $argv[2];
define('LARAVEL_START', microtime(true));
chdir($base);
require $autoload;
$app = require $base.'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();
$out = [];
foreach (array_slice($argv, 3) as $name) { if (is_array(config($name))) { $out[$name] = config($name); } }
$json = json_encode($out, JSON_PARTIAL_OUTPUT_ON_ERROR | JSON_INVALID_UTF8_SUBSTITUTE | JSON_PRESERVE_ZERO_FRACTION);
fwrite(STDOUT, "\n--laraq-config--\n".$json."\n--laraq-config--\n");
"""

_boot_cache: dict[tuple[str, tuple[tuple[str, str], ...]], AppConfig] = {}


def _autoloader(app_path: Path) -> Path:
    artisan = app_path / "artisan"
    try:
        m = _AUTOLOAD_RE.search(artisan.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        m = None
    return app_path / (m.group(1).lstrip("/") if m else "vendor/autoload.php")


def boot_app_config(app_path: Path, env: Mapping[str, str], *, php: str | None = None,
                    timeout: float = 60.0) -> AppConfig:
    """Boot the app once with ``php`` and read its configuration (kept per process, per app and environment)."""
    key = (str(app_path), tuple(sorted(env.items())))
    if key in _boot_cache:
        return _boot_cache[key]
    php = php or env.get("LARAQ_PHP") or shutil.which("php")
    if not php:
        raise AppConfigError("php is not on PATH (set LARAQ_PHP, or export the config with laraq config --from)")
    autoload = _autoloader(app_path)
    if not autoload.is_file():
        raise AppConfigError(f"the app's autoloader {autoload} is missing (composer install not run?)")
    try:
        proc = subprocess.run([php, "-d", "display_errors=stderr", "-r", _BOOT_PHP, str(app_path), str(autoload),
                               *SUBTREES], capture_output=True, env=dict(env), cwd=app_path, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AppConfigError(f"booting the app at {app_path} with {php} failed: {exc}") from exc
    out = proc.stdout.decode("utf-8", errors="replace")
    parts = out.split("\n--laraq-config--\n")
    if proc.returncode != 0 or len(parts) < 3:
        err = (proc.stderr.decode("utf-8", errors="replace").strip() or out.strip())[-400:]
        raise AppConfigError(f"booting the app at {app_path} with {php} failed (exit {proc.returncode}): {err}")
    try:
        data = json.loads(parts[1])
    except ValueError as exc:
        raise AppConfigError(f"the booted app at {app_path} printed config that is not JSON: {exc}") from exc
    config = AppConfig(_subset(data if data != [] else {}, str(app_path)), BOOTED, str(app_path))
    _boot_cache[key] = config
    return config


# -- 3. an exported file ------------------------------------------------------------------------------------

def export_app_config(app_path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """What ``laraq config --from APP -o FILE`` writes: the cached config, else the booted app's."""
    config = read_cached_config(app_path, env) or boot_app_config(app_path, env)
    return {"format": EXPORT_FORMAT, "read_from": config.label, "config": dict(config.values)}


def read_exported_config(path: str | Path) -> AppConfig:
    """A file written by ``laraq config --from APP -o FILE``."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AppConfigError(f"cannot read the exported app config {p}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise AppConfigError(f"{p} is not a file written by laraq config --from (format {EXPORT_FORMAT!r})")
    return AppConfig(_subset(data.get("config"), str(p)), EXPORTED, str(p))


# -- the order ----------------------------------------------------------------------------------------------

def load_app_config(app_path: Path | None, env: Mapping[str, str], *, exported: str | Path | None = None,
                    boot: bool = True) -> AppConfig | None:
    """The app's configuration from the first source that has it (see the module docstring), or None.

    ``env`` is the process environment handed to PHP (``.env`` is read by the app itself). A cached config
    that cannot be parsed is an error (Laravel would use it); a boot that fails falls through to the
    exported file, with a note.
    """
    notes: list[str] = []
    if app_path is not None:
        cached = read_cached_config(app_path, env)
        if cached is not None:
            return _with_notes(cached, notes, exported)
        if boot and env.get("LARAQ_APP_BOOT", "1").strip().lower() not in ("0", "false", "no", "off"):
            try:
                return _with_notes(boot_app_config(app_path, env), notes, exported)
            except AppConfigError as exc:
                notes.append(f"{exc}; reading .env instead" if exported is None else str(exc))
    if exported is not None:
        return _with_notes(read_exported_config(exported), notes, None)
    if notes:
        return AppConfig({}, "none", str(app_path), tuple(notes))
    return None


def _with_notes(config: AppConfig, notes: list[str], unused: str | Path | None) -> AppConfig:
    if unused is not None:
        notes.append(f"--app-config {unused} not used: the app's {config.label} comes first")
    return AppConfig(config.values, config.source, config.location, tuple(notes)) if notes else config


def clear_boot_cache() -> None:
    """Forget booted apps (tests)."""
    _boot_cache.clear()
