"""``deploy/grafana/laraq-dashboard.json`` queries only metrics laraq exports.

The exported names are taken from real collectors: a :class:`~laraq.production.metrics.Metrics` listener
and ``laraq metrics``' exposition, each family expanded by its type the way Prometheus's text format
names its samples (a counter ``_total``, a histogram ``_bucket``/``_sum``/``_count``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from laraq.production.metrics import Metrics, exposition
from laraq.protocol.queue import RedisQueue

BOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "laraq-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created")}
#: PromQL words that look like metric names but are functions, keywords or labels
PROMQL = {"sum", "by", "rate", "max", "histogram_quantile", "time", "le", "queue", "state", "host", "action",
          "label_values"}


def exported(redis_client: Any) -> set[str]:
    registry = CollectorRegistry()
    Metrics(registry=registry)
    names = set()
    for family in registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    text = exposition(RedisQueue(redis_client, prefix="grafana_"), [], heartbeat_prefix="grafana_").decode()
    names |= set(re.findall(r"^# TYPE (\w+) gauge", text, re.M))
    return names


def queries(board: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in board["panels"] for t in p["targets"]]
    out += [v["definition"] for v in board["templating"]["list"] if v.get("definition")]
    return out


def test_every_query_names_a_metric_laraq_exports(redis_client: Any) -> None:
    board = json.loads(BOARD.read_text())
    names = exported(redis_client)
    assert {"laraq_jobs_processed_total", "laraq_queue_jobs", "laraq_workers_live"} <= names
    used = set()
    for expr in queries(board):
        found = {w for w in re.findall(r"\b(laraq_\w+)\b", expr)}
        assert found, f"a query names no laraq metric: {expr}"
        words = set(re.findall(r"\b([a-z_]+)\s*[({]", expr))
        assert words <= PROMQL | names, f"{expr}: {sorted(words - PROMQL - names)}"
        assert found <= names, f"{expr} names {sorted(found - names)}, which laraq does not export"
        used |= found
    assert len(used) >= 10


def test_panels_are_well_formed() -> None:
    board = json.loads(BOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"] and board["schemaVersion"] >= 36
    for p in board["panels"]:
        assert p["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
