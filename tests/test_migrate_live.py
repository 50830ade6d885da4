"""Issue 32, proof: a Laravel 8 stack moved to Laravel 13 (and 13 to 8) while real ``php artisan
queue:work`` workers run on both sides, with failures injected on the way.

The source app keeps working its queue and the destination app's worker takes what arrives, while
``laraq move`` (the CLI, as a process) meets, in turn:

1. a wrong destination password: it exits non-zero naming ``--to-url`` and takes nothing;
2. ``kill -9`` at random points, three times;
3. the destination going away mid-move (a TCP proxy in front of it is shut): the job in flight is held
   in the journal, ``status`` lists it with the command that finishes it, and the re-run (proxy back)
   delivers it;
4. then an ``export`` of a second queue, ``import`` killed with ``kill -9`` and re-run twice, and
   ``remove-exported`` on the source.

Afterwards every dispatched job is in exactly one place: run once (on either side, per the apps' run
logs) or waiting once at the destination; nothing is left in a holding key on either server.
A second test moves failed jobs: ``move-failed`` into the destination app's failed_jobs, where
``php artisan queue:retry`` pushes them, and ``move-failed --retry`` straight into its queue, where
its PHP worker runs them.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import RedisServer, require_laravel
from phpapp import PhpApp
from test_worker_support import ROOT, laraq_env, wait_for

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php

LARAQ_CLI = [sys.executable, "-c", "from laraq.cli import main; main()"]
READY, DELAYED, LATE = 1500, 100, 300
PASSWORD = "s3cret-dest"


class Proxy:
    """A TCP forwarder to the destination: ``down()`` drops every connection and stops listening."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.listener.listen(16)
        self.sockets: list[socket.socket] = []
        self.alive = True
        #: seconds added to every request on its way to the destination (a slow link)
        self.delay = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.alive:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            for a, b, slow in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, slow), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, slow: bool) -> None:
        try:
            while data := a.recv(65536):
                if slow and self.delay:
                    time.sleep(self.delay)
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        self.alive = False
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close() alone would keep listening)
        self.listener.close()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def _uuids(members: list[bytes]) -> list[str]:
    return [json.loads(m)["uuid"] for m in members]


