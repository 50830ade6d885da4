"""``laraq schedule``: run the leaderless scheduler and operate its entries (see :mod:`laraq.schedule.scheduler`).

* ``laraq schedule work --app M:app`` (alias ``run-loop``): a scheduler process; run as many as you
  like, on any hosts. ``laraq work --schedule`` runs the same loop in a thread beside the worker.
* ``laraq schedule list``: every stored entry, its next and last due time, who fired it, counters.
* ``laraq schedule run NAME --app M:app``: fire once now (the schedule itself is untouched).
* ``laraq schedule pause NAME`` / ``resume NAME``: while paused, due times pass without firing.
* ``laraq schedule forget NAME``: remove a stored entry now (an instance that declares it adds it back).

Every command takes ``--json``. These are artisan's ``schedule:work``, ``schedule:list``,
``schedule:test`` and (for pause) ``schedule:interrupt``-like operations, for laraq's entries.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

import click

from laraq.app import load_app
from laraq.cli.common import Ops, emit_json, fmt_time, settings_options
from laraq.cli.render import print_table
from laraq.exitcodes import EXIT_ERROR
from laraq.schedule.store import ScheduleStore

__all__ = ["schedule_group"]


@click.group("schedule")
def schedule_group() -> None:
    """The leaderless scheduler: recurring jobs fired exactly once across all instances."""


def _scheduler(ops: Ops, app_spec: str, **kwargs: Any) -> Any:
    # start-up: the scheduler (cronsim, the entries: ~6 ms) is loaded for the schedule commands only
    from laraq.schedule.scheduler import Scheduler

    try:
        app = load_app(app_spec)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise click.UsageError(f"cannot load --app {app_spec}: {exc}") from exc
    return Scheduler(app, ops.queue, encrypter=ops.encrypter, **kwargs)


def _run_loop(ops: Ops, app_spec: str, poll: float, instance: str | None, verbose: int) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s laraq[%(process)d] %(levelname)s %(name)s: %(message)s")
    scheduler = _scheduler(ops, app_spec, poll=poll, instance=instance)
    if not scheduler.entries:
        raise click.UsageError(f"the App {app_spec} declares no schedule entries")

    def stop(_signum: int, _frame: Any) -> None:
        scheduler.stop()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    click.echo(f"laraq scheduler {scheduler.instance}: {len(scheduler.entries)} entries", err=True)
    scheduler.run_forever()


def _loop_command(name: str, hidden: bool = False) -> click.Command:
    @click.command(name, hidden=hidden)
    @settings_options
    @click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR", help="The laraq.App declaring the entries.")
    @click.option("--poll", type=click.FloatRange(0.05), default=1.0, show_default=True,
                  help="Longest sleep between two looks at the schedule (seconds).")
    @click.option("--instance", default=None, help="This instance's name in 'who fired' (default host:pid).")
    @click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
    def command(ops: Ops, app_spec: str, poll: float, instance: str | None, verbose: int) -> None:
        """Run a scheduler process (any number may run, on any hosts)."""
        _run_loop(ops, app_spec, poll, instance, verbose)

    return command


schedule_group.add_command(_loop_command("work"))
schedule_group.add_command(_loop_command("run-loop", hidden=True))


@schedule_group.command("list")
@settings_options
@click.option("--app", "app_spec", default=None, metavar="MODULE:ATTR",
              help="Also show entries the app declares that no instance has installed yet.")
@click.option("--history", type=click.IntRange(0), default=0, help="Also show the last N firings.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(ops: Ops, app_spec: str | None, history: int, as_json: bool) -> None:
    """Stored entries: next and last due time, who fired, counters."""
    store = ScheduleStore(ops.queue.client, ops.queue.prefix)
    rows = store.status()
    if app_spec:
        stored = {r["name"] for r in rows}
        for entry in _scheduler(ops, app_spec).entries.values():
            if entry.name not in stored:
                rows.append({"name": entry.name, "next_due": None, **entry.describe(), "installed": False})
    fired = store.history(-history, -1) if history else []
    if as_json:
        emit_json({"entries": rows, "history": fired} if history else rows)
        return
    if not rows:
        click.echo("no schedule entries are stored")
    else:
        print_table(
            ["entry", "timing", "target", "next due (UTC)", "last due (UTC)", "fired by", "fires", "skipped", "state"],
            [[r["name"], r.get("timing", "?"), r.get("target", "?"), fmt_time(r.get("next_due")),
              fmt_time(r.get("last_due")), r.get("last_by") or "-",
              f"{r.get('fires', 0)}+{r['manual']}" if r.get("manual") else r.get("fires", 0),
              r.get("skipped", 0) + r.get("overlapped", 0), _state(r)] for r in rows])
    if fired:
        click.echo("")
        print_table(["entry", "due (UTC)", "job uuid", "fired by", "at (UTC)"],
                    [[f["name"], fmt_time(f["due"]), f["uuid"], f["by"], fmt_time(f["at"])] for f in fired])


def _state(row: dict[str, Any]) -> str:
    if row.get("installed") is False:
        return "not installed"
    if row.get("paused"):
        return "paused"
    if row.get("running"):
        return "running"
    return "active"


@schedule_group.command("run")
@settings_options
@click.argument("name")
@click.option("--app", "app_spec", required=True, metavar="MODULE:ATTR", help="The laraq.App declaring NAME.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def run_cmd(ops: Ops, name: str, app_spec: str, as_json: bool) -> None:
    """Fire entry NAME once, now (its schedule is untouched; overlap protection still applies)."""
    scheduler = _scheduler(ops, app_spec)
    try:
        result = scheduler.fire_now(name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from exc
    if as_json:
        emit_json({"name": name, "status": result.status, "uuids": list(result.uuids)})
    elif result.status == "fired":
        click.echo(f"fired {name}: job {', '.join(result.uuids)}")
    elif result.status == "overlap":
        raise click.ClickException(f"{name} was not fired: its previous job is still queued or running")
    elif result.status == "changed":
        raise click.ClickException(f"{name} was not fired: the stored definition differs from this app's "
                                   "(another version is deployed; the instance started last installs its own)")
    else:
        raise click.ClickException(f"{name} was not fired ({result.status})")
    if result.status != "fired":
        sys.exit(EXIT_ERROR)


def _flag_command(command_name: str, paused: bool) -> click.Command:
    doc = ("Pause entry NAME: its due times pass without firing (counted as skipped)." if paused
           else "Resume entry NAME from its next due time.")

    @click.command(command_name, help=doc)
    @settings_options
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
    def command(ops: Ops, name: str, as_json: bool) -> None:
        ok = ScheduleStore(ops.queue.client, ops.queue.prefix).set_paused(name, paused)
        if as_json:
            emit_json({"name": name, "paused": paused, "found": ok})
        if not ok:
            raise click.ClickException(f"no stored schedule entry named {name!r} (see laraq schedule list)")
        if not as_json:
            click.echo(f"{name} {'paused' if paused else 'resumed'}")

    return command


schedule_group.add_command(_flag_command("pause", True))
schedule_group.add_command(_flag_command("resume", False))


@schedule_group.command("forget")
@settings_options
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def forget_cmd(ops: Ops, name: str, as_json: bool) -> None:
    """Remove stored entry NAME now (a running instance that still declares it installs it again)."""
    ok = ScheduleStore(ops.queue.client, ops.queue.prefix).forget(name)
    if as_json:
        emit_json({"name": name, "removed": ok})
    elif ok:
        click.echo(f"{name} removed")
    if not ok:
        raise click.ClickException(f"no stored schedule entry named {name!r}")


COMMANDS = [schedule_group]
