"""The KEDA ``ScaledObject`` examples in ``deploy/kubernetes/`` (autoscaling ``laraq work``):

* both validate against a JSON schema of the fields they use, written from KEDA's ``scaledobjects.keda.sh``
  CRD (``scaleTargetRef.name`` and ``triggers`` required; each trigger a ``type`` and a ``metadata`` map of
  *strings*, an int there is refused by the API server) plus each scaler's required metadata;
* the redis trigger's ``listName`` is the key where a stock Laravel 13 app's ``dispatch()`` really puts
  jobs (PHP pushes, the list is read back), the prefix laraq derives for the app, and what
  ``laraq status --json`` prints as the queue's ``ready`` key;
* the prometheus trigger's query selects ``laraq_queue_length`` samples that the sampler really exports
  for that queue, and adds up to the jobs waiting and running.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT, require_laravel
from phpapp import PhpApp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from laraq.config.settings import LaravelSettings
from laraq.production.metrics import QueueSampler
from laraq.protocol.queue import RedisQueue

KUBE = ROOT / "deploy" / "kubernetes"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object", "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {"type": "object", "required": ["name"],
                                   "properties": {k: {"type": "string"} for k in ("apiVersion", "kind", "name")}},
                **{k: {"type": "integer", "minimum": 0} for k in ("minReplicaCount", "maxReplicaCount",
                                                                  "pollingInterval", "cooldownPeriod")},
                "triggers": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["type", "metadata"],
                    "properties": {
                        "type": {"enum": ["redis", "prometheus"]},
                        "metadata": STRING_MAP,
                        "authenticationRef": {"type": "object", "required": ["name"]},
                    },
                    "allOf": [
                        {"if": {"properties": {"type": {"const": "redis"}}},
                         "then": {"properties": {"metadata": {"required": ["listName"], "anyOf": [
                             {"required": ["address"]}, {"required": ["host"]}]}}}},
                        {"if": {"properties": {"type": {"const": "prometheus"}}},
                         "then": {"properties": {"metadata": {"required": ["serverAddress", "query", "threshold"]}}}},
                    ],
                }},
            },
        },
    },
}


def scaled_object(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d]
    (found,) = [d for d in docs if d["kind"] == "ScaledObject"]
    return found


@pytest.mark.parametrize("name", ["keda-redis.yaml", "keda-prometheus.yaml"])
def test_scaled_objects_validate(name: str) -> None:
    obj = scaled_object(name)
    jsonschema.validate(obj, SCHEMA)
    deployment = yaml.safe_load((KUBE / "deployment.yaml").read_text())
    assert obj["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    bad = json.loads(json.dumps(obj))
    bad["spec"]["triggers"][0]["metadata"]["threshold" if "prometheus" in name else "listLength"] = 10
    with pytest.raises(jsonschema.ValidationError):  # an int in metadata: the API server refuses it
        jsonschema.validate(bad, SCHEMA)


def test_the_redis_trigger_reads_the_list_php_pushes_to(php: str, redis_server: Any, redis_client: Any,
                                                        tmp_path: Any) -> None:
    from laraq.cli import main

    require_laravel("13")
    list_name = scaled_object("keda-redis.yaml")["spec"]["triggers"][0]["metadata"]["listName"]
    app = PhpApp(redis_server.port, version="13", workdir=tmp_path)  # stock APP_NAME, stock prefix
    settings = LaravelSettings.from_env({"APP_NAME": "Laravel"}, version=app.release)
    assert settings.redis_prefix + "queues:default" == list_name
    app.tool("dispatch", "echo", "--queue=default", "--count=3")
    assert redis_client.llen(list_name) == 3  # where PHP's dispatch() put them: what KEDA reads
    result = CliRunner().invoke(main, ["status", "--json", "--sample", "0", "--laravel", app.release, "default"],
                                env={**app.env, "REDIS_PREFIX": settings.redis_prefix})
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["queues"]
    assert (row["pending"], row["keys"]["ready"]) == (3, list_name)


def test_the_prometheus_query_selects_the_sampled_gauge(redis_client: Any) -> None:
    query = scaled_object("keda-prometheus.yaml")["spec"]["triggers"][0]["metadata"]["query"]
    key_re = re.search(r'key=~"([^"]+)"', query)
    state_re = re.search(r'state=~"([^"]+)"', query)
    assert key_re and state_re and "laraq_queue_length" in query
    queue = RedisQueue(redis_client, prefix="laravel-database-", version="13")
    for n in range(4):
        queue.push_raw(json.dumps({"id": str(n), "attempts": 0, "job": "x"}).encode(), "default")
    queue.push_raw(json.dumps({"id": "o", "attempts": 0, "job": "x"}).encode(), "other")
    assert queue.pop("default") is not None  # one running
    registry = CollectorRegistry()
    QueueSampler(registry).update(queue, ["default", "other"])
    picked = [s for family in text_string_to_metric_families(generate_latest(registry).decode())
              for s in family.samples if s.name == "laraq_queue_length"
              and re.fullmatch(key_re.group(1), s.labels["key"]) and re.fullmatch(state_re.group(1), s.labels["state"])]
    assert sorted((s.labels["state"], s.value) for s in picked) == [("ready", 3.0), ("reserved", 1.0)]
