"""Unit tests for :mod:`laraq.protocol.payload` readers and builders, and the cjson facts the readers rely on
(checked on a real ``redis-server``)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import redis

from laraq.protocol.payload import (
    CALL_QUEUED_HANDLER,
    Payload,
    PayloadError,
    build_object_payload,
    build_string_payload,
    log_context,
    new_uuid,
    parse_job_name,
    php_int_cast,
    random_id,
    reencode_like_php_retry,
    with_attempts,
)
from laraq.protocol.versions import LaravelVersion


def _p(obj: dict[str, object], version: str | None = None) -> Payload:
    return Payload.parse(json.dumps(obj), version=version)


# -- parsing errors -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"\xff{}", "not valid UTF-8"),
        (b"[1,2]", "must be a JSON object, got list"),
        (b'"text"', "must be a JSON object, got str"),
        (b'{"job":"A@b"}', "no 'attempts'"),
        (b'{"attempts":null}', "no 'attempts'"),
        (b'{"attempts":"abc"}', "must be numeric"),
        (b'{"attempts":[1]}', "must be numeric"),
        (b'{"attempts":true}', "must be numeric"),
    ],
)
def test_parse_errors(raw: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        Payload.parse(raw)


def test_payload_error_is_value_error() -> None:
    assert issubclass(PayloadError, ValueError)


def test_attempts_shapes() -> None:
    assert _p({"attempts": 0}).attempts == 0
    assert _p({"attempts": 2.0}).attempts == 2
    assert _p({"attempts": "3"}).attempts == 3
    assert _p({"attempts": 1.2345678901235e16}).attempts == 12345678901235000


def test_missing_job_is_an_error_only_when_read() -> None:
    p = _p({"attempts": 0})
    with pytest.raises(PayloadError, match="'job'"):
        _ = p.job
    assert p.resolve_name == ""


# -- readers --------------------------------------------------------------------------------------

def test_readers_on_a_full_payload() -> None:
    raw = build_object_payload(
        "13", command_name="App\\Jobs\\X", command='O:10:"App\\Jobs\\X":0:{}', max_tries=3, max_exceptions=2,
        fail_on_timeout=True, backoff=[1, 5], timeout=60, retry_until=1_800_000_000, batch_id="b-1",
        created_at=1_700_000_000, uuid="u-1", id="i" * 32, delay=7,
    )
    p = Payload.parse(raw.encode())
    assert p.raw == raw.encode()
    assert (p.uuid, p.id, p.display_name, p.resolve_name) == ("u-1", "i" * 32, "App\\Jobs\\X", "App\\Jobs\\X")
    assert (p.job, p.job_class, p.job_method) == (CALL_QUEUED_HANDLER, "Illuminate\\Queue\\CallQueuedHandler", "call")
    assert (p.max_tries, p.max_exceptions, p.fail_on_timeout, p.timeout) == (3, 2, True, 60)
    assert (p.backoff, p.retry_until, p.created_at, p.delay) == ("1,5", 1_800_000_000, 1_700_000_000, 7)
    assert (p.command_name, p.batch_id, p.is_encrypted_command) == ("App\\Jobs\\X", "b-1", False)
    assert p.get("nope", 5) == 5 and "uuid" in p
    assert "uuid='u-1'" in repr(p)


def test_cjson_shapes() -> None:
    p = _p({"attempts": 1.0, "data": {}, "maxTries": 3.0, "timeout": 1.2345678901235e16, "retryUntil": "1700000000",
            "displayName": "", "job": "A@b", "failOnTimeout": 0})
    assert p.data == {} and p.attempts == 1 and p.max_tries == 3
    assert p.timeout == 12345678901235000 and p.retry_until == 1_700_000_000
    assert p.resolve_name == "A@b"  # empty displayName falls back to job
    assert p.fail_on_timeout is False
    assert _p({"attempts": 0, "data": []}).data == {}
    assert _p({"attempts": 0, "data": [1, 2]}).data == [1, 2]
    assert _p({"attempts": 0, "displayName": "0", "job": "J"}).resolve_name == "J"  # PHP empty("0")
    with pytest.raises(PayloadError, match="maxTries"):
        _ = _p({"attempts": 0, "maxTries": "many"}).max_tries
    with pytest.raises(PayloadError, match="timeout"):
        _ = _p({"attempts": 0, "timeout": [1]}).timeout


def test_encrypted_command_detection() -> None:
    cqh = "Illuminate\\Queue\\CallQueuedHandler@call"
    assert _p({"attempts": 0, "job": cqh, "data": {"command": "eyJpdiI6..."}}).is_encrypted_command
    assert not _p({"attempts": 0, "job": cqh, "data": {"command": 'O:1:"X":0:{}'}}).is_encrypted_command
    assert not _p({"attempts": 0, "job": cqh, "data": {"x": 1}}).is_encrypted_command
    assert not _p({"attempts": 0, "job": cqh, "data": {}}).is_encrypted_command


def test_only_a_queued_command_has_a_command() -> None:
    data = {"commandName": "App\\Jobs\\Echo", "command": 'O:1:"X":0:{}', "batchId": "b"}
    for job in ("Illuminate\\Queue\\CallQueuedHandler@call", "\\Illuminate\\Queue\\CallQueuedHandler@call "):
        p = _p({"attempts": 0, "job": job, "data": data})
        assert p.is_queued_command and (p.command_name, p.command, p.batch_id) == (data["commandName"], data["command"], "b")
    for job in ("App\\Handlers\\Foo@bar", "App\\Handlers\\Foo", "Illuminate\\Queue\\CallQueuedHandler@handle", None):
        p = _p({"attempts": 0, "job": job, "data": data})
        assert not p.is_queued_command and (p.command_name, p.command, p.batch_id) == (None, None, None)
        assert not p.is_encrypted_command


def test_retry_until_timeout_at_fallback_is_8x_only() -> None:
    legacy = {"attempts": 0, "retryUntil": None, "timeoutAt": 1_700_000_123}
    assert _p(legacy, "8").retry_until == 1_700_000_123
    assert _p(legacy, "8.0").retry_until == 1_700_000_123
    for version in ("9", "10", "11", "12", "13"):
        assert _p(legacy, version).retry_until is None
    assert _p(legacy).retry_until is None  # default version is 13
    assert _p({"attempts": 0, "retryUntil": 5, "timeoutAt": 9}, "8").retry_until == 5


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ("App\\Handlers\\Foo@bar", ("App\\Handlers\\Foo", "bar")),
        ("App\\Handlers\\Foo", ("App\\Handlers\\Foo", "fire")),
        ("A@b@c", ("A", "b@c")),
        ("class@anonymous\0/app/x.php:3$0", ("class@anonymous\0/app/x.php:3$0", "fire")),
        ("class@anonymous\0/app/x.php:3$0@handle", ("class@anonymous\0/app/x.php:3$0", "handle")),
    ],
)
def test_parse_job_name(job: str, expected: tuple[str, str]) -> None:
    assert parse_job_name(job) == expected


# -- backoff --------------------------------------------------------------------------------------

def test_backoff_table() -> None:
    p = _p({"attempts": 0, "backoff": "1,5,10"})
    assert [p.backoff_seconds(n) for n in range(1, 6)] == [1, 5, 10, 10, 10]
    assert p.backoff_seconds(0) == 10  # index -1 does not exist: last entry


def test_backoff_default_when_payload_null() -> None:
    p = _p({"attempts": 0, "backoff": None})
    assert p.backoff_seconds(1) == 0
    assert p.backoff_seconds(1, "7") == 7
    assert p.backoff_seconds(2, 7) == 7
    assert [p.backoff_seconds(n, "2,4") for n in (1, 2, 3)] == [2, 4, 4]
    assert [p.backoff_seconds(n, [3, 6]) for n in (1, 2, 3)] == [3, 6, 6]
    assert p.backoff_seconds(1, None) == 0


def test_backoff_php_int_cast() -> None:
    assert [_p({"attempts": 0, "backoff": "5s,,x, 9"}).backoff_seconds(n) for n in (1, 2, 3, 4)] == [5, 0, 0, 9]
    assert _p({"attempts": 0, "backoff": 5}).backoff_seconds(3) == 5  # cjson may turn "5" into 5? still 5
    assert _p({"attempts": 0, "backoff": 2.5}).backoff_seconds(1) == 2
    assert _p({"attempts": 0, "backoff": ""}).backoff_seconds(1) == 0


def test_backoff_12_11_delay_fallback() -> None:
    """backoff() = payload.backoff ?? payload.delay: a delayed 12.11+ job backs off by its delay."""
    raw = build_object_payload("12.11", command_name="X", command="O:1:\"X\":0:{}", delay=30, created_at=1)
    p = Payload.parse(raw)
    assert p.backoff == 30 and p.delay == 30
    assert p.backoff_seconds(1, default_backoff=3) == 30
    explicit = Payload.parse(build_object_payload("12.11", command_name="X", command="c", delay=30, backoff=4))
    assert explicit.backoff_seconds(1) == 4
    older = Payload.parse(build_object_payload("12.10", command_name="X", command="c", delay=30))
    assert older.backoff is None and older.delay is None and "delay" not in older


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5", 5), ("5s", 5), ("", 0), (" 7", 7), ("\n7", 7), ("-3", -3), ("+4", 4), ("1e3", 1000),
     (".5e1", 5), ("1.9", 1), ("0x1A", 0), ("abc", 0), ("99999999999999999999", 2**63 - 1), (".", 0), ("e5", 0)],
)
def test_php_int_cast(text: str, expected: int) -> None:
    assert php_int_cast(text) == expected


# -- builders -------------------------------------------------------------------------------------

def test_random_fields() -> None:
    ids = {random_id() for _ in range(200)}
    assert len(ids) == 200 and all(re.fullmatch(r"[A-Za-z0-9]{32}", i) for i in ids)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", new_uuid())


def test_object_payload_field_order_per_version() -> None:
    def keys(version: str) -> list[str]:
        return list(json.loads(build_object_payload(version, command_name="X", command="c")))

    base = ["uuid", "displayName", "job", "maxTries", "maxExceptions"]
    tail = ["backoff", "timeout", "retryUntil"]
    assert keys("8.42") == [*base, *tail, "data", "id", "attempts"]
    assert keys("8.83") == [*base, "failOnTimeout", *tail, "data", "id", "attempts"]
    assert keys("12.10") == keys("11")
    assert keys("12.11") == [*base, "failOnTimeout", *tail, "data", "createdAt", "id", "attempts", "delay"]
    assert keys("13") == [*base, "failOnTimeout", *tail, "deleteWhenMissingModels", "data", "createdAt", "id",
                          "attempts", "delay"]
    assert list(json.loads(build_object_payload("12.50", command_name="X", command="c"))["data"]) == [
        "commandName", "command"]
    assert list(json.loads(build_object_payload("12.51", command_name="X", command="c"))["data"]) == [
        "commandName", "command", "batchId"]


def test_string_payload_shape() -> None:
    out = build_string_payload("13", "App\\H@run", {"a": [], "b": {}}, uuid="u", id="i", created_at=5)
    assert out == (
        '{"uuid":"u","displayName":"App\\\\H","job":"App\\\\H@run","maxTries":null,"maxExceptions":null,'
        '"failOnTimeout":false,"backoff":null,"timeout":null,"data":{"a":[],"b":{}},"createdAt":5,'
        '"id":"i","attempts":0,"delay":null}'
    )
    assert json.loads(build_string_payload("9", "A@b", [1]))["data"] == [1]
    assert json.loads(build_string_payload("9", "A@b"))["data"] == ""


def test_unicode_escaping_per_version() -> None:
    def build(version: str) -> str:
        return build_object_payload(version, command_name="X", command="é ☃ 😀 \u2028 /", uuid="u", id="i")

    assert '"command":"é ☃ 😀 \\u2028 \\/"' in build("8.82")
    assert '"command":"\\u00e9 \\u2603 \\ud83d\\ude00 \\u2028 \\/"' in build("8.81")
    horizon_like = build_object_payload("13", command_name="X", command="é", unescaped_unicode=False)
    assert '"command":"\\u00e9"' in horizon_like


def test_invalid_utf8_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="Malformed UTF-8"):
        build_string_payload("13", "A@b", {"bin": b"\xff\xfe"})


def test_hooks_and_context() -> None:
    ctx = log_context(hidden={"k": 's:1:"v";'})
    assert ctx == {"data": [], "hidden": {"k": 's:1:"v";'}}
    out = json.loads(build_object_payload(
        "12", command_name="X", command="c", context=ctx, extra={"sentry": 1, "displayName": "Renamed"},
    ))
    assert list(out)[-5:] == ["illuminate:log:context", "sentry", "id", "attempts", "delay"]
    assert out["displayName"] == "Renamed" and list(out).index("displayName") == 1  # overwritten in place
    with pytest.raises(ValueError, match="Context"):
        build_object_payload("10", command_name="X", command="c", context=ctx)


def test_dates_and_durations() -> None:
    now = 1_700_000_000.0
    when = datetime.fromtimestamp(now + 90, tz=UTC)
    out = json.loads(build_object_payload(
        "13", command_name="X", command="c", retry_until=when, delay=timedelta(seconds=45),
        backoff=[datetime.fromtimestamp(now + 10, tz=UTC), 20], now=now,
    ))
    assert out["retryUntil"] == 1_700_000_090 and out["delay"] == 45 and out["backoff"] == "10,20"
    assert out["createdAt"] == 1_700_000_000
    past = json.loads(build_object_payload("13", command_name="X", command="c",
                                           delay=datetime.fromtimestamp(now - 5, tz=UTC), now=now))
    assert past["delay"] == 0
    assert json.loads(build_object_payload("13", command_name="X", command="c", backoff=5))["backoff"] == "5"
    assert json.loads(build_object_payload("13", command_name="X", command="c", backoff="3,4"))["backoff"] == "3,4"


def test_with_attempts_and_retry_reencode() -> None:
    cjson_like = b'{"uuid":"u","data":{},"tags":{},"name":"\xc3\xa9","attempts":3,"l":{"0":"a","1":"b"}}'
    assert with_attempts(cjson_like, 0) == (
        b'{"uuid":"u","data":[],"tags":[],"name":"\\u00e9","attempts":0,"l":["a","b"]}'
    )
    assert with_attempts(cjson_like, 5, unescaped_unicode=True).startswith(
        b'{"uuid":"u","data":[],"tags":[],"name":"\xc3\xa9","attempts":5'
    )
    out = reencode_like_php_retry(b'{"retryUntil":null,"attempts":4}', retry_until=1_700_000_000)
    assert out == '{"retryUntil":1700000000,"attempts":0}'
    assert reencode_like_php_retry(b'{"attempts":null}') == '{"attempts":null}'
    with pytest.raises(PayloadError):
        reencode_like_php_retry(b"[1]")
    with pytest.raises(PayloadError):
        with_attempts(b"{", 1)


def test_version_argument_forms() -> None:
    a = build_object_payload("12.67", command_name="X", command="c", uuid="u", id="i", created_at=1)
    b = build_object_payload(LaravelVersion(12, 67, 0), command_name="X", command="c", uuid="u", id="i", created_at=1)
    assert a == b


# -- cjson facts on a real redis-server (documented in compat-docs/payload.md) --------------------

_ROUND_TRIP = "return cjson.encode(cjson.decode(ARGV[1]))"
_POP_LIKE = "local r = cjson.decode(ARGV[1]); r['attempts'] = r['attempts'] + 1; return cjson.encode(r)"


def _cjson(client: redis.Redis, text: str | bytes) -> bytes:
    result = client.eval(_ROUND_TRIP, 0, text)
    assert isinstance(result, bytes)
    return result


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (b"[]", b"{}"),
        (b'{"a":[],"b":[[]]}', None),  # order may change; checked below via json
        (b"{}", b"{}"),
        (b'"x\\/y"', b'"x\\/y"'),
        (b'"x/y"', b'"x\\/y"'),
        (b'"\\u00e9\\u2603\\ud83d\\ude00"', '"é☃😀"'.encode()),
        (b'"\\u2028\\u2029"', b'"\xe2\x80\xa8\xe2\x80\xa9"'),
        (b'"\x7f"', b'"\\u007f"'),
        (b'"\\u0000\\u0001\\b\\f\\n\\r\\t\\u001f"', b'"\\u0000\\u0001\\b\\f\\n\\r\\t\\u001f"'),
        (b"1.0", b"1"),
        (b"0.30000000000000004", b"0.3"),
        (b"0.1", b"0.1"),
        (b"123456789012345", b"1.2345678901234e+14"),
        (b"12345678901234567", b"1.2345678901235e+16"),
        (b"12345678901234", b"12345678901234"),
        (b"1700000000", b"1700000000"),
        (b"1e5", b"100000"),
        (b"1.5E+25", b"1.5e+25"),
        (b"-0.0", b"-0"),
        (b"[null,1]", b"[null,1]"),
        (b'{"a":1,"a":2}', b'{"a":2}'),
        (b' { "a" : true } ', b'{"a":true}'),
    ],
)
def test_cjson_reencode_facts(redis_client: redis.Redis, given: bytes, expected: bytes | None) -> None:
    out = _cjson(redis_client, given)
    if expected is None:
        assert json.loads(out) == {"a": {}, "b": [{}]}
    else:
        assert out == expected


def test_cjson_popped_payload_is_readable(redis_client: redis.Redis) -> None:
    pushed = build_string_payload(
        "13", "App\\H@run", {"big": 12345678901234567, "empty": [], "t": "a\u2028b"}, created_at=1_700_000_000,
    )
    reserved = redis_client.eval(_POP_LIKE, 0, pushed)
    assert isinstance(reserved, bytes)
    p = Payload.parse(reserved)
    assert p.attempts == 1 and p.created_at == 1_700_000_000
    assert p.data == {"big": 1.2345678901235e16, "empty": {}, "t": "a\u2028b"}
    assert b"\xe2\x80\xa8" in reserved  # U+2028 raw after cjson
    # numeric-string attempts are accepted by the Lua arithmetic, and by the parser
    again = redis_client.eval(_POP_LIKE, 0, b'{"attempts":"2"}')
    assert isinstance(again, bytes) and Payload.parse(again).attempts == 3
