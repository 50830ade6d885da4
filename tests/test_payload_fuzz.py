"""Fuzzing the JSON layer: whatever bytes a queue member holds, reading it ends in a clean error or a value.

Anyone who can write a queue's keys chooses the bytes. Payloads built by hypothesis (odd types for
``attempts``, ``job``, ``data``, ``displayName``, ``uuid`` and the other fields Laravel's readers use) and
then damaged (cut short, nested thousands of levels deep at a random place, invalid UTF-8, numbers of
thousands of digits, a stray bracket or quote) are given to:

* :meth:`Payload.parse <laraq.protocol.payload.Payload.parse>` and every reader of the payload it returns:
  a value or :class:`~laraq.protocol.payload.PayloadError`, nothing else;
* the JSON helpers (:func:`~laraq.protocol.phpjson.json_loads`, ``check_json_depth``, ``php_json_decode``):
  a value or ``ValueError``;
* what the operator commands read with: ``InspectedJob.from_payload``, ``JobView.from_member`` and
  ``JobView.from_excerpt`` (the member cut to its two ends), ``member_fields``, ``leading_fields``,
  ``job_identity``, ``JobView.to_dict``: never an exception.

Seeds are fixed (``derandomize``); the file runs in a few seconds, beside the PHP codec's fuzzing
(``test_codec_differential.py``).
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laraq.ops.inspect import JobView, job_identity, leading_fields
from laraq.protocol.listing import InspectedJob
from laraq.protocol.lua import Excerpt
from laraq.protocol.payload import Payload, PayloadError
from laraq.protocol.phpjson import PhpJsonError, check_json_depth, json_loads, php_json_decode
from laraq.protocol.queue import member_fields

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "0", "1", " 3 ", "0x1", "1e3", "-1", "9" * 30, "App\\Jobs\\J@handle", "@x", "O:1:\"A\":0:{}"]),
)
_values = st.recursive(_scalars, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)), max_leaves=10)

_FIELDS = ["uuid", "displayName", "job", "maxTries", "maxExceptions", "failOnTimeout", "backoff", "timeout",
           "retryUntil", "data", "createdAt", "id", "attempts", "delay"]
_commands = st.one_of(_values, st.sampled_from([
    'O:19:"App\\Jobs\\PythonJob":0:{}', 'O:19:"App\\Jobs\\PythonJob":99999999999:{}', "a:1:{i:0;" * 5000,
    "eyJpdiI6IiIsInZhbHVlIjoiIiwibWFjIjoiIn0=", "W1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW1tbW10=",
]))
_data = st.one_of(_values, st.fixed_dictionaries({}, optional={
    "commandName": _values, "command": _commands, "batchId": _values}))
_payloads = st.fixed_dictionaries({}, optional={name: (_data if name == "data" else _values) for name in _FIELDS})


def mutate(rng: random.Random, raw: bytes) -> bytes:
    """One kind of damage at a random place."""
    at = rng.randrange(len(raw) + 1)
    kind = rng.randrange(8)
    if kind == 0:
        return raw[:at]
    if kind == 1:
        depth = rng.choice([511, 512, 1100, 5000, 100_000])
        opener = rng.choice([b"[", b'{"a":'])
        closer = b"]" if opener == b"[" else b"}"
        return raw[:at] + opener * depth + b"1" + closer * depth + raw[at:]
    if kind == 2:
        return raw[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]) + raw[at:]
    if kind == 3:
        return raw[:at] + b"9" * rng.choice([20, 400, 5000]) + raw[at:]
    if kind == 4:
        return raw[:at] + rng.choice([b"[", b"]", b"{", b"}", b'"', b"\\", b",", b":"]) + raw[at:]
    if kind == 5:
        return b"[" * 600 + raw + b"]" * 600
    if kind == 6:
        return raw.replace(b'"attempts":', b'"attempts":' + b"1" * rng.choice([1, 5000]) + b",\"x\":", 1)
    return raw[:at] + b"1e99999" + raw[at:]


def read_everything(raw: bytes) -> None:
    """Every reader of the JSON layer on ``raw``: only the documented errors."""
    try:
        payload = Payload.parse(raw)
    except PayloadError:
        pass
    else:
        for name in ("uuid", "id", "display_name", "resolve_name", "attempts", "max_tries", "max_exceptions",
                     "fail_on_timeout", "timeout", "retry_until", "backoff", "created_at", "delay", "data",
                     "command_name", "command", "is_encrypted_command", "batch_id", "delete_when_missing_models"):
            with contextlib.suppress(PayloadError):
                getattr(payload, name)
        for call in (payload.unrunnable, lambda: payload.backoff_seconds(2), lambda: repr(payload)):
            with contextlib.suppress(PayloadError):
                call()
    for loader, error in ((json_loads, ValueError), (check_json_depth, PhpJsonError),
                          (php_json_decode, PhpJsonError)):
        with contextlib.suppress(error):
            loader(raw)
    InspectedJob.from_payload(raw, "q")
    view = JobView.from_member("q", "pending", raw)
    view.to_dict(raw=True)
    job_identity(raw)
    for side in (16, 200):
        cut = Excerpt(len(raw), raw[:side], raw[-side:]) if len(raw) > 2 * side else Excerpt(len(raw), raw, b"")
        JobView.from_excerpt("q", "pending", cut).to_dict(raw=True)
        member_fields(cut, ("createdAt", "pushedAt", "id", "attempts"))
        leading_fields(cut.head)


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_payloads, st.randoms(use_true_random=False))
def test_payloads_and_their_damage_read_cleanly(fields: dict[str, Any], rng: random.Random) -> None:
    raw = json.dumps(fields, allow_nan=True).encode()
    read_everything(raw)
    for _ in range(4):
        read_everything(mutate(rng, raw))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=60))
def test_random_bytes_read_cleanly(data: bytes) -> None:
    read_everything(data)
    read_everything(b'{"uuid":"u","attempts":0,"data":' + data + b"}")


_nested = st.recursive(_scalars, lambda children: st.one_of(
    st.lists(children, min_size=1, max_size=3), st.dictionaries(st.text(alphabet='[]{}"\\ab', max_size=6), children,
                                                               min_size=1, max_size=3)), max_leaves=40)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_nested, st.integers(min_value=1, max_value=12))
def test_the_depth_scans_agree_with_the_real_depth(value: Any, limit: int) -> None:
    """The C and Python depth scans of the text, and the C walk of the parsed value, all give the nesting
    of any valid document (strings full of brackets, quotes and backslashes included)."""
    from laraq.protocol import phpjson

    def depth(v: Any) -> int:
        children = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max((depth(c) for c in children), default=0)

    doc = json.dumps(value, ensure_ascii=False).encode()
    scans = [phpjson.scan_too_deep]
    with contextlib.suppress(ImportError):
        from laraq._speedups import json_too_deep, value_too_deep
        scans += [json_too_deep, lambda _doc, lim: value_too_deep(value, lim)]
    assert [scan(doc, limit) for scan in scans] == [depth(value) >= limit] * len(scans)
