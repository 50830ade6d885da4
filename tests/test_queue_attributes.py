"""13.x queue attributes in a job schema (no PHP): which are honoured, which refuse the dispatch, and how
an attribute's value ranks against the caller's (``ReadsClassAttributes::getAttributeValue``). The PHP
comparison is tests/test_queue_attributes_php.py."""

from __future__ import annotations

import pytest

from laraq.bus.schema import JobSchema, SchemaError, debounce_key, plan
from laraq.protocol.versions import LaravelVersion

NS = "Illuminate\\Queue\\Attributes\\"
V13 = LaravelVersion.parse("13.26")


def schema(*names: str, methods: frozenset[str] = frozenset(), **resolved: object) -> JobSchema:
    return JobSchema("App\\Jobs\\A", declared={}, attributes=tuple(NS + n for n in names), methods=methods,
                     queue_attributes=dict(resolved))


def test_an_attribute_laraq_does_not_honour_refuses_the_dispatch() -> None:
    with pytest.raises(SchemaError, match=r"^App\\Jobs\\A: PHP computes its payload from queue attributes "
                                          r"WithoutRelations; dispatch it from PHP"):
        schema("WithoutRelations", "Tries", tries=3).check({})


def test_a_schema_exported_without_the_resolved_values_refuses() -> None:
    with pytest.raises(SchemaError, match=r"queue attributes Tries, Backoff \(a schema exported without their "
                                          r"values: export it again\)"):
        schema("Tries", "Backoff").check({})


def test_the_attribute_gives_the_setting_unless_the_caller_does() -> None:
    s = schema("Tries", "Backoff", "FailOnTimeout", tries=4, backoff=[1, 3], failOnTimeout=True)
    p = plan(s, {}, V13, explicit={}, queueable={})
    assert (p.payload["tries"], p.payload["backoff"], p.payload["fail_on_timeout"]) == (4, [1, 3], True)
    p = plan(s, {}, V13, explicit={"tries": 7}, queueable={})
    assert p.payload["tries"] == 7


def test_debounce_needs_its_id_and_no_unique_lock() -> None:
    s = schema("DebounceFor", methods=frozenset({"debounceId"}), debounceFor=2)
    with pytest.raises(SchemaError, match=r"debounceId\(\) \(give debounce_id=\)"):
        s.check({})
    s.check({"debounce_id": "k"})
    assert debounce_key(s, {}, "k") == "laravel_debounced_job:App\\Jobs\\A:k"
    assert debounce_key(schema("DebounceFor", debounceFor=2), {"debounceId": 5}, None).endswith("\\A:5")
    unique = JobSchema("App\\Jobs\\A", declared={}, unique=True, attributes=(NS + "DebounceFor",),
                       queue_attributes={"debounceFor": 2})
    with pytest.raises(SchemaError, match="cannot also be ShouldBeUnique"):
        unique.check({})
