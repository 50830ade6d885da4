"""The examples in ``deploy/`` are checked by the tools their platforms use, and supervisord is really run.

* systemd: ``systemd-analyze verify`` on the unit (warnings count as failures), plus its stop/restart rules;
* supervisord: the shipped program section runs real ``laraq work`` processes against a real Redis: a
  stop lets the running job finish (SIGTERM to laraq only), and ``laraq restart`` (what
  ``queue:restart`` does) makes the workers exit 0 and supervisord start new ones;
* Docker: ``hadolint`` on the Dockerfile, the compose-spec JSON schema (``check-jsonschema``) on the
  compose file;
* Kubernetes: ``kubernetes-validate`` (the API's JSON schemas), probes and grace period against --timeout.

A missing tool skips its test locally with the reason (``.ci/run`` installs all of them; in CI they fail).
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from conftest import ROOT, require
from prodapp import LARAQ, laraq_env, runs, wait_until

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

DEPLOY = ROOT / "deploy"


def tool(name: str) -> str:
    found = shutil.which(name) or (shutil.which(name, path=str(Path(sys.executable).parent)))
    require(found is not None, f"{name} is not installed (bash .ci/run installs it)")
    return str(found)


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# -- systemd --------------------------------------------------------------------------------------------

def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / "laraq-worker.service")
    return parser


def test_systemd_unit_verifies_and_fits_the_timeout(tmp_path):
    analyze = tool("systemd-analyze")
    laraq = shutil.which("laraq") or tool("laraq")
    text = (DEPLOY / "systemd" / "laraq-worker.service").read_text()
    local = tmp_path / "laraq-worker.service"
    local.write_text(text.replace("/usr/local/bin/laraq", laraq))  # verify needs an existing binary
    proc = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=120)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if "laraq-worker" in line]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr
    # the check can fail: a bad value is reported
    (tmp_path / "bad").mkdir()
    broken = tmp_path / "bad" / "laraq-worker.service"
    broken.write_text(local.read_text().replace("KillMode=mixed", "KillMode=sometimes"))
    proc = subprocess.run([analyze, "verify", str(broken)], capture_output=True, text=True, timeout=120)
    assert "kill mode" in (proc.stdout + proc.stderr).lower()

    service = unit()["Service"]
    args = shlex.split(service["ExecStart"].replace("\\\n", " "))
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    assert service["Restart"] == "always"  # queue:restart exits 0
    assert int(service["TimeoutStopSec"]) >= int(option(args, "--timeout")) + 10


# -- Docker and Kubernetes ---------------------------------------------------------------------------------

def test_dockerfile_passes_hadolint(tmp_path):
    hadolint = tool("hadolint")
    proc = subprocess.run([hadolint, str(DEPLOY / "docker" / "Dockerfile")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN cd /app && pip install laraq\n")
    assert subprocess.run([hadolint, str(bad)], capture_output=True, timeout=120).returncode != 0


def test_compose_file_matches_the_compose_spec_and_the_timeout():
    checker = tool("check-jsonschema")
    path = DEPLOY / "docker" / "compose.yaml"
    proc = subprocess.run([checker, "--builtin-schema", "vendor.compose-spec", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    compose = yaml.safe_load(path.read_text())
    worker = compose["services"]["worker"]
    assert worker["stop_signal"] == "SIGTERM"
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*?\])$", dockerfile.replace("\\\n", ""), re.M | re.S)
    assert cmd is not None
    timeout = int(option(yaml.safe_load(cmd.group(1)), "--timeout"))
    assert int(worker["stop_grace_period"].rstrip("s")) >= timeout + 10


def test_kubernetes_deployment_validates_and_its_probes_and_grace_fit_the_timeout(tmp_path):
    validator = tool("kubernetes-validate")
    path = DEPLOY / "kubernetes" / "deployment.yaml"
    proc = subprocess.run([validator, "--strict", str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("terminationGracePeriodSeconds: 90", "terminationGracePeriodSeconds: soon"))
    assert subprocess.run([validator, "--strict", str(bad)], capture_output=True, timeout=300).returncode != 0

    spec = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]
    container = spec["containers"][0]
    timeout = int(option(container["args"], "--timeout"))
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert spec["terminationGracePeriodSeconds"] >= timeout + int(pre_stop[-1]) + 10
    for probe in ("livenessProbe", "readinessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["laraq", "health"] and "--id-file" in command
        assert option(command, "--id-file") == option(container["args"], "--heartbeat-file")


# -- supervisord, for real -----------------------------------------------------------------------------------

class Supervisord:
    """supervisord running the shipped ``[program:laraq-worker]`` with local paths."""

    def __init__(self, tmp: Path, env: dict[str, str], metrics_port: int) -> None:
        self.tmp = tmp
        shipped = configparser.RawConfigParser(strict=False)
        shipped.optionxform = str  # type: ignore[assignment,method-assign]
        shipped.read(DEPLOY / "supervisor" / "laraq-worker.conf")
        self.program = dict(shipped["program:laraq-worker"])
        args = shlex.split(self.program["command"])
        assert args[:2] == ["/usr/local/bin/laraq", "work"]
        args = args[2:]
        args[args.index("--app") + 1] = "prodapp:app"
        i = args.index("--env-file")
        del args[i:i + 2]
        args[args.index("--metrics-port") + 1] = str(metrics_port)
        args[args.index("--metrics-dir") + 1] = str(tmp / "metrics")
        args[args.index("--sleep") + 1] = "0.2"
        self.timeout = int(option(args, "--timeout"))
        program = dict(self.program)
        program["command"] = shlex.join([*LARAQ, "work", *args])
        program["directory"] = str(ROOT)
        program.pop("user", None)
        program["stdout_logfile"] = str(tmp / "worker-%(process_num)02d.log")
        program["environment"] = ",".join(f'{k}="{v}"' for k, v in env.items()
                                          if k.startswith(("REDIS_", "LARAQ_", "CACHE_", "DB_", "PYTHON")))
        conf = tmp / "supervisord.conf"
        sock = tmp / "supervisor.sock"
        lines = [
            "[unix_http_server]", f"file={sock}", "",
            "[supervisord]", f"logfile={tmp / 'supervisord.log'}", f"pidfile={tmp / 'supervisord.pid'}",
            f"childlogdir={tmp}", "nodaemon=true", "", "[rpcinterface:supervisor]",
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface", "",
            "[supervisorctl]", f"serverurl=unix://{sock}", "", "[program:laraq-worker]",
            *(f"{k}={v}" for k, v in program.items()),
        ]
        conf.write_text("\n".join(lines) + "\n")
        self.conf = conf
        self.proc = subprocess.Popen([tool("supervisord"), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def ctl(self, *args: str, timeout: float = 180) -> str:
        proc = subprocess.run([tool("supervisorctl"), "-c", str(self.conf), *args], capture_output=True,
                              text=True, timeout=timeout)
        return proc.stdout + proc.stderr

    def pids(self) -> dict[str, int]:
        found = {}
        for line in self.ctl("status").splitlines():
            m = re.match(r"(\S+)\s+RUNNING\s+pid (\d+)", line)
            if m:
                found[m.group(1)] = int(m.group(2))
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.ctl("shutdown")
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def test_supervisord_runs_stops_gracefully_and_restarts_after_queue_restart(redis_server, redis_client, tmp_path):
    tool("supervisord")
    from conftest import free_port

    log = tmp_path / "runs.jsonl"
    laravel = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": "sv_",
               "LARAQ_LARAVEL_VERSION": "12.67", "CACHE_STORE": "redis", "DB_CONNECTION": "sqlite",
               "DB_DATABASE": str(tmp_path / "db.sqlite")}
    env = laraq_env(**laravel, LARAQ_LOG=str(log))
    sv = Supervisord(tmp_path, env, free_port())
    queue = RedisQueue(redis_client, prefix="sv_", version="12.67")
    d = Dispatcher(queue)
    try:
        assert sv.program["stopsignal"] == "TERM" and sv.program["autorestart"] == "true"
        assert sv.program["stopasgroup"] == "false"
        assert int(sv.program["stopwaitsecs"]) >= sv.timeout + 10
        numprocs = int(sv.program["numprocs"])
        assert wait_until(lambda: len(sv.pids()) == numprocs, 60), sv.ctl("status")

        # a stop while a job runs: the job finishes, nothing stays reserved
        d.push(d.prepare_job("App\\Jobs\\Track", {"n": 1, "seconds": 2}))
        assert wait_until(lambda: runs(log, "start"), 60)
        out = sv.ctl("stop", "laraq-worker:*")
        assert "stopped" in out, out
        assert [r["n"] for r in runs(log)] == [1]
        assert redis_client.zcard("sv_queues:default:reserved") == 0
        assert redis_client.llen("sv_queues:default") == 0

        # queue:restart (laraq restart writes the same cache key): every worker exits 0 and is started again
        sv.ctl("start", "laraq-worker:*")
        assert wait_until(lambda: len(sv.pids()) == numprocs, 60), sv.ctl("status")
        before = sv.pids()
        time.sleep(1.5)  # the restart stamp must be newer than the workers' start (whole seconds)
        restart = subprocess.run([*LARAQ, "restart"], env=env, capture_output=True, text=True, timeout=60)
        assert restart.returncode == 0, restart.stderr
        assert wait_until(lambda: len(after := sv.pids()) == numprocs
                          and not set(after.values()) & set(before.values()), 90), sv.ctl("status")
        worker_log = "".join(p.read_text() for p in tmp_path.glob("worker-*.log"))
        assert "exited: laraq-worker" in (tmp_path / "supervisord.log").read_text(), worker_log
        assert "expected" in (tmp_path / "supervisord.log").read_text()  # exit 0
        d.push(d.prepare_job("App\\Jobs\\Track", {"n": 2}))
        assert wait_until(lambda: [r["n"] for r in runs(log)] == [1, 2], 60), worker_log
    finally:
        sv.stop()
    assert not os.path.exists(tmp_path / "supervisor.sock") or sv.proc.poll() is not None
