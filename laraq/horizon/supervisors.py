"""laraq workers as Horizon masters and supervisors, and the commands Horizon sends them.

Mirrors ``Laravel\\Horizon\\Repositories\\RedisMasterSupervisorRepository`` (``masters`` zset +
``master:<name>`` hash, EXPIRE 15 s, read window 14 s), ``RedisSupervisorRepository``
(``supervisors`` zset + ``supervisor:<name>`` hash, EXPIRE 30 s, with ``processes`` per
``connection:queue`` that feed ``WaitTimeCalculator`` and the workload view) and
``RedisHorizonCommandQueue`` (``commands:master:<master>`` and ``commands:<supervisor>`` lists).

One ``laraq work`` process is one master named like ``MasterSupervisor::name()``
(``slug(hostname)-XXXX``, the ``XXXX`` derived from the ``laraq work`` process so that each of its
worker processes, and one started again after a kill, names the same master: :func:`shared_master_name`)
with one supervisor per worker process: ``<master>:laraq-<worker name>`` with ``--processes 1``,
``<master>:laraq-<worker name>-<n>`` (``n`` = 1..N) with ``--processes N``. Every worker process writes
the master hash (the same fields, the whole supervisor list) and its own supervisor hash. The master's
``environment`` is ``laraq:<APP_ENV>``, an environment no ``horizon.environments`` plan names: the
dashboard's masters endpoint (``MasterSupervisorController@index``) adds the plan's supervisors of a
master's environment to that master as ``inactive`` ones, which under laraq's master would be
supervisors that never run. Each pool works the
``--queue`` list in priority order, like a Horizon supervisor with ``balance => false``, so
``processes`` is ``{"<connection>:<q1,q2>": <concurrency>}``, and its options say what Horizon's
``SupervisorOptions::toArray`` says for such a supervisor: ``workersName`` is the worker name
(``--name``, ``default``), ``autoScalingStrategy`` is ``null`` (``SupervisorCommand`` keeps it only
with ``balance => auto``).

Two levels, two pids. The master record carries the master pid (below); the supervisor record carries
the pid of :class:`laraq.horizon.relay.SupervisorRelay` (a child of that worker process), so
``horizon:pause-supervisor`` pauses that worker process only: its record says ``paused`` while the master's still says ``running`` and
``horizon:status`` reports Horizon running, as with Horizon's own processes. A master-level pause
(``horizon:pause``) shows both paused, as Horizon's master pauses its supervisors.

Signals, safe by design. ``horizon:pause``, ``horizon:continue`` and ``horizon:terminate`` send
SIGUSR2, SIGCONT and SIGTERM to the ``pid`` of every live master whose name starts with
``slug(hostname)``. The recorded pid is therefore only ever the long-lived ``laraq work`` process
that handles exactly those signals (pause, resume, finish running jobs and exit 0): the supervisor
parent when laraq supervises its worker (it forwards them), else the worker itself, and only while
it is our own process or our direct parent. Against PID reuse: the records are deleted on every
orderly exit before the signal handlers go away; after a crash they vanish from Horizon's 14 s read
window; the hash also records the process start time (``pid_started``), and every laraq on the
host deletes laraq masters whose pid is gone or now belongs to another process. In containers the
pid means something only inside laraq's PID namespace: when PHP runs elsewhere under the same
hostname, ``--no-horizon-signals`` records a pid above Linux's PID limit, which no ``kill`` can
reach, and laraq still obeys the ``commands:`` lists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import string
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from laraq.horizon.settings import HorizonSettings
from laraq.protocol.phpjson import json_loads
from laraq.protocol.versions import _slug

__all__ = ["NO_SIGNAL_PID", "HorizonCommand", "HorizonMaster", "master_basename", "pid_namespace", "process_started",
           "shared_master_name"]

log = logging.getLogger("laraq.horizon")

#: Above Linux's PID_MAX_LIMIT (2**22): ``posix_kill`` can only fail with ESRCH.
NO_SIGNAL_PID = 2**22 + 1

MASTER_TTL = 15
SUPERVISOR_TTL = 30
#: ``names()`` window: masters older than this are gone.
MASTER_WINDOW = 14

_COMMANDS = "Laravel\\Horizon\\SupervisorCommands\\"


def _cli(value: Any) -> str:
    """A number as it reads on a command line (``3``, ``0.5``), the way Horizon's options carry it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def master_basename() -> str:
    """``MasterSupervisor::basename()``: ``Str::slug(gethostname())``."""
    return _slug(socket.gethostname(), "-")


