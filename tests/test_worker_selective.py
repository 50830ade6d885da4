"""The selective reserve (a queue shared with PHP workers): laraq takes only the jobs it has a handler
for, leaves every other member where it is, and reserves what it takes exactly as Laravel's pop does.

The reference for "exactly as Laravel's pop" is Laravel's own pop script text (``LuaScripts::pop``,
the same from 8.0 to 13.x), run on the same Redis: a job taken by the selective reserve and the same
job popped by Laravel's script leave byte-identical ``:reserved`` members and notify counts.
"""

from __future__ import annotations

import json
import logging

import pytest
import redis

from laraq.protocol.queue import RedisQueue

#: Laravel's pop script (``Illuminate\\Queue\\LuaScripts::pop``, unchanged 8.0 to 13.x).
LARAVEL_POP = """
local job = redis.call('lpop', KEYS[1])
local reserved = false
if(job ~= false) then
    reserved = cjson.decode(job)
    reserved['attempts'] = reserved['attempts'] + 1
    reserved = cjson.encode(reserved)
    redis.call('zadd', KEYS[2], ARGV[1], reserved)
    redis.call('lpop', KEYS[3])
end
return {job, reserved}
"""


def command_job(name: str, n: int, display: str | None = None) -> bytes:
    return json.dumps({
        "uuid": f"u{n}", "displayName": display or name, "job": "Illuminate\\Queue\\CallQueuedHandler@call",
        "maxTries": None, "data": {"commandName": name, "command": f"O:1:\"X\":1:{{s:1:\"n\";i:{n};}}"},
        "id": f"id{n}", "attempts": 0,
    }).encode()


def string_job(job: str, n: int) -> bytes:
    return json.dumps({"uuid": f"s{n}", "displayName": job, "job": job, "data": {"n": n},
                       "id": f"sid{n}", "attempts": 2}).encode()


def push(client: redis.Redis, queue: RedisQueue, members: list[bytes]) -> None:
    for m in members:
        queue.push_raw(m)


