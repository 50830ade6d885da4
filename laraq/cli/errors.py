"""One place where a fault of the surroundings becomes one line and a documented exit code, for every command.

:class:`LaraqGroup` is the ``laraq`` click group: a command that lets a Redis, database or configuration
error escape gets the line and code of :func:`laraq.config.faults.explain` (``Redis ... refused the
credentials ...; set REDIS_PASSWORD ...``, exit 4) instead of a traceback. Unknown exceptions still show
their traceback: they are bugs, and hiding them would help nobody. An error's message may name a queue or
a class read from Redis: its control characters are shown as escapes (:func:`laraq.logtext.visible`).
"""

from __future__ import annotations

from typing import Any

import click

from laraq.logtext import visible

__all__ = ["LaraqGroup", "LaraqError"]


class LaraqError(click.ClickException):
    """A click error with laraq's exit code (see ``compat-docs/worker.md``, "Exit codes")."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click types exit_code as a class variable, but reads it from the instance: one class serves every code
        self.exit_code = exit_code  # type: ignore[misc]


class LaraqGroup(click.Group):
    """The ``laraq`` group: known faults of Redis, databases and settings become :class:`LaraqError`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # click types message as final, and reads it when the error is shown: escaped in place
            exc.message = visible(exc.message, multiline=True)  # type: ignore[misc]
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            # start-up: the start-up and fault modules are imported only when a command failed (laraq --version needs neither)
            from laraq.cli.startup import StartupError  # start-up: as above
            from laraq.config.faults import explain  # start-up: as above
            if isinstance(exc, StartupError):
                raise LaraqError(visible(exc.message, multiline=True), exc.exit_code) from exc
            explained = explain(exc)
            if explained is None:
                raise
            raise LaraqError(visible(explained[0], multiline=True), explained[1]) from exc
