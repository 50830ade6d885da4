"""Payloads built to hurt: JSON nested past PHP's ``json_decode`` depth, PHP-serialized commands nested past
``unserialize``'s, declared counts and string lengths no body holds, numbers too long to convert. Each one
fails alone (``failed_jobs`` with one line naming it and the cause, or laraq's ``:poison`` list when the pop
script's ``cjson`` cannot read it) and the job behind it runs, in a real ``laraq work`` process. The
operator commands (``status``, ``peek``, ``show``, ``metrics``) on a queue of them exit 0 and show them as
unreadable.

What those commands read is bounded per member, and that is asserted on bytes, not on time: Redis counts
every byte it sends (``INFO stats``: ``total_net_output_bytes``), and a command run against the test's
own server reads at most a few excerpts of 64 KB per job, however big the jobs are. Long names are cut
for display, saying how long they were.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
import redis
from conftest import ROOT
from pyapp import PYTHON_JOB, STRING_JOB, PyApp
from test_worker_support import laraq_env, run_laraq

from laraq.protocol import phpjson
from laraq.protocol.payload import build_object_payload, build_string_payload
from laraq.protocol.phpjson import JSON_MAX_DEPTH, PhpJsonError, check_json_depth

try:
    import laraq._speedups as _speedups
except ImportError:  # no compiler: the Python scan alone
    _speedups = None  # type: ignore[assignment]

MB = 1024 * 1024


def deep_json_job(app: PyApp, uuid: str, depth: int) -> bytes:
    """A string job of the Python app whose ``data`` is ``depth`` arrays nested."""
    text = build_string_payload(app.release, STRING_JOB, "DEEP", uuid=uuid, id=uuid)
    return text.replace('"data":"DEEP"', '"data":' + "[" * depth + "]" * depth).encode()


def command_job(app: PyApp, uuid: str, command: bytes) -> bytes:
    """A ``PythonJob`` whose ``data.command`` is ``command`` (PHP-serialized, as laid out by the caller)."""
    return build_object_payload(app.release, command_name=PYTHON_JOB, command=command.decode(), uuid=uuid,
                                id=uuid).encode()


def python_job(properties: bytes, count: int = 1) -> bytes:
    return b'O:%d:"%s":%d:{%s}' % (len(PYTHON_JOB), PYTHON_JOB.encode(), count, properties)


def deep_command(depth: int) -> bytes:
    return python_job(b's:8:"document";' + b"a:1:{i:0;" * depth + b"i:1;" + b"}" * depth)


def laraq_cmd(app: PyApp, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # a table as wide as a terminal of 400 columns: no cell wraps
    return subprocess.run([sys.executable, "-m", "laraq", *args, "--laravel", app.release],
                          env=laraq_env(app, COLUMNS="400"), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def qkey(app: PyApp, queue: str) -> str:
    return f"{app.prefix}queues:{queue}"


# -- the depth rule is PHP's ----------------------------------------------------------------------------

DEPTH_CASES = {
    "arrays-511": "[" * 511 + "]" * 511,
    "arrays-512": "[" * 512 + "]" * 512,
    "objects-511": '{"a":' * 511 + "1" + "}" * 511,
    "objects-512": '{"a":' * 512 + "1" + "}" * 512,
    "mixed-512": '[{"a":' * 256 + "null" + "}]" * 256,
    "brackets-in-strings": '["' + "[{" * 2000 + '"]',
    "escaped-quote-then-brackets": '["\\"' + "[" * 2000 + '"]',
    "many-shallow": "[" + ",".join(["[1]"] * 3000) + "]",
    "scalar": "1",
}


@pytest.mark.php
@pytest.mark.parametrize("name", sorted(DEPTH_CASES))
def test_json_depth_is_phps(php: str, name: str) -> None:
    """``check_json_depth`` and both of its scans (C, when built, and Python) say what PHP says."""
    doc = DEPTH_CASES[name]
    proc = subprocess.run([php, "-r", "echo json_decode(stream_get_contents(STDIN), true) === null "
                                      "&& json_last_error() === JSON_ERROR_DEPTH ? 'deep' : 'ok';"],
                          input=doc.encode(), capture_output=True, timeout=60, check=True)
    try:
        check_json_depth(doc)
        ours = "ok"
    except PhpJsonError:
        ours = "deep"
    assert ours == proc.stdout.decode()
    scans = [phpjson.scan_too_deep] + ([_speedups.json_too_deep] if _speedups is not None else [])
    assert [("deep" if scan(doc.encode(), JSON_MAX_DEPTH) else "ok") for scan in scans] == [ours] * len(scans)
    if _speedups is not None:  # the worker's check of what orjson parsed
        assert ("deep" if _speedups.value_too_deep(json.loads(doc), JSON_MAX_DEPTH) else "ok") == ours


# -- a worker fails each one and goes on ----------------------------------------------------------------

def test_worker_fails_each_hostile_job_and_runs_the_next(pyapp: PyApp, redis_client: redis.Redis) -> None:
    hostile = {
        "deep-json": deep_json_job(pyapp, "deep-json", 600),  # cjson reads it (1000 levels), PHP does not
        "deep-php": command_job(pyapp, "deep-php", deep_command(5000)),
        "huge-count": command_job(pyapp, "huge-count", python_job(b"", 999_999_999_999)),
        "huge-string": command_job(pyapp, "huge-string", python_job(b's:8:"document";s:99999999999:"x";')),
    }
    too_deep_for_cjson = deep_json_job(pyapp, "deep-cjson", 200_000)  # 400 KB that crashed orjson 3.8
    for body in hostile.values():
        redis_client.rpush(qkey(pyapp, "dq"), body)
    redis_client.rpush(qkey(pyapp, "dq"), too_deep_for_cjson)
    pyapp.dispatch("python", "dq")

    proc = run_laraq(pyapp, "--stop-when-empty", "--queue=dq", "--no-supervise", timeout=120)

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["class"] for r in pyapp.runs()] == [PYTHON_JOB]  # the job behind them ran
    rows = {row["uuid"]: row for row in pyapp.failed_rows()}
    assert set(rows) == set(hostile)
    for uuid, body in hostile.items():
        assert rows[uuid]["payload"].encode() == body  # kept byte for byte
    assert "Maximum stack depth exceeded" in rows["deep-json"]["exception"]
    assert "laraq cannot read the job payload on queue dq (uuid deep-json)" in proc.stderr
    assert "4096" in rows["deep-php"]["exception"]  # unserialize_max_depth, as PHP fails it
    assert "999999999999" in rows["huge-count"]["exception"]
    assert "99999999999" in rows["huge-string"]["exception"]
    assert redis_client.lrange(qkey(pyapp, "dq") + ":poison", 0, -1) == [too_deep_for_cjson]
    assert re.search(r"moved 1 unreadable member\(s\) of \S+:dq to \S+:dq:poison \(.*\): uuid deep-cjson, "
                     r"nested more than 1000 levels deep", proc.stderr), proc.stderr[-3000:]
    assert not redis_client.exists(qkey(pyapp, "dq"), qkey(pyapp, "dq") + ":reserved")


# -- operator commands ---------------------------------------------------------------------------------

def test_operator_commands_show_deep_jobs_as_unreadable(pyapp: PyApp, redis_client: redis.Redis) -> None:
    redis_client.rpush(qkey(pyapp, "dq"), deep_json_job(pyapp, "deep-small", 600),
                       deep_json_job(pyapp, "deep-big", 200_000))
    pyapp.dispatch("python", "dq")

    status = laraq_cmd(pyapp, "status", "dq", "--sample", "0", "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    assert json.loads(status.stdout)["queues"][0]["pending"] == 3

    peek = laraq_cmd(pyapp, "peek", "dq", "--json")
    assert peek.returncode == 0, peek.stderr[-2000:]
    views = {v["uuid"]: v for v in json.loads(peek.stdout)}
    for uuid in ("deep-small", "deep-big"):
        assert "Maximum stack depth exceeded" in views[uuid]["error"], views[uuid]
    assert [v["error"] for v in views.values()].count(None) == 1
    table = laraq_cmd(pyapp, "peek", "dq")
    assert table.returncode == 0 and table.stdout.count("Maximum stack depth") == 2, table.stderr[-2000:]

    for uuid in ("deep-small", "deep-big"):
        show = laraq_cmd(pyapp, "show", uuid, "--json")
        assert show.returncode == 0, show.stderr[-2000:]
        (found,) = json.loads(show.stdout)
        assert found["uuid"] == uuid and "Maximum stack depth exceeded" in found["error"]

    metrics = laraq_cmd(pyapp, "metrics")
    assert metrics.returncode == 0, metrics.stderr[-2000:]
    assert re.search(r'laraq_queue_jobs\{queue="dq",state="pending"\} 3\.0', metrics.stdout)


def sent_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def test_operator_commands_read_a_bounded_excerpt_of_each_job(pyapp: PyApp, redis_client: redis.Redis) -> None:
    """Five 20 MB jobs (100 MB): status, peek, metrics and the search of show each read a few excerpts of
    64 KB, not the jobs; show then reads the one job it shows."""
    blob = "x" * (20 * MB)
    for n in range(5):
        redis_client.rpush(qkey(pyapp, "big"), build_string_payload(
            pyapp.release, STRING_JOB, {"blob": blob}, uuid=f"big-{n}", id=f"big-{n}", created_at=1_700_000_000))
    del blob
    reads: dict[str, int] = {}
    outputs: dict[str, Any] = {}
    for name, args in {"status": ["status", "big", "--sample", "0", "--json"], "peek": ["peek", "big", "--json"],
                       "metrics": ["metrics"], "show": ["show", "big-3", "--json"]}.items():
        before = sent_bytes(redis_client)
        proc = laraq_cmd(pyapp, *args)
        reads[name] = sent_bytes(redis_client) - before
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs[name] = proc.stdout
    assert reads["status"] < 1 * MB and reads["metrics"] < 1 * MB and reads["peek"] < 1 * MB, reads
    assert 20 * MB < reads["show"] < 22 * MB, reads  # the one job shown, and excerpts of the others
    status = json.loads(outputs["status"])["queues"][0]
    assert status["pending"] == 5 and status["oldest_pending_age"] > 0  # createdAt read from the job's end
    peeked = json.loads(outputs["peek"])
    assert [v["uuid"] for v in peeked] == [f"big-{n}" for n in range(5)]
    assert all(v["size"] > 20 * MB and v["job"] == STRING_JOB and v["created_at"] == 1_700_000_000
               and v["error"] is None and "@skipped" in v["properties"] for v in peeked)
    (shown,) = json.loads(outputs["show"])
    assert shown["uuid"] == "big-3" and shown["body_bytes"] > 20 * MB and shown["data"]["blob"].startswith("xxx")


def test_long_names_are_cut_for_display_saying_how_long(pyapp: PyApp, redis_client: redis.Redis) -> None:
    """Jobs named with 150 KB (read from their first 32 KB) and with 50 KB (read whole): ``peek -n 400``
    shows each name's first 200 characters and how long it is, and reads 64 KB at most per job."""
    for n in range(400):
        size = 150_000 if n % 2 else 50_000
        redis_client.rpush(qkey(pyapp, "names"), json.dumps({
            "uuid": f"n-{n}", "displayName": "N" * size, "job": STRING_JOB, "data": {}, "id": f"n-{n}",
            "attempts": 0}))
    before = sent_bytes(redis_client)
    proc = laraq_cmd(pyapp, "peek", "names", "-n", "400", "--json")
    read = sent_bytes(redis_client) - before
    assert proc.returncode == 0, proc.stderr[-2000:]
    views = json.loads(proc.stdout)
    assert len(views) == 400
    assert read < 400 * 65 * 1024  # not the 40 MB the names hold
    assert {v["name"][200:] for v in views[0::2]} == {"… (50,000 characters)"}
    assert all(v["name"].startswith("N" * 200) and re.fullmatch(r"… \(more than [\d,]+ characters\)", v["name"][200:])
               for v in views[1::2])
    assert len(proc.stdout) < 400 * 2048
