"""OpenTelemetry spans (:mod:`laraq.production.otel`) and error reports (:mod:`laraq.production.reporting`)
from a real worker on real Redis, checked with the SDK's in-memory exporter and a Sentry transport that
keeps the events (laraq alone: the fixture app's settings and ``failed_jobs`` from ``pyapp.PyApp``, once);
and the trace context Python dispatch writes into a payload is ignored by PHP's worker on each live Laravel
line (the job runs, as PHP runs any payload with a ``createPayloadUsing`` key).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from phpapp import PhpApp
from pyapp import PyApp
from test_schema_php import dispatcher, pushed

pytest.importorskip("opentelemetry.sdk", reason="the otel extra's test part (pip install opentelemetry-sdk)")
sentry_sdk = pytest.importorskip("sentry_sdk", reason="the sentry extra (pip install sentry-sdk)")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from sentry_sdk.transport import Transport  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.production.otel import instrument_dispatch, trace_context  # noqa: E402

ECHO = "App\\Jobs\\EchoJob"


@pytest.fixture
def app(laravel: str, redis_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> PhpApp:
    php = PhpApp(redis_server.port, version=laravel, workdir=tmp_path)
    monkeypatch.setenv("LARAQ_LOG", str(php.log_path))
    return php


_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def tracing() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The SDK's provider as the global one (as an app's handlers module sets it), spans kept in memory."""
    from opentelemetry import trace

    trace.set_tracer_provider(_PROVIDER)  # once per process; later calls keep the first (the same provider)
    _EXPORTER.clear()
    instrument_dispatch()
    yield _PROVIDER, _EXPORTER
    Dispatcher.create_payload_using(None)


