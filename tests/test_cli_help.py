"""Every ``laraq`` command documents itself and reaches Redis the same way.

Walks the real click tree (``laraq.cli.main``, including groups such as ``poison``): every option of every
command has help text, and every command that talks to Redis takes ``--redis-url`` and ``--env-file``.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
from click.testing import CliRunner

from laraq.cli import main


def walk(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))


def test_every_option_of_every_command_has_help():
    missing = []
    for path, command in walk(main):
        assert command.help or command.short_help, f"laraq {' '.join(path)} has no help text"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip():
                missing.append(f"laraq {' '.join(path)} {param.opts[-1]}")
    assert missing == []


def test_every_redis_command_takes_redis_url_and_env_file():
    lacking = []
    for path, command in walk(main):
        if isinstance(command, click.Group) or path == ("schema",):  # schema: PHP reflection, no Redis
            continue
        names = {opt for p in command.params if isinstance(p, click.Option) for opt in p.opts}
        if not {"--redis-url", "--env-file"} <= names:
            lacking.append(" ".join(path))
    assert lacking == []


def test_redis_url_is_used_by_every_kind_of_command(redis_server, redis_client, tmp_path):
    """REDIS_PORT points nowhere: only --redis-url can reach the server."""
    redis_client.rpush("px_queues:via-url", b'{"uuid":"u1","id":"i1","attempts":0,"job":"X","data":{}}')
    env = {"REDIS_PORT": "1", "CACHE_STORE": "redis", "LARAQ_LARAVEL_VERSION": "12.67", "DB_CONNECTION": "sqlite",
           "DB_DATABASE": str(tmp_path / "db.sqlite")}
    url = ["--prefix", "px_", "--redis-url", redis_server.url]

    def ok(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, *url], env=env)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    assert '"queue": "via-url"' in ok("status", "--json", "--sample", "0")
    assert "u1" in ok("peek", "via-url") and "u1" in ok("show", "u1", "--no-failed")
    assert '\\"uuid\\":\\"u1' in ok("export", "via-url")
    ok("copy", "via-url", "mirror")
    assert redis_client.llen("px_queues:mirror") == 1
    ok("pause", "via-url")  # the cache connection follows --redis-url too (its /0 wins, as REDIS_URL in Laravel)
    assert redis_client.exists("px_laravel-cache-illuminate:queue:paused:redis:via-url")
    assert '"paused": true' in ok("status", "via-url", "--json", "--sample", "0")
    assert "no poison members" in ok("poison", "list")
    bad = CliRunner().invoke(main, ["status", "--sample", "0", "--redis-url", "nonsense://x"], env=env)
    assert bad.exit_code == 2 and "--redis-url" in bad.output


def test_default_params_are_what_the_command_line_resolves():
    """In-process workers (tests, embedders) start from the same option values as ``laraq work --app X``.

    click 8.3 stores a truthy ``UNSET`` placeholder as a flag's ``.default``; reading it turned ``--once`` and
    ``--force`` on for every in-process worker.
    """
    from laraq.cli.work import default_params, work_cmd

    seen: dict[str, object] = {}
    command = click.Command("work", params=work_cmd.params, callback=lambda **kw: seen.update(kw))
    result = CliRunner().invoke(command, ["--app", "mod:app"], standalone_mode=False, env={})
    assert result.exception is None, result.output
    expected = dict(seen, connection=None, app_spec=None)
    assert default_params() == expected
    for flag in ("once", "force", "stop_when_empty", "daemon", "quiet"):
        assert default_params()[flag] is False, flag
    assert default_params(once=True)["once"] is True


def test_python_dash_m_runs_the_same_command() -> None:
    """``python -m laraq`` (and ``python -m laraq.cli``) for environments whose scripts are not on PATH."""
    import subprocess
    import sys
    from pathlib import Path

    from laraq._version import __version__

    root = Path(__file__).resolve().parent.parent
    for module in ("laraq", "laraq.cli"):
        out = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True,
                             cwd=root, timeout=60)
        assert out.returncode == 0, out.stderr
        assert __version__ in out.stdout
        work = subprocess.run([sys.executable, "-m", module, "work", "--help"], capture_output=True, text=True,
                              cwd=root, timeout=60)
        assert work.returncode == 0 and "--queue" in work.stdout, work.stderr
