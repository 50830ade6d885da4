"""``laraq doctor``: diagnose a queue set-up (:func:`laraq.ops.doctor.diagnose`)."""

from __future__ import annotations

import sys

import click
from rich.text import Text

from laraq.cli.common import (
    Ops,
    emit_json,
    settings_options,
)
from laraq.cli.render import Column, print_table
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible
from laraq.ops.doctor import diagnose

# -- doctor --------------------------------------------------------------------------------------------------

LEVEL_STYLES = {"ok": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}

#: The widest a doctor line gets, on a terminal or piped (its long findings and fixes wrap).
WIDTH = 100


@click.command("doctor")
@settings_options
@click.option("--app", "app_ref", default=None, help="module:app of your laraq handlers (checks coverage).")
@click.option("--timeout", "worker_timeout", type=int, default=60, show_default=True,
              help="The worker --timeout you run with (checked against retry_after).")
@click.option("--queue", "queue_names", default=None,
              help="Only these queues (comma list), e.g. the ones laraq work --queue takes.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor_cmd(ops: Ops, app_ref: str | None, worker_timeout: int, queue_names: str | None, as_json: bool) -> None:
    """Diagnose the queue set-up and print each finding with its fix."""
    queues = [q for q in (queue_names or "").split(",") if q] or None
    findings = diagnose(ops.settings, ops.queue, app_ref=app_ref, worker_timeout=worker_timeout, queues=queues)
    if as_json:
        emit_json([f.to_dict() for f in findings])
    else:
        rows = []
        for f in findings:
            finding = Text(visible(f.title))  # a Text cell is taken as built: what it holds is escaped here
            if f.detail:
                finding.append("\n" + visible(f.detail, multiline=True), style="dim")
            rows.append((Text(f.level.upper(), style=LEVEL_STYLES.get(f.level, "")), finding, f.fix))
        print_table([Column("level", no_wrap=True), Column("finding", overflow="fold", min_width=20),
                     Column("fix", overflow="fold", min_width=20)], rows, max_width=WIDTH)
    if any(f.level == "error" for f in findings):
        sys.exit(EXIT_ERROR)
