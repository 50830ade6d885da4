"""When the worker's console lines go out (``Output.hold``): a busy worker writes once per job, and no
line is ever late where it matters.

* A job's first line is on the stream before its handler runs, and so is the previous job's success
  line: a worker that dies mid-job has shown which job it was running, and what finished before it.
* Only a success line reported on the holding thread waits, and only until the next line or the end
  of the run; another thread's lines, failures and worker messages are written at once, after what is
  held, so the order never changes.
* A worker that runs out of jobs writes the last success line before it waits for more.

Every stream here is a real descriptor, written as a real worker's stdout is: one end of a
``SOCK_SEQPACKET`` socket pair, which keeps each ``write()`` as one packet, so a test sees the writes
themselves. Each test runs with both sinks (:mod:`laraq.cli.linesink`): the C one and the pure-Python one.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import require
from test_worker_support import wait_for

from laraq.app import App
from laraq.bus.dispatch import Dispatcher
from laraq.cli import linesink
from laraq.cli.output import Output
from laraq.cli.work import build_worker, default_params
from laraq.protocol.queue import RedisQueue
from laraq.protocol.versions import LaravelVersion

PREFIX = "laravel_database_"
ECHO = "App\\Jobs\\EchoJob"
L8 = LaravelVersion.parse("8.83.27")


class _Job:
    """What Output reads of a job."""

    def __init__(self, n: int) -> None:
        self.id = f"id{n}"
        self.uuid = f"uuid{n}"
        self.name = f"App\\Jobs\\Job{n}"
        self.connection = "redis"
        self.queue = "default"
        self.attempts = 1
        self.is_deleted = self.is_released = self.has_failed = False


_CONSOLES: dict[int, _Console] = {}


class _Console:
    """A worker's stdout on a real descriptor that keeps each ``write()`` as one packet."""

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.reader.setblocking(False)
        self.file = open(self.writer.fileno(), "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        self.packets: list[bytes] = []
        _CONSOLES[self.file.fileno()] = self

    def writes(self) -> list[bytes]:
        """Every ``write()`` made so far, in order."""
        while True:
            try:
                self.packets.append(self.reader.recv(1 << 20))
            except BlockingIOError:
                return self.packets

    def text(self) -> str:
        return b"".join(self.writes()).decode("utf-8")

    def close(self) -> None:
        _CONSOLES.pop(self.file.fileno(), None)
        self.file.close()
        self.writer.close()
        self.reader.close()


@pytest.fixture(params=["c", "python"])
def sink(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which sink Output gets on a real descriptor: the C one (``laraq/_lines.c``) or the pure-Python one."""
    if request.param == "c":
        monkeypatch.delenv("LARAQ_PURE_PYTHON", raising=False)
        require(linesink.c_sinks_enabled(), "laraq._speedups is not built (no C compiler at install time)")
    else:
        monkeypatch.setenv("LARAQ_PURE_PYTHON", "1")
    return str(request.param)


@pytest.fixture
def console(sink: str) -> Any:
    made = _Console()
    yield made
    made.close()


@pytest.fixture
def stream(console: _Console) -> Any:
    return console.file


def _text(stream: Any) -> str:
    return _CONSOLES[stream.fileno()].text()


def test_a_held_success_line_goes_out_with_the_next_line_in_one_write(stream: Any, console: _Console) -> None:
    made = console.packets
    out = Output(L8, stream=stream)
    one, two = _Job(1), _Job(2)
    out.hold()
    out.job(one, "starting")
    assert "Processing: App\\Jobs\\Job1" in _text(stream)  # out before the handler runs
    out.job(one, "success")
    assert "Processed:" not in _text(stream)  # held
    out.job(two, "starting")
    text = _text(stream)
    assert text.index("Processed:  App\\Jobs\\Job1") < text.index("Processing: App\\Jobs\\Job2")
    console.writes()
    assert len(made) == 2 and made[1].count(b"\n") == 2  # the held line and the next one: one write
    out.job(two, "success")
    out.release()
    assert _text(stream).count("Processed:") == 2 and len(made) == 3 and out._sink.writes == 3


def test_failures_messages_and_other_threads_are_written_at_once_after_what_is_held(stream: Any) -> None:
    out = Output(L8, stream=stream)
    jobs = [_Job(n) for n in range(4)]
    out.hold()
    out.job(jobs[0], "starting")
    out.job(jobs[0], "success")
    out.job(jobs[1], "failed", RuntimeError("boom"))  # a failure is never held, and keeps its place
    lines = _text(stream).splitlines()
    assert [re.sub(r"^\[[^]]*\]\[\w*\] ", "", line) for line in lines] == [
        "Processing: App\\Jobs\\Job0", "Processed:  App\\Jobs\\Job0", "Failed:     App\\Jobs\\Job1"]
    # a slot thread's success line does not wait for the loop thread's next line
    other = threading.Thread(target=lambda: (out.job(jobs[2], "starting"), out.job(jobs[2], "success")))
    other.start()
    other.join()
    assert "Processed:  App\\Jobs\\Job2" in _text(stream)
    out.job(jobs[3], "starting")
    out.job(jobs[3], "success")
    out.message("worker stopping")  # a worker line writes what is held first
    text = _text(stream)
    assert text.index("Processed:  App\\Jobs\\Job3") < text.index("worker stopping")
    out.release()


def test_modern_and_json_styles_hold_the_same_way(stream: Any) -> None:
    for out in (Output(LaravelVersion.parse("11.0.0"), stream=stream),
                Output(LaravelVersion.parse("11.30.0"), stream=stream, json_mode=True)):
        job = _Job(7)
        before = _text(stream)
        out.hold()
        out.job(job, "starting")
        started = _text(stream)
        assert len(started) > len(before)
        out.job(job, "success")
        assert _text(stream) == started
        out.release()
        assert len(_text(stream)) > len(started)


def test_quiet_holds_nothing(stream: Any) -> None:
    out = Output(L8, stream=stream, quiet=True)
    out.hold()
    out.job(_Job(1), "starting")
    out.job(_Job(1), "success")
    out.release()
    assert _text(stream) == ""


def test_the_listener_prints_through_the_same_lines_as_job(stream: Any, tmp_path: Path) -> None:
    """The worker's per-job events (``Listeners`` -> ``OutputListener``) and ``Output.job`` print the same
    text, in every console style and in --json."""
    from laraq.cli.output import OutputListener
    from laraq.worker.events import JobProcessed, JobProcessing, Listeners

    stamps = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+\+00:00)?|\d+\.\d\dms|\"duration\":[\d.e-]+")
    for version, json_mode in (("8.83.27", False), ("9.30.0", False), ("11.0.0", False), ("12.20.0", True)):
        texts = []
        for via_events in (False, True):
            path = tmp_path / f"{version}-{via_events}.log"
            with open(path, "w", encoding="utf-8") as fh:
                out = Output(LaravelVersion.parse(version), stream=fh, json_mode=json_mode)
                events = Listeners([OutputListener(out)])
                for n in range(3):
                    job = _Job(n)
                    if via_events:
                        events.emit(JobProcessing(job))  # type: ignore[arg-type]
                        events.emit(JobProcessed(job, 0.001))  # type: ignore[arg-type]
                    else:
                        out.job(job, "starting")
                        out.job(job, "success")
            texts.append(stamps.sub("T", path.read_text(encoding="utf-8")))
        assert texts[0] == texts[1] and texts[0].count("\n") >= 3, (version, texts)
        assert "Job2" in texts[0] and ("id2" in texts[0]) == (version == "8.83.27" or json_mode), texts[0]


@pytest.mark.parametrize("version", ["8.83.27", "11.0.0"])
def test_a_job_that_never_finishes_here_is_forgotten_in_time(stream: Any, monkeypatch: pytest.MonkeyPatch,
                                                            version: str) -> None:
    """What the printer keeps of a started job (its id, name and start) is bounded: a job abandoned at its
    timeout never gets a last line, and a long-running worker must not keep it forever. A job whose entry
    was dropped still prints its own name (and, before 9.21, id)."""
    import laraq.cli.output as output_mod

    monkeypatch.setattr(output_mod, "_MAX_STARTED", 3)
    out = Output(LaravelVersion.parse(version), stream=stream)
    jobs = [_Job(n) for n in range(6)]
    for job in jobs:
        out.job(job, "starting")
    assert len(out._started) <= 3
    for job in jobs:
        out.job(job, "success")
    done = [line for line in _text(stream).splitlines() if "Processed:" in line or line.endswith("DONE")]
    assert [re.search(r"Job\d", line).group(0) for line in done] == [f"Job{n}" for n in range(6)]  # type: ignore[union-attr]
    if version.startswith("8."):
        assert [re.sub(r"^\[[^]]*\]", "", line) for line in done] == [
            f"[id{n}] Processed:  App\\Jobs\\Job{n}" for n in range(6)]
    assert out._started == {}


# -- a real worker -------------------------------------------------------------------------------------

def _fill(redis_server: Any, n: int, queue: str) -> None:
    q = RedisQueue(redis_server.client(), prefix=PREFIX, version=L8)
    d = Dispatcher(q)
    d.bulk([d.prepare_job(ECHO, {"args": {"n": i}, "mode": "ok", "seconds": 0}, queue=queue, connection="redis")
            for i in range(n)])


def _worker(redis_server: Any, app: App, workers: list[Any], stream: Any, monkeypatch: pytest.MonkeyPatch,
            queue: str, **opts: Any) -> Any:
    monkeypatch.setattr(sys, "stdout", stream)  # the worker's console is this file, by its descriptor
    params = default_params(laravel="8", quiet=False, queue=queue, redis_url=redis_server.url,
                            prefix=PREFIX, memory=1 << 20, **{"sleep": 0, **opts})
    env = {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": str(redis_server.port), "CACHE_DRIVER": "array"}
    worker = build_worker(params, env=env, app=app)
    workers.append(worker)
    return worker


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_each_handler_finds_its_own_line_and_the_last_jobs_outcome_already_written(
        redis_server: Any, workers: list[Any], stream: Any, console: _Console, monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    seen: list[tuple[int, bool, bool]] = []
    app = App("hold")

    def look(command: Any, job: Any) -> None:
        n = command["args"]["n"]
        text = _text(stream)
        mine = f"][{job.id}] Processing: {ECHO}\n" in text
        previous_done = n == 0 or text.count("Processed:") == n
        seen.append((n, mine, previous_done))

    if kind == "async":
        @app.handler(ECHO)
        async def echo(command: Any, job: Any) -> None:
            look(command, job)
    else:
        @app.handler(ECHO)
        def echo(command: Any, job: Any) -> None:
            look(command, job)

    _fill(redis_server, 30, "hold")
    worker = _worker(redis_server, app, workers, stream, monkeypatch, "hold", stop_when_empty=True)
    assert worker.daemon() == 0
    assert [n for n, _, _ in seen] == list(range(30))
    assert all(mine and previous_done for _, mine, previous_done in seen), seen
    lines = [re.sub(r"^\[[^]]*\]\[\w*\] ", "", line) for line in _text(stream).splitlines()]
    assert lines == [f"Processing: {ECHO}", f"Processed:  {ECHO}"] * 30
    made = console.writes()
    # one write per job, and one for a held line at the end of each reserve round and of the run; not two per job
    assert len(made) <= 30 + 5, [w.count(b"\n") for w in made]


def test_the_last_success_line_is_out_before_the_worker_waits_for_more(
        redis_server: Any, workers: list[Any], stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    app = App("hold")
    ran: list[int] = []

    @app.handler(ECHO)
    async def echo(command: Any, job: Any) -> None:
        ran.append(command["args"]["n"])

    _fill(redis_server, 3, "idle")
    worker = _worker(redis_server, app, workers, stream, monkeypatch, "idle", stop_when_empty=False, sleep=30)
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(worker.daemon()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(ran) == 3, timeout=30)
        # the worker now sleeps 30 s for more work: the third line must not wait for that
        wait_for(lambda: _text(stream).count("Processed:") == 3, timeout=10)
    finally:
        worker.signals.quit()
        worker.signals.wake.set()
        thread.join(30)
    assert status == [0]


@pytest.mark.parametrize("release", ["8.83.27", "13.26.1"])
def test_the_lines_are_dated_in_the_apps_timezone(stream: Any, release: str) -> None:
    """Both sinks date a job's lines in the zone they are given (the app's, as artisan's ``Carbon::now()``),
    and ``--json``'s timestamp carries that zone's offset as PHP's ``P`` writes it."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    paris, kiritimati = ZoneInfo("Europe/Paris"), ZoneInfo("Pacific/Kiritimati")  # UTC+1/+2 and UTC+14
    for zone in (paris, kiritimati):
        before = datetime.now(zone).replace(microsecond=0)
        out = Output(LaravelVersion.parse(release), stream=stream, timezone=zone)
        start = len(_text(stream))
        out.job(_Job(1), "starting")
        out.job(_Job(1), "success")
        after = datetime.now(zone)
        dates = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", _text(stream)[start:])
        assert len(dates) == 2
        for shown in dates:
            assert before <= datetime.strptime(shown, "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone) <= after, shown
    out = Output(LaravelVersion.parse("11.30.0"), stream=stream, json_mode=True, timezone=kiritimati)
    start = len(_text(stream))
    out.job(_Job(2), "starting")
    stamp = re.search(r'"timestamp":"([^"]+)"', _text(stream)[start:])
    assert stamp is not None and stamp.group(1).endswith("+14:00") and re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+14:00", stamp.group(1))
