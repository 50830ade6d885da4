"""The ``laraq work`` supervisor: N worker processes (prefork) under one process that costs ~10 MB.

``laraq work`` (with ``--supervise``, the default) parses its options, then *replaces itself* with this
supervisor: ``python -S -c`` running this file, so the supervisor imports nothing but ``os``, ``sys``,
``signal``, ``select`` and ``time`` (no ``site``, no click, no redis, no laraq) and stays near the
interpreter's own ~10 MB RSS instead of a second full laraq process. Its ``--processes`` worker
processes (each in its own session, each a complete ``laraq work --no-supervise`` worker built from the
JSON settings in ``LARAQ_WORKER_CONFIG``) are first *forked* by ``laraq work`` just before it execs
(:func:`fork_workers`: they keep that interpreter, its ``site`` and its imports, so a start costs one
interpreter, not three) and adopted by the supervisor; a worker it starts again later is a fresh
interpreter (``posix_spawn``). supervisord + ``numprocs`` + artisan in one command.

Rules (the exit codes are artisan's, :mod:`laraq.exitcodes`):

* a worker killed by a signal (its own timeout SIGKILL, the OOM killer, ``kill -9``) is started again
  at once (with a growing pause if it keeps dying within a second of its start); its jobs stay
  reserved until ``retry_after``, as with artisan under supervisord;
* a worker that exits with an error before it is ready (it writes :data:`READY` on its pipe once built)
  after some worker of this supervisor was ready failed to start (the set-up worked, so the cause is of
  the moment: an import path, a resource): the supervisor says so (an error line with the exit code and
  how many workers run) and starts it again after a growing pause (0.5 s doubling to 30 s), never running
  short-handed without a word; so does a start the system refuses (``posix_spawn`` failing). Workers
  failing before any was ever ready is the deployment's error: the supervisor exits with their code;
* a worker that exits normally is not restarted: ``queue:restart``, ``--stop-when-empty``,
  ``--max-time`` stop every worker, and the supervisor exits when the last one has (with the first
  non-zero code, else 0) so that the process manager above starts new code. With several processes
  one worker over ``--memory`` (exit 12) is replaced instead, so the others keep serving;
* SIGTERM/SIGINT/SIGQUIT/SIGHUP: forwarded to every worker (SIGHUP as SIGTERM), which finish their
  running jobs and give their prefetched ones back; SIGUSR2/SIGCONT (pause/resume) are forwarded too;
* ``--max-jobs`` counts over all workers (each reports its jobs on a pipe, one byte per job, written
  per batch, and only when ``--max-jobs`` is set); when it is reached every worker is told to stop;
* if the supervisor dies, the kernel kills its workers (``PR_SET_PDEATHSIG``, set by each worker).

This module must import nothing outside the standard library's smallest modules.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

__all__ = ["fork_workers", "main", "spawn_argv"]

#: Environment of a worker process (read by :func:`laraq.cli.work.child_main`).
FD_ENV = "LARAQ_WORKER_FD"
PARENT_ENV = "LARAQ_WORKER_PARENT"
BANNER_ENV = "LARAQ_BANNER"
MAX_JOBS_ENV = "LARAQ_WORKER_MAX_JOBS"
MAX_TIME_ENV = "LARAQ_WORKER_MAX_TIME"
SLOT_ENV = "LARAQ_WORKER_SLOT"

#: The signals the supervisor handles and forwards to its workers (see the module docstring).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR2, signal.SIGCONT, signal.SIGHUP)



def _exit_codes() -> dict[str, object]:
    """:mod:`laraq.exitcodes`, read from its file: the supervisor imports no laraq module (see above)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "exitcodes.py")
    codes: dict[str, object] = {}
    with open(path, "rb") as fh:
        exec(compile(fh.read(), path, "exec"), codes)  # noqa: S102 - laraq's own constants module
    return codes


_CODES = _exit_codes()
EXIT_SUCCESS = int(_CODES["EXIT_SUCCESS"])  # type: ignore[call-overload]
EXIT_ERROR = int(_CODES["EXIT_ERROR"])  # type: ignore[call-overload]
EXIT_MEMORY_LIMIT = int(_CODES["EXIT_MEMORY_LIMIT"])  # type: ignore[call-overload]

