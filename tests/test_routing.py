"""Queue-name resolution rules (enum values, 13.26 forwards) in isolation; the live proof against the
13.26 app is in ``test_live_13.py``."""

from __future__ import annotations

import enum

import pytest

from laraq.protocol.queue import RedisQueue
from laraq.protocol.routing import QueueForwards, enum_value, queue_name_of


class Backed(enum.StrEnum):
    MAIL = "mail"


class Numbered(enum.IntEnum):
    FIVE = 5


class Pure(enum.Enum):
    A = enum.auto()


def test_enum_value_like_php() -> None:
    assert enum_value(Backed.MAIL) == "mail" and enum_value(Numbered.FIVE) == 5 and enum_value(Pure.A) == "A"
    assert queue_name_of(None) is None and queue_name_of("") is None and queue_name_of(Numbered.FIVE) == "5"
    with pytest.raises(TypeError, match="queue name"):
        queue_name_of(["a"])


def test_forwards_parse_and_resolve() -> None:
    f = QueueForwards.parse(" old=new , mail=smtp@redis, only=@sqs ")
    assert f.resolve("old", "redis") == "new" and f.resolve("mail", "redis") == "smtp"
    assert f.resolve("mail", "other") == "mail" and f.resolve("only", "redis") == "only"
    assert f.resolve("untouched", "redis") == "untouched"
    assert QueueForwards.of({Backed.MAIL: "x", "y": ("redis", Backed.MAIL)}).routes == {
        "mail": (None, "x"), "y": ("redis", "mail")}
    with pytest.raises(ValueError, match="'broken'"):
        QueueForwards.parse("broken")


def test_forwards_apply_from_13_26_only(redis_client) -> None:  # type: ignore[no-untyped-def]
    for version, expected in (("13.26", "p_queues:new"), ("13.25", "p_queues:old"), ("12.67", "p_queues:old")):
        q = RedisQueue(redis_client, prefix="p_", version=version, forwards="old=new")
        assert q.keys("old").list == expected, version
        assert q.keys(Backed.MAIL).list == "p_queues:mail"
