"""Which PHP classes of Python jobs lack the ``RunsInPython`` hand-off (``examples/php/RunsInPython.php``).

A PHP worker (``queue:work``, a Horizon supervisor) that pops a job of such a class on a queue it shares
with laraq runs the class's own ``handle()`` (often empty) and reports the job done: the Python handler
never runs. Only the app can say which classes use the trait: the app's PHP (:mod:`laraq.bus.phpprocess`,
``class_uses_recursive`` as Laravel reads traits) is asked once, when the app is on this host. The banner,
``laraq doctor`` and the ``laraq_handoff_missing`` metric name those classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from laraq.bus.phpprocess import PhpProcess, PhpStepError
from laraq.logtext import visible

__all__ = ["HandoffCheck", "check_handoff"]


@dataclass(frozen=True)
class HandoffCheck:
    """The classes without the hand-off (``missing``), or why they could not be checked (``unchecked``)."""

    missing: tuple[str, ...] = ()
    unchecked: str | None = None

    def warning(self) -> str | None:
        """One line for the banner and ``doctor`` (None: nothing to say)."""
        if self.unchecked:
            return ("a PHP worker works a queue laraq takes Python jobs from, and whether the PHP classes of "
                    f"the Python jobs hand themselves over (RunsInPython) could not be checked: {self.unchecked}")
        if self.missing:
            return ("a PHP worker works a queue laraq takes Python jobs from, and these PHP classes of Python jobs "
                    "do not use RunsInPython, so a PHP worker that pops one runs its handle() instead of handing "
                    f"it over: {', '.join(visible(name) for name in self.missing)} "
                    "(examples/php/RunsInPython.php)")
        return None


def check_handoff(app_path: Path | None, handled: Iterable[str], *,
                  env: Mapping[str, str] | None = None) -> HandoffCheck:
    """Ask the app at ``app_path`` which of the ``handled`` job classes use no ``RunsInPython`` trait.

    A handler name with ``@`` (a string job, ``Class@method``) has no PHP class of its own and is left out,
    as is a class the app does not have (no PHP worker can run it)."""
    classes = sorted({name for name in handled if "@" not in name})
    if not classes:
        return HandoffCheck()
    if app_path is None:
        return HandoffCheck(unchecked="the app is not on this host (give --php-app PATH, or an --env-file inside "
                                      "the app)")
    process = PhpProcess(app_path, env=env)
    try:
        facts = process.classes(classes)
    except PhpStepError as exc:
        return HandoffCheck(unchecked=f"the app's PHP did not answer: {exc}")
    finally:
        process.close()
    return HandoffCheck(missing=tuple(name for name in classes
                                      if facts.get(name, {}).get("exists") and not facts[name].get("runs_in_python")))