_BOOT = ("import sys; p = sys.argv[1]; g = {'__name__': '__laraq_supervisor__', '__file__': p}; "
         "exec(compile(open(p, 'rb').read(), p, 'exec'), g); sys.exit(g['main'](sys.argv[2:]))")
#: The directory the supervisor's own ``laraq`` package is in (this file is ``<root>/laraq/production/``).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: A worker the supervisor starts: ``python -P`` (the current directory is not put first on the import
#: path, as it is not for ``laraq work`` itself), and ``laraq`` imported from the supervisor's own root
#: before anything else, so a ``laraq/`` folder (a checkout) in the current directory, or a different
#: installed laraq, is never the one a replacement runs. The app's module is found as ``laraq work``
#: finds it (:func:`laraq.app.load_app`).
_WORKER = (f"import sys; sys.path.insert(0, {_ROOT!r}); import laraq; del sys.path[0]; "
           "from laraq.cli.work import child_main; child_main()")
#: The byte a worker writes on its pipe once it is built and about to take jobs (every other byte is a job).
READY = b"r"


def spawn_argv(processes: int, *, once: bool, max_jobs: int, max_time: float, json_logs: bool,
               adopted: list[tuple[int, int]] | None = None) -> list[str]:
    """The command line that turns ``laraq work`` into this supervisor (for ``os.execv``).

    ``adopted``: the ``(pid, read_fd)`` of workers :func:`fork_workers` already started, one per slot.
    """
    argv = [sys.executable, "-S", "-c", _BOOT, os.path.abspath(__file__), str(processes), str(int(once)),
            str(max_jobs), str(max_time), "json" if json_logs else "text"]
    if adopted:
        argv.append(",".join(f"{pid}:{fd}" for pid, fd in adopted))
    return argv


def _worker_env(env: dict[str, str], write_fd: int, index: int, *, banner_shown: bool, max_jobs: int,
                max_time: float) -> None:
    """What a worker process reads from its environment (:func:`laraq.cli.work.child_main`)."""
    env[FD_ENV] = str(write_fd)
    env[PARENT_ENV] = str(os.getpid())
    env[SLOT_ENV] = str(index)
    if banner_shown:
        env[BANNER_ENV] = "shown"
    if max_jobs:  # what is left of --max-jobs / --max-time (at least 1: 0 would mean no limit)
        env[MAX_JOBS_ENV] = str(max(1, max_jobs))
    if max_time:
        env[MAX_TIME_ENV] = str(max(1, int(max_time)))


