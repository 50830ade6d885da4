"""The production listeners ``laraq work`` attaches from its options: heartbeat and Prometheus metrics.

:func:`attach_listeners` turns ``--heartbeat/--no-heartbeat``, ``--heartbeat-file``, ``--metrics-port``,
``--metrics-addr``, ``--metrics-jobs``, ``--metrics-interval`` and ``--metrics-dir`` into :class:`~laraq.production.heartbeat.Heartbeat` and
:class:`~laraq.production.metrics.Metrics` listeners on a :class:`~laraq.worker.worker.Worker` (through the event seam,
``worker.add_listener``). The listeners themselves live in their own modules. From the environment:
``LARAQ_OTEL=1`` adds the OpenTelemetry span listener (:mod:`laraq.production.otel`, extra ``laraq[otel]``);
an initialized Sentry or ``LARAQ_REPORT`` adds the error reporter (:mod:`laraq.production.reporting`).
"""

from __future__ import annotations

import os
from typing import Any

from laraq.production.heartbeat import Heartbeat
from laraq.production.multiproc import use_multiprocess_dir
from laraq.production.reporting import ErrorReporter, sentry_active

__all__ = ["attach_listeners", "build_listeners"]


def build_listeners(worker: Any, params: dict[str, Any]) -> list[Any]:
    """The listeners ``laraq work``'s options ask for (heartbeat on by default)."""
    listeners: list[Any] = []
    if params.get("heartbeat", True):
        # a wedged loop stops beating; a long job may keep a classic (--batch 1) loop busy up to --timeout
        timeout = int(params.get("timeout") or 0)
        stall_after = max(300.0, 2.0 * timeout + 60) if timeout else None
        listeners.append(Heartbeat(worker.queue.client, worker.queue.prefix, id_file=params.get("heartbeat_file"),
                                   stall_after=stall_after, held=worker.held))
    if params.get("metrics_port") is not None:
        if params.get("metrics_dir"):
            use_multiprocess_dir(params["metrics_dir"])
        # prometheus_client reads PROMETHEUS_MULTIPROC_DIR when imported, so it waits until that is set;
        # start-up: it (~40 modules, ~15 ms) is loaded only for --metrics-port
        from laraq.production.metrics import Metrics

        # the job label's known classes: the app's handlers and the names --metrics-jobs adds
        jobs = [*(getattr(worker.context.app, "names", None) or ()),
                *(n for arg in params.get("metrics_jobs") or () for n in str(arg).split(",") if n.strip())]
        listeners.append(Metrics(port=params["metrics_port"], addr=params.get("metrics_addr") or "127.0.0.1",
                                 sample_interval=float(params.get("metrics_interval") or 15.0), queue=worker.queue,
                                 jobs=jobs, handoff=params.get("handoff")))
    if params.get("otel") or os.environ.get("LARAQ_OTEL", "") not in ("", "0", "false"):
        # optional dependency: opentelemetry (laraq[otel]) is imported only when tracing is asked for
        from laraq.production.otel import OtelListener, instrument_dispatch

        instrument_dispatch()
        listeners.append(OtelListener())
    report = params.get("report") or os.environ.get("LARAQ_REPORT", "")
    if sentry_active() or report not in ("", "0", "false"):
        listeners.append(ErrorReporter())
    return listeners


def attach_listeners(worker: Any, params: dict[str, Any]) -> list[Any]:
    """Build the listeners and add them to ``worker``; returns them."""
    listeners = build_listeners(worker, params)
    for listener in listeners:
        worker.add_listener(listener)
    return listeners
