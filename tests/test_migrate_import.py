"""Issue 32: ``import`` is idempotent by uuid/id, like ``copy``; ``export`` says it copies and
``remove-exported`` deletes exactly what was exported.

An import killed at any point and re-run, or run twice, or re-run after workers ran some of the jobs,
writes every job exactly once; ``--allow-duplicates`` writes them again on purpose.
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

from click.testing import CliRunner
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

PREFIX = "old_"


def invoke(env, *args, code=0):  # noqa: F811
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def seed(client, pending=20, delayed=5, queue="default"):
    q = RedisQueue(client, prefix=PREFIX, version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, queue=queue) for i in range(pending)]
           + [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}, delay=600, queue=queue) for i in range(delayed)])
    return q


def uuids(client, base):
    return Counter([json.loads(m)["uuid"] for m in client.lrange(base, 0, -1)]
                   + [json.loads(m)["uuid"] for m in client.zrange(base + ":delayed", 0, -1)])


def test_import_twice_never_duplicates_and_export_says_it_copies(redis_client, env, tmp_path):  # noqa: F811
    seed(redis_client)
    path = tmp_path / "jobs.jsonl"
    exported = invoke(env, "export", "default", "-o", str(path))
    assert "This is a copy: the jobs are still in Redis" in exported.stderr
    assert f"laraq remove-exported {path} --prefix old_" in exported.stderr
    first = invoke(env, "import", str(path), "--prefix", "new_").stdout
    assert first.startswith("imported 20 pending, 5 delayed")
    again = invoke(env, "import", str(path), "--prefix", "new_").stdout
    assert again.startswith("imported 0 pending") and "25 skipped: a job with the same uuid/id" in again
    assert sum(uuids(redis_client, "new_queues:default").values()) == 25
    assert redis_client.llen("new_queues:default:notify") == 20
    # workers ran five of them: a re-run import does not bring them back
    for _ in range(5):
        redis_client.lpop("new_queues:default")
    invoke(env, "import", str(path), "--prefix", "new_")
    assert sum(uuids(redis_client, "new_queues:default").values()) == 20
    # on purpose
    forced = invoke(env, "import", str(path), "--prefix", "new_", "--allow-duplicates").stdout
    assert forced.startswith("imported 20 pending, 5 delayed")
    assert sum(uuids(redis_client, "new_queues:default").values()) == 40  # a sorted set holds a member once
    # the bookkeeping set is not a queue
    status = json.loads(invoke(env, "status", "--prefix", "new_", "--sample", "0", "--json").stdout)
    assert [q["queue"] for q in status["queues"]] == ["default"]


def test_remove_exported_deletes_exactly_what_was_exported(redis_client, env, tmp_path):  # noqa: F811
    q = seed(redis_client, pending=6, delayed=2)
    path = tmp_path / "jobs.jsonl"
    invoke(env, "export", "default", "-o", str(path))
    q.pop()  # a worker took one since
    later = Dispatcher(q).dispatch_job("App\\Jobs\\EchoJob", {"late": True}).payload  # dispatched after the export
    out = invoke(env, "remove-exported", str(path), "--force").stdout
    assert "removed 7 exported job(s); 1 were no longer here" in out
    assert redis_client.lrange(PREFIX + "queues:default", 0, -1) == [later]
    assert redis_client.llen(PREFIX + "queues:default:notify") == 1
    assert redis_client.zcard(PREFIX + "queues:default:delayed") == 0
    assert redis_client.zcard(PREFIX + "queues:default:reserved") == 1  # the running one is left alone


IMPORTER = """
import sys, redis
from laraq.ops.jsonl import import_jobs
from laraq.protocol.queue import RedisQueue
target = RedisQueue(redis.Redis(port=int(sys.argv[1])), prefix="new_", version="13")
with open(sys.argv[2], "rb") as fh:
    import_jobs(target, fh)
"""


def test_import_killed_at_random_points_then_rerun_writes_each_job_once(redis_server, redis_client, env,  # noqa: F811
                                                                         tmp_path):
    rng = random.Random(32)
    seed(redis_client, pending=3000, delayed=300)
    path = tmp_path / "jobs.jsonl"
    invoke(env, "export", "default", "-o", str(path))
    expected = uuids(redis_client, PREFIX + "queues:default")
    run = [sys.executable, "-c", IMPORTER, str(redis_server.port), str(path)]
    child_env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for _ in range(4):
        proc = subprocess.Popen(run, env=child_env)
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    subprocess.run(run, env=child_env, check=True, timeout=120)
    subprocess.run(run, env=child_env, check=True, timeout=120)  # and a re-run of a finished import
    assert uuids(redis_client, "new_queues:default") == expected  # each once
    assert redis_client.llen("new_queues:default:notify") == 3000
