"""Every table reads at 80 columns, at 200, and piped: the identifying column (queue, class, uuid) is always
there, whole or shortened in the middle (both ends kept), numbers are never cut, headers never cut; a
table too wide for the width becomes a list (one block per row)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from test_ops_cli import cli, env  # noqa: F401  (the ops tests' settings fixture)

from laraq.bus.dispatch import Dispatcher
from laraq.cli.render import Column, fit_widths, shorten_middle
from laraq.protocol.queue import RedisQueue

LONG_QUEUE = "emails-transactional-priority-high-volume-eu-west-1"
LONG_CLASS = "App\\Jobs\\Billing\\Invoices\\GenerateQuarterlyInvoicePdfForEnterpriseCustomers"
PENDING = 123456
WIDTHS = {"80": 80, "200": 200, "piped": None}


def _seed(redis_client) -> RedisQueue:  # noqa: F811
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job(LONG_CLASS, {"i": i}, queue=LONG_QUEUE) for i in range(40)]
           + [d.prepare_job("App\\Jobs\\EchoJob", {"i": i}) for i in range(3)])
    # a big count the table must print whole
    filler = [json.dumps({"uuid": f"f-{i}", "displayName": "App\\Jobs\\EchoJob", "job": "x", "data": {}})
              for i in range(PENDING - 40)]
    for start in range(0, len(filler), 10_000):
        redis_client.rpush(f"old_queues:{LONG_QUEUE}", *filler[start:start + 10_000])
    return q


def _run(env, width, *args, code=0):  # noqa: F811
    environ = dict(env)
    environ["COLUMNS"] = None if width is None else str(width)  # None: unset, whatever the test run's own
    result = CliRunner().invoke(cli, list(args), env=environ, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.stdout


def _fits(text: str, width: int | None) -> None:
    if width is not None:
        too_wide = [line for line in text.splitlines() if len(line) > width]
        assert not too_wide, too_wide


def _present(text: str, value: str) -> bool:
    """``value`` is printed whole, or shortened in the middle with both its ends kept (on one line)."""
    return value in text or bool(re.search(re.escape(value[:6]) + r"\S*…\S*" + re.escape(value[-6:]), text))


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_status_keeps_the_queue_and_whole_numbers(env, redis_client, width):  # noqa: F811
    _seed(redis_client)
    out = _run(env, width, "status", "--sample", "0")
    _fits(out, width)
    assert _present(out, LONG_QUEUE) and "default" in out
    assert re.search(rf"(^|\s){PENDING}(\s|$)", out, re.M)  # the count whole
    assert "pendi…" not in out and "dela…" not in out
    if width == 200 or width is None:
        assert LONG_QUEUE in out and out.splitlines()[0].split()[:2] == ["queue", "pending"]


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_peek_keeps_class_and_uuid(env, redis_client, width):  # noqa: F811
    q = _seed(redis_client)
    uuid = json.loads(redis_client.lindex(q.keys(LONG_QUEUE).list, 0))["uuid"]
    out = _run(env, width, "peek", LONG_QUEUE, "-n", "3")
    _fits(out, width)
    assert uuid in out  # an id to paste is never cut
    assert _present(out, LONG_CLASS)
    assert not any(line.strip() in ("Invoices\\GenerateQuarterl", "yPdfForEnterpriseCustomers")
                   for line in out.splitlines())  # not wrapped over lines


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_status_reserved_keeps_queue_job_and_id(env, redis_client, width):  # noqa: F811
    q = RedisQueue(redis_client, prefix="old_", version="12.67")
    d = Dispatcher(q)
    d.bulk([d.prepare_job(LONG_CLASS, {"i": 1}, queue=LONG_QUEUE)])
    job = q.pop(LONG_QUEUE)
    assert job is not None
    out = _run(env, width, "status", "--reserved")
    _fits(out, width)
    assert _present(out, LONG_QUEUE) and _present(out, LONG_CLASS)
    payload = json.loads(job.body)
    assert payload["uuid"] in out or str(payload.get("id")) in out


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_failed_keeps_id_and_class(env, redis_client, width):  # noqa: F811
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import make_failed_store

    store = make_failed_store(LaravelSettings.from_env(env, version="12.67"))
    store.ensure_table()
    for i in range(3):
        body = json.dumps({"uuid": f"9f3c1b7e-0000-4000-8000-00000000000{i}", "displayName": LONG_CLASS, "job": "x",
                           "data": {}, "attempts": 1})
        store.log("redis", LONG_QUEUE, body, "RuntimeException: " + "a long reason " * 10)
    for args in (["failed"], ["failed", "--exceptions"]):
        out = _run(env, width, *args)
        _fits(out, width)
        ids = [row.id for row in store.all()]
        assert all(str(i) in out for i in ids)
        assert _present(out, LONG_CLASS) and "emai…" not in out and "App…" not in out


def test_shorten_middle_keeps_both_ends():
    from rich.text import Text

    short = shorten_middle(Text(LONG_CLASS), 30).plain
    assert len(short) == 30 and short.startswith("App\\Jobs\\") and short.endswith("Customers") and "…" in short
    assert shorten_middle(Text("short"), 30).plain == "short"


def test_numbers_keep_their_width_and_text_gives_way():
    from rich.text import Text

    cols = [Column("queue", key=True), Column("jobs", justify="right"), Column("note", overflow="fold")]
    cells = [[Text(LONG_QUEUE), Text("1234567"), Text("x" * 60)]]
    widths = fit_widths(cols, cells, 80)
    assert widths is not None and widths[1] == 7 and sum(widths) + 6 <= 80 and widths[0] >= 16
    assert fit_widths(cols, cells, 30) is None  # too narrow for the key and the number: a list


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_poison_list_keeps_the_queue_and_the_index(env, redis_client, width):  # noqa: F811
    redis_client.rpush(f"old_queues:{LONG_QUEUE}:poison", b"s:3:\"abc\";" + b"x" * 200, b"\x92\x01\x02")
    out = _run(env, width, "poison", "list", LONG_QUEUE)
    _fits(out, width)
    assert _present(out, LONG_QUEUE)
    assert re.search(r"(^|\s)#?:? ?0(\s|$)", out, re.M) and re.search(r"(^|\s)#?:? ?1(\s|$)", out, re.M)
    assert re.search(r"(^|\s)(bytes: )?210(\s|$)", out, re.M)  # the size of the first member, whole
