"""The ``laraq`` command line: one click group, commands registered from one module per family.

* :mod:`laraq.cli.work` - ``laraq work`` (``php artisan queue:work``);
* :mod:`laraq.cli.schedule` - ``laraq schedule work/list/run/pause/resume/forget`` (the scheduler);
* :mod:`laraq.cli.setup` - ``laraq config`` (the worker's start-up banner, as text or JSON);
* :mod:`laraq.cli.errors` - the group class: known faults become one line and an exit code;
* :mod:`laraq.cli.ops` - dispatch/status/peek/failed/retry/... (every command in its ``COMMANDS`` list);
* :mod:`laraq.cli.production` - ``workers``, ``health`` and ``metrics``.
"""

from __future__ import annotations

import click

from laraq._version import __version__
from laraq.cli import ops, production
from laraq.cli.errors import LaraqGroup
from laraq.cli.schedule import schedule_group
from laraq.cli.schema_cmd import schema_cmd
from laraq.cli.setup import config_cmd
from laraq.cli.work import work_cmd

__all__ = ["main"]


@click.group(cls=LaraqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="laraq")
def main() -> None:
    """Laravel's Redis queue, spoken natively by Python."""


def _register() -> None:
    main.add_command(work_cmd)
    main.add_command(schedule_group)  # laraq schedule ... (the leaderless scheduler)
    main.add_command(config_cmd)
    main.add_command(schema_cmd)  # laraq schema --from APP (job class defaults, enums)
    for command in [*ops.COMMANDS, *production.COMMANDS]:
        main.add_command(command)


_register()
