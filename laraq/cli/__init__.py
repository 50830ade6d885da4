"""The ``laraq`` command line: one click group whose commands are imported only when they run.

Each command lives in its own module (:data:`COMMANDS` names it, with the one-line help ``laraq --help``
shows), and :class:`LazyGroup` imports that module the first time the command is looked up, so
``laraq --version`` and ``laraq --help`` import no command at all and ``laraq status`` does not pay for the
worker. The families:

* :mod:`laraq.cli.work_command` and :mod:`laraq.cli.work` - ``laraq work`` (``php artisan queue:work``):
  its options, and the worker built and run, with its start-up checks and banner
  (:mod:`laraq.cli.startup`) and its console lines (:mod:`laraq.cli.output`, :mod:`laraq.cli.linesink`);
* :mod:`laraq.cli.schedule` - ``laraq schedule work/list/run/pause/resume/forget`` (the scheduler);
* :mod:`laraq.cli.setup` - ``laraq config`` (the worker's start-up banner, as text or JSON);
* :mod:`laraq.cli.schema_cmd` - ``laraq schema`` (the app's job classes and enums);
* :mod:`laraq.cli.errors` - the group class: known faults become one line and an exit code;
* :mod:`laraq.cli.ops` - dispatch/status/peek/failed/retry/... (every command in its ``COMMANDS`` list);
* :mod:`laraq.cli.production` - ``workers``, ``health`` and ``metrics``;
* :mod:`laraq.cli.dashboard_cmd` - ``laraq dashboard`` (the web dashboard, :mod:`laraq.dashboard`).

``tests/test_cli_lazy.py`` checks that the table names every command with its own help.
"""

from __future__ import annotations

import importlib

import click

from laraq._version import __version__
from laraq.cli.errors import LaraqGroup

__all__ = ["COMMANDS", "LazyGroup", "main"]

#: command name -> (module under ``laraq.cli``, attribute, the first paragraph of its help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    'clear': ('repair', 'clear_cmd',
               'Delete every job of QUEUE (ready, delayed, reserved), like queue:clear.'),
    'config': ('setup', 'config_cmd',
                'Show the settings laraq work would use (its start-up banner) and where each came from.'),
    'copy': ('migrate_cmds', 'copy_cmd',
              'Copy jobs from SOURCE queue to DEST queue (same or another prefix/db/server).'),
    'dashboard': ('dashboard_cmd', 'dashboard_cmd',
                   'Serve a web dashboard of the app\'s queues, failed jobs, workers, schedule and transfers.'),
    'dispatch': ('dispatch_cmd', 'dispatch_cmd',
                  'Dispatch JOB (a job class, or Class@method) so that PHP workers run it.'),
    'doctor': ('doctor_cmd', 'doctor_cmd',
                'Diagnose the queue set-up and print each finding with its fix.'),
    'export': ('migrate_cmds', 'export_cmd',
                'Write jobs as JSON Lines: {"queue", "state", "score", "body"} (body_b64 if not UTF-8).'),
    'failed': ('failed_cmds', 'failed_cmd',
                'List failed jobs, like queue:failed.'),
    'flush': ('failed_cmds', 'flush_cmd',
               'Delete all failed jobs (or those older than --hours), like queue:flush.'),
    'forget': ('failed_cmds', 'forget_cmd',
                'Delete failed jobs by id, like queue:forget.'),
    'health': ('production', 'health_cmd',
                'Exit 0 if a worker beat within --within seconds, else 1 (for container probes).'),
    'import': ('migrate_cmds', 'import_cmd',
                'Read JSON Lines written by export and push the jobs, bytes and scores unchanged.'),
    'list': ('inspect_cmds', 'list_cmd',
              'List the jobs of QUEUE (same as peek; --offset pages through).'),
    'metrics': ('production', 'metrics_cmd',
                 'Print Prometheus metrics once: queue sizes, oldest pending age, live workers (and job counters).'),
    'move': ('migrate_cmds', 'move_cmd',
              'Move jobs from SOURCE queue to DEST queue (same or another prefix/db/server).'),
    'move-failed': ('migrate_cmds', 'move_failed_cmd',
                     "Move failed jobs to another app's failed-job store (they stay failed: queue:retry there works), or --retry them into its queue."),
    'pause': ('repair', 'pause_cmd',
               'Stop workers taking jobs from a queue (Laravel 12.40+), like queue:pause.'),
    'peek': ('inspect_cmds', 'peek_cmd',
              'Show the next jobs of QUEUE, decoded, without taking them.'),
    'poison': ('poison', 'poison_group',
                "laraq's dead-letter lists: members the pop could not reserve (list, requeue, drop)."),
    'prune-failed': ('failed_cmds', 'prune_failed_cmd',
                      'Delete failed jobs older than --hours, like queue:prune-failed.'),
    'remove-exported': ('migrate_cmds', 'remove_exported_cmd',
                         'Delete from this Redis the jobs of an export file that are still here, byte for byte.'),
    'restart': ('repair', 'restart_cmd',
                 'Tell every worker (PHP and laraq) to exit after its current job, like queue:restart.'),
    'resume': ('repair', 'resume_cmd',
                'Let workers take jobs from a paused queue again, like queue:resume.'),
    'retry': ('failed_cmds', 'retry_cmd',
               "Push failed jobs back onto their queue (IDs, 'all', --queue, --range), like queue:retry."),
    'schedule': ('schedule', 'schedule_group',
                  'The leaderless scheduler: recurring jobs fired exactly once across all instances.'),
    'schema': ('schema_cmd', 'schema_cmd',
                "Export each job class's dispatch defaults and each backed enum by PHP reflection."),
    'show': ('inspect_cmds', 'show_cmd',
              'Find a job by payload id or uuid in every queue and state, and in failed_jobs (by its id or uuid), and show it.'),
    'status': ('status_cmd', 'status_cmd',
                'Sizes, ages, failed count, paused state, pickup rate and wait estimate of QUEUES (default: every queue found under the prefix, via SCAN), like queue:monitor.'),
    'work': ('work_command', 'work_cmd',
              'Process jobs on the queue (php artisan queue:work), running them with Python handlers.'),
    'workers': ('production', 'workers_cmd',
                 'List the running laraq workers (their heartbeat records in Redis).'),
}


class LazyGroup(LaraqGroup):
    """A click group that imports a command's module when the command is looked up (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            module, attribute, _ = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"laraq.cli.{module}"), attribute)
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, with the help of a command not imported yet taken from :data:`COMMANDS`."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None:
                if loaded.hidden:
                    continue
                rows.append((name, loaded.get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="laraq")
def main() -> None:
    """Laravel's Redis queue, spoken natively by Python."""
