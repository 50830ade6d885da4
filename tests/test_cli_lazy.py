"""``laraq``'s click group loads a command's module only when that command runs.

The static table :data:`laraq.cli.COMMANDS` must name every command with its own help (checked against
the imported commands), ``laraq --help`` must read the same as the help of the fully loaded group, and
``laraq --version`` / ``--help`` / ``import laraq`` must not import the worker, Redis or the codec (checked
in a fresh interpreter through ``sys.modules``; nothing here is timed).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

import laraq
from laraq.cli import COMMANDS, LazyGroup, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("redis", "laraq.worker.worker", "laraq.protocol.queue", "laraq.protocol.serializer", "laraq.app", "asyncio",
         "cryptography", "laraq.cli.work", "laraq.cli.common", "starlette", "uvicorn", "jinja2", "laraq.dashboard")
#: the ``dashboard`` extra's packages: only ``laraq dashboard`` itself imports them
DASHBOARD = ("starlette", "uvicorn", "jinja2", "laraq.dashboard")


def modules_after(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY) and (m in HEAVY or m.split(".")[0] in HEAVY or "." in m)
            and any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_table_names_every_command_with_its_own_help() -> None:
    for name, (module, attribute, summary) in COMMANDS.items():
        command = getattr(importlib.import_module(f"laraq.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        assert command.name == name
        assert summary == " ".join((command.help or "").split("\n\n")[0].split()), name


def test_every_command_module_is_in_the_table() -> None:
    """A command added to a family's COMMANDS list must be in the lazy table too."""
    ops = importlib.import_module("laraq.cli.ops")
    production = importlib.import_module("laraq.cli.production")
    registered = {c.name for c in [*ops.COMMANDS, *production.COMMANDS]}
    assert registered | {"work", "schedule", "config", "schema", "dashboard"} == set(COMMANDS)


def test_help_reads_as_the_fully_loaded_group() -> None:
    lazy = CliRunner().invoke(main, ["--help"], terminal_width=100)
    eager = LazyGroup("main", help=main.help, params=main.params)
    for name in COMMANDS:
        eager.get_command(click.Context(eager), name)
    assert set(eager.commands) == set(COMMANDS)
    loaded = CliRunner().invoke(eager, ["--help"], prog_name="main", terminal_width=100)
    assert lazy.exit_code == 0 and loaded.exit_code == 0
    assert lazy.output.split("Commands:")[1] == loaded.output.split("Commands:")[1]


def test_version_help_and_import_laraq_load_no_command() -> None:
    for code in ("from laraq.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass",
                 "from laraq.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
                 "import laraq"):
        assert heavy(modules_after(code)) == [], code


def test_a_command_is_loaded_when_it_is_looked_up() -> None:
    modules = modules_after("from laraq.cli import main\nimport click\nmain.get_command(click.Context(main), 'peek')")
    assert "laraq.cli.inspect_cmds" in modules and "laraq.cli.work" not in modules


def test_no_other_command_imports_the_dashboard_extra() -> None:
    """The web stack stays out of every other command, and out of ``laraq dashboard`` until it runs."""
    code = ("from laraq.cli import main, COMMANDS\nimport click\n"
            "[main.get_command(click.Context(main), name) for name in COMMANDS if name != 'work']")
    modules = modules_after(code)
    assert "laraq.cli.dashboard_cmd" in modules and "laraq.cli.status_cmd" in modules
    assert [m for m in modules if m.split(".")[0] in DASHBOARD or m.startswith("laraq.dashboard")] == []


def test_top_level_names_resolve_lazily_to_their_modules() -> None:
    from laraq.protocol.queue import RedisQueue

    assert laraq.RedisQueue is RedisQueue
    assert set(laraq.__all__) <= set(dir(laraq))
    for name in laraq.__all__:
        assert getattr(laraq, name) is not None
    try:
        laraq.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_laraq_work_parses_and_execs_without_importing_the_worker() -> None:
    """Until it becomes the supervisor, ``laraq work`` has imported its options and prefork, nothing heavier."""
    code = ("from laraq.cli import main\nimport click\nmain.get_command(click.Context(main), 'work')\n"
            "from laraq.production import prefork")
    modules = modules_after(code)
    assert "laraq.cli.work_command" in modules and "laraq.production.prefork" in modules
    assert heavy(modules) == []
    from laraq.cli.work import work_cmd
    from laraq.cli.work_command import work_cmd as light

    assert work_cmd is light


def test_the_command_and_the_worker_agree_on_the_config_variable() -> None:
    from laraq.cli import work, work_command

    assert work._CONFIG_ENV == work_command._CONFIG_ENV
