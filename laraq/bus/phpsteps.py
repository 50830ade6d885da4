"""The steps of Laravel's ``Illuminate\\Queue\\CallQueuedHandler`` that span PHP when Python runs the job:
the unique lock, the chain (``Illuminate\\Bus\\Queueable::dispatchNextJobInChain`` /
``invokeChainCatchCallbacks``), the batch (``Illuminate\\Bus\\Batchable`` + ``DatabaseBatchRepository``)
and the class's own ``failed()`` method.

The rule, in one place:

* **Unique lock** (``ShouldBeUnique``): when the key is known to Python - the command has a
  ``uniqueId`` *property* - laraq releases it itself, at PHP's moment: before the
  handler for ``unique="until_processing"``, after success unless the job released itself, and on
  final failure. When ``uniqueId()`` is a method, only PHP can compute the key: the release is handed
  to PHP (:mod:`laraq.bus.handoff`) and never guessed (``laravel_unique_job:<class>`` alone is not the
  lock of such a job).
* **Chain**: after a success (not released, not failed) with a non-empty ``chained``, the next job is
  dispatched by PHP's own ``ensureNextJobInChainIsDispatched`` on the original command - the payload
  PHP builds for it is byte for byte what ``queue:work`` would push. ``chained`` rides in the command,
  so it survives release and retry untouched.
* **Batch**: after a success with a ``batchId``, PHP's ``ensureSuccessfulBatchJobIsRecorded`` runs
  (row lock, counts, ``then``/``finally``/``progress`` callbacks in PHP); after a failure,
  ``CallQueuedHandler::failed`` records it (``failed_job_ids``, cancel unless ``allowFailures``,
  ``catch``/``finally``).
* **Failure**: PHP's ``CallQueuedHandler::failed`` runs once on the original payload (lock, batch, catch
  callbacks, the class's ``failed()``), after laraq wrote the ``failed_jobs`` row: in-process for every
  object job, as artisan does; by hand-off when the job has chain ``catch`` callbacks, a batch, a
  PHP-side unique key, or the handler asks for its PHP ``failed()`` method (``php_failed=True``).

Where PHP's part runs (see ``compat-docs/worker.md``, "The job model"):

* **in-process PHP** - when the app is on the worker's host (:func:`laraq.bus.phpprocess.app_on_host`), the
  worker's :class:`~laraq.bus.phpprocess.PhpProcess` runs those ``CallQueuedHandler`` steps synchronously,
  at artisan's moment: before the handler, right after success and right after the failure, before the
  worker takes its next job. Nothing is queued for PHP and ``APP_KEY`` is not needed.
* **hand-off** - otherwise the steps go as a continuation job (:mod:`laraq.bus.handoff`) to the PHP queue,
  which must be a queue laraq does not work (:func:`continuation_conflict` refuses the rest at start).
  A continuation is a signed closure, so it needs ``APP_KEY``; without it a job that needs PHP is not run
  at all: it goes back to PHP untouched (see :meth:`PhpSteps.unsupported`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laraq.bus.handoff import FAILURE_CODE, SUCCESS_CODE, continuation_payload, continuation_title
from laraq.bus.phpprocess import PhpStepError
from laraq.logtext import visible
from laraq.protocol.serializer import PHPObject, PHPSerializeError, deref, loads
from laraq.stores import batches
from laraq.stores.failed import php_class_name

if TYPE_CHECKING:
    from laraq.bus.job import Job
    from laraq.bus.phpprocess import PhpProcess
    from laraq.protocol.queue import RedisQueue
    from laraq.protocol.versions import LaravelVersion

__all__ = ["MIDDLEWARE_PASSED", "PhpSteps", "continuation_conflict", "context_lock"]

log = logging.getLogger("laraq.worker.worker")

#: The job attribute :meth:`PhpSteps.before_handle` sets when a ``ShouldBeUniqueUntilProcessing`` lock
#: waits for the job's middleware (11.40+): the middleware gate calls it once the job may run.
MIDDLEWARE_PASSED = "on_middleware_passed"


def _non_empty(value: Any) -> bool:
    if isinstance(value, dict | list):
        return len(value) > 0
    return value not in (None, "", False)


@dataclass(frozen=True, slots=True)
class _Facts:
    """The parts of a command the PHP-spanning steps depend on."""

    chained: bool = False
    catch: bool = False
    batch_id: str | None = None
    #: the ``uniqueId`` property (``""`` when it is null), None when the command has none
    unique_id: str | None = None
    #: job middleware is serialized on the command (see :mod:`laraq.bus.middleware`)
    middleware: bool = False

    @classmethod
    def of(cls, command: PHPObject | None) -> _Facts:
        if command is None:
            return _NO_FACTS
        # CallQueuedHandler reads these from outside the object: only *public* properties count, and
        # a public property's wire name is its plain name (a dict lookup, no name resolution)
        get = command._props.get
        chained = get("chained")
        catch = get("chainCatchCallbacks")
        batch = get("batchId")
        unique = get("uniqueId", _MISSING)
        middleware = get("middleware")
        if not (chained or catch or batch or middleware) and unique is _MISSING and type(chained) not in _ODD \
                and type(catch) not in _ODD and type(batch) not in _ODD and type(middleware) not in _ODD:
            return _NO_FACTS  # the usual job: all empty (falsy, and not one of the falsy values _non_empty counts)
        batch = deref(batch)
        unique = deref(unique)
        return cls(
            chained=_non_empty(deref(chained)),
            catch=_non_empty(deref(catch)),
            batch_id=str(batch) if _non_empty(batch) else None,
            unique_id=None if unique is _MISSING else "" if unique is None else str(unique),
            middleware=_non_empty(deref(middleware)),
        )


_MISSING = object()
_NO_FACTS = _Facts()
#: Falsy values ``_non_empty`` still counts as set (an object without properties, empty bytes).
_ODD = (PHPObject, bytes)


class PhpSteps:
    """The PHP-spanning steps of one worker (chain, batch, unique lock, PHP ``failed()``); the rest of
    ``CallQueuedHandler`` is :class:`laraq.bus.callqueued.CallQueuedHandler`."""

    def __init__(self, queue: RedisQueue, version: LaravelVersion, *, cache: Any, signing_key: bytes | None,
                 connection_name: str, php_queue: str | None = None) -> None:
        self.queue = queue
        self.version = version
        self.cache = cache
        self.signing_key = signing_key
        self.connection_name = connection_name
        #: Where continuations go: a queue PHP workers serve (default: the connection's default queue).
        self.php_queue = php_queue
        #: The app's own CallQueuedHandler in a PHP process on this host (None: hand-off by continuation).
        self.php: PhpProcess | None = None
        #: The unique kind the app's class declares, per class (asked of PHP once, when a handler says none).
        self._class_unique: dict[str, bool | str | None] = {}

    def use_php(self, process: PhpProcess | None) -> None:
        """Run PHP's steps in ``process`` (synchronously), not as continuations."""
        self.php = process

    def send_to_php(self, job: Job, reason: str, worked: list[str]) -> bool:
        """A job only PHP can run (middleware laraq does not know, debounce, an enum with no Python twin):
        moved once, untouched (attempts not burned), to ``--php-queue`` when that is a queue this worker
        does not take, with one log line; False when there is no such queue (the caller puts it back on
        its own queue for the PHP workers there). Pushed before the reservation goes: a crash in between
        leaves it twice, never lost."""
        target = self.php_queue
        if not target or target in worked or target == job.queue:
            return False
        self.queue.push_raw(job.body, target)
        self.queue.delete_reserved(job.reserved_job)
        log.warning("%s (id %s on %s): moved untouched to queue %s for PHP: %s", job.name, job.id, job.queue,
                    target, reason)
        return True

    def describe(self) -> tuple[int, str]:
        """The log level and the line that says, at a worker's start, where PHP's steps go."""
        if self.php is not None:
            return logging.INFO, ("chain steps, batch bookkeeping, uniqueId() locks and PHP failed() run in the "
                                  f"app's PHP: {self.path}")
        if self.signing_key is None:
            return logging.WARNING, ("APP_KEY is not set: jobs in a chain or a batch, or with a uniqueId() method, "
                                     "cannot be finished by PHP and are sent back to PHP untouched")
        return logging.INFO, ("chain steps, batch bookkeeping, uniqueId() locks and PHP failed() are handed to PHP "
                              f"on queue {self.php_queue or self.queue.default_queue}: keep a PHP worker on it")

    @property
    def path(self) -> str:
        """Which path PHP's steps take: ``in-process PHP`` or ``hand-off on queue X``."""
        if self.php is not None:
            return f"in-process PHP ({self.php.base_path})"
        return f"hand-off on queue {self.php_queue or self.queue.default_queue}"

    # -- what a job needs ----------------------------------------------------------------------------

    @staticmethod
    def _command(job: Job) -> PHPObject | None:
        command = job.command
        return command if isinstance(command, PHPObject) else None

    def facts(self, job: Job) -> _Facts:
        """What the command says (read once per job: property lookups are not free on the hot path)."""
        facts = job.model_facts
        if facts is None:
            facts = job.model_facts = _Facts.of(self._command(job))
        return facts

    def _unique_mode(self, job: Job) -> Any:
        """The handler's ``unique=``; when it says nothing and the app is on this host, what the class
        implements (``ShouldBeUniqueUntilProcessing``: ``"until_processing"``, ``ShouldBeUnique``: True), so
        that a lock keyed by a ``uniqueId()`` method goes at artisan's moment."""
        handler = job.handler
        if handler is None:
            return None
        if handler.unique is None and self.php is not None:
            return self._declared_unique(job.payload.command_name or job.name)
        return handler.unique

    def _declared_unique(self, class_name: str) -> bool | str | None:
        if class_name not in self._class_unique:
            assert self.php is not None
            try:
                kind = self.php.classes([class_name]).get(class_name, {}).get("unique")
            except PhpStepError as exc:
                log.warning("could not ask the app whether %s is unique: %s", visible(class_name), exc)
                kind = None
            self._class_unique[class_name] = ("until_processing" if kind == "until_processing"
                                              else True if kind == "unique" else None)
        return self._class_unique[class_name]

    def _python_unique_id(self, job: Job) -> str | None:
        """The ``uniqueId`` Python can compute (a property), else None."""
        return self.facts(job).unique_id

    def _unique_known(self, job: Job) -> bool:
        return self._unique_mode(job) is not False and self._python_unique_id(job) is not None

    def _unique_for_php(self, job: Job) -> bool:
        mode = self._unique_mode(job)
        return bool(mode) and self._python_unique_id(job) is None

    def chained(self, job: Job) -> bool:
        return self.facts(job).chained

    def has_catch_callbacks(self, job: Job) -> bool:
        return self.facts(job).catch

    def batch_id(self, job: Job) -> str | None:
        return self.facts(job).batch_id

    def success_steps(self, job: Job) -> list[str]:
        steps = []
        if self.chained(job):
            steps.append("chain")
        if self.batch_id(job):
            steps.append("batch")
        mode = self._unique_mode(job)
        # a lock Python cannot release goes with PHP's steps: declared (uniqueId() method), or, when a
        # continuation runs anyway, whatever PHP finds (it checks ShouldBeUnique itself)
        if mode != "until_processing" and mode is not False and not self._unique_known(job) \
                and (self._unique_for_php(job) or steps):
            steps.append("unique")
        return steps

    def needs_php_on_failure(self, job: Job) -> bool:
        """Does ``CallQueuedHandler::failed`` have work on this failure? In-process: for every object job,
        as artisan calls it (the class's own ``failed()`` included); by hand-off: only when the job says so."""
        if self.php is not None and self._command(job) is not None:
            return True
        handler = job.handler
        return (self.has_catch_callbacks(job) or self.batch_id(job) is not None or self._unique_for_php(job)
                or bool(handler is not None and getattr(handler, "php_failed", False)))

    def unsupported(self, job: Job) -> str | None:
        """Why this job cannot be run by Python now (it then goes back to PHP untouched), or None."""
        if self.signing_key is not None or self.php is not None:
            return None
        needs = [what for what, yes in (
            ("a chain", self.chained(job) or self.has_catch_callbacks(job)),
            ("a batch", self.batch_id(job) is not None),
            ("a uniqueId() method", self._unique_for_php(job)),
        ) if yes]
        if not needs:
            return None
        return f"{job.name} has {' and '.join(needs)}, which PHP finishes, and APP_KEY is not set"

    # -- the steps -------------------------------------------------------------------------------------

    def before_handle(self, job: Job) -> None:
        """``ShouldBeUniqueUntilProcessing``: the lock goes before ``handle()``: before the job's middleware
        up to 11.39, once the middleware let the job through from 11.40 (then the middleware gate calls
        the job's ``on_middleware_passed``, see :func:`laraq.bus.middleware.enter`)."""
        if self._unique_mode(job) != "until_processing":
            return
        if job.payload.version.until_processing_lock_after_middleware and self.facts(job).middleware:
            setattr(job, MIDDLEWARE_PASSED, lambda: self._release_until_processing(job))  # noqa: B010
            return
        self._release_until_processing(job)

    def _release_until_processing(self, job: Job) -> None:
        setattr(job, MIDDLEWARE_PASSED, None)  # noqa: B010 - once
        if self._unique_known(job):
            self.release_unique(job)
        else:
            self._php_steps(job, ["unique-now"])

    def _middleware_stopped(self, job: Job) -> None:
        """The middleware stopped a ``ShouldBeUniqueUntilProcessing`` job without releasing it (its lock is
        still held, 11.40+): 12.21+ free the lock all the same (the pipeline's ``finally``), 11.40 to 12.20
        leave it to expire."""
        if job.payload.version.until_processing_lock_freed_when_stopped:
            self._release_until_processing(job)
        else:
            setattr(job, MIDDLEWARE_PASSED, None)  # noqa: B010

    def after_success(self, job: Job) -> None:
        """After a handler returned (and the job did not release itself): lock, chain, batch."""
        if getattr(job, MIDDLEWARE_PASSED, None) is not None:
            self._middleware_stopped(job)
        if self.facts(job) is _NO_FACTS and self._unique_mode(job) is None:
            # the usual job (no chain, batch or uniqueId; no unique declared in Python): no steps, and no
            # lock Python knows of; only the 11.39+ Context lock may be left to release
            self._release_context_lock(job)
            return
        steps = self.success_steps(job)
        if self._unique_known(job) and self._unique_mode(job) != "until_processing":
            self.release_unique(job)
        elif "unique" not in steps:
            self._release_context_lock(job)
        if steps:
            counts = self._batch_data(job, success=True) if "batch" in steps and self.php is None else None
            self._php_steps(job, steps, counts)

    def after_failure(self, job: Job, exc: BaseException) -> None:
        """After ``failed_jobs`` was written: PHP's ``failed()`` side, or the lock when Python knows it."""
        if self.needs_php_on_failure(job) and self.php is not None:
            self.php.failed(job.body, self.connection_name, job.queue, job.uuid or "", php_class_name(exc), str(exc))
        elif self.needs_php_on_failure(job) and self.signing_key is not None:
            counts = self._batch_data(job, success=False)
            self._push(job, FAILURE_CODE, {"uuid": job.uuid or "", "class": php_class_name(exc),
                                           "message": str(exc), "counts": counts}, "failed")
        elif self._unique_known(job) and self._unique_mode(job) != "until_processing":
            self.release_unique(job)
        else:
            self._release_context_lock(job)

    def release_unique(self, job: Job) -> None:
        unique_id = self._python_unique_id(job)
        if self.cache is None or unique_id is None:
            return
        command = self._command(job)
        owner = command.get("uniqueLockOwner") if command is not None else None
        class_name = job.payload.command_name or job.name
        # 12.41+ key the lock by displayName() only when the class has that method; the payload's
        # displayName differs from the class name exactly then
        display = job.display_name if job.display_name not in (None, class_name) else None
        try:
            self.cache.unique_lock_release(class_name, unique_id, display, owner=owner or None)
        except Exception as exc:
            log.warning("could not release the unique lock of %s: %s", job.name, exc)

    def _release_context_lock(self, job: Job) -> None:
        """11.39+: a ``ShouldBeUnique`` job with no hint (no ``uniqueId`` property, handler ``unique=None``)
        is still known by the lock key ``PendingDispatch`` put in the payload's hidden Context (with the
        owner, 13.24+): released with that exact key after success or final failure."""
        lock = context_lock(job.payload.decoded)
        if lock is None or self.cache is None or self._unique_mode(job) is not None \
                or self.facts(job).unique_id is not None:
            return
        name, owner, store = lock
        release = getattr(self.cache, "release_lock", None)
        if release is None or (store and store != getattr(self.cache, "store_name", store)):
            log.warning("%s (uuid %s): its unique lock %s is in cache store %r, which laraq does not hold: "
                        "left to expire", job.name, job.uuid, name, store)
            return
        try:
            release(name, owner=owner or None)
        except Exception as exc:
            log.warning("could not release the unique lock of %s: %s", job.name, exc)

    def _php_steps(self, job: Job, steps: list[str], counts: list[int] | None = None) -> None:
        """Run the success-side steps now in the PHP process, else hand them to PHP by continuation."""
        if self.php is not None:
            self.php.success(job.body, self.connection_name, job.queue, steps)
            return
        self._push(job, SUCCESS_CODE, {"steps": steps, "counts": counts}, self._label(job, steps))

    def _batch_data(self, job: Job, *, success: bool) -> list[int] | None:
        """Data-only path (no PHP on this host): the batch row's counts, ``failed_job_ids`` and cancel,
        written now (:mod:`laraq.stores.batches`); the continuation then runs only the PHP part with
        these counts. None when the job has no batch, no database, or the row is not there."""
        batch = self.batch_id(job)
        db = job.app_db
        if self.php is not None or batch is None or db is None or not job.uuid or not hasattr(db, "connection"):
            return None
        try:
            record = batches.record_success if success else batches.record_failure
            counts = record(db, batch, job.uuid)
        except Exception as exc:
            log.warning("%s (uuid %s): could not record it in batch %s (%s): PHP records it later", job.name,
                        job.uuid, batch, " ".join(str(exc).split())[:300])
            return None
        return None if counts is None else [counts.pending_jobs, counts.failed_jobs]

    def _label(self, job: Job, steps: list[str]) -> str:
        """What the continuation does, for its Horizon name: a speculative ``unique`` step (PHP checks
        ``ShouldBeUnique`` itself) is not named unless the handler declares the job unique."""
        named = [("unique lock" if s == "unique-now" else s) for s in steps
                 if s != "unique" or self._unique_mode(job)]
        return " + ".join(named) or "unique lock"

    def _push(self, job: Job, code: str, use: dict[str, Any], about: str) -> None:
        if self.signing_key is None:
            log.error("%s (uuid %s) needs PHP for %s but APP_KEY is not set: not handed over",
                      job.name, job.uuid, about)
            return
        data = job.payload.decoded.get("data")
        variables = {"data": data if isinstance(data, dict) else {}, "body": job.body,
                     "connection": self.connection_name, "queue": job.queue, "counts": None, **use}
        body = continuation_payload(self.version, self.signing_key, code=code, use=variables, about=about)
        target = self.php_queue or self.queue.default_queue
        self.queue.push_raw(body, target)
        log.info("%s (uuid %s): %s handed to PHP on queue %s as %r", job.name, job.uuid, about, target,
                 continuation_title(about))


