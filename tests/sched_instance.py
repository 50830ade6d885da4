"""One scheduler instance for the race tests: ``python tests/sched_instance.py PORT NAME MODE``.

MODE ``sim``: the clock is the Redis key ``sim:now`` that the test moves (a controllable clock shared by
every process); the loop ticks as fast as it can. MODE ``real``: ``laraq schedule work``'s own loop with
the Redis server's clock. The entries are :func:`race_app` (or :func:`realtime_app`).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import redis

from laraq.app import App
from laraq.protocol.queue import RedisQueue
from laraq.schedule.scheduler import Scheduler

PREFIX = "laravel_database_"


def race_app() -> App:
    app = App()
    app.schedule_job("App\\Jobs\\EveryMinute", every=60, name="every-min-all", catch_up=1_000_000)
    app.schedule_job("App\\Jobs\\FixedTime", cron="30 2 * * *", tz="Europe/Berlin", name="berlin-0230-all",
                     catch_up="all")
    app.schedule_job("App\\Jobs\\HalfHour", cron="*/30 * * * *", tz="Europe/Berlin", name="berlin-half-all",
                     catch_up=1_000_000)
    app.schedule_job("App\\Jobs\\Seven", cron="*/7 * * * *", tz="Europe/Berlin", name="berlin-7-once",
                     catch_up="once")
    app.schedule_job("App\\Jobs\\Five", every=timedelta(minutes=5), name="every-5-limit3", catch_up=3)
    app.schedule_job("App\\Jobs\\Skip", every=300, name="every-5-skip", catch_up="skip", grace=100)
    app.schedule_job("App\\Jobs\\Hourly", cron="@hourly", tz="America/New_York", name="ny-hourly-once",
                     catch_up="once", queue="other")

    @app.schedule(every=600, name="py-fn", queue="py", catch_up=1_000_000)
    def python_entry() -> None:  # run by a laraq worker; the race test only counts the firings
        pass

    return app


def realtime_app() -> App:
    app = App()
    app.schedule_job("App\\Jobs\\EchoJob", {"args": {"from": "schedule"}, "mode": "ok"}, every=1,
                     name="echo-every-second", catch_up=1_000_000)
    app.schedule_job("App\\Jobs\\EchoJob", {"args": {"from": "cron"}, "mode": "ok"}, every=3,
                     name="echo-every-3s", catch_up="once", queue="three")
    return app


def worker_app() -> App:
    """A Python-function entry every second, run by the same ``laraq work --schedule`` process."""
    import os

    app = App()

    @app.schedule(every=1, name="tick-file", queue="py", catch_up="once")
    def tick_file(run) -> None:
        with open(os.environ["SCHED_OUT"], "a") as fh:
            fh.write(f"{run.name} {int(run.due.timestamp())}\n")

    app.schedule_job("App\\Jobs\\Nightly", cron="0 3 * * *", tz="Europe/Berlin", name="nightly", queue="php")
    return app


def main() -> None:
    port, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    client = redis.Redis(port=port)
    if mode == "sim":
        def clock() -> float:
            while True:
                value = client.get("sim:now")
                if value is not None:
                    return float(value)
                time.sleep(0.01)

        queue = RedisQueue(client, prefix=PREFIX, version="8.83.26", clock=clock)
        scheduler = Scheduler(race_app(), queue, clock=clock, instance=name, history=1_000_000,
                              sync_interval=10**9, sweep_interval=0)
        client.rpush("sim:started", name)
        while True:
            scheduler.tick()
            time.sleep(0.002)
    queue = RedisQueue(client, prefix=PREFIX, version="8.83.26")
    scheduler = Scheduler(realtime_app(), queue, instance=name, history=1_000_000, poll=0.2)
    client.rpush("sim:started", name)
    scheduler.run_forever()


if __name__ == "__main__":
    main()
