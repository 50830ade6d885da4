"""``laraq schema --from APP``: export the app's job classes and backed enums (see :mod:`laraq.bus.schema`),
as JSON and, with ``--python``, as a module of typed classes (see :mod:`laraq.bus.typed`)."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from laraq.bus.schema import SchemaError, export_schema
from laraq.bus.typed import fingerprint, generate_module
from laraq.exitcodes import EXIT_ERROR
from laraq.logtext import visible


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
@click.option("--skip-unreadable", is_flag=True,
              help="Leave out the classes PHP cannot load (each is still named) instead of exiting 1.")
@click.option("--php", default="php", show_default=True, help="The PHP binary.")
def schema_cmd(app_path: str, classes: tuple[str, ...], output: str | None, python_out: str | None,
               check: bool, skip_unreadable: bool, php: str) -> None:
    """Export each job class's dispatch defaults and each backed enum by PHP reflection.

    Give the file to `laraq dispatch --schema` or `app.load_schema()`: Python's dispatch of those
    classes then writes what PHP's dispatch() writes (class defaults, unique lock), and handlers get
    enum cases with their values.

    With --python, handlers annotated with the module's classes get instances of them (mypy checks
    property names), and Dispatcher.dispatch(instance) writes what PHP's dispatch() writes.

    A class PHP cannot load (its file does not parse, its parent is missing) is named on stderr, and
    nothing is written (exit 1) unless --skip-unreadable is given.
    """
    try:
        data = export_schema(app_path, classes, php=php)
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from exc
    unreadable = data.pop("unreadable", None) or {}
    for name, why in sorted(unreadable.items()):
        click.echo(f"cannot read {visible(name)}: {visible(str(why))}", err=True)
    if unreadable and not skip_unreadable:
        click.echo(f"{len(unreadable)} class{'es' if len(unreadable) != 1 else ''} left unread: fix "
                   f"{'them' if len(unreadable) != 1 else 'it'}, or pass --skip-unreadable to write the others",
                   err=True)
        sys.exit(EXIT_ERROR)
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if check:
        if not python_out:
            raise click.UsageError("--check needs --python MODULE.py (the module to check)")
        _check(Path(python_out), data)
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


def _check(module: Path, data: dict[str, Any]) -> None:
    """Exit 1 when the module's recorded fingerprint is not the PHP classes' fingerprint now, naming each
    class that was added, removed or changed."""
    try:
        text = module.read_text(encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot read {module}: {exc}") from exc
    found = re.search(r"^__laraq_fingerprint__ = '([0-9a-f]{64})'$", text, re.M)
    if found is None:
        raise click.ClickException(f"{module} is not a module laraq schema --python wrote")
    if found.group(1) == fingerprint(data):
        click.echo(f"{module} matches the PHP classes")
        return
    changes = _changes(text, data)
    for line in changes:
        click.echo(f"  {line}", err=True)
    if not changes:
        click.echo("  its classes read as the PHP classes now, but its fingerprint differs (edited by hand?)", err=True)
    click.echo(f"{module} is out of date: the PHP classes changed; regenerate it with --python", err=True)
    sys.exit(EXIT_ERROR)


def _changes(text: str, data: dict[str, Any]) -> list[str]:
    """One line per class the module and the PHP app disagree on (read from the module's literals,
    without importing it)."""
    then_jobs: dict[str, Any] = {}
    then_enums: dict[str, Any] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        values: dict[str, Any] = {}
        for item in node.body:
            target: ast.expr
            if isinstance(item, ast.AnnAssign) and item.value is not None:
                target, value = item.target, item.value
            elif isinstance(item, ast.Assign) and len(item.targets) == 1:
                target, value = item.targets[0], item.value
            else:
                continue
            if isinstance(target, ast.Name):
                try:
                    values[target.id] = ast.literal_eval(value)
                except ValueError:
                    continue
        php = values.pop("__php_class__", None)
        if not isinstance(php, str):
            continue
        if "__laraq_schema__" in values:
            then_jobs[php] = values["__laraq_schema__"]
        elif any(isinstance(base, ast.Attribute) and base.attr == "Enum" for base in node.bases):
            then_enums[php] = {k: v for k, v in values.items() if not k.startswith("__")}
    now_jobs: dict[str, Any] = json.loads(json.dumps(data.get("jobs") or {}))
    now_enums: dict[str, Any] = data.get("enums") or {}
    out = []
    for kind, then, now in (("job", then_jobs, now_jobs), ("enum", then_enums, now_enums)):
        for name in sorted(set(then) | set(now)):
            if name not in now:
                out.append(f"{kind} {visible(name)}: gone from the PHP app")
            elif name not in then:
                out.append(f"{kind} {visible(name)}: new in the PHP app")
            elif kind == "job" and then[name] != now[name]:
                props_then = {p.get("name"): p for p in then[name].get("properties") or []}
                props_now = {p.get("name"): p for p in now[name].get("properties") or []}
                changed = sorted(n for n in set(props_then) | set(props_now) if props_then.get(n) != props_now.get(n))
                what = ("propert" + ("y " if len(changed) == 1 else "ies ") + ", ".join(map(str, changed))
                        if changed else "its interfaces, traits or methods")
                out.append(f"job {visible(name)}: {visible(what)} changed")
            elif kind == "enum" and dict(then[name]) != dict(now[name]):
                out.append(f"enum {visible(name)}: its cases changed")
    return out