def continuation_conflict(queues: list[str], php_queue: str | None, default_queue: str, *,
                          in_process: bool, signing_key: bool,
                          unhandled: str = "leave") -> tuple[str, str] | None:
    """``("refuse" | "warn", one line)`` when continuations could land where this worker takes them, else None.

    Nothing is handed off when the PHP steps run in-process, or without ``APP_KEY`` (such jobs are not
    run). ``--php-queue`` naming a queue this worker works is refused: its continuations would bounce.
    The connection's default queue (no ``--php-queue``) among the worked queues is the shared-queue
    topology (PHP workers on the same queue take the continuations), so it is only warned about: with
    no PHP worker there, the continuations would wait. That holds only while this worker leaves jobs it
    has no handler for in the list (``--unhandled leave``); with any other policy it would take its own
    continuations (requeue them, release them, or fail them), so that is refused too.
    """
    if in_process or not signing_key:
        return None
    target = php_queue or default_queue
    if target not in queues:
        return None
    what = f"chain steps, batch callbacks and PHP failed() are handed to PHP on queue {target!r}"
    fix = ("set --php-queue to a queue only PHP workers serve, or run where the app is (--php-app PATH, or "
           "--env-file inside the app) so PHP runs them in-process")
    if php_queue:
        return "refuse", f"{what} (--php-queue), which this worker takes itself: {fix}"
    if unhandled != "leave":
        return "refuse", (f"{what} (the connection's default queue), which this worker takes with "
                          f"--unhandled {unhandled}: use --unhandled leave (the default), or {fix}")
    return "warn", f"{what} (the connection's default queue), which this worker also takes: keep a PHP worker " \
                   f"on it, or {fix}"


def context_lock(payload: dict[str, Any]) -> tuple[str, str | None, str | None] | None:
    """(lock key, owner, cache store) from the payload's hidden Context (11.39+ unique dispatch), or None."""
    ctx = payload.get("illuminate:log:context")
    hidden = ctx.get("hidden") if isinstance(ctx, dict) else None
    if not isinstance(hidden, dict):
        return None

    def text(name: str) -> str | None:
        raw = hidden.get(name)
        if not isinstance(raw, str):
            return None
        try:
            value = loads(raw.encode("utf-8"))
        except PHPSerializeError:
            return None
        return value if isinstance(value, str) else None

    key = text("laravel_unique_job_key")
    if not key:
        return None
    return key, text("laravel_unique_job_lock_owner"), text("laravel_unique_job_cache_store")
