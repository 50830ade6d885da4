"""Bulk retry (``laraq retry --class/--failed-after/--failed-before/--exception``, :func:`laraq.bus.retry.bulk_retry`)
over rows PHP's ``queue:work`` wrote (Laravel 8, 12, 13): a dry run changes nothing, the count comes before
the confirmation, the journal says what was sent where, and ``--undo`` takes it back so exactly that
``php artisan queue:retry`` of the restored rows pushes the same bytes laraq pushed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from phpapp import PhpApp

from laraq.cli import main

pytestmark = pytest.mark.php


@pytest.fixture
def app(laravel: str, redis_server: Any, tmp_path: Any) -> PhpApp:
    return PhpApp(redis_server.port, version=laravel, workdir=tmp_path)


def laraq(app: PhpApp, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, ["retry", "--laravel", app.release, *args], env=app.env, input=input)


def test_filtered_retry_with_journal_and_undo(app: PhpApp, redis_client: Any, tmp_path: Path) -> None:
    for reason, queue in (("card declined", "mail"), ("card declined", "mail"), ("db timeout", "mail"),
                          ("card declined", "other")):
        app.tool("dispatch", "failing", f"--queue={queue}", "--args=" + json.dumps({"reason": reason}))
    app.tool("dispatch", "echo", "--queue=mail", "--args=" + json.dumps({"mode": "fail"}))
    app.artisan("queue:work", "redis", "--queue=mail,other", "--stop-when-empty", "--tries=1", check=True)
    listing = json.loads(CliRunner().invoke(main, ["failed", "--json", "--laravel", app.release], env=app.env).output)
    assert len(listing) == 5
    mail_list = app.prefix + "queues:mail"
    wanted = ["--class", "App\\Jobs\\Failing*", "--exception", "DECLINED", "-q", "mail"]

    dry = laraq(app, *wanted, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.output)
    assert doc["count"] == 2 and {j["class"] for j in doc["jobs"]} == {"App\\Jobs\\FailingJob"}
    assert redis_client.llen(mail_list) == 0
    assert laraq(app, "--failed-before", "2000-01-01", "--dry-run").output.startswith("0 failed job(s) match")
    assert "1 failed job(s) match" in laraq(app, "--class", "App\\Jobs\\EchoJob", "--failed-after", "1h",
                                               "--dry-run").output

    refused = laraq(app, *wanted, input="n\n")
    assert refused.exit_code != 0 and "2 failed job(s) match" in refused.output and "Retry 2" in refused.output
    assert redis_client.llen(mail_list) == 0

    journal = tmp_path / "retry.jsonl"
    done = laraq(app, *wanted, "--yes", "--journal", str(journal))
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    retried = [e for e in lines if e["step"] == "retry"]
    assert [e["step"] for e in lines] == ["retry", "done", "retry", "done"]
    assert {e["key"] for e in retried} == {mail_list} and all("card declined" in e["failed"]["exception"]
                                                             for e in retried)
    pushed = redis_client.lrange(mail_list, 0, -1)
    assert sorted(pushed) == sorted(e["pushed"].encode() for e in retried)
    left = json.loads(CliRunner().invoke(main, ["failed", "--json", "--laravel", app.release], env=app.env).output)
    assert len(left) == 3

    undo = laraq(app, "--undo", str(journal))
    assert undo.exit_code == 0, undo.output
    assert redis_client.llen(mail_list) == 0
    assert len(json.loads(CliRunner().invoke(main, ["failed", "--json", "--laravel", app.release],
                                            env=app.env).output)) == 5
    again = laraq(app, "--undo", str(journal))  # re-running an undo changes nothing
    assert again.exit_code == 0 and "2 present" in again.output
    # the restored rows are PHP's again: its queue:retry pushes exactly what laraq pushed
    redis_client.delete(mail_list + ":notify")
    for entry in retried:
        app.artisan("queue:retry", str(entry["uuid"] or entry["id"]), check=True)
    assert sorted(redis_client.lrange(mail_list, 0, -1)) == sorted(pushed)


def test_dry_run_lists_the_jobs_and_a_partial_undo_is_not_an_error(app: PhpApp, redis_client: Any,
                                                                    tmp_path: Path) -> None:
    for reason in ("card declined", "card declined"):
        app.tool("dispatch", "failing", "--queue=mail", "--args=" + json.dumps({"reason": reason}))
    app.artisan("queue:work", "redis", "--queue=mail", "--stop-when-empty", "--tries=1", check=True)
    rows = json.loads(CliRunner().invoke(main, ["failed", "--json", "--laravel", app.release], env=app.env).output)
    wanted = ["--class", "App\\Jobs\\FailingJob", "-q", "mail"]
    # --dry-run lists each job (its id first, never dropped) at 80 columns, as well as the counts
    for env in ({"COLUMNS": "80"}, {}):  # an 80-column terminal's width, and piped (no width: nothing cut)
        dry = CliRunner().invoke(main, ["retry", "--laravel", app.release, *wanted, "--dry-run"],
                                 env={**app.env, "COLUMNS": "", **env})
        assert dry.exit_code == 0, dry.output
        lines = dry.output.splitlines()
        if env:
            assert max(len(line) for line in lines) <= 80, dry.output
        else:
            assert sum("App\\Jobs\\FailingJob" in line for line in lines) == 3, dry.output  # 1 count row, 2 jobs
        for row in rows:
            assert any(line.startswith(str(row["uuid"] or row["id"])) for line in lines), dry.output
        assert "nothing retried" in dry.output and redis_client.llen(app.prefix + "queues:mail") == 0
    journal = tmp_path / "retry.jsonl"
    assert laraq(app, *wanted, "--yes", "--journal", str(journal)).exit_code == 0
    redis_client.lpop(app.prefix + "queues:mail")  # a worker takes one before the undo
    undo = laraq(app, "--undo", str(journal))
    assert undo.exit_code == 0, undo.output
    assert "1 restored, 1 taken" in undo.output and "already taken were left to it" in undo.output
    again = laraq(app, "--undo", str(journal))
    assert again.exit_code == 0 and "1 present, 1 taken" in again.output, again.output
    # a journal that cannot be read is still an error
    (tmp_path / "bad.jsonl").write_text("not json\n")
    assert laraq(app, "--undo", str(tmp_path / "bad.jsonl")).exit_code == 1
