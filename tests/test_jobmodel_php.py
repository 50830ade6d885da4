"""Laravel's job model when Python runs the job, proven against real artisan on Laravel 8 to 13.

The same dispatch is done twice by PHP: once onto queue ``pq``, drained by ``php artisan queue:work``,
and once onto ``lq``, drained by laraq (Python handlers mirroring the PHP jobs). PHP workers drain the
follow-up jobs on both sides (the connection's default queue carries laraq's hand-overs to PHP). The
end states are then compared: what the jobs recorded and in which order, the chain ``catch`` callback
runs, ``failed_jobs``, and what is left in Redis.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from typing import Any

import pytest
import test_worker_support as support
from conftest import queue_count
from phpapp import PhpApp

from laraq.cli.work import build_worker, default_params
from laraq.protocol.versions import LaravelVersion
from laraq.worker.worker import Worker

pytestmark = pytest.mark.php



@pytest.fixture
def app(laravel: str, redis_client: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    app = PhpApp(redis_server.port, version=laravel)
    monkeypatch.setenv("LARAQ_LOG", str(app.log_path))
    return app


def chain(app: PhpApp, queue: str, steps: list[dict[str, Any]], *, catch: bool = False) -> None:
    steps = [{"args": {"q": queue, "n": i + 1}, **step} for i, step in enumerate(steps)]
    app.tool("chain", f"--queue={queue}", "--steps=" + json.dumps(steps), *([f"--catch={queue}"] if catch else []))


def artisan_drain(app: PhpApp, queues: str) -> None:
    app.artisan("queue:work", "redis", f"--queue={queues}", "--stop-when-empty", "--sleep=0", check=True)


def laraq_drain(app: PhpApp, workers: list[Worker], queue: str = "lq") -> None:
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, queue=queue)
    worker = build_worker(params, env=app.env, app=support.app)
    workers.append(worker)
    assert worker.daemon() == 0


def pending(app: PhpApp, redis_client: Any, queue: str) -> int:
    return queue_count(redis_client, app.prefix + "queues:" + queue)


def drain_both(app: PhpApp, redis_client: Any, workers: list[Worker], rounds: int = 8) -> None:
    """artisan drains ``pq``; laraq drains ``lq`` and artisan the hand-overs, until nothing is left."""
    artisan_drain(app, "pq,default")
    for _ in range(rounds):
        laraq_drain(app, workers)
        artisan_drain(app, "default")
        if pending(app, redis_client, "lq") == 0 and pending(app, redis_client, "default") == 0:
            return
    raise AssertionError("the laraq side did not settle")


def side(app: PhpApp, queue: str) -> dict[str, Any]:
    """What one side left behind: its step runs in order, its catch runs, its failed_jobs rows."""
    runs = app.runs()
    steps = [(r["args"]["n"], r["attempts"]) for r in runs
             if r.get("class") == "App\\Jobs\\EchoJob" and r.get("args", {}).get("q") == queue]
    catches = [r["message"] for r in runs if r.get("class") == "chain-catch" and r.get("tag") == queue]
    conn = sqlite3.connect(app.db_path)
    # the message without its exception class (a Python handler raises RuntimeError, PHP RuntimeException)
    rows = [(q, json.loads(p)["displayName"], re.sub(r"^\S+: | in \S+:\d+$", "", e.splitlines()[0]))
            for q, p, e in conn.execute("SELECT queue, payload, exception FROM failed_jobs ORDER BY id")
            if q == queue]
    conn.close()
    return {"steps": steps, "catches": catches, "failed": rows}


def same_sides(app: PhpApp, redis_client: Any) -> dict[str, Any]:
    pq, lq = side(app, "pq"), side(app, "lq")
    lq["failed"] = [("pq", *rest) for _q, *rest in lq["failed"]]
    assert pq == lq
    for queue in ("pq", "lq", "default"):
        assert pending(app, redis_client, queue) == 0, queue
    return pq


def test_chain_of_three_runs_every_step(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        chain(app, queue, [{"mode": "ok"}, {"mode": "ok"}, {"mode": "ok"}], catch=True)
    drain_both(app, redis_client, workers)
    result = same_sides(app, redis_client)
    assert result == {"steps": [(1, 1), (2, 1), (3, 1)], "catches": [], "failed": []}
    runners = {r["runner"] for r in app.runs() if r.get("args", {}).get("q") == "lq"}
    assert runners == {"python"}  # every lq step ran in Python; PHP only ran the hand-overs


def test_failing_step_runs_the_catch_once_and_ends_the_chain(app: PhpApp, redis_client: Any,
                                                             workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        chain(app, queue, [{"mode": "ok"}, {"mode": "fail", "settings": {"tries": 1}}, {"mode": "ok"}], catch=True)
    drain_both(app, redis_client, workers)
    result = same_sides(app, redis_client)
    assert result["steps"] == [(1, 1), (2, 1)]
    assert result["catches"] == ["echo job failed on purpose"]
    assert [r[2] for r in result["failed"]] == ["echo job failed on purpose"]


def test_chained_survives_release_and_retry(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        chain(app, queue, [{"mode": "fail-until", "seconds": 2, "settings": {"tries": 2}}, {"mode": "ok"}],
              catch=True)
    drain_both(app, redis_client, workers)
    result = same_sides(app, redis_client)
    assert result == {"steps": [(1, 1), (1, 2), (2, 1)], "catches": [], "failed": []}


def test_next_step_is_queued_exactly_as_php_queues_it(app: PhpApp, redis_client: Any,
                                                      workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        chain(app, queue, [{"mode": "ok"}, {"mode": "ok", "settings": {"tries": 4, "backoff": [3, 9],
                                                                        "timeout": 30}}])
    app.artisan("queue:work", "redis", "--queue=pq", "--once", check=True)
    params = default_params(laravel=app.release, sleep=0, quiet=True, memory=1 << 20, queue="lq", once=True)
    worker = build_worker(params, env=app.env, app=support.app)
    workers.append(worker)
    assert worker.daemon() == 0
    artisan_drain(app, "default")  # the hand-over: PHP dispatches step 2
    (php_next,) = redis_client.lrange(app.prefix + "queues:" + "pq", 0, -1)
    (py_next,) = redis_client.lrange(app.prefix + "queues:" + "lq", 0, -1)

    def norm(body: bytes) -> dict[str, Any]:
        payload = json.loads(body)
        payload["uuid"] = payload["id"] = "-"
        if "createdAt" in payload:  # 12+: the dispatch time
            payload["createdAt"] = 0
        payload["data"]["command"] = payload["data"]["command"].replace('"lq"', '"pq"')
        return payload

    assert norm(py_next) == norm(php_next)
    assert norm(py_next)["maxTries"] == 4 and norm(py_next)["backoff"] == "3,9"


# -- unique locks -------------------------------------------------------------------------------------

def lock_keys(redis_client: Any, side_tag: str) -> list[str]:
    return sorted(k.decode() for k in redis_client.scan_iter(match=f"*laravel_unique_job:*{side_tag}*"))


def dispatch_unique(app: PhpApp, queue: str, kind: str, mode: str) -> None:
    app.tool("dispatch", kind, f"--queue={queue}", "--pending", "--args=" + json.dumps({"id": f"{queue}-1", "mode": mode}))


def unique_side(app: PhpApp, redis_client: Any, queue: str, kind: str) -> dict[str, Any]:
    runs = [(r["lock"], r["mode"]) for r in app.runs() if r.get("queue") == queue and "lock" in r]
    conn = sqlite3.connect(app.db_path)
    failed = conn.execute("SELECT COUNT(*) FROM failed_jobs WHERE queue = ?", (queue,)).fetchone()[0]
    conn.close()
    left = lock_keys(redis_client, f"{queue}-1")
    # a new dispatch of the same job is accepted again (PHP drops it while the lock is held)
    dispatch_unique(app, queue, kind, "ok")
    return {"runs": runs, "failed": failed, "locks_left": len(left), "redispatched": redis_client.llen(app.prefix + "queues:" + queue)}


@pytest.mark.parametrize("mode", ["ok", "fail"])
@pytest.mark.parametrize("kind", ["unique-property", "unique-method", "until-processing"])
def test_unique_lock_released_with_the_real_key_at_phps_moment(app: PhpApp, redis_client: Any,
                                                              workers: list[Worker], kind: str, mode: str) -> None:
    for queue in ("pq", "lq"):
        dispatch_unique(app, queue, kind, mode)
        dispatch_unique(app, queue, kind, mode)  # dropped: the lock is held
        assert redis_client.llen(app.prefix + "queues:" + queue) == 1
        assert len(lock_keys(redis_client, f"{queue}-1")) == 1
    drain_both(app, redis_client, workers)
    pq = unique_side(app, redis_client, "pq", kind)
    lq = unique_side(app, redis_client, "lq", kind)
    assert pq == lq
    assert pq["locks_left"] == 0 and pq["redispatched"] == 1
    assert pq["runs"] == [("free" if kind == "until-processing" else "held", mode)]


def test_unique_lock_without_a_hint_is_found_in_the_payload_context(app: PhpApp, redis_client: Any,
                                                                    workers: list[Worker]) -> None:
    """A ``uniqueId()`` method and a handler that says nothing (``unique=None``): 11.39+ payloads carry the
    lock's key (and 13.24+ owner) in hidden Context, so laraq releases the real lock after the job."""
    if app.version in ("8", "9", "10"):
        pytest.skip(f"Laravel {app.version}'s payload does not name the lock (Context carries it from 11.39): "
                    "declare unique=True (see compat-docs/worker.md)")
    from laraq.app import App

    plain = App("no-hint")
    plain.register("App\\Jobs\\UniqueMethodJob", support.unique_method)
    for queue in ("pq", "lq"):
        dispatch_unique(app, queue, "unique-method", "ok")
    artisan_drain(app, "pq")
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20, queue="lq")
    worker = build_worker(params, env=app.env, app=plain)
    workers.append(worker)
    assert worker.daemon() == 0
    assert pending(app, redis_client, "default") == 0  # nothing handed to PHP: laraq released it itself
    pq = unique_side(app, redis_client, "pq", "unique-method")
    lq = unique_side(app, redis_client, "lq", "unique-method")
    assert pq == lq and pq["locks_left"] == 0 and pq["redispatched"] == 1


