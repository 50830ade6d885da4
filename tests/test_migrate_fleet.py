"""``laraq move`` SIGKILLed at random points while a mixed fleet works the source queue.

One real ``php artisan queue:work`` and one real ``laraq work`` (the Python twin of ``EchoJob`` from
``test_worker_support``) consume the source queue while ``laraq move`` (the CLI, as a process) is
started and SIGKILLed several times, then run once more to completion. Both the same-connection path
(one Lua script per job) and the cross-database path (journal + done-marker) are covered.

Afterwards every dispatched job must be in exactly one place: run once (by PHP or by Python, per the
shared run log) or waiting once at the destination (ready or delayed, delayed scores unchanged), and
nothing may be left behind: no job and no ``:notify`` token in the source, no bookkeeping keys.
Run on Laravel 8, 12 and 13, each app on its stock prefix, with Python dispatching that line's payloads.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
from phpapp import PhpApp
from test_worker_support import ROOT, laraq_env, popen_laraq, wait_for

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

pytestmark = pytest.mark.php

READY, DELAYED = 4000, 300
LARAQ_CLI = [sys.executable, "-c", "from laraq.cli import main; main()"]


def _uuids(members: list[bytes]) -> list[str]:
    return [json.loads(m)["uuid"] for m in members]


@pytest.mark.parametrize("dest_db", [0, 3], ids=["same-connection-lua", "cross-db-journal"])
def test_move_killed_under_php_and_python_workers(laravel: str, redis_server: Any, redis_client: Any,
                                                  tmp_path: Any, dest_db: int) -> None:
    rng = random.Random(20240 + dest_db)
    app = PhpApp(redis_server.port, version=laravel, workdir=tmp_path)
    SOURCE, DEST = app.prefix + "queues:fleet", app.prefix + "queues:parked"
    dest = redis_server.client(dest_db)
    dest.flushdb()

    queue = RedisQueue(redis_client, prefix=app.prefix, version=app.release)
    d = Dispatcher(queue)
    # each job runs for 20 ms, so the two workers take at most ~100 jobs a second: on a loaded machine the
    # four mover start-ups before the final move can take 10 s or more, and at 4 ms a job the workers had
    # drained three quarters of the queue by then (the share check below failed under load)
    common = dict(protected={"note": "n"}, private={"hidden": "h"}, queue="fleet")
    jobs = [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i], "mode": "sleep", "seconds": 0.02}, **common)
            for i in range(READY)]
    jobs += [d.prepare_job("App\\Jobs\\EchoJob", {"args": [i], "mode": "sleep", "seconds": 0.02}, delay=3600, **common)
             for i in range(DELAYED)]
    expected = {r.uuid for r in d.bulk(jobs)}
    delayed_scores = {json.loads(m)["uuid"]: s for m, s in
                      redis_client.zrange(SOURCE + ":delayed", 0, -1, withscores=True)}

    env = laraq_env(app)
    move = [*LARAQ_CLI, "move", "fleet", "parked", "--laravel", app.release]
    if dest_db:
        move += ["--to-url", f"redis://127.0.0.1:{redis_server.port}/{dest_db}"]

    def at_dest() -> int:
        return int(dest.llen(DEST) + dest.zcard(DEST + ":delayed"))

    def in_source() -> int:
        return int(redis_client.llen(SOURCE) + redis_client.zcard(SOURCE + ":delayed"))

    artisan = app.popen_artisan("queue:work", "redis", "--queue=fleet", "--sleep=0", "--quiet")
    laraq = popen_laraq(app, "--queue=fleet", "--quiet")
    workers = [artisan, laraq]
    interrupted = 0
    try:
        wait_for(lambda: {"php", "python"} <= {r["runner"] for r in app.runs()}, timeout=60)
        for _ in range(4):
            before = at_dest()
            mover = subprocess.Popen(move, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # kill only once the mover is under way (start-up is slow on a loaded machine), then at random
            deadline = time.monotonic() + 30
            while at_dest() == before and mover.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.03))
            mover.send_signal(signal.SIGKILL)
            if mover.wait() == -signal.SIGKILL and in_source():
                interrupted += 1
        final = subprocess.run(move, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert final.returncode == 0, final.stderr
        assert "moved" in final.stdout
        # the jobs the workers hold finish, then both workers stop cleanly
        wait_for(lambda: redis_client.zcard(SOURCE + ":reserved") == 0, timeout=30)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    runs = app.runs()
    ran = [r["uuid"] for r in runs]
    waiting = _uuids(dest.lrange(DEST, 0, -1)) + _uuids(dest.zrange(DEST + ":delayed", 0, -1))
    everything = Counter(ran + waiting)
    twice = [u for u, n in everything.items() if n > 1]
    assert not twice, f"{len(twice)} job(s) exist twice (run and moved, moved twice or run twice)"
    assert set(everything) == expected, f"{len(expected - set(everything))} job(s) lost"
    assert Counter(r["runner"] for r in runs).keys() == {"php", "python"}  # a mixed fleet really ran
    assert interrupted, "no kill landed in the middle of a move"
    # delayed jobs all moved, scores kept; every ready job at the destination has its :notify token
    assert {json.loads(m)["uuid"]: s for m, s in dest.zrange(DEST + ":delayed", 0, -1, withscores=True)} \
        == delayed_scores
    assert dest.llen(DEST + ":notify") == dest.llen(DEST)
    # nothing left behind in the source, no bookkeeping keys anywhere
    assert (redis_client.llen(SOURCE), redis_client.zcard(SOURCE + ":delayed"),
            redis_client.zcard(SOURCE + ":reserved"), redis_client.llen(SOURCE + ":notify")) == (0, 0, 0, 0)
    assert len(waiting) > READY // 4 and len(ran) > 0  # both the mover and the workers took a real share
    assert list(redis_client.scan_iter("*laraq-transfer*")) == [] and list(dest.scan_iter("*laraq-transfer*")) == []
    # what PHP and Python saw is what Python dispatched
    assert all(r["note"] == "n" and r["hidden"] == "h" and r["mode"] == "sleep" for r in runs)
