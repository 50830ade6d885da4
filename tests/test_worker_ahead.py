"""The next batch asked for while the current one runs (``Reservation.send_ahead`` / ``land_ahead``).

With fast jobs and a full batch, the worker sends its next reserve call before running the batch it has,
and reads the reply when its buffer is empty. Correctness only, nothing timed: every job runs exactly
once; a stop, ``--max-jobs`` or a lost connection while a call is out never loses or repeats a job; jobs
handed back keep their original bodies (attempts not burned).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from conftest import in_process_worker

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.cli.work import build_worker, default_params
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
KEY = PREFIX + "queues:ahead"


def _fill(redis_server: Any, count: int) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("8.83.27"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i}, "mode": "ok", "seconds": 0}, queue="ahead", connection="redis")
            for i in range(count)])


def _worker(redis_server: Any, app: App, workers: list[Any], **opts: Any) -> Any:
    return in_process_worker(redis_server, app, workers, queue="ahead", **opts)


def _counting(worker: Any) -> dict[str, int]:
    """Count the batches asked for ahead (sent without waiting, no ``:notify`` wait first) and landed."""
    calls = {"sent": 0, "landed": 0}
    reserving = worker.reserver.reserving
    send, land = reserving.reserve_batch_send, reserving.reserve_batch_receive

    def counted_send(*args: Any, **kwargs: Any) -> Any:
        pending = send(*args, **kwargs)
        calls["sent"] += pending is not None and kwargs.get("wait") is None
        return pending

    def counted_land(pending: Any) -> Any:
        calls["landed"] += 1
        return land(pending)

    reserving.reserve_batch_send, reserving.reserve_batch_receive = counted_send, counted_land
    return calls


def _app(ran: list[int], on_job: Any = None) -> App:
    app = App("ahead")

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        ran.append(command["args"]["n"])
        if on_job is not None:
            on_job(len(ran))

    return app


def _waiting(redis_client: Any) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in redis_client.lrange(KEY, 0, -1)]


def test_every_job_runs_once_with_batches_asked_for_ahead(redis_server: Any, redis_client: Any,
                                                          workers: list[Any]) -> None:
    _fill(redis_server, 1500)
    ran: list[int] = []
    worker = _worker(redis_server, _app(ran), workers)
    calls = _counting(worker)
    assert worker.daemon() == 0
    assert calls["sent"] >= 5 and calls["landed"] == calls["sent"]  # the path under test was taken
    assert sorted(ran) == list(range(1500))
    assert redis_client.llen(KEY) == 0 and redis_client.zcard(KEY + ":reserved") == 0


def test_a_stop_while_a_batch_is_out_gives_it_back_untouched(redis_server: Any, redis_client: Any,
                                                             workers: list[Any]) -> None:
    _fill(redis_server, 1000)
    ran: list[int] = []
    holder: dict[str, Any] = {}

    def stop_once_ahead_is_out(count: int) -> None:
        w = holder["worker"]
        if count >= 150 and w.reserver.buffered > w.reserver.ready and not w.signals.should_quit:
            holder["out_when_stopped"] = True  # a batch asked for ahead is out
            w.signals.quit()

    worker = holder["worker"] = _worker(redis_server, _app(ran, stop_once_ahead_is_out), workers,
                                        stop_when_empty=False)
    assert worker.daemon() == 0
    assert holder.get("out_when_stopped")
    assert len(ran) == len(set(ran))
    waiting = _waiting(redis_client)
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert sorted(ran + [p["data"]["command"] and _n(p) for p in waiting]) == list(range(1000))
    assert all(p["attempts"] == 0 for p in waiting)  # handed back as dispatched: no attempt burned
    assert [_n(p) for p in waiting] == sorted(_n(p) for p in waiting)  # at the head, in their order


def _n(payload: dict[str, Any]) -> int:
    command = payload["data"]["command"]
    marker = 's:1:"n";i:'
    start = command.index(marker) + len(marker)
    return int(command[start:command.index(";", start)])


def test_max_jobs_counts_what_is_asked_for_ahead(redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    _fill(redis_server, 1000)
    ran: list[int] = []
    worker = _worker(redis_server, _app(ran), workers, max_jobs=333, stop_when_empty=False)
    calls = _counting(worker)
    assert worker.daemon() == 0
    assert calls["sent"] >= 1
    assert sorted(ran) == list(range(333))
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert [_n(p) for p in _waiting(redis_client)] == list(range(333, 1000))


def test_a_lost_reply_strands_nothing(redis_server: Any, redis_client: Any, workers: list[Any]) -> None:
    # the connection of an ahead call breaks before its reply is read: the jobs it reserved wait in
    # :reserved until retry_after, as any reservation whose reply was lost; the acks it carried are sent
    # again. The failed round is retried, not taken for an empty queue (--stop-when-empty), so this
    # worker may run the stranded jobs itself once they expire; a later worker runs whatever is left
    _fill(redis_server, 600)
    ran: list[int] = []
    # retry_after 1: the stranded reservations expire within the test; a stranded job's retry is its 2nd attempt
    worker = _worker(redis_server, _app(ran), workers, tries=3, retry_after=1)
    receive = worker.reserver.reserving.reserve_batch_receive
    broken = {"done": False}

    def receive_once_broken(pending: Any) -> Any:
        if not broken["done"]:
            broken["done"] = True
            pending.call.conn.disconnect()  # the reply is gone with the connection
            raise redis.exceptions.ConnectionError("connection lost (test)")
        return receive(pending)

    worker.reserver.reserving.reserve_batch_receive = receive_once_broken
    assert worker.daemon() == 0
    assert broken["done"]
    assert len(ran) == len(set(ran))
    stranded = redis_client.zcard(KEY + ":reserved")
    assert len(ran) + stranded + redis_client.llen(KEY) == 600
    time.sleep(2.2)  # past retry_after: the stranded reservations expire
    again: list[int] = []
    later = _worker(redis_server, _app(again), workers, tries=3)
    assert later.daemon() == 0
    assert sorted(ran + again) == list(range(600))  # every job ran once; nothing lost
    assert redis_client.zcard(KEY + ":reserved") == 0 and redis_client.llen(KEY) == 0


def test_queue_pause_is_seen_while_batches_are_asked_for_ahead(redis_server: Any, redis_client: Any,
                                                               workers: list[Any]) -> None:
    # Laravel 12.40+: queue:pause is read before every reserve call; a busy queue whose batches come
    # from calls sent ahead must see it too, within about one batch
    from laraq.stores.cache import CacheStore

    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=LaravelVersion.parse("13.26.1"))
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i}, "mode": "ok", "seconds": 0}, queue="ahead", connection="redis")
            for i in range(3000)])
    ran: list[int] = []
    holder: dict[str, Any] = {}

    def pause_after(count: int) -> None:
        if count == 400:
            holder["cache"].pause("redis", "ahead")
            holder["paused_at"] = count

    params = default_params(laravel="13.26.1", sleep=0, quiet=True, queue="ahead", redis_url=redis_server.url,
                            prefix=PREFIX, memory=1 << 20, max_time=3)
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "CACHE_STORE": "redis",
           "REDIS_PREFIX": PREFIX}
    worker = build_worker(params, env=env, app=_app(ran, pause_after))
    workers.append(worker)
    holder["cache"] = worker.context.cache
    assert isinstance(worker.context.cache, CacheStore) and worker.version.has_queue_pause
    calls = _counting(worker)
    assert worker.daemon() == 0  # --max-time 3: it idles, paused, until then
    assert holder.get("paused_at") == 400 and calls["sent"] >= 1
    assert len(ran) == len(set(ran))
    # after the pause it finished the jobs it held (at most its buffer and one call ahead), then took none
    assert 400 <= len(ran) <= 400 + 2 * 100
    assert redis_client.zcard(KEY + ":reserved") == 0
    assert len(ran) + redis_client.llen(KEY) == 3000