def pid_namespace() -> str:
    """This process's PID namespace (``/proc/self/ns/pid``), or '' where there is none."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_started(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


_TOKEN_CHARS = string.ascii_letters + string.digits


def shared_master_name(pid: int) -> str:
    """The master name of the ``laraq work`` process ``pid``: ``slug(hostname)-XXXX`` like
    ``MasterSupervisor::name()``, its four characters derived from the pid, the process's start time
    and its PID namespace, so every worker process of one ``laraq work`` (and a worker started again
    after a kill) names the same master, and another ``laraq work`` (or the same pid reused) another."""
    seed = f"{pid}:{process_started(pid) or ''}:{pid_namespace()}".encode()
    digest = hashlib.sha256(seed).digest()
    token = "".join(_TOKEN_CHARS[b % len(_TOKEN_CHARS)] for b in digest[:4])
    return f"{master_basename()}-{token}"


def supervisor_names(master: str, worker_name: str, slots: int) -> list[str]:
    """The supervisors of ``master``: one per worker process (``-1`` .. ``-N`` only when there are several)."""
    base = f"{master}:laraq-{worker_name}"
    return [base] if slots <= 1 else [f"{base}-{n}" for n in range(1, slots + 1)]


def master_environment(app_env: str) -> str:
    """The ``environment`` of laraq's master records: ``laraq:<APP_ENV>``, no ``horizon.environments`` key."""
    return f"laraq:{app_env}"


@dataclass(frozen=True)
class HorizonCommand:
    """One entry of a ``commands:`` list (``{"command": class, "options": {...}}``)."""

    command: str
    options: Mapping[str, Any]
    #: read from the supervisor's own list (``commands:<supervisor>``), not the master's
    supervisor: bool = False

    @property
    def action(self) -> str | None:
        """``pause``, ``continue``, ``terminate`` or ``restart`` for the commands laraq obeys."""
        return {
            _COMMANDS + "Pause": "pause",
            _COMMANDS + "ContinueWorking": "continue",
            _COMMANDS + "Terminate": "terminate",
            _COMMANDS + "Restart": "restart",
        }.get(self.command)


