"""``laraq dashboard``: serve the web dashboard (:mod:`laraq.dashboard`) with uvicorn.

It binds ``127.0.0.1`` by default; any other address needs ``--token``/``LARAQ_DASHBOARD_TOKEN`` or
``--basic-auth``/``LARAQ_DASHBOARD_BASIC_AUTH`` (:func:`laraq.dashboard.auth.check_bind`). Starlette,
uvicorn and Jinja2 come with the ``dashboard`` extra and are imported only when the command runs.
"""

from __future__ import annotations

import click

from laraq.cli.common import Ops, settings_options

__all__ = ["dashboard_cmd"]


def _basic(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise click.BadParameter("give USER:PASSWORD", param_hint="--basic-auth")
    return user, password


@click.command("dashboard")
@settings_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind (anything but loopback needs --token or --basic-auth).")
@click.option("--port", type=click.IntRange(1, 65535), default=8089, show_default=True, help="Port to bind.")
@click.option("--token", envvar="LARAQ_DASHBOARD_TOKEN", default=None,
              help="Require this token (Authorization: Bearer, or the sign-in page) [env LARAQ_DASHBOARD_TOKEN].")
@click.option("--basic-auth", "basic_auth", envvar="LARAQ_DASHBOARD_BASIC_AUTH", default=None,
              metavar="USER:PASSWORD", help="Require HTTP basic auth [env LARAQ_DASHBOARD_BASIC_AUTH].")
@click.option("--read-only", is_flag=True, help="Turn every action off (pause, restart, retry, forget).")
@click.option("--poll", type=click.FloatRange(1), default=5.0, show_default=True, metavar="SECONDS",
              help="How often a live page refreshes in the browser.")
@click.option("--sample", type=click.FloatRange(1), default=10.0, show_default=True, metavar="SECONDS",
              help="How often the overview's last-hour charts take a sample of every queue.")
def dashboard_cmd(ops: Ops, host: str, port: int, token: str | None, basic_auth: str | None, read_only: bool,
                  poll: float, sample: float) -> None:
    """Serve a web dashboard of the app's queues, failed jobs, workers, schedule and transfers."""
    try:
        import uvicorn  # optional dependency: the `dashboard` extra (starlette, uvicorn, jinja2)

        from laraq.dashboard.app import create_app  # optional dependency: it imports starlette and jinja2
        from laraq.dashboard.auth import Access, check_bind  # optional dependency (the same package)
        from laraq.dashboard.history import History  # optional dependency (the same package)
    except ImportError as exc:
        raise click.ClickException(f"the dashboard needs the 'dashboard' extra: pip install 'laraq[dashboard]' "
                                   f"({exc})") from exc
    access = Access(token=token or None, basic=_basic(basic_auth))
    try:
        check_bind(host, access)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    app = create_app(ops, access=access, read_only=read_only, poll_seconds=poll, history=History(every=sample),
                     allowed_hosts=("127.0.0.1", "localhost", "::1", "[::1]", host))
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"laraq dashboard on http://{shown}:{port}/  (prefix {ops.queue.prefix!r}"
               f"{', read-only' if read_only else ''}; Ctrl-C to stop)")
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False)
