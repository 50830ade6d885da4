"""``rich`` is imported when a table is drawn, not when a command that may draw one is loaded.

Checked in a fresh interpreter through ``sys.modules``; nothing here is timed. That the tables read
the same is ``tests/test_cli_render.py``'s and the commands' own tests' business.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from laraq.cli import render

ROOT = Path(__file__).resolve().parents[1]


def _modules_after(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_loading_the_table_commands_imports_no_rich() -> None:
    code = ("import click\nfrom laraq.cli import main\nctx = click.Context(main)\n"
            "for name in ('status', 'peek', 'failed', 'workers'):\n    main.get_command(ctx, name)")
    modules = _modules_after(code)
    assert "laraq.cli.render" in modules and "laraq.cli.status_cmd" in modules
    assert [m for m in modules if m.split(".")[0] == "rich"] == []


def test_drawing_a_table_imports_rich_and_keeps_the_column_options(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setenv("COLUMNS", "80")
    with redirect_stdout(buffer):
        render.print_table([render.Column("queue"), render.Column("jobs", justify="right")],
                           [["default", 7], ["a-longer-name", 1234]])
    lines = buffer.getvalue().splitlines()
    assert lines[0].split() == ["queue", "jobs"]
    # justify="right" reached rich: the 7 ends where the 1234 ends (left-justified, it would end 3 earlier)
    assert lines[2].endswith("7") and lines[3].endswith("1234") and len(lines[2]) == len(lines[3])
    assert "rich" in sys.modules
