"""``laraq schema --from APP``: export the app's job classes and backed enums (see :mod:`laraq.bus.schema`),
as JSON and, with ``--python``, as a module of typed classes (see :mod:`laraq.bus.typed`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from laraq.bus.schema import SchemaError, export_schema
from laraq.bus.typed import fingerprint, generate_module
from laraq.exitcodes import EXIT_ERROR


@click.command("schema")
@click.option("--from", "app_path", required=True, type=click.Path(file_okay=False, exists=True),
              help="The Laravel app's base directory (its bootstrap/app.php and autoloader are used).")
@click.option("--class", "classes", multiple=True,
              help="Only this job or enum class (repeatable; default: every class under the app's PSR-4 roots).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the JSON here.")
@click.option("--python", "python_out", type=click.Path(dir_okay=False), default=None,
              help="Also write a Python module of typed job classes (dataclasses) here.")
@click.option("--check", is_flag=True,
              help="With --python: write nothing; exit 1 when the module there no longer matches the PHP classes.")
@click.option("--php", default="php", show_default=True, help="The PHP binary.")
def schema_cmd(app_path: str, classes: tuple[str, ...], output: str | None, python_out: str | None,
               check: bool, php: str) -> None:
    """Export each job class's dispatch defaults and each backed enum by PHP reflection.

    Give the file to `laraq dispatch --schema` or `app.load_schema()`: Python's dispatch of those
    classes then writes what PHP's dispatch() writes (class defaults, unique lock), and handlers get
    enum cases with their values.

    With --python, handlers annotated with the module's classes get instances of them (mypy checks
    property names), and Dispatcher.dispatch(instance) writes what PHP's dispatch() writes.
    """
    try:
        data = export_schema(app_path, classes, php=php)
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from exc
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if check:
        if not python_out:
            raise click.UsageError("--check needs --python MODULE.py (the module to check)")
        _check(Path(python_out), fingerprint(data))
        return
    if python_out:
        Path(python_out).write_text(generate_module(data, source=str(Path(app_path).resolve())), encoding="utf-8")
        click.echo(f"{len(data.get('jobs') or {})} typed job classes -> {python_out}", err=True)
        if not output:
            return
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"{len(data.get('jobs') or {})} job classes, {len(data.get('enums') or {})} enums -> {output}",
                   err=True)
    else:
        click.echo(text, nl=False)


def _check(module: Path, now: str) -> None:
    """Exit 1 when the module's recorded fingerprint is not the PHP classes' fingerprint now."""
    try:
        found = re.search(r"^__laraq_fingerprint__ = '([0-9a-f]{64})'$", module.read_text(encoding="utf-8"), re.M)
    except OSError as exc:
        raise click.ClickException(f"cannot read {module}: {exc}") from exc
    if found is None:
        raise click.ClickException(f"{module} is not a module laraq schema --python wrote")
    if found.group(1) != now:
        click.echo(f"{module} is out of date: the PHP classes changed; regenerate it with --python", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"{module} matches the PHP classes")
