#!/usr/bin/env python3
"""Peak and after-job memory of one big job: laraq against ``php artisan queue:work``, Laravel 13 fixture app.

    python3 bench/big_payload_memory.py                 # 10, 50, 100 MB; --memory 128 and 256
    python3 bench/big_payload_memory.py --sizes 10,50   # fewer

For each size and shape, one ``App\\Jobs\\PlainJob`` whose public ``$nothing`` holds either one big string
(``string``) or a list of short strings (``array``, 20 bytes each serialized) is dispatched; each worker runs it
with ``--stop-when-empty --memory M`` (the daemon loop, where both check memory after the job) in a fresh process, and ``wait4`` gives the process' peak RSS. PHP's
``--memory`` compares ``memory_get_usage()`` after the job (exit 12 when over); laraq compares its RSS after
the job (exit 12 when over). The columns: exit code and peak RSS of each (MB), so the question "does a
job PHP runs within --memory exceed it in laraq?" is the pair of exit codes. PHP's ``memory_limit`` is
the CLI's (``-1`` on this host). The last results are in compat-docs/performance-history.md ("Big payloads").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import RedisServer  # noqa: E402
from phpapp import PhpApp  # noqa: E402

from laraq.bus.dispatch import Dispatcher  # noqa: E402
from laraq.protocol.queue import RedisQueue  # noqa: E402

MB = 1024 * 1024

HANDLERS = '''
from laraq.app import App
app = App("bigmem")

@app.handler("App\\\\Jobs\\\\PlainJob")
def plain(command, job):
    value = command.nothing
    assert len(value) > 0
'''


#: Started by a small process of its own: a child's ``ru_maxrss`` starts from its parent's resident size
#: at fork (Linux keeps the high-water mark across exec), so a child of this process, which built the
#: 100 MB payloads, would report at least this process' size. The wrapper is small; its child is measured.
_WRAPPER = ("import os, subprocess, sys\n"
            "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
            "err = p.stderr.read()\n"
            "_, status, usage = os.wait4(p.pid, 0)\n"
            "code = os.waitstatus_to_exitcode(status)\n"
            "print(code, usage.ru_maxrss // 1024)\n"
            "sys.stderr.buffer.write(err[-2000:] if code not in (0, 12) else b'')\n")


def waited(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, int]:
    """(exit code, peak RSS in MB) of one process."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], env=env, cwd=cwd, capture_output=True, text=True)
    if out.stderr:
        sys.stderr.write(out.stderr)
    code, peak = out.stdout.split()
    return int(code), int(peak)


def push(app: PhpApp, client: object, size_mb: int, shape: str, queue: str) -> int:
    if shape == "string":
        value: object = "x" * (size_mb * MB)
    else:  # s:6:"abcdef"; with an i:N; key: about 20 bytes per element
        value = ["abcdef"] * (size_mb * MB // 20)
    Dispatcher(RedisQueue(client, prefix=app.prefix, version=app.release)).dispatch_job(
        "App\\Jobs\\PlainJob", {"nothing": value}, queue=queue, tries=1)
    return int(client.llen(f"{app.prefix}queues:{queue}") and len(client.lindex(f"{app.prefix}queues:{queue}", 0)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,100")
    parser.add_argument("--memory", default="128,256")
    parser.add_argument("--shapes", default="string,array")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        try:
            client = server.client()
            app = PhpApp(server.port, version="13")
            handlers = Path(tmp) / "bigmem_handlers.py"
            handlers.write_text(HANDLERS)
            env = dict(app.env, PYTHONPATH=os.pathsep.join([tmp, str(ROOT)]))
            print(f"{'size':>5} {'shape':>6} {'mem':>4} {'body MB':>8} | {'php exit':>8} {'php peak':>8} | "
                  f"{'laraq exit':>10} {'laraq peak':>10}")
            for size in (int(s) for s in args.sizes.split(",")):
                for shape in args.shapes.split(","):
                    for memory in (int(m) for m in args.memory.split(",")):
                        client.flushall()
                        body = push(app, client, size, shape, "pq") / MB
                        php = waited(["php", "artisan", "queue:work", "redis", "--stop-when-empty", "--queue=pq",
                                      f"--memory={memory}"], app.env, app.path)
                        push(app, client, size, shape, "lq")
                        laraq = waited([sys.executable, "-c", "from laraq.cli import main; main()", "work",
                                        "--app", "bigmem_handlers:app", "--laravel", app.release, "--stop-when-empty",
                                        "--no-supervise", "--queue=lq", "--memory", str(memory), "--sleep", "0",
                                        "-q"], env, ROOT)
                        left = client.llen(f"{app.prefix}queues:lq") + client.zcard(f"{app.prefix}queues:lq:reserved")
                        print(f"{size:>5} {shape:>6} {memory:>4} {body:>8.1f} | {php[0]:>8} {php[1]:>8} | "
                              f"{laraq[0]:>10} {laraq[1]:>10}{'  (job left in Redis!)' if left else ''}",
                              flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