def _cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LARAQ_CLI, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("src_v,dst_v", [("8", "13"), ("13", "8")], ids=["8-to-13", "13-to-8"])
def test_stack_moved_under_live_workers_with_failures(redis_server: Any, redis_client: Any, tmp_path: Path,
                                                      src_v: str, dst_v: str, request: Any) -> None:
    require_laravel(src_v)
    require_laravel(dst_v)
    rng = random.Random(32 + int(src_v))
    dest_server = RedisServer(tmp_path)
    request.addfinalizer(dest_server.stop)
    dest_server.client().config_set("requirepass", PASSWORD)
    proxy = Proxy(dest_server.port)
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    src = PhpApp(redis_server.port, version=src_v, workdir=tmp_path / "src")
    dst = PhpApp(dest_server.port, version=dst_v, workdir=tmp_path / "dst", extra_env={"REDIS_PASSWORD": PASSWORD})
    dest = redis.Redis(port=dest_server.port, password=PASSWORD)
    source_q = RedisQueue(redis_client, prefix=src.prefix, version=src.release)
    d = Dispatcher(source_q)
    common = dict(queue="fleet")
    jobs = [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i], "mode": "sleep", "seconds": 0.01}, **common)
            for i in range(READY)]
    jobs += [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i]}, delay=3600, **common) for i in range(DELAYED)]
    jobs += [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i]}, queue="late") for i in range(LATE)]
    expected = {r.uuid for r in d.bulk(jobs)}
    delayed_scores = {json.loads(m)["uuid"]: s for m, s in
                      redis_client.zrange(src.prefix + "queues:fleet:delayed", 0, -1, withscores=True)}

    env = laraq_env(src)
    url = f"redis://:{PASSWORD}@127.0.0.1:{proxy.port}/0"
    move = ["move", "fleet", "--laravel", src.release, "--to-prefix", dst.prefix, "--to-laravel", dst.release]
    workers = [src.popen_artisan("queue:work", "redis", "--queue=fleet", "--sleep=0", "--quiet"),
               dst.popen_artisan("queue:work", "redis", "--queue=fleet,late", "--sleep=0", "--quiet")]
    SRC = src.prefix + "queues:fleet"

    def at_dest() -> int:
        return int(dest.llen(dst.prefix + "queues:fleet") + dest.zcard(dst.prefix + "queues:fleet:delayed"))

    def held(client: Any) -> list[bytes]:
        return list(client.scan_iter("*laraq-transfer*journal"))

    try:
        wait_for(lambda: len(src.runs()) > 0, timeout=60)
        # 1. wrong password: nothing taken, the error names --to-url
        wrong = _cli(env, *move, "--to-url", f"redis://:wrong@127.0.0.1:{proxy.port}/0")
        assert wrong.returncode != 0 and "--to-url" in wrong.stderr and "nothing was taken" in wrong.stderr
        assert "REDIS_PASSWORD" not in wrong.stderr and "wrong" not in wrong.stderr
        assert held(redis_client) == [] and at_dest() == 0
        # 2. kill -9 at random points
        interrupted = 0
        for _ in range(3):
            before = at_dest()
            mover = subprocess.Popen([*LARAQ_CLI, *move, "--to-url", url], env=env, cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while at_dest() == before and mover.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.05))
            mover.send_signal(signal.SIGKILL)
            if mover.wait() == -signal.SIGKILL:
                interrupted += 1
        assert interrupted
        # 3. the destination goes away mid-move (a slow link, so the move is surely under way)
        proxy.delay = 0.003
        mover = subprocess.Popen([*LARAQ_CLI, *move, "--to-url", url], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def delivered() -> int:  # the move's done-marker at the destination (its worker eats what arrives)
            return sum(int(dest.scard(k)) for k in dest.scan_iter("*laraq-transfer*:done"))

        base = delivered()  # killed runs leave their marker (and up to one held job each) for the re-run
        wait_for(lambda: delivered() > base + 20 or mover.poll() is not None, timeout=60, interval=0.001)
        proxy.down()
        _, err = mover.communicate(timeout=60)

        assert mover.returncode != 0, "the move finished before the destination went away"
        if mover.returncode != 0:
            assert "--to-url" in err and "REDIS_PASSWORD" not in err, err
            status = json.loads(_cli(env, "status", "--laravel", src.release, "--sample", "0", "--json").stdout)
            entries = sum(len([f for f in redis_client.hkeys(k) if not f.startswith(b"#")]) for k in held(redis_client))
            assert entries >= 1 and sum(t["jobs"] for t in status["transfers"]) == entries  # every held job listed
            for transfer in status["transfers"]:
                assert "--recover" in transfer["finish"] and "--to-source" in transfer["undo"]
        proxy = Proxy(dest_server.port, proxy.port)
        url = f"redis://:{PASSWORD}@127.0.0.1:{proxy.port}/0"
        final = _cli(env, *move, "--to-url", url)
        assert final.returncode == 0, final.stderr
        assert "or lost" not in final.stdout
        assert held(redis_client) == []
        # 4. export, import killed and re-run twice, then the exported jobs removed at the source
        export = tmp_path / "late.jsonl"
        out = _cli(env, "export", "late", "--laravel", src.release, "-o", str(export))
        assert out.returncode == 0 and "This is a copy" in out.stderr
        dst_env = laraq_env(dst)
        importer = [*LARAQ_CLI, "import", str(export), "--laravel", dst.release]
        for _ in range(2):
            proc = subprocess.Popen(importer, env=dst_env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.2, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for _ in range(2):
            done = _cli(dst_env, "import", str(export), "--laravel", dst.release)
            assert done.returncode == 0, done.stderr
        removed = _cli(env, "remove-exported", str(export), "--laravel", src.release, "--force")
        assert removed.returncode == 0 and "removed 300 exported job(s)" in removed.stdout, removed.stdout
        # the workers finish what they hold, then stop
        wait_for(lambda: redis_client.zcard(SRC + ":reserved") == 0 and redis_client.llen(SRC) == 0, timeout=120)
        wait_for(lambda: dest.llen(dst.prefix + "queues:late") == 0
                 and dest.zcard(dst.prefix + "queues:late:reserved") == 0, timeout=120)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            proc.wait(60)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        proxy.down()

    ran = [r["uuid"] for r in src.runs()] + [r["uuid"] for r in dst.runs()]
    waiting = (_uuids(dest.lrange(dst.prefix + "queues:fleet", 0, -1))
               + _uuids(dest.zrange(dst.prefix + "queues:fleet:delayed", 0, -1)))
    everything = Counter(ran + waiting)
    twice = [u for u, n in everything.items() if n > 1]
    assert not twice, f"{len(twice)} job(s) exist twice"
    assert set(everything) == expected, f"{len(expected - set(everything))} job(s) lost"
    assert {json.loads(m)["uuid"]: s for m, s in dest.zrange(dst.prefix + "queues:fleet:delayed", 0, -1,
                                                              withscores=True)} == delayed_scores
    assert any(r["runner"] == "php" for r in dst.runs())  # the destination's PHP worker ran moved jobs
    assert (redis_client.llen(SRC), redis_client.zcard(SRC + ":delayed"), redis_client.llen(SRC + ":notify")) \
        == (0, 0, 0)
    assert held(redis_client) == [] and held(dest) == []
    assert list(redis_client.scan_iter("*laraq-transfer*")) == []
    assert [k for k in dest.scan_iter("*laraq-transfer*") if not k.endswith(b":imported")] == []


@pytest.mark.parametrize("src_v,dst_v", [("8", "13"), ("13", "8")], ids=["8-to-13", "13-to-8"])
def test_failed_jobs_move_and_queue_retry_works_there(redis_server: Any, redis_client: Any, tmp_path: Path,
                                                      src_v: str, dst_v: str) -> None:
    require_laravel(src_v)
    require_laravel(dst_v)
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    src = PhpApp(redis_server.port, version=src_v, workdir=tmp_path / "src", prefix="src_")
    dst = PhpApp(redis_server.port, version=dst_v, workdir=tmp_path / "dst", prefix="dst_")
    for i in range(3):
        src.tool("dispatch", "echo", "--queue=default", "--args=" + json.dumps({"mode": "fail", "args": [i]}))
    src.artisan("queue:work", "redis", "--queue=default", "--stop-when-empty", "--sleep=0", "--tries=1", check=True)
    rows = sqlite3.connect(src.db_path).execute("select uuid, payload from failed_jobs").fetchall()
    assert len(rows) == 3
    env_file = tmp_path / "dst.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in dst.laravel_env.items()))
    env = laraq_env(src)
    moved = _cli(env, "move-failed", "--laravel", src.release, "--to-env-file", str(env_file), "--to-laravel",
                 dst.release, "--queue", "default")
    assert moved.returncode == 0 and moved.stdout.startswith("moved 3 failed job(s) as failed jobs"), moved.stderr
    again = _cli(env, "move-failed", "--laravel", src.release, "--to-env-file", str(env_file), "--to-laravel",
                 dst.release)
    assert again.stdout.startswith("moved 0 failed job(s)")
    theirs = dict(sqlite3.connect(dst.db_path).execute("select uuid, payload from failed_jobs").fetchall())
    assert theirs == dict(rows)  # byte for byte, each once
    assert sqlite3.connect(src.db_path).execute("select count(*) from failed_jobs").fetchone()[0] == 0
    listing = dst.artisan("queue:failed", check=True).stdout
    assert all(uuid in listing for uuid, _ in rows)
    dst.artisan("queue:retry", "all", check=True)
    pushed = [json.loads(m) for m in redis_client.lrange(dst.prefix + "queues:default", 0, -1)]
    assert sorted(p["uuid"] for p in pushed) == sorted(u for u, _ in rows) and all(p["attempts"] == 0 for p in pushed)
    # and --retry: straight into the destination queue, where its PHP worker runs them
    redis_client.delete(dst.prefix + "queues:default", dst.prefix + "queues:default:notify")
    sqlite3.connect(dst.db_path).execute("delete from failed_jobs").connection.commit()
    for i in range(2):
        src.tool("dispatch", "echo", "--queue=default", "--args=" + json.dumps({"mode": "fail", "args": [10 + i]}))
    src.artisan("queue:work", "redis", "--queue=default", "--stop-when-empty", "--sleep=0", "--tries=1", check=True)
    retried = _cli(env, "move-failed", "--laravel", src.release, "--retry", "--to-env-file", str(env_file),
                   "--to-laravel", dst.release)
    assert retried.returncode == 0 and retried.stdout.startswith("moved 2 failed job(s) retried into the queue"), \
        retried.stdout + retried.stderr
    dst.artisan("queue:work", "redis", "--queue=default", "--stop-when-empty", "--sleep=0", "--tries=1", check=True)
    ran = [r for r in dst.runs() if r.get("runner") == "php"]
    assert len(ran) == 2  # PHP on the destination read and ran both (they fail again, by design)
    assert sqlite3.connect(dst.db_path).execute("select count(*) from failed_jobs").fetchone()[0] == 2
