"""The leaderless scheduler against a real redis-server: timing, DST, catch-up, claims, definition changes.

The race tests with real processes and SIGKILL are in ``test_scheduler_race.py``; PHP runs the fired
jobs in ``test_scheduler_php.py``.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from conftest import queue_count

from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.schedule.entries import CatchUp, Cron, Entry, Every, JobTarget, ScheduleError
from laraq.schedule.scheduler import Scheduler

PREFIX = "laravel_database_"
BERLIN = ZoneInfo("Europe/Berlin")


def ts(*args: int, tz=UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp())


def local(t: int) -> str:
    return datetime.fromtimestamp(t, BERLIN).strftime("%Y-%m-%d %H:%M %Z")


def make(redis_client, app: App, now: list[float], instance: str = "test", **kw) -> Scheduler:
    queue = RedisQueue(redis_client, prefix=PREFIX, version="13")  # payload timestamps: the real clock
    return Scheduler(app, queue, clock=lambda: now[0], instance=instance, history=100_000, **kw)


def queued(redis_client, queue: str = "default") -> list[dict]:
    return [json.loads(m) for m in redis_client.lrange(f"{PREFIX}queues:{queue}", 0, -1)]


# -- timing ---------------------------------------------------------------------------------------------

def test_berlin_spring_forward_fixed_time_fires_once_at_the_end_of_the_gap():
    cron = Cron("30 2 * * *", "Europe/Berlin")
    times = [t for t, _ in zip(cron.after(ts(2026, 3, 27, 12)), range(4), strict=False)]
    assert [local(t) for t in times] == [
        "2026-03-28 02:30 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST", "2026-03-31 02:30 CEST"]


def test_berlin_fall_back_fixed_time_fires_once_and_wildcard_hours_fire_every_real_occurrence():
    cron = Cron("30 2 * * *", "Europe/Berlin")
    times = [t for t, _ in zip(cron.after(ts(2026, 10, 24, 12)), range(3), strict=False)]
    assert [local(t) for t in times] == ["2026-10-25 02:30 CEST", "2026-10-26 02:30 CET", "2026-10-27 02:30 CET"]
    half = Cron("*/30 * * * *", "Europe/Berlin")
    start = ts(2026, 10, 24, 23, 0)  # 01:00 CEST on the 25th
    times = [t for t, _ in zip(half.after(start), range(6), strict=False)]
    # 02:00 and 02:30 happen twice (CEST, then CET): real time advances by 30 minutes every step.
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [1800] * 5
    assert [local(t) for t in times][1:5] == ["2026-10-25 02:00 CEST", "2026-10-25 02:30 CEST",
                                              "2026-10-25 02:00 CET", "2026-10-25 02:30 CET"]


def test_intervals_are_real_seconds_aligned_to_the_epoch_plus_offset():
    every = Every(300, offset=60)
    assert every.next_after(ts(2026, 3, 29, 0, 59, 59)) == ts(2026, 3, 29, 1, 1)
    assert every.next_after(ts(2026, 3, 29, 1, 1)) == ts(2026, 3, 29, 1, 6)


def test_bad_definitions_are_refused_with_the_value_named():
    with pytest.raises(ScheduleError, match="bad cron expression '61 \\* \\* \\* \\*'"):
        Cron("61 * * * *")
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Base'"):
        Cron("* * * * *", "Mars/Base")
    with pytest.raises(ScheduleError, match="catch_up"):
        CatchUp.parse("sometimes")
    with pytest.raises(ScheduleError, match="entry name"):
        Entry("bad name!", Every(5), JobTarget("X"))
    app = App()
    with pytest.raises(ScheduleError, match="exactly one of cron"):
        app.schedule_job("App\\Jobs\\X", cron="* * * * *", every=60)
    app.schedule_job("App\\Jobs\\X", every=60)
    with pytest.raises(ValueError, match="already declared"):
        app.schedule_job("App\\Jobs\\X", every=30)


@pytest.mark.parametrize(("policy", "fire", "skipped"), [
    ("skip", [1560], 10),                   # 11 due times; the newest is 30 s old, within the grace
    ("once", [1560], 10),
    (3, [1440, 1500, 1560], 8),
    ("all", [960 + 60 * i for i in range(11)], 0),
])
def test_catch_up_policies(policy, fire, skipped):
    entry = Entry("e", Every(60), JobTarget("X"), CatchUp.parse(policy))
    plan = entry.plan(960, 1590)
    assert (plan.fire, plan.skipped, plan.next_due) == (fire, skipped, 1620)
    assert entry.plan(960, 1000).fire == [960]  # on time: every policy fires it
    late = Entry("e", Every(60), JobTarget("X"), CatchUp.parse(policy, grace=20)).plan(960, 1590)
    assert late.fire == ([] if policy == "skip" else fire)
    cron = Entry("c", Cron("* * * * *"), JobTarget("X"), CatchUp.parse(policy))
    plan = cron.plan(960, 1590)
    assert (plan.fire, plan.skipped, plan.next_due) == (fire, skipped, 1620)


# -- claims against Redis ----------------------------------------------------------------------------

def test_a_job_entry_pushes_the_dispatch_payload_and_records_who_fired(redis_client):
    app = App()
    app.schedule_job("App\\Jobs\\Report", {"kind": "daily"}, cron="*/5 * * * *", queue="reports", tries=3)
    now = [ts(2026, 1, 1, 11, 58)]
    s = make(redis_client, app, now, "host-a:1")
    assert s.sync() == {"App.Jobs.Report": "added"}
    assert s.store.score("App.Jobs.Report") == ts(2026, 1, 1, 12, 0)
    assert s.tick() == [] and queued(redis_client, "reports") == []
    now[0] = ts(2026, 1, 1, 12, 0, 1)
    [result] = s.tick()
    assert result.status == "fired" and result.due == [ts(2026, 1, 1, 12, 0)]
    [payload] = queued(redis_client, "reports")
    assert payload["uuid"] == result.uuids[0] and payload["displayName"] == "App\\Jobs\\Report"
    assert payload["maxTries"] == 3 and '"kind";s:5:"daily"' in payload["data"]["command"]
    assert redis_client.llen(f"{PREFIX}queues:reports:notify") == 1
    [row] = s.store.status()
    assert row["next_due"] == ts(2026, 1, 1, 12, 5) and row["last_by"] == "host-a:1" and row["fires"] == 1
    assert row["last_job"] == payload["uuid"] and row["timing"] == "*/5 * * * * (UTC)"


def test_racing_threads_fire_each_due_time_exactly_once(redis_client):
    app = App()
    app.schedule_job("App\\Jobs\\Every", every=60, catch_up="all")
    app.schedule_job("App\\Jobs\\Cron", cron="*/7 * * * *", tz="Europe/Berlin", catch_up="all")
    now = [float(ts(2026, 3, 28, 22, 0))]
    schedulers = [make(redis_client, app, now, f"t{i}") for i in range(6)]
    for s in schedulers:
        s.sync()
    barrier = threading.Barrier(len(schedulers) + 1)
    outcomes: list[list] = [[] for _ in schedulers]
    steps = 600

    def run(i: int) -> None:
        for _ in range(steps):
            barrier.wait()
            outcomes[i].extend(schedulers[i].tick())
            barrier.wait()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(schedulers))]
    for t in threads:
        t.start()
    start = now[0]
    for step in range(steps):
        now[0] = start + 60 * (step + 1)   # every thread ticks at the same instant
        barrier.wait()
        barrier.wait()
    for t in threads:
        t.join(10)
    fired = [r for out in outcomes for r in out if r.status == "fired"]
    lost = [r for out in outcomes for r in out if r.status == "lost"]
    assert lost, "the threads never contended: the test proves nothing"
    history = schedulers[0].store.history()
    for name, timing in (("App.Jobs.Every", Every(60)), ("App.Jobs.Cron", Cron("*/7 * * * *", "Europe/Berlin"))):
        expected = []
        t = timing.next_after(start)
        while t <= now[0]:
            expected.append(t)
            t = timing.next_after(t)
        got = sorted(h["due"] for h in history if h["name"] == name)
        assert got == expected
        assert sorted(d for r in fired if r.name == name for d in r.due) == expected
    assert len(queued(redis_client)) == len(history)
    assert len({p["uuid"] for p in queued(redis_client)}) == len(history)


def test_changing_an_expression_never_fires_a_due_time_twice_nor_keeps_the_old_one(redis_client):
    old, new = App(), App()
    old.schedule_job("App\\Jobs\\R", cron="*/10 * * * *", name="r", catch_up="all")
    new.schedule_job("App\\Jobs\\R", cron="*/15 * * * *", name="r", catch_up="all")
    now = [float(ts(2026, 1, 1, 11, 55))]
    a, b = make(redis_client, old, now, "old"), make(redis_client, new, now, "new")
    a.sync()
    now[0] = ts(2026, 1, 1, 12, 0, 30)
    assert [r.status for r in a.tick()] == ["fired"]          # 12:00 fired by the old definition
    assert b.sync() == {"r": "changed"}
    assert b.store.score("r") == ts(2026, 1, 1, 12, 15)         # not 12:00 again, not 12:10 (old)
    now[0] = ts(2026, 1, 1, 12, 16)
    results = a.tick() + b.tick()
    assert [(r.name, r.status) for r in results] == [("r", "changed"), ("r", "fired")]
    assert [h["due"] for h in a.store.history()] == [ts(2026, 1, 1, 12, 0), ts(2026, 1, 1, 12, 15)]
    assert [h["by"] for h in a.store.history()] == ["old", "new"]
    assert a.fire_now("r").status == "changed"                  # nor by hand from the old definition
    assert len(a.store.history()) == 2


def test_a_removed_entry_leaves_no_ghost_and_a_rolling_deploy_keeps_it_alive(redis_client):
    with_it, without = App(), App()
    with_it.schedule_job("App\\Jobs\\Gone", every=60, name="gone")
    without.schedule_job("App\\Jobs\\Stay", every=60, name="stay")
    now = [float(ts(2026, 1, 1, 12, 0, 30))]
    old, new = make(redis_client, with_it, now, "old"), make(redis_client, without, now, "new", orphan_grace=300)
    old.sync()
    new.sync()
    now[0] += 90
    assert {r.name for r in new.tick()} == {"stay"}             # new instances leave "gone" to old ones
    assert {r.name for r in old.tick()} == {"gone"}
    now[0] += 600                                               # the old instances are gone for good
    new.tick()
    assert new.store.names() == ["stay"]
    assert not redis_client.exists(f"{PREFIX}laraq:schedule:entry:gone")
    # an old instance coming back installs it again, from its next due time (never a backlog)
    now[0] += 1
    assert old.tick() == [] and "gone" in old.store.names()
    assert old.store.score("gone") > now[0]


def test_overlap_protection_holds_until_the_job_leaves_the_queue(redis_client):
    app = App()
    app.schedule_job("App\\Jobs\\Slow", every=60, name="slow", overlap=True, catch_up="all")
    now = [float(ts(2026, 1, 1, 12, 0, 0))]
    s = make(redis_client, app, now, sweep_interval=0)
    s.sync()
    now[0] += 60
    assert [r.status for r in s.tick()] == ["fired"]
    q = RedisQueue(redis_client, prefix=PREFIX, version="13")
    job = q.pop("default")                                      # a worker runs it...
    now[0] += 60
    assert [r.status for r in s.tick()] == ["overlap"]          # ...so the next due time is skipped
    assert s.store.status()[0]["overlapped"] == 1 and s.store.status()[0]["running"]
    q.release(job, 0)                                            # released: still pending
    now[0] += 60
    assert [r.status for r in s.tick()] == ["overlap"]
    job = q.pop("default")
    q.delete_reserved(job)                                       # finished
    now[0] += 60
    assert [r.status for r in s.tick()] == ["fired"]
    assert s.store.status()[0]["fires"] == 2


def test_pause_resume_and_fire_now(redis_client):
    app = App()
    app.schedule_job("App\\Jobs\\P", every=60, name="p")
    now = [float(ts(2026, 1, 1, 12, 0, 0))]
    s = make(redis_client, app, now)
    s.sync()
    assert s.store.set_paused("p", True) and not s.store.set_paused("nope", True)
    now[0] += 60
    assert [r.status for r in s.tick()] == ["paused"] and queued(redis_client) == []
    manual = s.fire_now("p")
    assert manual.status == "fired" and len(queued(redis_client)) == 1
    assert s.store.score("p") == ts(2026, 1, 1, 12, 2)          # the schedule itself did not move
    s.store.set_paused("p", False)
    now[0] += 60
    assert [r.status for r in s.tick()] == ["fired"]
    row = s.store.status()[0]
    assert (row["fires"], row["manual"], row["skipped"]) == (1, 1, 1)
    with pytest.raises(KeyError, match="no schedule entry named 'x'"):
        s.fire_now("x")


def test_a_python_function_entry_is_queued_and_run_by_a_laraq_worker(redis_client):
    from laraq.cli.work import build_worker, default_params

    app = App()
    ran: list = []

    @app.schedule(every=timedelta(minutes=1), name="tidy", queue="py", catch_up="all")
    def tidy(run):
        ran.append((run.name, run.due))

    now = [float(ts(2026, 1, 1, 12, 0, 0))]
    s = make(redis_client, app, now)
    s.sync()
    now[0] += 120
    [result] = s.tick()
    assert result.due == [ts(2026, 1, 1, 12, 1), ts(2026, 1, 1, 12, 2)]
    assert [p["job"] for p in queued(redis_client, "py")] == ["Laraq\\Schedule@tidy"] * 2
    env = {"REDIS_PORT": str(redis_client.connection_pool.connection_kwargs["port"]), "REDIS_HOST": "127.0.0.1",
           "CACHE_DRIVER": "redis", "CACHE_STORE": "redis", "QUEUE_FAILED_DRIVER": "null"}
    # memory: the in-process worker's --memory counts this whole pytest process (Laravel's rule: exit 12)
    worker = build_worker(default_params(queue="py", stop_when_empty=True, sleep=0, prefix=PREFIX, quiet=True,
                                         memory=1 << 20), app=app, env=env)
    assert worker.run() == 0
    assert not redis_client.llen(f"{PREFIX}queues:py")  # --stop-when-empty stops only once the queue is empty
    assert ran == [("tidy", datetime(2026, 1, 1, 12, 1, tzinfo=UTC)), ("tidy", datetime(2026, 1, 1, 12, 2, tzinfo=UTC))]


# -- command line ----------------------------------------------------------------------------------------

def _cli_env(monkeypatch, redis_client) -> None:
    port = redis_client.connection_pool.connection_kwargs["port"]
    for key, value in {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(port), "REDIS_PREFIX": PREFIX,
                       "CACHE_DRIVER": "redis", "CACHE_STORE": "redis", "QUEUE_FAILED_DRIVER": "null"}.items():
        monkeypatch.setenv(key, value)


def test_schedule_commands_list_run_pause_resume_forget(redis_client, monkeypatch):
    from click.testing import CliRunner

    from laraq.cli import main

    _cli_env(monkeypatch, redis_client)
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    runner = CliRunner()
    spec = "sched_instance:worker_app"
    res = runner.invoke(main, ["schedule", "list", "--app", spec, "--json"])
    assert res.exit_code == 0, res.output
    assert {r["name"]: r.get("installed") for r in json.loads(res.output)} == {"tick-file": False, "nightly": False}
    res = runner.invoke(main, ["schedule", "run", "nightly", "--app", spec, "--json"])
    assert res.exit_code == 0, res.output
    fired = json.loads(res.output)
    assert fired["status"] == "fired"
    [payload] = queued(redis_client, "php")
    assert payload["uuid"] == fired["uuids"][0] and payload["displayName"] == "App\\Jobs\\Nightly"
    res = runner.invoke(main, ["schedule", "list", "--json", "--history", "5"])
    data = json.loads(res.output)
    [row] = [r for r in data["entries"] if r["name"] == "nightly"]
    assert row["manual"] == 1 and row["timing"] == "0 3 * * * (Europe/Berlin)" and row["last_job"] == payload["uuid"]
    assert data["history"][-1]["uuid"] == payload["uuid"] and data["history"][-1]["manual"]
    assert runner.invoke(main, ["schedule", "pause", "nightly"]).output == "nightly paused\n"
    res = runner.invoke(main, ["schedule", "list"], env={"COLUMNS": "200"})
    assert "paused" in res.output and "nightly" in res.output and "0 3 * * * (Europe/Berlin)" in res.output
    assert runner.invoke(main, ["schedule", "resume", "nightly"]).exit_code == 0
    res = runner.invoke(main, ["schedule", "pause", "nope"])
    assert res.exit_code == 1 and "no stored schedule entry named 'nope'" in res.output
    res = runner.invoke(main, ["schedule", "run", "nope", "--app", spec])
    assert res.exit_code == 1 and "no schedule entry named 'nope'" in res.output
    assert runner.invoke(main, ["schedule", "forget", "nightly"]).output == "nightly removed\n"
    assert "nightly" not in ScheduleStoreNames(redis_client)


def ScheduleStoreNames(redis_client) -> list[str]:  # noqa: N802
    from laraq.schedule.store import ScheduleStore

    return ScheduleStore(redis_client, PREFIX).names()


def test_laraq_work_with_schedule_fires_and_runs_python_entries_in_one_process(redis_client, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    out = tmp_path / "ticks.txt"
    port = redis_client.connection_pool.connection_kwargs["port"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here.parent), str(here)]), REDIS_HOST="127.0.0.1",
               REDIS_PORT=str(port), REDIS_PREFIX=PREFIX, CACHE_DRIVER="redis", CACHE_STORE="redis",
               QUEUE_FAILED_DRIVER="null", SCHED_OUT=str(out))
    proc = subprocess.run([sys.executable, "-c", "from laraq.cli import main; main()", "work", "--app",
                           "sched_instance:worker_app", "--queue", "py", "--schedule", "--max-time", "5",
                           "--sleep", "0.2", "-q"], env=env, cwd=str(here), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from laraq.schedule.store import ScheduleStore

    history = [h for h in ScheduleStore(redis_client, PREFIX).history() if h["name"] == "tick-file"]
    ran = out.read_text().splitlines() if out.exists() else []
    assert len(history) >= 2
    # every firing whose job the worker took before --max-time ran once; the rest still wait in the queue
    waiting = queue_count(redis_client, f"{PREFIX}queues:py")
    assert len(ran) + waiting == len(history)
    assert sorted(ran) == sorted({line for line in ran})
    assert {int(line.split()[1]) for line in ran} <= {h["due"] for h in history}


def test_an_entry_that_cannot_build_its_job_is_reported_and_does_not_stop_the_others(redis_client, caplog):
    app = App()
    app.schedule_job("App\\Jobs\\Secret", every=60, name="secret", encrypt=True)   # no APP_KEY given
    app.schedule_job("App\\Jobs\\Fine", every=60, name="fine")
    now = [float(ts(2026, 1, 1, 12, 0, 0))]
    s = make(redis_client, app, now)
    s.sync()
    now[0] += 60
    with caplog.at_level("ERROR", logger="laraq.schedule.scheduler"):
        results = {r.name: r.status for r in s.tick()}
    assert results == {"secret": "error", "fine": "fired"}
    assert "schedule entry secret cannot build its job" in caplog.text and "APP_KEY" in caplog.text
    assert s.store.score("secret") == ts(2026, 1, 1, 12, 1)    # still due: it fires once the key is there
    assert [p["displayName"] for p in queued(redis_client)] == ["App\\Jobs\\Fine"]


def test_a_long_backlog_is_fired_in_bounded_claims_each_due_time_once(redis_client):
    from laraq.schedule.entries import MAX_PER_CLAIM

    app = App()
    app.schedule_job("App\\Jobs\\Tick", every=1, name="tick", catch_up=2000)
    now = [float(ts(2026, 1, 1, 12, 0, 0))]
    s = make(redis_client, app, now)
    s.sync()
    now[0] += 3000                      # 3000 missed seconds: the newest 2000 fire, 1000 are skipped
    sizes = []
    for _ in range(10):
        results = s.tick()
        if not results:
            break
        sizes += [len(r.due) for r in results]
    assert sizes == [MAX_PER_CLAIM] * 4
    dues = [h["due"] for h in s.store.history()]
    assert dues == list(range(int(now[0]) - 1999, int(now[0]) + 1))
    row = s.store.status()[0]
    assert (row["fires"], row["skipped"], row["next_due"]) == (2000, 1000, int(now[0]) + 1)
    assert len(queued(redis_client)) == 2000


def test_overlap_protection_caps_a_catch_up_at_one_job():
    entry = Entry("o", Every(60), JobTarget("X"), CatchUp.parse("all"), overlap=True)
    plan = entry.plan(960, 1590)
    assert (plan.fire, plan.skipped, plan.next_due) == ([1560], 10, 1620)
