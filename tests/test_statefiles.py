"""laraq's files that hold job data (:mod:`laraq.cli.statefiles`): the state directory is ``0700`` and the
fallback ``failed_jobs.sqlite`` in it ``0600``; bulk-retry journals and exports are ``0600`` files created
with ``O_EXCL|O_NOFOLLOW``, so a symbolic link planted at the path makes the command stop with one message
and write nothing through it. Real ``laraq retry``/``export`` runs over a real Redis and the fixture app's
SQLite ``failed_jobs`` (``pyapp.PyApp``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyapp import ECHO, PyApp

from laraq.cli import main
from laraq.cli.startup import open_failed_store
from laraq.cli.statefiles import PrivateFileError, open_private, state_dir_problem
from laraq.config.settings import LaravelSettings
from laraq.stores.failed import DatabaseUuidFailedJobStore


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def fail_jobs(app: PyApp, count: int) -> None:
    """``count`` failed rows of echo jobs in the app's ``failed_jobs``, as a worker logs them."""
    conn = sqlite3.connect(app.db_path)
    store = DatabaseUuidFailedJobStore(conn, dialect="sqlite")
    for n in range(count):
        store.log("redis", "default", app.prepare("echo", "default", n).payload, "RuntimeException: no stock")
    conn.commit()
    conn.close()


def retry(app: PyApp, state: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["retry", "--laravel", app.release, "--class", ECHO, "--yes", *args],
                              env={**app.env, "LARAQ_STATE_DIR": str(state)})


def test_a_retry_journal_is_a_private_file_in_the_state_dir(pyapp: PyApp, redis_client: Any,
                                                           tmp_path: Path) -> None:
    fail_jobs(pyapp, 2)
    state = tmp_path / "state"
    done = retry(pyapp, state, "--json")
    assert done.exit_code == 0, done.output
    [journal] = state.glob("laraq-retry-*.jsonl")
    assert mode(state) == 0o700 and mode(journal) == 0o600
    assert [json.loads(line)["step"] for line in journal.read_text().splitlines()] == ["retry", "done"] * 2
    assert redis_client.llen(pyapp.prefix + "queues:default") == 2


def test_a_symbolic_link_at_the_journal_path_is_refused(pyapp: PyApp, redis_client: Any, tmp_path: Path) -> None:
    fail_jobs(pyapp, 2)
    target = tmp_path / "someone-elses-file"
    planted = tmp_path / "retry.jsonl"
    planted.symlink_to(target)
    refused = retry(pyapp, tmp_path / "state", "--journal", str(planted))
    assert refused.exit_code != 0
    assert f"refusing to use {planted}: it is a symbolic link" in refused.output
    assert not target.exists() and planted.is_symlink()
    assert redis_client.llen(pyapp.prefix + "queues:default") == 0 and len(pyapp.failed_rows()) == 2

    # --undo reads only a journal of this user's that nobody else may have written
    journal = tmp_path / "real.jsonl"
    assert retry(pyapp, tmp_path / "state", "--journal", str(journal)).exit_code == 0
    linked = tmp_path / "linked.jsonl"
    linked.symlink_to(journal)
    undo = CliRunner().invoke(main, ["retry", "--laravel", pyapp.release, "--undo", str(linked)], env=pyapp.env)
    assert undo.exit_code != 0 and "it is a symbolic link" in undo.output
    journal.chmod(0o666)
    undo = CliRunner().invoke(main, ["retry", "--laravel", pyapp.release, "--undo", str(journal)], env=pyapp.env)
    assert undo.exit_code != 0 and "other users may write to it (mode 666)" in undo.output
    assert redis_client.llen(pyapp.prefix + "queues:default") == 2  # nothing was undone


def test_an_export_is_private_and_never_written_through_a_link(pyapp: PyApp, tmp_path: Path) -> None:
    pyapp.dispatch("echo", count=2)
    target = tmp_path / "target.jsonl"
    planted = tmp_path / "planted.jsonl"
    planted.symlink_to(target)
    run = CliRunner().invoke(main, ["export", "--laravel", pyapp.release, "default", "-o", str(planted)],
                             env=pyapp.env)
    assert run.exit_code != 0 and "it is a symbolic link" in run.output and not target.exists()
    out = tmp_path / "jobs.jsonl"
    out.write_text("old\n")
    out.chmod(0o644)
    run = CliRunner().invoke(main, ["export", "--laravel", pyapp.release, "default", "-o", str(out)], env=pyapp.env)
    assert run.exit_code == 0, run.output
    assert mode(out) == 0o600 and len(out.read_text().splitlines()) == 2


def test_open_private_creates_0600_and_refuses_what_is_already_there(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with open_private(path, "new") as fh:
        fh.write("one\n")
    assert mode(path) == 0o600
    with pytest.raises(PrivateFileError, match="a file is already there"):
        open_private(path, "new")
    with open_private(path, "append") as fh:  # resumed on purpose: a file of this user's
        fh.write("two\n")
    assert path.read_text() == "one\ntwo\n"
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere")
    for how in ("new", "append", "replace", "read"):
        with pytest.raises(PrivateFileError, match="symbolic link"):
            open_private(link, how)  # type: ignore[arg-type]
    assert not (tmp_path / "elsewhere").exists()
    if os.geteuid() == 0:  # root can hand a file to another user: one not ours is refused
        os.chown(path, 65534, 65534)
        with pytest.raises(PrivateFileError, match="belongs to uid 65534"):
            open_private(path, "append")


def test_the_fallback_failed_job_store_is_0600_in_a_0700_state_dir(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "xdg" / "laraq"
    monkeypatch.delenv("LARAQ_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    # no project, and the stock SQLite store is not there: failed jobs go to the local file
    settings = LaravelSettings.from_env({"DB_CONNECTION": "sqlite", "DB_DATABASE": str(tmp_path / "gone.sqlite")},
                                        version="12.67")
    opened = open_failed_store(settings)
    assert str(state / "failed_jobs.sqlite") in opened.description
    opened.store.log("redis", "default", b'{"uuid":"u1","job":"X","data":{}}', "RuntimeException: boom")
    assert mode(state) == 0o700
    assert {p.name: mode(p) for p in state.iterdir()} == {"failed_jobs.sqlite": 0o600}

    # a state dir other users may write to is said, never changed; a database file made before is tightened
    state.chmod(0o777)
    (state / "failed_jobs.sqlite").chmod(0o644)
    again = open_failed_store(settings)
    assert any("writable by other users (mode 777)" in w for w in again.warnings)
    assert mode(state) == 0o777 and mode(state / "failed_jobs.sqlite") == 0o600
    assert state_dir_problem(tmp_path) is None
