"""Horizon 5.46+ on a Redis Cluster: ``{prefix}`` hash tag, checked against live Horizon 5.48.1.

The Laravel 13 app with Horizon 5.48.1 is given a cluster named like its ``default`` connection
(``HORIZON_CLUSTER_SEEDS``), so ``Horizon::use('default')`` stores Horizon's records on a three-master
cluster with its prefix wrapped in a hash tag (``{laravel_horizon:}``), while the queue stays on the
standalone Redis. PHP dispatches a tagged job (Horizon writes its pending record on the cluster); from
the same pushed payload laraq, with the settings it reads from the app and ``LARAQ_REDIS_CLUSTER=default``,
writes its pending record on an emptied cluster: the same keys (all in one slot), fields and members.
Horizon's own repositories then read laraq's record back from the cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import require
from horizon_support import horizon_app, horizon_state
from phpapp import live_missing
from prodapp import Cluster

from laraq.horizon import HorizonPayload, HorizonRecords, HorizonSettings

pytestmark = [pytest.mark.php, pytest.mark.slow]

TAGGED = "{laravel_horizon:}"


def _flush(client: Any) -> None:
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)


def test_horizon_548_hash_tags_its_prefix_on_a_cluster_and_laraq_follows(
        php: str, redis_server: Any, redis_client: Any, tmp_path: Path) -> None:
    reason = live_missing("13-h548")
    require(reason is None, reason or "")
    cluster = Cluster(tmp_path / "cluster")
    try:
        hz = horizon_app("13-h548", redis_server.port, HORIZON_CLUSTER_SEEDS=cluster.seeds)
        cc = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        redis_client.sadd("laravel_horizon:monitoring", "never-read-here")  # the standalone: not Horizon's
        cc.sadd(TAGGED + "monitoring", "watched")
        [php_id] = hz.tool("dispatch", "tagged", "--args=" + json.dumps({"tags": ["watched", "x"]}))["ids"]
        payload = redis_client.lindex(hz.prefix + "queues:default", 0)
        php_state = horizon_state(cc, {php_id: "<job>"}, prefix=TAGGED)
        assert "<job>" in php_state and "watched" in php_state  # Horizon wrote on the cluster, tagged
        assert redis_client.keys("laravel_horizon:*") == [b"laravel_horizon:monitoring"]  # only our marker

        settings = HorizonSettings.from_app({**hz.laravel_env, "LARAQ_REDIS_CLUSTER": "default"}, hz.path)
        assert (settings.prefix, str(settings.version)) == (TAGGED, "5.48.1")
        _flush(cc)
        cc.sadd(TAGGED + "monitoring", "watched")
        HorizonRecords(cc, settings).pushed("redis", "default", HorizonPayload.parse(payload))
        assert horizon_state(cc, {php_id: "<job>"}, prefix=TAGGED) == php_state

        dump = hz.tool("horizon-dump")
        assert [j["id"] for j in dump["pending"]] == [php_id]
    finally:
        cluster.stop()


def test_before_546_and_off_a_cluster_the_prefix_is_untouched(tmp_path: Path) -> None:
    env = {"LARAQ_REDIS_CLUSTER": "default"}
    assert HorizonSettings.from_app({**env, "LARAQ_HORIZON_VERSION": "5.45.6"}, tmp_path).prefix == "laravel_horizon:"
    assert HorizonSettings.from_app({**env, "LARAQ_HORIZON_VERSION": "5.46.0"}, tmp_path).prefix == TAGGED
    assert HorizonSettings.from_app({"LARAQ_HORIZON_VERSION": "5.48.1"}, tmp_path).prefix == "laravel_horizon:"
    # a prefix that already has a hash tag is kept (Connection::hasHashTag)
    tagged = {**env, "LARAQ_HORIZON_VERSION": "5.48.1", "HORIZON_PREFIX": "app:{hz}:"}
    assert HorizonSettings.from_app(tagged, tmp_path).prefix == "app:{hz}:"