@pytest.mark.parametrize("release_after", ["7", "none"], ids=["released", "deleted"])
def test_until_processing_lock_when_the_middleware_stops_the_job(app: PhpApp, redis_client: Any,
                                                                 workers: list[Worker], release_after: str) -> None:
    """``ShouldBeUniqueUntilProcessing`` behind a ``WithoutOverlapping`` whose lock another worker holds: up
    to 11.39 the unique lock went before the middleware ran; from 11.40 it goes only once the middleware
    lets the job through, so it stays held when the middleware releases the job, and when it drops the
    job, until 12.21's ``finally`` frees it then."""
    version = LaravelVersion.parse(app.release)
    for queue in ("pq", "lq"):
        overlap = app.prefix + version.cache_key(app.cache_prefix,
                                                 f"laravel-queue-overlap:App\\Jobs\\UntilProcessingJob:{queue}-k")
        redis_client.set(overlap, "another-worker")
        app.tool("dispatch", "until-processing", f"--queue={queue}", "--pending", f"--overlap={queue}-k",
                 f"--release-after={release_after}", "--args=" + json.dumps({"id": f"{queue}-1", "mode": "ok"}))
        assert len(lock_keys(redis_client, f"{queue}-1")) == 1
    run_once_both(app, workers)
    outcome = {}
    for queue in ("pq", "lq"):
        outcome[queue] = {"runs": [r for r in app.runs() if r.get("queue") == queue and "lock" in r],
                          "locks_left": len(lock_keys(redis_client, f"{queue}-1")),
                          "delayed": redis_client.zcard(app.prefix + "queues:" + queue + ":delayed"),
                          "pending": pending(app, redis_client, queue)}
    assert outcome["pq"] == outcome["lq"]
    held = version.until_processing_lock_after_middleware and (
        release_after == "7" or not version.until_processing_lock_freed_when_stopped)
    assert outcome["pq"] == {"runs": [], "locks_left": 1 if held else 0,
                             "delayed": 1 if release_after == "7" else 0,
                             "pending": 1 if release_after == "7" else 0}
    assert held == (app.version not in ("8", "9", "10") and (release_after == "7" or app.version == "11"))


