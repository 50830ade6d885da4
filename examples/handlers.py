r"""Example laraq handlers for the jobs of the Laravel fixture app (``fixtures/laravel8``).

Run them with::

    laraq work --app examples.handlers:app --queue=python

PHP side (recommended deployment: Python-bound jobs on their own queue)::

    GenerateReport::dispatch('q3.pdf', ['pages' => 12])->onQueue('python');   // the README walkthrough
    PythonJob::dispatch('report.pdf', ['pages' => 3])->onQueue('python');
    Queue::push('App\Handlers\Foo@bar', ['n' => 1], 'python');

Every PHP array arrives as a :class:`laraq.protocol.phparray.PHPArray` (a ``dict``), whether PHP sent ``[]``,
a list or a map, so ``command.options.get("pages", 1)`` always works.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from laraq import App, Job, PHPObject

log = logging.getLogger(__name__)

app = App("examples")


def render(document: str, *, pages: int, owner: str) -> None:
    """Stands in for the real work."""
    log.info("rendering %s: %d page(s) for %s", document, pages, owner)


@app.handler("App\\Jobs\\GenerateReport")
def generate_report_walkthrough(command: PHPObject, job: Job) -> None:
    """The README walkthrough's job: ``GenerateReport('q3.pdf', ['pages' => 12])``."""
    render(command.document, pages=command.options.get("pages", 1), owner=command.owner)


@app.failed("App\\Jobs\\GenerateReport")
def report_walkthrough_failed(command: PHPObject | None, job: Job, exc: BaseException) -> None:
    log.warning("report %s failed for good: %s", job.uuid, exc)


@app.handler("App\\Jobs\\PythonJob")
def generate_report(command: PHPObject, job: Job) -> None:
    """``App\\Jobs\\PythonJob``: public, protected and private properties read by plain name."""
    log.info("rendering %s for %s (attempt %d)", command.document, command["owner"], job.attempts)
    if command.options.get("fail"):
        raise RuntimeError(f"could not render {command.document}")


@app.failed("App\\Jobs\\PythonJob")
def report_failed(command: PHPObject | None, job: Job, exc: BaseException) -> None:
    """Like a job's ``failed()`` method: runs once, when the job is failed for good."""
    log.warning("giving up on %s: %s", job.uuid, exc)


@app.handler("App\\Handlers\\Foo@bar")
async def foo_bar(data: dict[str, Any], job: Job) -> None:
    """A string job (``Queue::push('App\\Handlers\\Foo@bar', $data)``) with an async handler."""
    await asyncio.sleep(0)
    log.info("Foo@bar got %s", data)
