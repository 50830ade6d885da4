"""``laraq config``: what ``laraq work`` would connect to and use, as its start-up banner says it (or JSON).

The same facts as the banner (:func:`laraq.worker.startup.describe_setup`): the Laravel profile and how it was
chosen, the Redis URL with the password masked, prefix, queues, ``retry_after``/``block_for``, the cache
and failed-job stores, the handlers of ``--app``, and warnings. It exits with the code ``laraq work`` would
exit with at start (e.g. 3 when Redis is not reachable), after printing what it found.
"""

from __future__ import annotations

import json
from typing import Any

import click

from laraq.app import App
from laraq.cli.errors import LaraqError
from laraq.cli.work import default_params, prepare
from laraq.worker.startup import StartupError, check_redis, queue_warnings, render_setup

__all__ = ["config_cmd"]


@click.command("config")
@click.option("--app", "app_spec", default=None, metavar="MODULE:ATTR",
              help="Also load this laraq.App and list its handlers.")
@click.option("--queue", default=None, help="Queues the worker would work (default: REDIS_QUEUE or 'default').")
@click.option("--env-file", type=click.Path(dir_okay=False), default=None, help="The Laravel app's .env file.")
@click.option("--laravel", default=None, help="Laravel version profile (default: detected, else 13).")
@click.option("--redis-url", default=None, help="Queue Redis URL (overrides REDIS_HOST/PORT/...).")
@click.option("--prefix", default=None, help="Redis key prefix (default: REDIS_PREFIX or the version's).")
@click.option("--json", "json_mode", is_flag=True, help="Print the facts as one JSON object.")
def config_cmd(app_spec: str | None, queue: str | None, env_file: str | None, laravel: str | None,
               redis_url: str | None, prefix: str | None, json_mode: bool) -> None:
    """Show the settings laraq work would use (its start-up banner), with warnings."""
    params = default_params(app_spec=app_spec, queue=queue, env_file=env_file, laravel=laravel,
                            redis_url=redis_url, prefix=prefix)
    prepared = prepare(params, app=None if app_spec else App("none"), checks=False, strict=False)
    info: dict[str, Any] = prepared.info
    if not app_spec:
        info["handlers"], info["app"] = None, None
    failure: StartupError | None = None
    try:
        check_redis(prepared.queue.client, info["redis"])
        info["warnings"] += queue_warnings(prepared.queue.client, info["prefix"], info["queues"])
    except StartupError as exc:
        failure = exc
        info["warnings"].append(exc.message)
    if json_mode:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(render_setup(info))
    if failure is not None:
        raise LaraqError(failure.message, failure.exit_code)
