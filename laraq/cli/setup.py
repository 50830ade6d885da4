"""``laraq config``: what ``laraq work`` would connect to and use, as its start-up banner says it (or JSON).

The same facts as the banner (:func:`laraq.cli.startup.describe_setup`): the Laravel profile and how it was
chosen, where the app's configuration was read, the Redis URL with the password masked, prefix, queues,
``retry_after``/``block_for``, the cache and failed-job stores, the handlers of ``--app``, and warnings;
then every setting laraq takes from the app with where its value came from (cached config, booted app,
exported file, .env, environment, a flag, or ``assumed``). It exits with the code ``laraq work`` would exit
with at start (e.g. 3 when Redis is not reachable), after printing what it found.

``laraq config --from APP -o FILE`` instead writes the app's configuration (its cached config, else the app
booted once) for a host without PHP or without the app: ``laraq work --app-config FILE`` reads it there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from laraq.app import App
from laraq.cli.common import APP_CONFIG_HELP, APP_PATH_HELP
from laraq.cli.errors import LaraqError
from laraq.cli.startup import StartupError, check_redis, queue_warnings, render_setup
from laraq.cli.work import default_params, handoff_check, prepare
from laraq.config.appconfig import AppConfigError, export_app_config, find_app_path
from laraq.config.phpworkers import shared_queue_warnings

__all__ = ["config_cmd"]


@click.command("config")
@click.option("--app", "app_spec", default=None, metavar="MODULE:ATTR",
              help="Also load this laraq.App and list its handlers.")
@click.option("--queue", default=None, help="Queues the worker would work (default: REDIS_QUEUE or 'default').")
@click.option("--env-file", type=click.Path(dir_okay=False), default=None, help="The Laravel app's .env file.")
@click.option("--app-path", type=click.Path(file_okay=False), default=None, help=APP_PATH_HELP)
@click.option("--app-config", type=click.Path(dir_okay=False), default=None, help=APP_CONFIG_HELP)
@click.option("--from", "from_app", type=click.Path(file_okay=False, exists=True), default=None, metavar="APP",
              help="Export the config of the Laravel app in this directory (with -o) instead of showing settings.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="With --from: the file to write (default: stdout).")
@click.argument("connection", required=False)
@click.option("--laravel", default=None, help="Laravel version profile (default: detected, else 13).")
@click.option("--redis-url", default=None, help="Queue Redis URL (overrides REDIS_HOST/PORT/...).")
@click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
@click.option("--json", "json_mode", is_flag=True, help="Print the facts as one JSON object.")
def config_cmd(app_spec: str | None, queue: str | None, env_file: str | None, app_path: str | None,
               app_config: str | None, from_app: str | None, output: str | None, connection: str | None,
               laravel: str | None, redis_url: str | None, prefix: str | None, json_mode: bool) -> None:
    """Show the settings laraq work would use (its start-up banner) and where each came from.

    With --from APP, write that app's configuration for laraq work --app-config instead."""
    if from_app is not None:
        _export(from_app, output)
        return
    params = default_params(app_spec=app_spec, queue=queue, env_file=env_file, laravel=laravel,
                            redis_url=redis_url, prefix=prefix, app_path=app_path, app_config=app_config)
    params["connection"] = connection
    prepared = prepare(params, app=None if app_spec else App("none"), checks=False, strict=False)
    info: dict[str, Any] = prepared.info
    if not app_spec:
        info["handlers"], info["app"] = None, None
    failure: StartupError | None = None
    try:
        check_redis(prepared.queue.client, info["redis"])
        info["warnings"] += queue_warnings(prepared.queue.client, info["prefix"], info["queues"])
        shared = shared_queue_warnings(prepared.queue.client, prepared.settings,
                                       prepared.queue.connection_name, info["queues"])
        info["warnings"] += shared
        if shared and app_spec:
            info["warnings"] += [w for w in (handoff_check(params, None, prepared.app).warning(),) if w]
    except StartupError as exc:
        failure = exc
        info["warnings"].append(exc.message)
    if json_mode:
        click.echo(json.dumps(info, indent=2, default=str))
    else:
        click.echo(render_setup(info))
        click.echo(render_sources(info["settings"]))
    if failure is not None:
        raise LaraqError(failure.message, failure.exit_code)


def render_sources(facts: list[dict[str, Any]]) -> str:
    """Every setting read from the app, its value and where it came from (``assumed`` marked)."""
    width = max((len(f["setting"]) for f in facts), default=10) + 2
    lines = ["settings (value, where it came from):"]
    for f in facts:
        mark = "   <- assumed, not read" if f["assumed"] else ""
        lines.append(f"  {f['setting']:<{width}}{f['value']!r:<34} {f['source']}{mark}")
    return "\n".join(lines)


def _export(from_app: str, output: str | None) -> None:
    try:
        app = find_app_path(None, from_app, {})
        if app is None:  # find_app_path raises for a directory that is no app; this is for the type checker
            raise AppConfigError(f"{from_app} is not a Laravel app")
        data = export_app_config(app, dict(os.environ))
    except AppConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    path = Path(output)
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o600)  # it holds the app's secrets (APP_KEY, Redis and database passwords)
    click.echo(f"wrote {path} (read from the {data['read_from']}); use it with laraq work --app-config {path}",
               err=True)
