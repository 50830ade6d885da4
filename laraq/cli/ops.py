"""The operations commands of ``laraq``: dispatch, inspect, repair, migrate and diagnose queues.

Every command reads the Laravel settings like ``laraq work`` (environment, ``--env-file``,
``--laravel``, ``--prefix``, ``--redis-url``), talks to the queue's Redis connection with raw bytes, and
prints a table, or JSON with ``--json``. The commands live in one module per family:

* :mod:`laraq.cli.common` - the shared plumbing (:class:`Ops`, :func:`settings_options`);
* :mod:`laraq.cli.dispatch_cmd` - ``dispatch``;
* :mod:`laraq.cli.status_cmd` - ``status`` (counters, failed, paused, pickup rate, ``--watch``, ``--max``);
* :mod:`laraq.cli.inspect_cmds` - ``peek``, ``list``, ``show``;
* :mod:`laraq.cli.repair` - ``clear``, ``restart``, ``pause``, ``resume``;
* :mod:`laraq.cli.failed_cmds` - ``failed``, ``retry``, ``forget``, ``flush``, ``prune-failed``;
* :mod:`laraq.cli.migrate_cmds` - ``move``, ``copy``, ``export``, ``import``, ``remove-exported``,
  ``move-failed``;
* :mod:`laraq.cli.poison` - the ``poison`` group (laraq's dead-letter lists);
* :mod:`laraq.cli.doctor_cmd` - ``doctor``.

:data:`COMMANDS` lists this family's commands; :mod:`laraq.cli` registers them through its own lazy
table (:data:`laraq.cli.COMMANDS`), which ``tests/test_cli_lazy.py`` checks against this list. The
mapping from artisan's ``queue:*`` commands is in ``compat-docs/operations.md``.
"""

from __future__ import annotations

import click

from laraq.cli.common import Ops, emit_json, parse_assignments, parse_delay, settings_options
from laraq.cli.dispatch_cmd import dispatch_cmd
from laraq.cli.doctor_cmd import doctor_cmd
from laraq.cli.failed_cmds import failed_cmd, flush_cmd, forget_cmd, prune_failed_cmd, retry_cmd
from laraq.cli.inspect_cmds import list_cmd, peek_cmd, show_cmd
from laraq.cli.migrate_cmds import MORE_COMMANDS, copy_cmd, export_cmd, import_cmd, move_cmd
from laraq.cli.poison import poison_group
from laraq.cli.repair import clear_cmd, pause_cmd, restart_cmd, resume_cmd
from laraq.cli.status_cmd import status_cmd

__all__ = ["COMMANDS", "Ops", "emit_json", "parse_assignments", "parse_delay", "settings_options"]

COMMANDS: list[click.Command] = [
    dispatch_cmd, status_cmd, peek_cmd, list_cmd, show_cmd, clear_cmd, restart_cmd, pause_cmd, resume_cmd,
    failed_cmd, retry_cmd, forget_cmd, flush_cmd, prune_failed_cmd, move_cmd, copy_cmd, export_cmd, import_cmd,
    doctor_cmd, poison_group, *MORE_COMMANDS,
]
