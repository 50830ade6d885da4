"""Each job once, whatever the order of ``copy``, ``move``, ``import`` and ``move --recover``.

* ``copy`` then ``move`` of the same queue: the move finds every job already at the destination, writes
  none again, removes them from the source and says so (``already_at_destination``);
* a move killed between the destination's write and the journal's cleanup, then undone with
  ``move --recover --to-source``: the job the destination wrote stays there and is not put back (the
  undo reads the destination, its password from ``LARAQ_TO_PASSWORD`` as the printed command expects);
* a property-style run on live Laravel 8 → 13: a seeded random sequence of those commands (and ``kill -9``
  of the CLI in the middle of a move or a copy, PHP dispatching between them), after each of which every
  job id is counted on both servers: never twice on one, never on both unless a copy put it there, never lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import RedisServer, require_laravel
from phpapp import PhpApp
from test_migrate_held import PREFIX, SRC, invoke, other_server, seed  # noqa: F401  (fixtures)
from test_migrate_live import Proxy
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)
from test_worker_support import ROOT, laraq_env

from laraq.ops.migrate import Transfer
from laraq.ops.transfers import PASSWORD_ENV, find_held
from laraq.protocol.queue import RedisQueue


def _held(client: Any, prefix: str) -> set[str]:
    """The ids of the jobs an unfinished move holds in its journals on this server (no worker runs them)."""
    found = set()
    for raw in client.scan_iter(match=prefix + "queues:*:laraq-transfer:*:journal"):
        for field, entry in client.hgetall(raw).items():
            if not field.startswith(b"#"):
                found.add(json.loads(entry.split(b"\n", 2)[2])["uuid"])
    return found


def _ids(client: Any, prefix: str) -> Counter[str]:
    """Every job id a worker could run under ``prefix`` on one server: ready, delayed, reserved."""
    found: Counter[str] = Counter()
    for raw in client.scan_iter(match=prefix + "queues:*"):
        key = raw.decode()
        if ":laraq-transfer:" in key:
            continue
        kind = client.type(key)
        if kind == b"list" and not key.endswith(":notify"):
            found.update(json.loads(m)["uuid"] for m in client.lrange(key, 0, -1))
        elif kind == b"zset":
            found.update(json.loads(m)["uuid"] for m in client.zrange(key, 0, -1))
    return found


def test_copy_then_move_writes_nothing_twice_and_says_so(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, pending=6, delayed=2)
    url = other_server.url
    invoke(env, "copy", "default", "--to-url", url)
    report = json.loads(invoke(env, "move", "default", "--to-url", url, "--json").output)
    assert report["transferred"] == {"pending": 0, "delayed": 0}
    assert report["already_at_destination"] == {"pending": 6, "delayed": 2}
    dest = other_server.client()
    assert set(_ids(dest, PREFIX).values()) == {1} and len(_ids(dest, PREFIX)) == 8
    assert _ids(redis_client, PREFIX) == Counter()  # moved: the source copies are gone
    # said in words too, and a dry run says the same without touching anything
    seed(redis_client, pending=2, delayed=0)
    invoke(env, "copy", "default", "--to-url", url)
    plan = invoke(env, "move", "default", "--to-url", url, "--dry-run").output
    assert "2 are already at the destination" in plan and "would be removed from the source" in plan
    assert redis_client.llen(SRC) == 2
    text = invoke(env, "move", "default", "--to-url", url).output
    assert "2 were already at the destination" in text and "removed from the source" in text
    assert set(_ids(dest, PREFIX).values()) == {1} and _ids(redis_client, PREFIX) == Counter()


def test_a_same_server_move_to_another_queue_is_not_taken_for_a_duplicate(redis_client, env):  # noqa: F811
    seed(redis_client, pending=3, delayed=0)
    out = invoke(env, "move", "default", "elsewhere").output
    assert out.startswith("moved 3 jobs") and redis_client.llen(PREFIX + "queues:elsewhere") == 3


def test_undo_leaves_at_the_destination_a_job_it_already_wrote(redis_client, other_server, env):  # noqa: F811
    seed(redis_client, pending=3, delayed=0)
    dest = other_server.client()
    dest.config_set("requirepass", "pw")
    src = RedisQueue(redis_client, prefix=PREFIX, version="12.67")
    dst = RedisQueue(redis.Redis.from_url(f"redis://:pw@127.0.0.1:{other_server.port}/0"), prefix=PREFIX,
                     version="12.67")
    dst._url = f"redis://:pw@127.0.0.1:{other_server.port}/0"  # as the CLI builds it: the URL is recorded, redacted
    t = Transfer(src, "default", dst)
    member = redis_client.lindex(SRC, 0)
    token = t._take(keys=[SRC, SRC + ":notify", t.journal_key],
                    args=["list", member, "h", b"pending\n0\n" + member, t.meta]).decode()
    assert t._deliver("pending", member, 0, token) == 1  # written there; the kill came before the journal's HDEL
    [held] = find_held(redis_client, PREFIX)
    undo = held.undo_command(PREFIX)
    assert "***" not in undo and "pw" not in undo and f"127.0.0.1:{other_server.port}" in undo
    status = json.loads(invoke(env, "status", "--sample", "0", "--json", code=1).output)
    assert status["transfers"][0]["password_env"] == PASSWORD_ENV
    # without the password the undo refuses, naming where the password goes, and puts nothing back
    args = undo.split()[1:]
    refused = invoke(env, *args, code=4).output
    assert PASSWORD_ENV in refused and "nothing was put back" in refused and "HELLO" not in refused
    assert redis_client.llen(SRC) == 2
    # pasted as printed, with the password in the environment: the written job stays at the destination
    out = invoke({**env, PASSWORD_ENV: "pw"}, *args).output
    assert "recovered 0 of 1" in out and "1 was already at the destination" in out
    assert member not in redis_client.lrange(SRC, 0, -1) and dest.lrange(SRC, 0, -1) == [member]
    assert find_held(redis_client, PREFIX) == []
    assert list(dest.scan_iter("*laraq-transfer*")) == []


# -- property-style: random orders of commands, with kills, on live Laravel 8 -> 13 ------------------------

LARAQ_CLI = [sys.executable, "-c", "from laraq.cli import main; main()"]
QUEUE = "stock"
PASSWORD = "once-pw"
STEPS = 10


def _cli(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LARAQ_CLI, *args], env=environ, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.php
@pytest.mark.parametrize("seed_value", [42, 7])
def test_random_orders_of_commands_leave_each_job_once(redis_server: Any, redis_client: Any, tmp_path: Path,
                                                      seed_value: int, request: Any) -> None:
    require_laravel("8")
    require_laravel("13")
    rng = random.Random(seed_value)
    dest_server = RedisServer(tmp_path)
    request.addfinalizer(dest_server.stop)
    dest_server.client().config_set("requirepass", PASSWORD)
    proxy = Proxy(dest_server.port)
    request.addfinalizer(proxy.down)
    proxy.delay = 0.001  # a slow link, so a kill lands in the middle of a transfer
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    src = PhpApp(redis_server.port, version="8", workdir=tmp_path / "src")
    dst = PhpApp(dest_server.port, version="13", workdir=tmp_path / "dst", extra_env={"REDIS_PASSWORD": PASSWORD})
    dest = redis.Redis(port=dest_server.port, password=PASSWORD)
    src_env = laraq_env(src)
    dst_env = laraq_env(dst)
    url = f"redis://127.0.0.1:{proxy.port}/0"  # no password in it: the environment carries it
    pw_env = {**src_env, PASSWORD_ENV: PASSWORD}
    to = ["--laravel", src.release, "--to-url", url, "--to-prefix", dst.prefix, "--to-laravel", dst.release]

    def dispatch(n: int, delay: int | None = None) -> None:
        extra = [f"--delay={delay}"] if delay else []
        src.tool("dispatch", "echo", f"--queue={QUEUE}", f"--count={n}", *extra)

    dispatch(120)
    dispatch(20, delay=3600)
    everything = set(_ids(redis_client, src.prefix))
    assert len(everything) == 140
    history: list[str] = []
    copied: set[str] = set()  # ids the user asked to have on both sides (copy, export + import)

    def killed(*args: str) -> None:
        """Start the CLI and kill -9 it once the destination has started to receive (or at once)."""
        before = sum(_ids(dest, dst.prefix).values())
        proc = subprocess.Popen([*LARAQ_CLI, *args], env=pw_env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline and sum(_ids(dest, dst.prefix).values()) == before:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    steps = ["copy", "move", "move-killed", "copy-killed", "recover", "undo", "import", "remove-exported",
             "dispatch"]
    for _ in range(STEPS):
        step = rng.choice(steps)
        history.append(step)
        at_source = set(_ids(redis_client, src.prefix))
        ok = True
        if step == "copy":
            copied |= at_source
            ok = _cli(pw_env, "copy", QUEUE, *to).returncode == 0
        elif step == "copy-killed":
            copied |= at_source
            killed("copy", QUEUE, *to)
        elif step == "move":
            out = _cli(pw_env, "move", QUEUE, *to, "--json")
            ok = out.returncode == 0
            if ok:  # a finished move leaves nothing at the source, whatever came before
                report = json.loads(out.stdout)
                assert _ids(redis_client, src.prefix) == Counter() and not _held(redis_client, src.prefix), \
                (history, report)
        elif step == "move-killed":
            killed("move", QUEUE, *to)
        elif step == "recover":  # a kill, then what is held goes on to the destination
            killed("move", QUEUE, *to)
            ok = _cli(pw_env, "move", "--recover", QUEUE, *to).returncode == 0
        elif step == "undo":  # a kill, then what is held goes back, by the command status prints
            killed("move", QUEUE, *to)
            listed = _cli(src_env, "status", "--laravel", src.release, "--sample", "0", "--json")
            transfers = json.loads(listed.stdout).get("transfers") or []
            assert listed.returncode == (1 if transfers else 0)  # a held transfer: status exits non-zero
            for held in transfers:
                assert "***" not in held["undo"] and held["password_env"] == PASSWORD_ENV
                out = subprocess.run(held["undo"], shell=True, env={**pw_env, "PATH": _path_with_laraq(tmp_path)},
                                     cwd=ROOT, capture_output=True, text=True, timeout=120)
                assert out.returncode == 0, out.stderr
        elif step in ("import", "remove-exported"):
            export = tmp_path / "stock.jsonl"
            assert _cli(src_env, "export", QUEUE, "--laravel", src.release, "-o", str(export)).returncode == 0
            copied |= at_source
            assert _cli(dst_env, "import", str(export), "--laravel", dst.release).returncode == 0
            if step == "remove-exported":  # export + import + remove-exported: a move by hand
                assert _cli(src_env, "remove-exported", str(export), "--laravel", src.release, "--force").returncode == 0
        elif step == "dispatch":
            dispatch(10)
            everything |= set(_ids(redis_client, src.prefix))
        here, there = _ids(redis_client, src.prefix), _ids(dest, dst.prefix)
        held = _held(redis_client, src.prefix)
        twice = [u for u in set(here) | set(there) if here[u] > 1 or there[u] > 1]
        assert not twice, (history, ok, len(twice))
        both = set(here) & set(there)
        assert both <= copied, (history, ok, len(both - copied))
        assert not held & set(here), (history, ok)  # a held job is not also waiting at the source
        lost = everything - set(here) - set(there) - held
        assert not lost, (history, ok, len(lost))
    # the end: whatever is held is finished, and every job is at the destination once
    assert _cli(pw_env, "move", "--recover", QUEUE, *to).returncode == 0
    final = _cli(pw_env, "move", QUEUE, *to)
    assert final.returncode == 0, final.stderr
    there = _ids(dest, dst.prefix)
    assert set(there) == everything and set(there.values()) == {1}, history
    assert _ids(redis_client, src.prefix) == Counter()
    assert list(redis_client.scan_iter("*laraq-transfer*")) == []


def _path_with_laraq(tmp_path: Path) -> str:
    """``PATH`` with a ``laraq`` that runs this worktree's CLI, so a printed command runs as pasted."""
    bin_dir = tmp_path / "bin"
    script = bin_dir / "laraq"
    if not script.exists():
        bin_dir.mkdir(exist_ok=True)
        script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from laraq.cli import main; main()' \"$@\"\n")
        script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
