"""Heartbeat and metrics on real ``laraq work`` processes.

* one worker: its record appears in ``laraq workers``, counts its jobs, answers ``laraq health`` by id
  file, pid and queue, and disappears when SIGTERM stops it (only its own: a second worker stays);
* two worker processes sharing one ``--metrics-port`` and ``--metrics-dir`` (prometheus_client's
  multiprocess mode): the port serves the sum, ``laraq metrics --metrics-dir`` prints the same sum, and
  when the serving worker stops the other takes the port over and the counters still add up.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.request

import pytest
from conftest import free_port
from prodapp import LARAQ, laraq_env, popen_work, runs, stop_process, wait_until
from prometheus_client.parser import text_string_to_metric_families

from laraq.bus.dispatch import Dispatcher
from laraq.protocol.queue import RedisQueue

PREFIX = "pw_"


@pytest.fixture
def env(redis_server, redis_client, tmp_path):
    return laraq_env(REDIS_HOST="127.0.0.1", REDIS_PORT=str(redis_server.port), REDIS_PREFIX=PREFIX,
                     LARAQ_LARAVEL_VERSION="12.67", CACHE_STORE="redis", DB_CONNECTION="sqlite",
                     DB_DATABASE=str(tmp_path / "db.sqlite"), LARAQ_LOG=str(tmp_path / "runs.jsonl"))


def push(redis_client, count, queue="default", start=0):
    d = Dispatcher(RedisQueue(redis_client, prefix=PREFIX, version="12.67"))
    for n in range(start, start + count):
        d.push(d.prepare_job("App\\Jobs\\Track", {"n": n}, queue=queue))


def cli(env, *args):
    return subprocess.run([*LARAQ, *args], env=env, capture_output=True, text=True, timeout=60)


def workers(env):
    proc = cli(env, "workers", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_heartbeat_of_real_workers(env, redis_client, tmp_path):
    idf = tmp_path / "a.id"
    log = tmp_path / "runs.jsonl"
    a = popen_work(env, "--queue", "default,mail", "--name", "alpha", "--sleep", "0.1", "--heartbeat-file",
                   str(idf), log=tmp_path / "a.log")
    b = popen_work(env, "--queue", "other", "--name", "beta", "--sleep", "0.1", log=tmp_path / "b.log")
    try:
        assert wait_until(lambda: len(workers(env)) == 2, 60), (tmp_path / "a.log").read_text()
        push(redis_client, 5, "mail")
        assert wait_until(lambda: len(runs(log)) == 5, 60)
        alpha = wait_until(lambda: next((w for w in workers(env) if w["name"] == "alpha" and w["jobs_done"] == 5),
                                        None), 30)
        assert alpha, workers(env)
        assert alpha["queues"] == ["default", "mail"] and alpha["laravel"].startswith("12.67")
        assert alpha["ppid"] == a.pid and {r["pid"] for r in runs(log)} == {alpha["pid"]}
        assert idf.read_text().strip() == alpha["id"]
        for args in (["--id-file", str(idf)], ["--pid", str(a.pid)], ["--queue", "mail"], ["--queue", "other"]):
            assert cli(env, "health", *args).returncode == 0, args
        table = cli(env, "workers")
        assert "alpha" in table.stdout and "beta" in table.stdout
        assert stop_process(a) == 0
        assert [w["name"] for w in workers(env)] == ["beta"]  # only its own record went
        assert cli(env, "health", "--id-file", str(idf)).returncode == 1
        assert cli(env, "health", "--queue", "mail").returncode == 1
        assert cli(env, "health", "--queue", "other").returncode == 0
    finally:
        stop_process(a)
        stop_process(b)
    assert workers(env) == []


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def try_scrape(port):
    try:
        return scrape(port)
    except OSError:
        return None


def test_two_worker_processes_add_up_on_one_metrics_port(env, redis_client, tmp_path):
    port = free_port()
    mdir = tmp_path / "metrics"
    args = ("--sleep", "0.1", "--metrics-port", str(port), "--metrics-dir", str(mdir), "--metrics-addr",
            "127.0.0.1", "--metrics-interval", "0.5", "--concurrency", "2")
    first = popen_work(env, *args, log=tmp_path / "w1.log")
    assert wait_until(lambda: try_scrape(port), 60), (tmp_path / "w1.log").read_text()
    second = popen_work(env, *args, log=tmp_path / "w2.log")
    log = tmp_path / "runs.jsonl"
    try:
        assert wait_until(lambda: (s := try_scrape(port)) and total(s, "laraq_worker_up") == 2, 60)
        push(redis_client, 60)
        for n in range(60, 80):  # slow jobs, so both processes get some
            d = Dispatcher(RedisQueue(redis_client, prefix=PREFIX, version="12.67"))
            d.push(d.prepare_job("App\\Jobs\\Track", {"n": n, "seconds": 0.05}))
        assert wait_until(lambda: len(runs(log)) == 80, 90)
        pids = {r["pid"] for r in runs(log)}
        label = {"queue": "default", "job": "App\\Jobs\\Track"}
        assert wait_until(lambda: total(scrape(port), "laraq_jobs_processed_total", **label) == 80, 30)
        s = scrape(port)
        assert total(s, "laraq_job_runtime_seconds_count", **label) == 80
        assert total(s, "laraq_job_pickup_delay_seconds_count", queue="default") == 80
        assert total(s, "laraq_jobs_in_flight") == 0
        assert wait_until(lambda: total(scrape(port), "laraq_queue_jobs", queue="default", state="pending") == 0, 30)
        one_shot = cli({**env, "PROMETHEUS_MULTIPROC_DIR": str(mdir)}, "metrics")  # the dir from the env
        assert one_shot.returncode == 0, one_shot.stderr
        lines = {(x.name, tuple(sorted(x.labels.items()))): x.value
                 for f in text_string_to_metric_families(one_shot.stdout) for x in f.samples}
        assert total(lines, "laraq_jobs_processed_total", **label) == 80
        assert total(lines, "laraq_workers_live") == 2
        assert not list(mdir.glob("gauge_all_*.db"))  # the one-shot wrote nothing into the workers' dir
        print(f"\nmetrics: 80 jobs over worker pids {sorted(pids)}")

        # the serving worker stops: the other one takes the port, and the sum still includes its jobs
        assert stop_process(first) == 0
        assert wait_until(lambda: (s := try_scrape(port)) and total(s, "laraq_worker_up") == 1, 60), \
            (tmp_path / "w2.log").read_text()
        push(redis_client, 5, start=100)
        assert wait_until(lambda: total(scrape(port), "laraq_jobs_processed_total", **label) == 85, 60)
        # the stopped worker's live gauges are gone: every live-gauge file belongs to a running process
        live_pids = {int(p.stem.rsplit("_", 1)[1]) for p in mdir.glob("gauge_live*_*.db")}
        assert len(live_pids) == 1
        for pid in live_pids:
            os.kill(pid, 0)
    finally:
        stop_process(first)
        stop_process(second)


def listening_addresses(port: int) -> set[str]:
    """The local IPv4/IPv6 addresses (hex, as /proc/net/tcp* writes them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in list(fh)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, hexport = local.partition(":")
                if state == "0A" and int(hexport, 16) == port:
                    found.add(address)
    return found


def this_hosts_addresses() -> set[str]:
    """This machine's IPv4 addresses other than loopback (none on a host with only ``lo``)."""
    import socket

    found = set()
    with contextlib.suppress(OSError):
        found |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: the kernel picks the outgoing address
        found.add(probe.getsockname()[0])
    return {a for a in found if not a.startswith("127.")}


def test_metrics_listen_on_loopback_unless_told_otherwise(env, tmp_path):
    import socket

    port = free_port()
    worker = popen_work(env, "--sleep", "0.1", "--metrics-port", str(port), log=tmp_path / "w.log")
    try:
        assert wait_until(lambda: try_scrape(port), 60), (tmp_path / "w.log").read_text()
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and no 0.0.0.0 (00000000) socket
        for address in this_hosts_addresses():
            with pytest.raises(ConnectionRefusedError), socket.create_connection((address, port), timeout=5):
                pass
    finally:
        stop_process(worker)