def test_takes_only_handled_jobs_and_leaves_the_rest_in_order(redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    members = [command_job("App\\Jobs\\Php", 0), command_job("App\\Jobs\\Py", 1), string_job("App\\Php@fire", 2),
               command_job("App\\Jobs\\Php", 3), string_job("App\\Handlers\\Foo@bar", 4),
               command_job("App\\Jobs\\Py", 5), b"not json", command_job("App\\Jobs\\Php", 6)]
    push(redis_client, queue, members)
    reserved = queue.reserving.reserve_batch(count=10, handled=["App\\Jobs\\Py", "App\\Handlers\\Foo@bar"], window=100)
    taken = reserved.jobs
    assert [t.body for t in taken] == [members[1], members[4], members[5]]
    # the PHP-only ones stay in the list in their order; the unreadable member is parked as pop parks it
    assert redis_client.lrange(keys.list, 0, -1) == [members[0], members[2], members[3], members[7]]
    assert redis_client.lrange(keys.poison, 0, -1) == [b"not json"]
    assert reserved.skipped == 4 and reserved.poisoned == 1
    # one :notify token per member taken from the list (3 reserved + 1 poisoned), as pops consume them
    assert redis_client.llen(keys.notify) == len(members) - 4
    # each reserved member is what Laravel's own pop script writes for the same body
    reference = redis.Redis(connection_pool=redis_client.connection_pool)
    for t in taken:
        reference.delete("ref", "ref:reserved", "ref:notify")
        reference.rpush("ref", t.body)
        _, laravel_reserved = reference.eval(LARAVEL_POP, 3, "ref", "ref:reserved", "ref:notify", 123)
        assert t.reserved == laravel_reserved
        assert redis_client.zscore(keys.reserved, t.reserved) is not None


def test_window_bounds_the_look_and_a_head_it_cannot_run_is_never_moved(redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    members = [command_job("App\\Jobs\\Php", n) for n in range(5)] + [command_job("App\\Jobs\\Py", 9)]
    push(redis_client, queue, members)
    assert queue.reserving.reserve_batch(count=5, handled=["App\\Jobs\\Py"], window=3).jobs == []
    assert redis_client.lrange(keys.list, 0, -1) == members
    assert redis_client.zcard(keys.reserved) == 0
    assert redis_client.llen(keys.notify) == len(members)
    taken = queue.reserving.reserve_batch(count=5, handled=["App\\Jobs\\Py"], window=10).jobs
    assert [t.body for t in taken] == [members[5]]
    assert redis_client.lrange(keys.list, 0, -1) == members[:5]


def test_names_match_as_the_app_resolves_them(redis_client: redis.Redis) -> None:
    """displayName, data.commandName, a string job and its class (``@fire`` or no method), with leading
    backslashes and spaces dropped, the way :meth:`laraq.app.App.candidates` reads a payload."""
    from laraq.app import App
    from laraq.protocol.payload import Payload

    app = App()
    for name in ("App\\Jobs\\ByCommand", "Shown As", "App\\Legacy", "App\\Handlers\\Foo@bar"):
        app.handler(name)(lambda data, job: None)
    members = [
        command_job("\\App\\Jobs\\ByCommand", 1), command_job("App\\Other", 2, display="Shown As"),
        string_job("App\\Legacy@fire", 3), string_job("App\\Legacy", 4), string_job(" \\App\\Handlers\\Foo@bar", 5),
        string_job("App\\Legacy@handle", 6), command_job("App\\Nope", 7), string_job("App\\Handlers\\Foo", 8),
    ]
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    push(redis_client, queue, members)
    taken = queue.reserving.reserve_batch(count=20, handled=app.names, window=100).jobs
    expected = [m for m in members if app.resolve(Payload.parse(m)) is not None]
    assert [t.body for t in taken] == expected
    assert len(expected) == 5


def test_a_string_jobs_data_never_names_its_handler(redis_client: redis.Redis) -> None:
    """A string job whose data carries ``commandName`` (a user-keyed array) is matched by its ``job``
    string only, by the selective reserve and by :meth:`laraq.app.App.resolve` alike; a ``Class@method``
    handler never takes a queued command, even one whose ``displayName`` is its name."""
    from laraq.app import App
    from laraq.protocol.payload import Payload

    app = App()
    for name in ("App\\Jobs\\EchoJob", "App\\Handlers\\Foo@bar"):
        app.handler(name)(lambda data, job: None)
    hostile = {"commandName": "App\\Jobs\\EchoJob", "command": 'O:1:"X":0:{}'}
    members = [
        json.dumps({"uuid": "s1", "displayName": "App\\Other", "job": "App\\Other@run", "data": hostile,
                    "attempts": 0}).encode(),
        json.dumps({"uuid": "s2", "displayName": "App\\Jobs\\EchoJob", "job": "App\\Other@run", "data": hostile,
                    "attempts": 0}).encode(),
        command_job("App\\Other", 3, display="App\\Handlers\\Foo@bar"),
        json.dumps({"uuid": "s4", "displayName": "App\\Handlers\\Foo", "job": "App\\Handlers\\Foo@bar",
                    "data": hostile, "attempts": 0}).encode(),
    ]
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    push(redis_client, queue, members)
    handlers = [app.resolve(Payload.parse(m)) for m in members]
    assert [h.name if h else None for h in handlers] == [None, None, None, "App\\Handlers\\Foo@bar"]
    taken = queue.reserving.reserve_batch(count=20, handled=app.names, window=100).jobs
    assert [json.loads(t.body)["uuid"] for t in taken] == ["s4"]


def test_batch_mode_without_names_is_unchanged(redis_client: redis.Redis) -> None:
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    members = [command_job("App\\Jobs\\Php", 0), command_job("App\\Jobs\\Py", 1)]
    push(redis_client, queue, members)
    assert [t.body for t in queue.reserving.reserve_batch(count=5).jobs] == members


@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
def test_a_worker_runs_its_jobs_and_leaves_the_others_in_order(redis_client: redis.Redis, batch: int) -> None:
    """The whole worker, with Laravel's pop (``--batch 1``) and with batch reserves, under the default
    ``--unhandled leave``."""
    from laraq.app import App
    from laraq.worker.worker import Worker, WorkerOptions

    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    members = [command_job("App\\Jobs\\Php" if n % 3 else "App\\Jobs\\Py", n) for n in range(30)]
    push(redis_client, queue, members)
    ran: list[str] = []
    app = App()
    app.handler("App\\Jobs\\Py")(lambda command, job: ran.append(job.uuid))
    worker = Worker(app, queue, "default", options=WorkerOptions(batch=batch, sleep=0, stop_when_empty=True, memory=1 << 20))
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert ran == [f"u{n}" for n in range(0, 30, 3)]
    assert redis_client.lrange(keys.list, 0, -1) == [m for n, m in enumerate(members) if n % 3]
    assert redis_client.zcard(keys.reserved) == 0 and redis_client.zcard(keys.delayed) == 0


def sweep(queue: RedisQueue, names: list[str], count: int, window: int = 200) -> tuple[list[bytes], int]:
    """Selective reserves with the deep look, the cursor carried from call to call as a worker carries it,
    until the look comes back to the list's head: the bodies taken and the calls made."""
    taken: list[bytes] = []
    cursor, calls = 0, 0
    while True:
        got = queue.reserving.reserve_batch(count=count, handled=names, window=window, deep=cursor)
        calls += 1
        taken += [t.body for t in got.jobs]
        assert got.cursor >= 0
        cursor = got.cursor
        if cursor == 0:
            return taken, calls


def test_the_deep_look_takes_python_jobs_behind_thousands_of_php_jobs(redis_client: redis.Redis) -> None:
    """Past the window, page by page: Python jobs deep in the list and near its tail are taken in list
    order, each reserved as Laravel's pop reserves it; the PHP jobs keep their order and their tokens; no
    call holds Redis 10 ms (SLOWLOG, 10,000 µs)."""
    from laraq.protocol.lua_laraq import DEEP_PAGE

    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    members = [command_job("App\\Jobs\\Php", n) for n in range(12_000)]
    python = {700: "App\\Jobs\\Py", 5_000: "App\\Jobs\\Py", 5_001: "App\\Jobs\\Py", 11_999: "App\\Jobs\\Py"}
    for at, name in python.items():
        members[at] = command_job(name, at)
    members[6_000] = string_job("App\\Legacy@fire", 6_000)  # a string job, by its class
    members[7_000] = b"not json"  # left for the head look (or PHP), never taken from the middle
    with redis_client.pipeline(transaction=False) as pipe:
        for m in members:
            pipe.rpush(keys.list, m)
            pipe.rpush(keys.notify, 1)
        pipe.execute()
    redis_client.config_set("slowlog-log-slower-than", 10_000)
    redis_client.slowlog_reset()
    taken, calls = sweep(queue, ["App\\Jobs\\Py", "App\\Legacy"], count=2)
    slow = redis_client.slowlog_get(128)
    redis_client.config_set("slowlog-log-slower-than", 10_000)
    wanted = [700, 5_000, 5_001, 6_000, 11_999]
    assert taken == [members[at] for at in wanted]
    assert calls >= len(members) // DEEP_PAGE
    left = [m for at, m in enumerate(members) if at not in wanted]
    assert redis_client.lrange(keys.list, 0, -1) == left
    assert redis_client.llen(keys.notify) == len(left)
    assert redis_client.llen(keys.poison) == 0
    reference = redis.Redis(connection_pool=redis_client.connection_pool)
    for body in taken:
        reference.delete("ref", "ref:reserved", "ref:notify")
        reference.rpush("ref", body)
        _, laravel_reserved = reference.eval(LARAVEL_POP, 3, "ref", "ref:reserved", "ref:notify", 123)
        assert redis_client.zscore(keys.reserved, laravel_reserved) is not None
    assert [(e["duration"], e["command"][-200:]) for e in slow] == []


def test_the_deep_look_counts_python_jobs_beyond_its_reach(redis_client: redis.Redis,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A Python job farther than ``DEEP_REACH`` members from both ends of the list is not taken (its removal
    would walk too far) but counted, for the worker's warning; one near either end is taken."""
    from laraq.protocol.lua_laraq import DEEP_REACH

    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    filler = [b'{"job":"App\\\\Php@fire","data":{},"attempts":0,"n":%d}' % n for n in range(2 * DEEP_REACH + 10)]
    middle = len(filler) // 2
    near_tail = len(filler) - 3
    filler[middle] = command_job("App\\Jobs\\Py", 1)
    filler[near_tail] = command_job("App\\Jobs\\Py", 2)
    with redis_client.pipeline(transaction=False) as pipe:
        for first in range(0, len(filler), 1000):
            pipe.rpush(keys.list, *filler[first:first + 1000])
        pipe.execute()
    cursor, beyond, taken = 0, 0, []
    while True:
        got = queue.reserving.reserve_batch(count=5, handled=["App\\Jobs\\Py"], window=200, deep=cursor)
        beyond += got.beyond
        taken += [t.body for t in got.jobs]
        cursor = got.cursor
        if cursor == 0:
            break
    assert taken == [filler[near_tail]]
    assert beyond == 1 and got.depth == len(filler) - 1
    assert redis_client.lindex(keys.list, middle) == filler[middle]

    # a worker says so: a warning naming the queue, and the event (the metrics' gauge) with the count
    from prometheus_client import CollectorRegistry

    from laraq.app import App
    from laraq.production.metrics import Metrics
    from laraq.worker.events import JobsOutOfReach, WorkerListener
    from laraq.worker.worker import Worker, WorkerOptions

    told: list[JobsOutOfReach] = []
    registry = CollectorRegistry()
    metrics = Metrics(registry=registry)
    metrics._queues = ["default"]

    class Recorder(WorkerListener):
        def jobs_out_of_reach(self, event: JobsOutOfReach) -> None:
            told.append(event)
            metrics.jobs_out_of_reach(event)

    app = App()
    app.handler("App\\Jobs\\Py")(lambda command, job: None)
    worker = Worker(app, queue, "default", options=WorkerOptions(sleep=0, stop_when_empty=True, memory=1 << 20),
                    listeners=[Recorder()])
    with caplog.at_level(logging.WARNING, logger="laraq.worker.worker"):
        try:
            assert worker.daemon() == 0
        finally:
            worker.close()
    assert [(e.queue, e.count, e.depth) for e in told] == [("default", 1, len(filler) - 1)]
    assert registry.get_sample_value("laraq_jobs_out_of_reach", {"queue": "default"}) == 1
    assert any("queue default: 1 Python job(s) wait more than 50000 members from both ends" in r.getMessage()
               for r in caplog.records)


def test_without_lset_and_lrem_the_deep_look_says_so_and_takes_nothing(redis_client: redis.Redis,
                                                                        redis_server: object) -> None:
    """An ACL user without ``LSET``/``LREM``: the reply's cursor is -1 and the list is untouched (the head
    look still works)."""
    redis_client.execute_command("ACL", "SETUSER", "nolrem", "on", ">pw", "~*", "+@all", "-lset", "-lrem")
    limited = redis.Redis(port=redis_client.connection_pool.connection_kwargs["port"], username="nolrem",
                          password="pw")
    queue = RedisQueue(limited, prefix="p_", retry_after=90)
    members = [command_job("App\\Jobs\\Php", n) for n in range(300)] + [command_job("App\\Jobs\\Py", 300)]
    push(redis_client, queue, members)
    got = queue.reserving.reserve_batch(count=5, handled=["App\\Jobs\\Py"], window=200, deep=0)
    assert got.cursor == 200 and got.jobs == []  # the head look; the deep look starts at the next call
    got = queue.reserving.reserve_batch(count=5, handled=["App\\Jobs\\Py"], window=200, deep=got.cursor)
    assert got.cursor == -1 and got.jobs == []
    assert redis_client.lrange(queue.keys().list, 0, -1) == members
    limited.close()


@pytest.mark.parametrize("batch", [1, 100], ids=["classic", "fast"])
def test_a_worker_finds_python_jobs_past_the_window_before_it_calls_the_queue_empty(
        redis_client: redis.Redis, batch: int) -> None:
    """With ``--stop-when-empty`` and ``--sleep 3``: the worker reads on past the window, call after call
    without sleeping, runs the Python jobs behind 2,000 jobs for PHP and only then stops."""
    from laraq.app import App
    from laraq.worker.worker import Worker, WorkerOptions

    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    keys = queue.keys()
    members = [command_job("App\\Jobs\\Php", n) for n in range(2_000)] + [command_job("App\\Jobs\\Py", n)
                                                                          for n in range(2_000, 2_005)]
    push(redis_client, queue, members)
    ran: list[str] = []
    app = App()
    app.handler("App\\Jobs\\Py")(lambda command, job: ran.append(job.uuid))
    worker = Worker(app, queue, "default", options=WorkerOptions(batch=batch, sleep=3, stop_when_empty=True,
                                                                 memory=1 << 20, scan_window=50))
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert ran == [f"u{n}" for n in range(2_000, 2_005)]
    assert redis_client.lrange(keys.list, 0, -1) == members[:2_000]
    assert redis_client.llen(keys.notify) == 2_000 and redis_client.zcard(keys.reserved) == 0


def test_once_reads_on_past_the_window_for_its_one_job(redis_client: redis.Redis) -> None:
    """``--once`` behind 2,000 jobs for PHP: the look goes on until it finds the Python job, which runs."""
    from laraq.app import App
    from laraq.worker.worker import Worker, WorkerOptions

    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    members = [command_job("App\\Jobs\\Php", n) for n in range(2_000)] + [command_job("App\\Jobs\\Py", 2_000)]
    push(redis_client, queue, members)
    ran: list[str] = []
    app = App()
    app.handler("App\\Jobs\\Py")(lambda command, job: ran.append(job.uuid))
    worker = Worker(app, queue, "default", options=WorkerOptions(once=True, sleep=0, memory=1 << 20))
    try:
        assert worker.daemon() == 0
    finally:
        worker.close()
    assert ran == ["u2000"]
    assert redis_client.lrange(queue.keys().list, 0, -1) == members[:2_000]


def test_a_queue_of_python_jobs_longer_than_the_window_is_taken_from_its_head_in_order(
        redis_client: redis.Redis) -> None:
    """The deep look is for jobs behind jobs for PHP: when the head gives what a call asks for, the next
    call reads the head again, so a long queue of Python jobs is taken in its order, as pops take it."""
    queue = RedisQueue(redis_client, prefix="p_", retry_after=90)
    members = [command_job("App\\Jobs\\Py", n) for n in range(700)]
    push(redis_client, queue, members)
    taken: list[bytes] = []
    cursor = 0
    while len(taken) < len(members):
        got = queue.reserving.reserve_batch(count=32, handled=["App\\Jobs\\Py"], window=200, deep=cursor)
        assert got.jobs, "a call found nothing while jobs were left"
        taken += [t.body for t in got.jobs]
        cursor = got.cursor
    assert taken == members
