"""Progress bars: labelled by the command's verb, redrawn at a human rate, silent off a terminal."""

from __future__ import annotations

import io

from test_ops_cli import FakeTTY, env, run, seed  # noqa: F401  (shared fixtures and helpers)

from laraq.cli import render


def test_progress_redraws_a_few_times_a_second_not_per_item(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(render, "stderr_stream", lambda: tty)
    now = [0.0]
    with render.progress(20_000, "moving", clock=lambda: now[0]) as bar:
        for i in range(20_000):
            if i % 5_000 == 0:
                now[0] += 1.0  # four seconds in all, on a fake clock
            bar.update(1)
    out = tty.getvalue()
    assert "20000/20000" in out
    assert 2 <= out.count("moving") <= 7  # first draw, one per second, the last one: never one per item
    assert len(out) < 2_000


def test_updates_between_redraws_are_not_lost(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(render, "stderr_stream", lambda: tty)
    with render.progress(10, "copying", clock=lambda: 0.0) as bar:
        for _ in range(10):
            bar.update(1)
    assert "10/10" in tty.getvalue() and tty.getvalue().count("copying") <= 3


def test_no_bar_off_a_terminal(monkeypatch):
    plain = io.StringIO()
    monkeypatch.setattr(render, "stderr_stream", lambda: plain)
    with render.progress(100, "moving") as bar:
        bar.update(100)
    assert plain.getvalue() == ""


def test_move_bar_is_labelled_moving(env, redis_client, monkeypatch):  # noqa: F811
    seed(redis_client)
    tty = FakeTTY()
    monkeypatch.setattr(render, "stderr_stream", lambda: tty)
    assert run(env, "move", "default", "elsewhere").startswith("moved 5 jobs")
    assert "moving" in tty.getvalue() and "moveing" not in tty.getvalue() and "5/5" in tty.getvalue()
