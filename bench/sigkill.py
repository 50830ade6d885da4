"""Jobs run twice per SIGKILL: laraq against artisan, in one mixed fleet.

    python3 bench/sigkill.py               # 20,000 jobs of 5 ms, 10 kills of each kind, Laravel 8
    python3 bench/sigkill.py --quick       # 3,000 jobs, 3 kills of each kind (CI smoke)
    python3 bench/sigkill.py --laravel 13 --json out.json

The fleet and the counting are ``bench/kill_fleet.py``'s (2 artisan + 2 laraq workers on one queue, a
SIGKILL about every second to one worker, laraq and artisan in turn, each restarted at once; a job
that ran twice is charged to the runner of its first run). This script only fixes the issue's sizes.

    python3 bench/sigkill.py --quick --tries 1   # also: jobs failed "attempted too many times" unrun
    python3 bench/sigkill.py --tries 1 --kill-only python   # kill laraq workers only

What bounds the count: artisan re-runs at most the job it was running. laraq writes each finished
job's ``ZREM`` the moment the job is done (``laraq.protocol.acks``), so it re-runs at most the jobs it
was running too. Its buffered, never-started jobs are not run twice, and not charged an attempt: their
unstarted records (``laraq.worker.unstarted``) give them back to the list, as pushed, within the
unstarted lease. With ``--tries 1`` the report's ``failed_without_running`` counts jobs failed
"attempted too many times" that never ran (before the records: every buffered job of every kill).

Quick mode, Laravel 8, same machine (2 shared cores), before and after one after the other, two runs
each (3 SIGKILLs of each kind per run):

=========================  ================================  ================================
                           before (main 4c0a1d6)             with unstarted records
=========================  ================================  ================================
--tries 0: jobs run twice  php 2 / 3, laraq 2 / 2            php 3 / 2, laraq 1 / 0
--tries 1: failed          57 / 95                           4 / 5
  of which never ran       55 / 92                           0 / 0
lost                       0                                 0
=========================  ================================  ================================

With ``--tries 1`` the failed jobs left are the ones running when a worker (either kind) was killed:
they ran once, and their next attempt is over the limit, as Laravel's rule has it.

Full size (20,000 jobs of 5 ms, ``--tries 1``, 10 kills of one kind only, ``--kill-only``):

=========================  =====================  =====================  =====================
                           laraq killed, before   laraq killed, after    artisan killed, after
=========================  =====================  =====================  =====================
failed                     327                    9                      10
  of which never ran       318 (31.8 per kill)    1 (0.1 per kill)       0
jobs run twice, lost       0, 0                   0, 0                   0, 0
=========================  =====================  =====================  =====================

The one left (0.1 per kill) is a buffered job that still came back with its attempt spent: either a
kill between the write that removed its record (with the previous job's ack) and its start, or, with
this fleet's ``retry_after`` of 2 s, Laravel's migrate of ``:reserved`` reaching it before a reclaim.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kill_fleet  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    quick = "--quick" in args
    if quick:
        args.remove("--quick")
    defaults = ["--jobs", "3000", "--kills", "3"] if quick else ["--jobs", "20000", "--kills", "10"]
    given = {a.split("=")[0] for a in args if a.startswith("--")}
    for flag, value in zip(defaults[::2], defaults[1::2], strict=True):
        if flag not in given:
            args += [flag, value]
    return kill_fleet.main(args)


if __name__ == "__main__":
    sys.exit(main())
