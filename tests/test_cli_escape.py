r"""Text from a job or from Redis reaches a terminal or a text log line only escaped (laraq.logtext.visible).

Jobs whose class name, ``displayName``, ``job`` string, property values, exception text and queue name
hold a clear-screen, an OSC 8 hyperlink, an OSC 0 window title, a C1 CSI, bidi overrides, a CR, a newline
followed by a forged log line, and rich markup are read by the real ``laraq`` commands (``python -m
laraq``) on a real Redis: ``peek``, ``show`` (``--full`` too), ``status`` (``--json``, ``--reserved``),
``failed`` (``--exceptions``), ``workers``, ``health``, ``poison list``; and run by ``laraq work``, whose
banner, console lines (the C sink and the pure-Python one) and text log are read back. No raw control
character gets out, the escaped form is shown, rich markup prints as written, and a record's text never
starts a second line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import redis
from pyapp import PyApp
from test_worker_support import ROOT

from laraq.app import App
from laraq.bus.job import Job
from laraq.logtext import visible
from laraq.protocol.queue import RedisQueue
from laraq.protocol.serializer import PHPObject

#: every kind of hostile text, with a newline and then what a forged log line would say
HOSTILE = ("\x1b[2J\x1b]8;;http://evil.example\x07link\x1b]8;;\x07\x1b]0;owned\x07\x9b31m\u202eevil\u2066x\u2069"
           "\r[bold red]red[/]\n2026-01-01 00:00:00,000 laraq[1] INFO forged: line")
#: a queue name with the same characters, minus the ``:`` a key's suffix would be read from
QUEUE = "q\x1b[2J\x9b\u202e[bold]\nforged"
CLASS = "App\\Jobs\\Evil\x1b]0;title\x07\x9b2J"
#: a control character a reader would not see: C0 (bar tab and newline), DEL, C1, bidi embeddings and isolates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
FORGED = "2026-01-01 00:00:00,000 laraq[1] INFO forged"

app = App()


@app.handler("App\\Jobs\\EvilJob")
def evil(command: PHPObject, job: Job) -> None:
    if command.mode == "fail":
        raise RuntimeError(command.message)


def laraq(pyapp: PyApp, *args: str, code: int | None = 0, **env: str) -> subprocess.CompletedProcess[str]:
    # no $COLUMNS: a piped table is unbounded, so no cell is folded and a value reads whole
    full_env = {**pyapp.env, "COLUMNS": "", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]), **env}
    proc = subprocess.run([sys.executable, "-m", "laraq", *args], env=full_env, cwd=ROOT, capture_output=True,
                          text=True, encoding="utf-8", errors="surrogateescape", timeout=120)
    if code is not None:
        assert proc.returncode == code, proc.stdout + proc.stderr
    return proc


def assert_clean(text: str) -> None:
    """No raw control character."""
    found = RAW.search(text)
    assert found is None, f"raw {found.group()!r} in {text!r}"


def assert_lines_own(text: str) -> None:
    """No raw control character, and nothing a job wrote begins a line of its own (a table may fold a
    long cell: this holds for console and log lines)."""
    assert_clean(text)
    assert not any(line.lstrip().startswith(("2026-01-01", "forged")) for line in text.splitlines()), text


def seed(pyapp: PyApp) -> dict[str, str]:
    """Hostile jobs on ``default`` and on the hostile queue; returns their ids by what is hostile."""
    d = pyapp.dispatcher
    ids = {
        "class": d.push(d.prepare_job(CLASS, {"note": HOSTILE})).id,
        "display": d.push(d.prepare_job("App\\Jobs\\EvilJob", {"mode": "ok", "message": HOSTILE},
                                        display_name=HOSTILE)).id,
        "string": d.push(d.prepare_string("App\\Handlers\\Evil\x1b[2J\u202e@handle", {"text": HOSTILE})).id,
        "queue": d.push(d.prepare_job("App\\Jobs\\EvilJob", {"mode": "ok", "message": HOSTILE}, queue=QUEUE)).id,
    }
    return {k: str(v) for k, v in ids.items()}


def test_visible_escapes_what_a_terminal_would_act_on() -> None:
    assert visible("App\\Jobs\\SendEmail") == "App\\Jobs\\SendEmail"
    assert visible("a\x1b[2Jb\x9b\u202e\n\r\t\x7f\u2066") == "a\\x1b[2Jb\\x9b\\u202e\\n\\r\\t\\x7f\\u2066"
    assert visible("line 1\nline\x1b 2", multiline=True) == "line 1\nline\\x1b 2"
    assert visible("é ☃ 😀 中文") == "é ☃ 😀 中文"
    assert visible("\U000e0041\ud800") == "\\U000e0041\\ud800"
    value = {"k": HOSTILE + "\U000e0041 é", "list": [QUEUE]}
    for indent in (None, 2):
        text = visible(json.dumps(value, ensure_ascii=False, indent=indent), multiline=indent is not None, json=True)
        assert RAW.search(text) is None and json.loads(text) == value and "é" in text


def test_peek_show_and_status_show_hostile_text_escaped(pyapp: PyApp, redis_client: redis.Redis) -> None:
    ids = seed(pyapp)
    outputs = []
    for args in (["peek", "default"], ["peek", QUEUE], ["status", "--sample", "0"], ["status", "--json", "--sample", "0"],
                 ["show", ids["class"]], ["show", ids["display"], "--full"], ["show", ids["string"]],
                 ["show", ids["queue"], "--json"], ["peek", "default", "--json"]):
        proc = laraq(pyapp, *args)
        assert_clean(proc.stdout + proc.stderr)
        outputs.append(proc.stdout)
    peek, peek_queue, status, status_json, show_class, show_full, show_string, show_json, peek_json = outputs
    assert "App\\Jobs\\Evil\\x1b]0;title\\x07\\x9b2J" in peek  # the class / commandName
    assert "\\x1b[2J\\x1b]8;;http://evil.example\\x07link" in peek  # the displayName
    assert "App\\Handlers\\Evil\\x1b[2J\\u202e" in peek  # the job string
    assert "[bold red]red[/]" in peek  # rich markup prints as written
    narrow = laraq(pyapp, "peek", "default", COLUMNS="80").stdout  # at 80 columns: escaped, and every column shown
    assert_clean(narrow)
    # too wide for 80 columns as a table: one block per job, the class first, every other column named
    assert all(f"{h}: " in narrow for h in ("#", "state", "attempts", "uuid", "at (UTC)"))
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert "App\\Jobs\\EvilJob" in peek_queue
    assert "q\\x1b[2J\\x9b\\u202e[bold]\\nforged" in status
    assert "\\n2026-01-01 00:00:00,000 laraq[1] INFO forged: line" in show_full
    assert "App\\Handlers\\Evil\\x1b[2J\\u202e" in show_string
    # JSON output: the same values, control characters as JSON escapes
    assert QUEUE in [q["queue"] for q in json.loads(status_json)["queues"]]
    assert json.loads(show_json)[0]["queue"] == QUEUE and json.loads(show_json)[0]["properties"]["message"] == HOSTILE
    assert json.loads(peek_json)[1]["name"] == HOSTILE
    # a reserved job on the hostile queue: status --reserved
    RedisQueue(redis_client, prefix=pyapp.prefix, version=pyapp.release).pop(QUEUE)
    reserved = laraq(pyapp, "status", "--reserved")
    assert_clean(reserved.stdout + reserved.stderr)
    assert "q\\x1b[2J\\x9b\\u202e[bold]" in reserved.stdout


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c-sink", "python-sink"])
def test_worker_lines_log_and_failed_jobs_show_hostile_text_escaped(pyapp: PyApp, pure: str) -> None:
    d = pyapp.dispatcher
    d.push(d.prepare_job("App\\Jobs\\EvilJob", {"mode": "ok", "message": ""}, display_name=HOSTILE))
    failing = d.push(d.prepare_job("App\\Jobs\\EvilJob", {"mode": "fail", "message": HOSTILE}, display_name=HOSTILE,
                                   queue=QUEUE, tries=1))
    worker = laraq(pyapp, "work", "--app", "test_cli_escape:app", "--queue", f"default,{QUEUE}", "--stop-when-empty",
                   "--sleep", "0", "--no-supervise", "--laravel", pyapp.release, LARAQ_PURE_PYTHON=pure)
    assert_lines_own(worker.stdout)
    assert_lines_own(worker.stderr)
    # the console: one line per event (RUNNING, DONE; RUNNING, FAIL), each naming the job escaped
    lines = worker.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["RUNNING", "DONE", "RUNNING", "FAIL"], worker.stdout
    assert all("\\x1b[2J\\x1b]8;;http://evil.example" in line and "\\nforged" not in line for line in lines)
    # the banner names the hostile queue escaped
    assert "q\\x1b[2J\\x9b\\u202e[bold]\\nforged" in worker.stderr
    # the text log: the failure's record is one line holding the escaped message; the traceback after it
    # repeats the message escaped, on the exception's own line
    [record] = [line for line in worker.stderr.splitlines() if "raised RuntimeError" in line]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ laraq\[\d+\] ERROR ", record)
    assert "\\r[bold red]red[/]\\n2026-01-01 00:00:00,000 laraq[1] INFO forged: line" in record
    [last] = [line for line in worker.stderr.splitlines() if line.startswith("RuntimeError: ")]
    assert last.endswith("\\n2026-01-01 00:00:00,000 laraq[1] INFO forged: line")
    # what was stored is the raw text, as PHP stores it
    [row] = pyapp.failed_rows()
    assert row["queue"] == QUEUE and HOSTILE in row["exception"] and json.loads(row["payload"])["id"] == failing.id
    for args in (["failed"], ["failed", "--exceptions"], ["show", str(failing.uuid)],
                 ["show", str(failing.uuid), "--full"]):
        proc = laraq(pyapp, *args)
        assert_clean(proc.stdout + proc.stderr)
        assert "q\\x1b[2J\\x9b\\u202e" in proc.stdout, proc.stdout
    shown = laraq(pyapp, "show", str(failing.uuid)).stdout
    assert "\\n2026-01-01 00:00:00,000 laraq[1] INFO forged: line" in shown


def test_workers_health_and_poison_show_hostile_records_escaped(pyapp: PyApp, redis_client: redis.Redis) -> None:
    now = float(redis_client.time()[0])
    key = f"{pyapp.prefix}laraq:{{workers}}"
    redis_client.hset(f"{key}:w1", mapping={"host": HOSTILE, "pid": "1", "name": QUEUE, "queues": f"default,{QUEUE}",
                                            "laravel": "13\x1b[2J", "started": repr(now), "beat": repr(now)})
    redis_client.zadd(key, {"w1\x1b]0;t\x07": now})
    redis_client.rename(f"{key}:w1", f"{key}:w1\x1b]0;t\x07")
    redis_client.rpush(f"{pyapp.prefix}queues:{QUEUE}:poison", HOSTILE.encode("utf-8") + b"\xff")
    workers = laraq(pyapp, "workers")
    assert_clean(workers.stdout + workers.stderr)
    assert "\\x1b[2J\\x1b]8;;http://evil.example" in workers.stdout and "w1\\x1b]0;t\\x07" in workers.stdout
    assert workers.stdout.splitlines()[0].split()[0] == "host"
    health = laraq(pyapp, "health", "--queue", QUEUE)
    assert_clean(health.stdout + health.stderr)
    poison = laraq(pyapp, "poison", "list")
    assert_clean(poison.stdout + poison.stderr)
    assert "q\\x1b[2J\\x9b\\u202e[bold]\\nforged" in poison.stdout and "\\x1b[2J" in poison.stdout


def test_json_lines_and_logs_stay_valid_and_hold_the_raw_values(pyapp: PyApp) -> None:
    d = pyapp.dispatcher
    d.push(d.prepare_job("App\\Jobs\\EvilJob", {"mode": "fail", "message": HOSTILE}, display_name=HOSTILE, tries=1))
    worker = laraq(pyapp, "work", "--app", "test_cli_escape:app", "--stop-when-empty", "--sleep", "0",
                   "--no-supervise", "--laravel", pyapp.release, "--json", "--log-format", "json")
    assert_lines_own(worker.stdout + worker.stderr)
    events = [json.loads(line) for line in worker.stdout.splitlines()]
    records = [json.loads(line) for line in worker.stderr.splitlines()]
    assert [e["job"] for e in events] == [HOSTILE, HOSTILE] and events[1]["message"] == HOSTILE
    [failure] = [r for r in records if r["level"] == "error" and "raised RuntimeError" in r["message"]]
    assert failure["job"] == HOSTILE and failure["message"].endswith(HOSTILE) and HOSTILE in failure["exception"]
