"""A process that holds a Horizon master/supervisor record through :class:`laraq.horizon.HorizonListener`
and obeys signals the way ``laraq work`` does (SIGUSR2 pause, SIGCONT continue, SIGTERM stop), for the
supervisor tests. Prints ``ready``, then one line per state change. Usage: ``PORT [PREFIX]``.
"""

from __future__ import annotations

import signal
import sys
import time

import redis

from laraq.horizon import HorizonSettings
from laraq.horizon.listener import HorizonListener
from laraq.protocol.versions import DEFAULT_VERSION
from laraq.worker.context import WorkerOptions
from laraq.worker.events import Looping, WorkerStarting, WorkerStopping


class Loop:
    """What the worker tells the listener: its queues and options, whether it is paused."""

    def __init__(self) -> None:
        self.options = WorkerOptions(concurrency=2, name="default")
        self.queues = ["default", "low"]
        self.paused = False
        self.should_quit = False


def main() -> int:
    client = redis.Redis(port=int(sys.argv[1]))
    listener = HorizonListener(client, HorizonSettings())
    loop = Loop()

    def on(signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR2:
            loop.paused = True
        elif signum == signal.SIGCONT:
            loop.paused = False
        else:
            loop.should_quit = True

    for sig in (signal.SIGUSR2, signal.SIGCONT, signal.SIGTERM):
        signal.signal(sig, on)
    listener.worker_starting(WorkerStarting("redis", loop.queues, loop.options, DEFAULT_VERSION))
    print("ready", listener.master.name if listener.master else "", flush=True)
    shown = None
    while not loop.should_quit:
        listener.worker_looping(Looping("redis", loop.queues, loop.paused))
        if loop.paused != shown:
            shown = loop.paused
            print("paused" if shown else "running", flush=True)
        time.sleep(0.1)
    listener.worker_stopping(WorkerStopping(0, "told to quit", loop.options))
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
