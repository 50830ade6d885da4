"""The supervisor's own pid: a tiny relay process Horizon's supervisor-level commands signal.

Horizon runs a master process and, under it, one process per supervisor, and its commands pick the
level by pid: ``horizon:pause``/``continue``/``terminate`` signal every master's pid,
``horizon:pause-supervisor``/``continue-supervisor`` signal one supervisor's pid (``PauseSupervisorCommand``
finds it in ``SupervisorRepository::all``). Both use the same signals (SIGUSR2, SIGCONT), so a master
and a supervisor recorded under one pid cannot be told apart: a supervisor pause would pause the master
too, and ``horizon:status`` would then report Horizon paused (exit 1) where Horizon says it is running.

laraq's master pid stays the long-lived ``laraq work`` process (see :mod:`laraq.horizon.supervisors`).
The supervisor record gets the pid of a relay: a child Python process that does nothing but wait for
SIGUSR2/SIGCONT/SIGTERM and write one byte per signal (``p``, ``c``, ``t``) to a pipe the worker's
Horizon listener reads at each loop. It ignores SIGINT/SIGHUP/SIGQUIT (a terminal's Ctrl-C reaches the
worker, which stops it), and exits when its parent is gone or the pipe is closed, so it never outlives
the worker and its pid is never left recorded for another process to inherit. ``ps`` shows it as
``laraq: horizon supervisor of worker <pid>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys

__all__ = ["SupervisorRelay"]

log = logging.getLogger("laraq.horizon")

# Runs with ``python -I -S``: no site, no laraq import, so it starts in a few milliseconds.
_RELAY = r"""
import os, signal, sys
fd, parent = int(sys.argv[1]), int(sys.argv[2])
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_IGN)
codes = {signal.SIGUSR2: b"p", signal.SIGCONT: b"c", signal.SIGTERM: b"t"}
signal.pthread_sigmask(signal.SIG_BLOCK, list(codes))
os.write(fd, b"r")
while os.getppid() == parent:
    info = signal.sigtimedwait(list(codes), 1.0)
    if info is not None:
        try:
            os.write(fd, codes[info.si_signo])
        except OSError:
            break
"""

#: what each byte from the relay asks of the supervisor
ACTIONS = {b"p": "pause", b"c": "continue", b"t": "terminate"}


class SupervisorRelay:
    """One relay process and the read end of its pipe (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._read = -1

    @property
    def pid(self) -> int | None:
        """The relay's pid while it runs, else ``None``."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> int | None:
        """Start (or restart) the relay; its pid, or ``None`` when it could not start (logged)."""
        self.stop()
        read, write = os.pipe()
        try:
            # argv[0] names it in ps/top (``laraq: horizon supervisor of worker <pid>``): a process of that worker
            self._proc = subprocess.Popen(
                [f"laraq: horizon supervisor of worker {os.getpid()}", "-I", "-S", "-c", _RELAY, str(write),
                 str(os.getpid())], executable=sys.executable,
                pass_fds=(write,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, close_fds=True,
            )
        except OSError as exc:
            os.close(read)
            log.warning("horizon: no supervisor relay (%s); the supervisor shares the master's pid", exc)
            return None
        finally:
            os.close(write)
        # wait until its signals are blocked, so a signal sent at once is never its default action
        ready = b""
        with contextlib.suppress(OSError):
            ready = os.read(read, 1)
        if ready != b"r":
            os.close(read)
            self.stop()
            log.warning("horizon: the supervisor relay did not start; the supervisor shares the master's pid")
            return None
        os.set_blocking(read, False)
        self._read = read
        return self._proc.pid if self._proc is not None else None

    def actions(self) -> list[str]:
        """The supervisor-level commands received since the last call, in order."""
        if self._read < 0:
            return []
        data = b""
        while True:
            try:
                chunk = os.read(self._read, 64)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        return [ACTIONS[bytes([b])] for b in data if bytes([b]) in ACTIONS]

    def stop(self) -> None:
        """End the relay and reap it (idempotent)."""
        proc, self._proc = self._proc, None
        if self._read >= 0:
            with contextlib.suppress(OSError):
                os.close(self._read)
            self._read = -1
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