def fork_workers(processes: int, *, max_jobs: int, max_time: float) -> tuple[bool, list[tuple[int, int]]]:
    """Fork the first ``processes`` workers from ``laraq work`` itself, just before it execs this supervisor.

    A worker started with ``posix_spawn`` is a third interpreter start (after ``laraq work`` and the
    supervisor), with its own ``site`` and every import; a forked one goes straight on in the interpreter
    that parsed the options. The caller imports the worker's modules before calling this (shared, one
    import for all ``processes``). Returns ``(True, [])`` in a worker (which then runs
    :func:`laraq.cli.work.child_main`), ``(False, [(pid, read_fd), ...])`` in ``laraq work``, whose
    read ends stay open across the exec for the supervisor to adopt (:func:`main`). The pid does not
    change with the exec, so the workers are the supervisor's children and its ``waitpid`` sees them.
    """
    adopted: list[tuple[int, int]] = []
    sys.stdout.flush()
    sys.stderr.flush()
    # The signals the supervisor forwards stay blocked from here to its handlers (Supervisor.run): a mask
    # and pending signals survive the exec, so a SIGTERM or SIGUSR2 sent meanwhile is delivered to the
    # supervisor's handler instead of killing ``laraq work`` with the workers already running.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    for index in range(max(1, processes)):
        read_fd, write_fd = os.pipe()
        env: dict[str, str] = {}
        _worker_env(env, write_fd, index, banner_shown=index > 0, max_jobs=max_jobs, max_time=max_time)
        try:
            pid = os.fork()
        except OSError:  # no process left (EAGAIN, ENOMEM): the ones started must not run unsupervised
            for started, fd in adopted:
                os.kill(started, signal.SIGKILL)
                os.close(fd)
            for fd in (read_fd, write_fd):
                os.close(fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            raise
        if pid == 0:  # the worker
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
                os.setsid()
                os.close(read_fd)
                for _, fd in adopted:  # earlier siblings' read ends: the supervisor's, not ours
                    os.close(fd)
                os.environ.update(env)
            except BaseException:
                os._exit(EXIT_ERROR)
            return True, []
        os.close(write_fd)
        os.set_inheritable(read_fd, True)
        adopted.append((pid, read_fd))
    return False, adopted


def _say(message: str, json_logs: bool, level: str = "warning") -> None:
    if json_logs:
        # The supervisor runs on the interpreter's bare modules; json pulls in 12 more (re among them,
        # ~3 ms, ~0.5 MB RSS): kept off the supervisor's start-up, loaded for the first JSON log line.
        import json

        line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "level": level,
                           "logger": "laraq.work", "message": message})
    else:
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] laraq.work {level.upper()}: {message}"
    try:  # noqa: SIM105 - contextlib is not imported here (the supervisor stays small)
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class _Slot:
    """One worker process: its pid, its job pipe and how often it died young."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.pid = 0
        self.fd = -1
        self.born = 0.0
        self.failures = 0
        self.restart_at: float | None = None
        self.done = False
        self.code: int | None = None
        #: the worker said it is built and taking jobs (:data:`READY`)
        self.ready = False


class Supervisor:
    """The prefork supervisor (see the module docstring)."""

    def __init__(self, processes: int, *, once: bool, max_jobs: int, max_time: float, json_logs: bool) -> None:
        self.slots = [_Slot(i) for i in range(max(1, processes))]
        self.once = once
        self.max_jobs = max_jobs
        self.max_time = max_time
        self.json_logs = json_logs
        self.jobs_done = 0
        self.started = time.monotonic()
        self.stopping = False
        self.spawned = 0
        self.code = EXIT_SUCCESS
        self.told_to_stop = False
        #: some worker was ready once: the set-up works, so a failed start is retried (see the module)
        self.served = False

    # -- workers -------------------------------------------------------------------------------------

    def adopt(self, adopted: list[tuple[int, int]]) -> None:
        """Take over the workers :func:`fork_workers` started before the exec (pid and pipe per slot)."""
        for slot, (pid, fd) in zip(self.slots, adopted, strict=False):
            os.set_inheritable(fd, False)
            slot.pid, slot.fd, slot.born, slot.restart_at = pid, fd, self.started, None
            self.spawned += 1

    def _spawn(self, slot: _Slot) -> None:
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, True)
        env = dict(os.environ)
        _worker_env(env, write_fd, slot.index, banner_shown=bool(self.spawned),
                    max_jobs=max(1, self.max_jobs - self.jobs_done) if self.max_jobs else 0,
                    max_time=max(1.0, self.max_time - (time.monotonic() - self.started)) if self.max_time else 0)
        try:
            slot.pid = os.posix_spawn(sys.executable, [sys.executable, "-P", "-c", _WORKER], env, setsid=True)
        except OSError as exc:  # no process left (EAGAIN, ENOMEM): tried again, said each time
            os.close(read_fd)
            slot.pid = 0
            self._retry(slot, f"could not start worker process {slot.index + 1} ({exc})")
            return
        finally:
            os.close(write_fd)
        self.spawned += 1
        slot.fd = read_fd
        slot.born = time.monotonic()
        slot.restart_at = None
        slot.ready = False

    def _retry(self, slot: _Slot, what: str) -> None:
        """A start that failed: said as an error with how many workers run, and tried again after a pause
        that grows with each failure in a row (0.5 s doubling to 30 s)."""
        slot.failures += 1
        pause = min(30.0, 0.5 * 2 ** (slot.failures - 1))
        running = sum(1 for other in self.slots if other.pid)
        _say(f"{what}; {running} of {len(self.slots)} worker process(es) running; starting it again in "
             f"{pause:g}s", self.json_logs, "error")
        slot.restart_at = time.monotonic() + pause

    def _signal_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.pid:
                try:  # noqa: SIM105
                    os.kill(slot.pid, signum)
                except ProcessLookupError:
                    pass

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
            self.stopping = True
            if signum == signal.SIGHUP:
                signum = signal.SIGTERM
        self._signal_all(signum)

    def _limits_reached(self) -> bool:
        if self.max_jobs and self.jobs_done >= self.max_jobs:
            return True
        return bool(self.max_time and time.monotonic() - self.started >= self.max_time)

    def _reaped(self, slot: _Slot, status: int) -> None:
        """A worker ended: restart it, or mark its slot done (see the module docstring)."""
        if slot.fd >= 0:
            self._drain(slot)
            os.close(slot.fd)
            slot.fd = -1
        slot.pid = 0
        code = os.waitstatus_to_exitcode(status)
        several = len(self.slots) > 1
        if code < 0:
            name = _signal_name(-code)
            if self.stopping and not slot.ready and -code in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                # still starting (its handlers not set yet) when the stop was forwarded: it stopped, no job lost
                self._finish(slot, EXIT_SUCCESS)
                return
            if self.stopping or self.once:
                _say(f"worker process died by {name}", self.json_logs)
                self._finish(slot, EXIT_ERROR)
                return
            if self._limits_reached():
                self._finish(slot, EXIT_SUCCESS)
                return
            slot.failures = slot.failures + 1 if time.monotonic() - slot.born < 1 else 0
            pause = min(30.0, 0.5 * 2 ** slot.failures) if slot.failures else 0.0
            _say(f"worker process died by {name} (its jobs stay reserved until retry_after); starting a new one"
                 + (f" in {pause:.0f}s" if pause else ""), self.json_logs)
            slot.restart_at = time.monotonic() + pause
            return
        if code != EXIT_SUCCESS and not slot.ready and self.served and not self.stopping \
                and not self._limits_reached():
            self._retry(slot, f"worker process {slot.index + 1} exited with code {code} before it started "
                              "(its error is above)")
            return
        if several and code == EXIT_MEMORY_LIMIT and not self.stopping and not self._limits_reached():
            _say(f"worker process {slot.index + 1} reached its --memory limit: starting a new one", self.json_logs,
                 "info")
            slot.restart_at = time.monotonic()
            return
        self._finish(slot, code)

    def _finish(self, slot: _Slot, code: int) -> None:
        slot.done = True
        slot.code = code
        if code and not self.code:
            self.code = code

    def _drain(self, slot: _Slot) -> bool:
        """Count the job bytes a worker wrote and note its :data:`READY`; False at end of file."""
        try:
            data = os.read(slot.fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        if READY in data:
            slot.ready = self.served = True
            slot.failures = 0
            data = data.replace(READY, b"")
        self.jobs_done += len(data)
        return True

    def run(self) -> int:
        for sig in FORWARDED:
            signal.signal(sig, self._on_signal)
        # blocked by fork_workers before the exec: what arrived meanwhile is handled (forwarded) now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        for slot in self.slots:
            if not slot.pid:
                self._spawn(slot)
        while True:
            now = time.monotonic()
            for slot in self.slots:
                if not slot.done and not slot.pid and slot.restart_at is not None and now >= slot.restart_at:
                    if self.stopping:
                        self._finish(slot, EXIT_SUCCESS)
                    else:
                        self._spawn(slot)
            if all(slot.done for slot in self.slots):
                return self.code
            fds = [slot.fd for slot in self.slots if slot.fd >= 0]
            try:
                ready, _, _ = select.select(fds, [], [], 0.25) if fds else ([], [], [])
            except InterruptedError:  # a signal: handled, loop again
                ready = []
            if not fds:
                time.sleep(0.05)
            for slot in self.slots:
                if slot.fd in ready and not self._drain(slot):
                    os.close(slot.fd)
                    slot.fd = -1
            if self.max_jobs and self.jobs_done >= self.max_jobs and not self.told_to_stop:
                self.told_to_stop = True
                self._signal_all(signal.SIGTERM)
            self._reap()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for slot in self.slots:
                if slot.pid == pid:
                    self._reaped(slot, status)
                    break


def main(argv: list[str]) -> int:
    """``processes once max_jobs max_time text|json [pid:fd,...]`` (see :func:`spawn_argv`)."""
    processes, once, max_jobs, max_time, fmt = argv[:5]
    supervisor = Supervisor(int(processes), once=once == "1", max_jobs=int(max_jobs), max_time=float(max_time),
                            json_logs=fmt == "json")
    if len(argv) > 5 and argv[5]:
        supervisor.adopt([(int(pid), int(fd)) for pid, fd in (pair.split(":") for pair in argv[5].split(","))])
    return supervisor.run()