class Capture(Transport):
    """Sentry's transport seam: keeps the envelopes instead of sending them."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Any) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(event)


@pytest.fixture
def sentry() -> Iterator[Capture]:
    transport = Capture()
    sentry_sdk.init(dsn="http://key@localhost/1", transport=transport)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.get_global_scope().set_client(None)


def run_worker(app: PyApp, workers: list[Any], handler: Any, *listeners: Any, tries: int = 2) -> None:
    from laraq.app import App
    from laraq.cli.work import build_worker, default_params

    py = App("obs")
    py.register(ECHO, handler)
    params = default_params(laravel=app.release, sleep=0, stop_when_empty=True, quiet=True, memory=1 << 20,
                            queue="lq", tries=tries, backoff="0")
    worker = build_worker(params, env=app.env, app=py)
    workers.append(worker)
    for listener in listeners:
        worker.add_listener(listener)
    assert worker.daemon() == 0


def test_consumer_spans_link_to_the_producer(pyapp: PyApp, redis_client: Any, workers: list[Any],
                                             tracing: tuple[TracerProvider, InMemorySpanExporter],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    provider, exporter = tracing
    tracer = provider.get_tracer("test")
    d = dispatcher(pyapp, redis_client, {})
    with tracer.start_as_current_span("checkout", kind=SpanKind.PRODUCER) as producer:
        ok = d.dispatch_job(ECHO, {"mode": "ok"}, queue="lq")
        bad = d.dispatch_job(ECHO, {"mode": "fail"}, queue="lq")
    plain = d.dispatch_job(ECHO, {"mode": "ok"}, queue="lq")  # no span current: no context
    assert trace_context(json.loads(ok.payload)).span_id == producer.get_span_context().span_id
    assert "traceparent" not in json.loads(plain.payload)

    def handle(command: Any, job: Any) -> None:
        if command.mode == "fail":
            raise RuntimeError("card declined")

    monkeypatch.setenv("LARAQ_OTEL", "1")  # laraq work attaches the span listener itself
    run_worker(pyapp, workers, handle)
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    by_outcome = sorted((s.attributes["messaging.message.id"], s.attributes["laraq.job.outcome"],
                         s.attributes["laraq.job.attempt"]) for s in spans)
    assert by_outcome == sorted([(ok.uuid, "processed", 1), (bad.uuid, "released", 1), (bad.uuid, "failed", 2),
                                 (plain.uuid, "processed", 1)])
    first = next(s for s in spans if s.attributes["messaging.message.id"] == ok.uuid)
    assert first.name == "process lq"
    assert {k: first.attributes[k] for k in ("messaging.system", "messaging.destination.name",
                                              "messaging.operation.type", "laraq.job.class")} == {
        "messaging.system": "redis", "messaging.destination.name": "lq", "messaging.operation.type": "process",
        "laraq.job.class": ECHO}
    assert [link.context.span_id for link in first.links] == [producer.get_span_context().span_id]
    assert not next(s for s in spans if s.attributes["messaging.message.id"] == plain.uuid).links
    failed = next(s for s in spans if s.attributes["laraq.job.outcome"] == "failed")
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.attributes["exception.message"] for e in failed.events if e.name == "exception"] == ["card declined"]


@pytest.mark.php
def test_php_runs_a_payload_carrying_the_trace_context(app: PhpApp, redis_client: Any,
                                                       tracing: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, _ = tracing
    d = dispatcher(app, redis_client, {})
    with provider.get_tracer("test").start_as_current_span("p"):
        d.dispatch_job(ECHO, {"args": [], "mode": "ok", "seconds": 0, "settings": []}, queue="lq")
    (body,) = pushed(app, redis_client, "lq")
    keys = list(json.loads(body))
    assert keys.index("traceparent") == keys.index("id") - 1  # where PHP merges createPayloadUsing's keys
    app.artisan("queue:work", "redis", "--queue=lq", "--stop-when-empty", "--sleep=0", check=True)
    assert [r["class"] for r in app.runs() if r.get("queue") == "lq"] == [ECHO]
    assert redis_client.llen(app.prefix + "queues:lq") == 0


def test_handler_exceptions_reach_sentry_and_logging_with_the_job(pyapp: PyApp, redis_client: Any,
                                                                   workers: list[Any], sentry: Capture,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    d = dispatcher(pyapp, redis_client, {})
    job = d.dispatch_job(ECHO, {"mode": "fail"}, queue="lq")

    def handle(command: Any, job: Any) -> None:
        raise ValueError("no stock for sku 42")

    with caplog.at_level(logging.ERROR, logger="laraq.report"):
        run_worker(pyapp, workers, handle)  # an initialized Sentry: laraq work attaches the reporter itself
    records = [r for r in caplog.records if r.name == "laraq.report"]
    assert [(r.job_class, r.job_id, r.queue, r.attempt, r.outcome) for r in records] == [  # type: ignore[attr-defined]
        (ECHO, job.id, "lq", 1, "released"), (ECHO, job.id, "lq", 2, "failed")]
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in records)
    assert [(e["exception"]["values"][-1]["type"], e["tags"]["job.class"], e["tags"]["job.queue"],
             e["tags"]["job.attempt"], e["tags"]["job.outcome"], e["contexts"]["job"]["job_id"])
            for e in sentry.events] == [("ValueError", ECHO, "lq", "1", "released", job.id),
                                        ("ValueError", ECHO, "lq", "2", "failed", job.id)]



def test_a_sentry_event_carries_no_job_data_from_laraq(pyapp: PyApp, redis_client: Any, workers: list[Any],
                                                       sentry: Capture) -> None:
    # the secret is built here so that no source line Sentry quotes around a frame holds it
    secret = "-".join(("card", "4111", "1111"))
    d = dispatcher(pyapp, redis_client, {})
    d.dispatch_job(ECHO, {"mode": "fail", "cardNumber": secret}, queue="lq")
    run_worker(pyapp, workers, _failing_handler, tries=1)
    [event] = sentry.events
    assert event["tags"]["job.class"] == ECHO and "extra" not in event and "request" not in event
    frames = event["exception"]["values"][-1]["stacktrace"]["frames"]
    laraq_frames = [f for f in frames if str(f.get("module")).startswith("laraq.")]
    assert laraq_frames and not [f["module"] for f in laraq_frames if "vars" in f]

    def holding(node: Any, path: str = "") -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield from holding(value, f"{path}/{key}")
        elif isinstance(node, list):
            for n, value in enumerate(node):
                yield from holding(value, f"{path}/{n}")
        elif secret in str(node):
            yield path

    # only the handler's own frame (the app's code, the app's include_local_variables) may hold the command
    handler = frames.index(next(f for f in frames if f.get("function") == "_failing_handler"))
    assert list(holding(event)) == [f"/exception/values/0/stacktrace/frames/{handler}/vars/command"]


def _failing_handler(command: Any, job: Any) -> None:
    raise ValueError("no stock")
