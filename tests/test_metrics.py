"""Prometheus metrics on a real Redis: job counters from real popped jobs, queue sampling, ``laraq metrics``."""

from __future__ import annotations

import time

import click
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.bus.job import Job
from laraq.cli.production import COMMANDS
from laraq.production.listeners import build_listeners
from laraq.production.metrics import OTHER, Metrics, sample_queues
from laraq.protocol.payload import Payload
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion
from laraq.worker.context import WorkerOptions
from laraq.worker.events import (
    JobFailed,
    JobProcessed,
    JobProcessing,
    JobReleased,
    JobTimedOut,
    WorkerStarting,
    WorkerStopping,
)
from laraq.worker.worker import Worker

cli = click.Group("laraq", commands={c.name: c for c in COMMANDS})
PREFIX = "m_"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def queue(redis_client):
    return RedisQueue(redis_client, prefix=PREFIX, version="12.67")


def popped(queue, name="default"):
    reserved = queue.pop(name)
    return Job(queue, reserved, Payload.parse(reserved.body, version="12.67"))


def test_job_events_become_labelled_counters_and_histograms(queue):
    d = Dispatcher(queue)
    for i in range(4):
        d.push(d.prepare_job("App\\Jobs\\Resize", {"i": i}, queue="media"))
    registry = CollectorRegistry()
    m = Metrics(registry=registry, jobs=["App\\Jobs\\Resize"])
    jobs = [popped(queue, "media") for _ in range(4)]
    for job in jobs:
        m.job_processing(JobProcessing(job))
    m.job_processed(JobProcessed(jobs[0], 0.2))
    m.job_processed(JobProcessed(jobs[1], 3.0))
    m.job_released(JobReleased(jobs[2], 10, RuntimeError("again")))
    m.job_timed_out(JobTimedOut(jobs[3]))
    m.job_failed(JobFailed(jobs[3], TimeoutError("slow"), 61.0))
    get = registry.get_sample_value
    labels = {"queue": "media", "job": "App\\Jobs\\Resize"}
    assert get("laraq_jobs_processed_total", labels) == 2
    assert get("laraq_jobs_released_total", labels) == 1
    assert get("laraq_jobs_failed_total", labels) == 1
    assert get("laraq_jobs_timed_out_total", labels) == 1
    assert get("laraq_job_runtime_seconds_count", labels) == 3
    assert get("laraq_job_runtime_seconds_sum", labels) == pytest.approx(64.2)
    assert get("laraq_jobs_in_flight", {}) == 0
    # createdAt is in the 12.x payload: four pickup delays observed, each well under a day
    assert get("laraq_job_pickup_delay_seconds_count", {"queue": "media"}) == 4
    assert get("laraq_job_pickup_delay_seconds_bucket", {"queue": "media", "le": "86400.0"}) == 4


def label_values(registry: CollectorRegistry, label: str) -> set[str]:
    return {s.labels[label] for family in registry.collect() for s in family.samples if label in s.labels}


def test_job_and_queue_labels_come_from_a_bounded_set(queue):
    """A producer's names cannot grow the page: 300 unique 1 KB class names are one ``other`` series."""
    d = Dispatcher(queue)
    for i in range(300):
        d.push(d.prepare_job(f"App\\Jobs\\Unique{i:03d}" + "x" * 1000, {}, queue="media"))
    d.push(d.prepare_job("App\\Jobs\\Resize", {}, queue="media"))
    d.push(d.prepare_job("App\\Jobs\\Listed", {}, queue="media"))
    d.push(d.prepare_job("App\\Jobs\\Resize", {}, queue="elsewhere"))  # a queue this worker does not serve
    registry = CollectorRegistry()
    m = Metrics(registry=registry, jobs=["App\\Jobs\\Resize", "\\App\\Jobs\\Listed"])
    m.worker_starting(WorkerStarting("redis", ["media"], WorkerOptions(), LaravelVersion.parse("12.67")))
    try:
        jobs = [popped(queue, "media") for _ in range(302)] + [popped(queue, "elsewhere")]
        for job in jobs:
            m.job_processing(JobProcessing(job))
            m.job_processed(JobProcessed(job, 0.01))
    finally:
        m.worker_stopping(WorkerStopping(0, "test", WorkerOptions()))
    assert label_values(registry, "job") == {"App\\Jobs\\Resize", "App\\Jobs\\Listed", OTHER}
    assert label_values(registry, "queue") == {"media", OTHER}
    get = registry.get_sample_value
    assert get("laraq_jobs_processed_total", {"queue": "media", "job": OTHER}) == 300
    assert get("laraq_jobs_processed_total", {"queue": OTHER, "job": "App\\Jobs\\Resize"}) == 1


def test_the_worker_labels_the_apps_handlers_and_metrics_jobs(queue):
    app = App("labels")
    app.register("App\\Jobs\\Handled", lambda command, job: None)
    worker = Worker(app, queue, ["default"])
    try:
        params = {"heartbeat": False, "metrics_port": 0, "metrics_jobs": ["App\\Jobs\\Php,App\\Jobs\\Other2", "X"]}
        [metrics] = build_listeners(worker, params)
    finally:
        worker.close()
    assert isinstance(metrics, Metrics)
    assert metrics.jobs == {"App\\Jobs\\Handled", "App\\Jobs\\Php", "App\\Jobs\\Other2", "X"}
    assert metrics.addr == "127.0.0.1"  # loopback unless --metrics-addr says otherwise


def test_queue_sampling_reads_sizes_and_the_oldest_pending_age(queue, redis_client):
    d = Dispatcher(queue)
    earlier = Dispatcher(RedisQueue(redis_client, prefix=PREFIX, version="12.67", clock=lambda: time.time() - 120))
    earlier.push(earlier.prepare_job("App\\Jobs\\A", {}))
    d.push(d.prepare_job("App\\Jobs\\A", {}))
    d.push(d.prepare_job("App\\Jobs\\A", {}, delay=300))
    d.push(d.prepare_job("App\\Jobs\\A", {}, queue="other"))
    queue.pop("other")
    found = sample_queues(queue, ["default", "other", "empty"])
    assert (found["default"]["pending"], found["default"]["delayed"], found["default"]["reserved"]) == (2, 1, 0)
    assert 119 <= found["default"]["oldest_pending_age"] < 3600
    assert (found["other"]["pending"], found["other"]["reserved"]) == (0, 1)
    assert found["other"]["oldest_pending_age"] is None
    assert found["empty"] == {"pending": 0, "delayed": 0, "reserved": 0, "oldest_pending_age": None}


def test_metrics_command_prints_exposition_text_and_writes_a_textfile(queue, redis_server, tmp_path):
    d = Dispatcher(queue)
    for _ in range(3):
        d.push(d.prepare_job("App\\Jobs\\A", {}, queue="mail"))
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "REDIS_PREFIX": PREFIX,
           "LARAQ_LARAVEL_VERSION": "12.67"}
    result = CliRunner().invoke(cli, ["metrics"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    got = samples(result.output)
    assert got[("laraq_queue_jobs", (("queue", "mail"), ("state", "pending")))] == 3
    target = tmp_path / "laraq.prom"
    result = CliRunner().invoke(cli, ["metrics", "--queue", "mail,default", "-o", str(target)], env=env)
    assert result.exit_code == 0 and result.output == ""
    got = samples(target.read_text())
    assert got[("laraq_queue_jobs", (("queue", "default"), ("state", "pending")))] == 0
    assert got[("laraq_queue_jobs", (("queue", "mail"), ("state", "pending")))] == 3