class HorizonMaster:
    """The master and supervisor records of one ``laraq work`` process."""

    def __init__(
        self,
        client: Any,
        settings: HorizonSettings,
        *,
        connection: str,
        queues: str,
        processes: int,
        options: Mapping[str, Any] | None = None,
        signal_pid: int | None = None,
        supervisor_pid: int | None = None,
        worker_name: str = "default",
        name: str | None = None,
        slot: int = 0,
        slots: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.settings = settings
        self.connection = connection
        self.queues = queues
        self.processes = processes
        self.clock = clock
        token = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(4))
        self.name = name or f"{master_basename()}-{token}"
        #: every worker process's supervisor (the master lists them all) and this one's
        self.supervisors = supervisor_names(self.name, worker_name, slots)
        self.supervisor = self.supervisors[min(max(0, slot), len(self.supervisors) - 1)]
        self.signal_pid = os.getpid() if signal_pid is None else signal_pid
        #: the pid ``horizon:pause-supervisor`` signals (the relay); the master's when there is none
        self.supervisor_pid = self.signal_pid if supervisor_pid is None else supervisor_pid
        self.worker_name = worker_name
        self.options = dict(options or {})
        self._started = None if self.signal_pid == NO_SIGNAL_PID else process_started(self.signal_pid)

    def _k(self, name: str) -> str:
        return self.settings.prefix + name

    # -- pid safety ----------------------------------------------------------------------------------

    def pid_is_ours(self) -> bool:
        """The recorded pid is this process or its direct parent, and still the same process."""
        if self.signal_pid == NO_SIGNAL_PID:
            return True
        if self.signal_pid not in (os.getpid(), os.getppid()):
            return False
        return process_started(self.signal_pid) == self._started

    # -- heartbeat ------------------------------------------------------------------------------------

    def supervisor_options(self) -> dict[str, Any]:
        """``SupervisorOptions::toArray`` for this worker (what the dashboard shows).

        A Horizon supervisor process builds its options from ``horizon:supervisor``'s command line, so
        every value is the option's string (``"60"``, ``"3"``), ``balance`` is ``""`` for
        ``balance => false``, ``force`` a boolean and ``autoScalingStrategy`` ``null`` unless balancing
        is ``auto``; laraq writes the same types."""
        o = self.options
        return {
            "balance": "", "connection": self.connection, "queue": self.queues,
            "backoff": _cli(o.get("backoff", 0)), "force": bool(o.get("force", False)),
            "maxProcesses": _cli(self.processes), "minProcesses": _cli(self.processes),
            "maxTries": _cli(o.get("tries", 1)), "maxTime": _cli(o.get("max_time", 0)),
            "maxJobs": _cli(o.get("max_jobs", 0)), "memory": _cli(o.get("memory", 128)), "nice": "0",
            "name": self.supervisor, "workersName": self.worker_name, "sleep": _cli(o.get("sleep", 3)),
            "timeout": _cli(o.get("timeout", 60)), "balanceCooldown": "3", "balanceMaxShift": "1",
            "parentId": str(self.signal_pid), "rest": _cli(o.get("rest", 0)),
            # SupervisorCommand: the strategy only with balance 'auto'; laraq never balances
            "autoScalingStrategy": None,
        }

    def persist(self, *, paused: bool = False, supervisor_only: bool = False) -> None:
        """``MasterSupervisor::persist`` + ``Supervisor::persist``: one heartbeat of both records.

        ``paused`` with ``supervisor_only``: the supervisor was paused on its own
        (``horizon:pause-supervisor``), the master still runs."""
        if not self.pid_is_ours():
            log.warning("horizon: pid %s is no longer laraq's; removing master %s", self.signal_pid, self.name)
            self.forget()
            return
        now = int(self.clock())
        status = "paused" if paused else "running"
        master_status = "running" if supervisor_only else status
        pid = str(self.signal_pid)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self._k("master:" + self.name), mapping={
            "name": self.name, "environment": master_environment(self.settings.environment), "pid": pid,
            "status": master_status, "supervisors": json.dumps(self.supervisors),
            # laraq's own fields (Horizon reads only the ones above)
            "laraq": "1", "pid_started": self._started or "", "pid_ns": pid_namespace(),
        })
        pipe.zadd(self._k("masters"), {self.name: now})
        pipe.expire(self._k("master:" + self.name), MASTER_TTL)
        pipe.hset(self._k("supervisor:" + self.supervisor), mapping={
            "name": self.supervisor, "master": self.name, "pid": str(self.supervisor_pid), "status": status,
            "processes": json.dumps({f"{self.connection}:{self.queues}": self.processes}),
            "options": json.dumps(self.supervisor_options()),
        })
        pipe.zadd(self._k("supervisors"), {self.supervisor: now})
        pipe.expire(self._k("supervisor:" + self.supervisor), SUPERVISOR_TTL)
        pipe.execute()

    def forget(self) -> None:
        """``RedisMasterSupervisorRepository::forget`` and the supervisor's: gone from Horizon at once.

        The master goes too: a sibling worker process still running writes it again at its next
        loop (about a second), so it is gone at the end whichever worker stops last."""
        keys = [self._k("master:" + self.name), self._k("supervisor:" + self.supervisor),
                self._k("commands:" + self.supervisor)]
        if len(self.supervisors) == 1:  # a master command may still be on its way to a sibling
            keys.append(self._k("commands:master:" + self.name))
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(*keys)
        pipe.zrem(self._k("masters"), self.name)
        pipe.zrem(self._k("supervisors"), self.supervisor)
        pipe.execute()

    def flush_commands(self) -> None:
        """A new master or supervisor starts with empty command lists, as Horizon's do (the master's only
        when no worker process of it has written the master yet: a sibling's pending command stays)."""
        keys = [self._k("commands:" + self.supervisor)]
        if not self.client.exists(self._k("master:" + self.name)):
            keys.append(self._k("commands:master:" + self.name))
        self.client.delete(*keys)

    # -- commands ------------------------------------------------------------------------------------

    def pending_commands(self) -> list[HorizonCommand]:
        """``RedisHorizonCommandQueue::pending`` for the master's and the supervisor's lists."""
        out: list[HorizonCommand] = []
        for key, own in ((self._k("commands:master:" + self.name), False),
                         (self._k("commands:" + self.supervisor), True)):
            pipe = self.client.pipeline(transaction=True)
            pipe.lrange(key, 0, -1)
            pipe.delete(key)
            for raw in pipe.execute()[0]:
                try:
                    item = json_loads(raw)
                    out.append(HorizonCommand(str(item["command"]), item.get("options") or {}, own))
                except (ValueError, KeyError, TypeError):
                    log.warning("horizon: ignoring an unreadable command in %s: %r", key, raw[:200])
        return out

    # -- who else is alive -----------------------------------------------------------------------------

    def live_masters(self) -> dict[str, dict[str, str]]:
        """Masters inside Horizon's 14 s window, each with its hash (``names()`` + ``get()``)."""
        names = [n.decode() if isinstance(n, bytes) else n for n in self.client.zrangebyscore(
            self._k("masters"), int(self.clock()) - MASTER_WINDOW, "+inf")]
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self._k("master:" + name))
        out: dict[str, dict[str, str]] = {}
        for name, record in zip(names, pipe.execute(), strict=True):
            if record:
                out[name] = {k.decode(): v.decode("utf-8", "replace") for k, v in record.items()}
        return out

    def php_master_alive(self) -> bool:
        """Whether a PHP ``php artisan horizon`` master is alive (it then trims; laraq does not)."""
        return any(record.get("laraq") != "1" for record in self.live_masters().values())

    def forget_dead_laraq_masters(self) -> list[str]:
        """Delete this host's laraq masters whose pid is gone or was reused (``pid_started`` differs),
        and the records a previous worker of the same ``laraq work`` supervisor left behind."""
        gone: list[str] = []
        base = master_basename()
        for name, record in self.live_masters().items():
            if name == self.name or record.get("laraq") != "1" or not name.startswith(base + "-"):
                continue
            if record.get("pid_ns", "") != pid_namespace():  # another container's pids: not ours to judge
                continue
            try:
                pid = int(record.get("pid", ""))
            except ValueError:
                continue
            if pid == NO_SIGNAL_PID:
                continue
            # Our pid under another name: the worker this supervisor ran before (killed at a timeout
            # and restarted). Left alone, Horizon would list it and signal this pid twice.
            predecessor = pid == self.signal_pid and self.signal_pid != os.getpid()
            if predecessor or process_started(pid) != (record.get("pid_started") or None):
                supervisors = json.loads(record.get("supervisors") or "[]")
                pipe = self.client.pipeline(transaction=False)
                pipe.delete(self._k("master:" + name), *[self._k("supervisor:" + s) for s in supervisors])
                pipe.zrem(self._k("masters"), name)
                if supervisors:
                    pipe.zrem(self._k("supervisors"), *supervisors)
                pipe.execute()
                gone.append(name)
        return gone