# -- job middleware -----------------------------------------------------------------------------------

def overlap_key(app: PhpApp, key: str) -> str:
    """The full Redis key of WithoutOverlapping's lock for an EchoJob (the class has no displayName())."""
    version = LaravelVersion.parse(app.release)
    return app.prefix + version.cache_key(app.cache_prefix, f"laravel-queue-overlap:App\\Jobs\\EchoJob:{key}")


def run_once_both(app: PhpApp, workers: list[Worker]) -> None:
    app.artisan("queue:work", "redis", "--queue=pq", "--once", check=True)
    params = default_params(laravel=app.release, sleep=0, quiet=True, memory=1 << 20, queue="lq", once=True)
    worker = build_worker(params, env=app.env, app=support.app)
    workers.append(worker)
    assert worker.daemon() == 0


def echo_runs(app: PhpApp, queue: str) -> int:
    return len([r for r in app.runs() if r.get("class") == "App\\Jobs\\EchoJob" and r.get("queue") == queue])


@pytest.mark.parametrize("release_after", ["7", "none"])
def test_without_overlapping_while_the_lock_is_held(app: PhpApp, redis_client: Any, workers: list[Worker],
                                                    release_after: str) -> None:
    for queue in ("pq", "lq"):
        app.tool("dispatch", "echo", f"--queue={queue}", f"--overlap={queue}-k", f"--release-after={release_after}",
                 "--args=" + json.dumps({"args": {"q": queue}}))
        redis_client.set(overlap_key(app, f"{queue}-k"), "another-worker")
    before = redis_client.time()[0]
    run_once_both(app, workers)
    outcome = {}
    for queue in ("pq", "lq"):
        delayed = [(json.loads(m)["attempts"], s - before)
                   for m, s in redis_client.zrange(app.prefix + "queues:" + queue + ":delayed", 0, -1, withscores=True)]
        outcome[queue] = {"runs": echo_runs(app, queue), "delayed": [a for a, _ in delayed],
                          "lock": redis_client.get(overlap_key(app, f"{queue}-k")), "reserved": pending(app, redis_client, queue)
                          - len(delayed), "delay_ok": all(7 <= d <= 67 for _, d in delayed)}
    assert outcome["pq"] == outcome["lq"]
    assert outcome["pq"]["runs"] == 0 and outcome["pq"]["lock"] == b"another-worker"
    assert outcome["pq"]["delayed"] == ([1] if release_after == "7" else [])
    assert outcome["pq"]["delay_ok"] and outcome["pq"]["reserved"] == 0


def test_without_overlapping_runs_and_frees_the_lock(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        app.tool("dispatch", "echo", f"--queue={queue}", f"--overlap={queue}-k",
                 "--args=" + json.dumps({"args": {"q": queue}}))
    run_once_both(app, workers)
    for queue in ("pq", "lq"):
        assert echo_runs(app, queue) == 1
        assert redis_client.exists(overlap_key(app, f"{queue}-k")) == 0
        assert pending(app, redis_client, queue) == 0


def test_middleware_laraq_does_not_run_goes_back_to_php_untouched(app: PhpApp, redis_client: Any,
                                                                  workers: list[Worker],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    app.tool("dispatch", "echo", "--queue=lq", "--rate-limited=backups", "--args=" + json.dumps({"args": {"q": "lq"}}))
    (body,) = redis_client.lrange(app.prefix + "queues:" + "lq", 0, -1)
    laraq_drain(app, workers)
    assert echo_runs(app, "lq") == 0
    assert redis_client.zrange(app.prefix + "queues:" + "lq:delayed", 0, -1) == [body]  # attempts not burned, bytes untouched
    assert any("RateLimited" in r.getMessage() and "PHP" in r.getMessage() for r in caplog.records)
    # and PHP's own worker runs it as if laraq had never seen it
    redis_client.zadd(app.prefix + "queues:" + "lq:delayed", {body: 0})
    artisan_drain(app, "lq")
    assert [r["runner"] for r in app.runs() if r.get("queue") == "lq"] == ["php"]


# -- batches ------------------------------------------------------------------------------------------

def batch(app: PhpApp, queue: str, steps: list[dict[str, Any]], *, allow_failures: bool = False) -> str:
    steps = [{"args": {"q": queue, "n": i + 1}, **step} for i, step in enumerate(steps)]
    return app.tool("batch-callbacks", f"--queue={queue}", "--steps=" + json.dumps(steps),
                    *(["--allow-failures"] if allow_failures else []))["id"]


def batch_side(app: PhpApp, queue: str, batch_id: str) -> dict[str, Any]:
    runs = app.runs()
    items = [(r["args"]["n"], r["attempts"]) for r in runs
             if r.get("class") == "App\\Jobs\\BatchEchoJob" and r.get("args", {}).get("q") == queue]
    callbacks = [r["what"] for r in runs if r.get("class") == "batch-callback" and r.get("tag") == queue]
    conn = sqlite3.connect(app.db_path)
    total, pending_jobs, failed, failed_ids, cancelled, finished = conn.execute(
        "SELECT total_jobs, pending_jobs, failed_jobs, failed_job_ids, cancelled_at, finished_at "
        "FROM job_batches WHERE id = ?", (batch_id,)).fetchone()
    failed_uuids = {json.loads(p)["uuid"] for (p,) in conn.execute("SELECT payload FROM failed_jobs")}
    conn.close()
    ids = json.loads(failed_ids)
    return {"items": items, "callbacks": callbacks, "total": total, "pending": pending_jobs, "failed": failed,
            "failed_ids": len(ids), "failed_ids_in_failed_jobs": all(i in failed_uuids for i in ids),
            "cancelled": cancelled is not None, "finished": finished is not None}


@pytest.mark.parametrize("allow_failures", [False, True])
@pytest.mark.parametrize("modes", [("ok", "ok", "ok"), ("ok", "fail", "ok")], ids=["all-ok", "item2-fails"])
def test_batch_bookkeeping_and_callbacks(app: PhpApp, redis_client: Any, workers: list[Worker],
                                         modes: tuple[str, ...], allow_failures: bool) -> None:
    ids = {q: batch(app, q, [{"mode": m, "settings": {"tries": 1}} for m in modes], allow_failures=allow_failures)
           for q in ("pq", "lq")}
    drain_both(app, redis_client, workers)
    pq, lq = batch_side(app, "pq", ids["pq"]), batch_side(app, "lq", ids["lq"])
    assert pq == lq
    assert {r["runner"] for r in app.runs() if r.get("class") == "App\\Jobs\\BatchEchoJob"
            and r["args"]["q"] == "lq"} == {"python"}
    for queue in ("pq", "lq", "default"):
        assert pending(app, redis_client, queue) == 0
    if "fail" in modes:
        assert pq["failed"] == pq["failed_ids"] == 1 and pq["failed_ids_in_failed_jobs"]
        assert pq["cancelled"] is (not allow_failures)
        # queue:retry-batch finds the item Python failed, as it finds the one PHP failed
        for queue in ("pq", "lq"):
            app.artisan("queue:retry-batch", ids[queue], check=True)
        assert redis_client.llen(app.prefix + "queues:" + "pq") == redis_client.llen(app.prefix + "queues:" + "lq") == 1
    else:
        assert pq["callbacks"] == ["then", "finally"] and pq["finished"] and pq["pending"] == 0


@pytest.mark.parametrize("skip_cancelled", [False, True], ids=["handler-asks", "SkipIfBatchCancelled"])
def test_cancelled_batch(app: PhpApp, redis_client: Any, workers: list[Worker], skip_cancelled: bool,
                        caplog: pytest.LogCaptureFixture) -> None:
    """A cancelled batch: the handler sees ``batch()->cancelled()`` (Python: ``job.batch_cancelled()``), or
    ``SkipIfBatchCancelled`` skips the items; the batch's counts end the same on both sides."""
    if skip_cancelled and app.version == "8":
        pytest.skip("Illuminate\\Queue\\Middleware\\SkipIfBatchCancelled arrived after Laravel 8")
    caplog.set_level(logging.INFO, logger="laraq.worker.worker")
    ids = {}
    for q in ("pq", "lq"):
        steps = [{"args": {"q": q, "n": i + 1}, "mode": "ok"} for i in range(2)]
        ids[q] = app.tool("batch-callbacks", f"--queue={q}", "--steps=" + json.dumps(steps), "--cancel",
                          *(["--skip-cancelled"] if skip_cancelled else []))["id"]
    drain_both(app, redis_client, workers)
    pq, lq = batch_side(app, "pq", ids["pq"]), batch_side(app, "lq", ids["lq"])
    assert pq == lq and pq["cancelled"]
    seen = {q: [r.get("cancelled") for r in app.runs() if r.get("class") == "App\\Jobs\\BatchEchoJob"
                and r["args"]["q"] == q] for q in ("pq", "lq")}
    assert seen["pq"] == seen["lq"] == ([] if skip_cancelled else [True, True])
    if skip_cancelled:  # laraq skipped them itself (not handed back to PHP)
        assert sum("skipped by SkipIfBatchCancelled" in r.getMessage() for r in caplog.records) == 2
    assert {r["runner"] for r in app.runs() if r.get("class") == "App\\Jobs\\BatchEchoJob"
            and r["args"]["q"] == "lq"} <= {"python"}
    for queue in ("pq", "lq", "default"):
        assert pending(app, redis_client, queue) == 0


# -- what laraq cannot finish alone is said loudly -----------------------------------------------------

def test_doctor_names_jobs_that_php_must_finish(app: PhpApp, redis_client: Any) -> None:
    from laraq.config.settings import LaravelSettings
    from laraq.ops.doctor import diagnose
    from laraq.protocol.queue import RedisQueue

    chain(app, "lq", [{"mode": "ok"}, {"mode": "ok"}])
    app.tool("dispatch", "echo", "--queue=lq", "--rate-limited=backups", "--args=" + json.dumps({"args": {"q": "lq"}}))
    settings = LaravelSettings.from_env(app.env, version=app.release)
    queue = RedisQueue(redis_client, prefix=app.prefix, version=settings.version, retry_after=settings.retry_after)
    found = {(f.level, f.title) for f in diagnose(settings, queue, app_ref="test_worker_support:app")}
    assert ("warn", "1 App\\Jobs\\EchoJob job(s) use RateLimited('backups'): the app declares no rate limiter "
            "'backups'") in found
    assert ("info", "1 App\\Jobs\\EchoJob job(s) are part of a chain") in found


def test_php_failed_method_runs_once_in_php(app: PhpApp, redis_client: Any, workers: list[Worker]) -> None:
    for queue in ("pq", "lq"):
        app.tool("dispatch", "failed-hook", f"--queue={queue}", "--args=" + json.dumps({"reason": f"no {queue} ✗"}))
    drain_both(app, redis_client, workers)
    hooks = sorted((r["reason"], r["message"]) for r in app.runs() if r.get("class") == "failed-hook")
    assert hooks == [("no lq ✗", "no lq ✗"), ("no pq ✗", "no pq ✗")]
    conn = sqlite3.connect(app.db_path)
    assert sorted(q for (q,) in conn.execute("SELECT queue FROM failed_jobs")) == ["lq", "pq"]
    conn.close()


@pytest.mark.parametrize("skip", ["1", "0"])
def test_skip_middleware(app: PhpApp, redis_client: Any, workers: list[Worker], skip: str) -> None:
    if app.version in ("8", "9", "10"):
        pytest.skip(f"Illuminate\\Queue\\Middleware\\Skip arrived in Laravel 11 (this is {app.version})")
    for queue in ("pq", "lq"):
        chain(app, queue, [{"mode": "ok"}, {"mode": "ok"}])  # the first step carries no middleware
        app.tool("dispatch", "echo", f"--queue={queue}", f"--skip={skip}", "--args=" + json.dumps({"args": {"q": queue}}))
    drain_both(app, redis_client, workers)
    counts = {q: echo_runs(app, q) for q in ("pq", "lq")}
    assert counts["pq"] == counts["lq"] == (2 if skip == "1" else 3)
    for queue in ("pq", "lq"):
        assert pending(app, redis_client, queue) == 0
