"""Laravel's ``Illuminate\\Queue\\CallQueuedHandler`` for jobs Python runs: the command, ``handle()`` through
the job's middleware, what follows a success, and the failure side (``CallQueuedHandler::failed``).

One object, both sides, as Laravel's is:

* **the command** (``getCommand``): unserialized, decrypted for a ``ShouldBeEncrypted`` job (:meth:`decode`);
  a string job (``Class@method``) gets its ``data``;
* **who runs it**: :meth:`php_only` (13.6+ debounced jobs only PHP can judge) and :meth:`php_reason` (a
  middleware laraq does not run, a ``middleware()`` method, a model or enum with no Python twin, a job
  PHP must finish without ``APP_KEY``): such a job goes back to PHP untouched;
* **call** (:meth:`call`, :meth:`call_async`): a missing model (``handleModelNotFound``), the
  ``ShouldBeUniqueUntilProcessing`` lock, the serialized middleware (:mod:`laraq.bus.middleware`) around
  the handler; then :meth:`after_success`: the unique lock, the chain's next step and the batch record
  (:class:`~laraq.bus.phpsteps.PhpSteps`);
* **failed** (:meth:`failed`): the Python ``failed`` callback, then PHP's own ``failed()`` side (lock,
  batch, chain ``catch``).

The worker (``Worker::process`` in :mod:`laraq.worker.process`) calls it and knows nothing of chains,
batches or unique locks; deleting, releasing and failing the job in Redis is the worker's settle step.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from laraq.bus import middleware, models, schema
from laraq.bus.job import Job, JobAbandoned
from laraq.bus.phpsteps import PhpSteps
from laraq.protocol.payload import PayloadError
from laraq.protocol.phparray import loads_php_arrays, php_arrays
from laraq.protocol.redis_retry import retrying
from laraq.protocol.serializer import PHPSerializeError

if TYPE_CHECKING:
    from laraq.bus.handlers import Handler, HandlerRegistry
    from laraq.protocol.encryption import Encrypter
    from laraq.protocol.versions import LaravelVersion

__all__ = ["CallQueuedHandler"]

log = logging.getLogger("laraq.worker.worker")

#: A non-empty ``debounceOwner`` property in a serialized command (13.6+ debounce).
_DEBOUNCED = re.compile(r's:13:"debounceOwner";s:[1-9][0-9]*:')

#: Runs blocking work off the event loop's thread.
OffLoop = Callable[..., Awaitable[Any]]


class Runner(Protocol):
    """Where a handler runs (:class:`laraq.worker.bridge.AsyncBridge`)."""

    def call(self, handler: Handler, argument: Any, job: Job, running: Any) -> None:
        """Run ``handler`` to its end on this thread (an ``async def`` one on the worker's loop)."""


class CallQueuedHandler:
    """``CallQueuedHandler`` for one worker (see the module)."""

    def __init__(self, app: HandlerRegistry, version: LaravelVersion, steps: PhpSteps, *, cache: Any = None,
                 encrypter: Encrypter | None = None, model_loader: models.ModelLoader | None = None) -> None:
        self.app = app
        self.version = version
        #: ``#[DebounceFor]`` exists (13.6+): only then can a command be debounced
        self._debounce = version.since("13.6")
        self.steps = steps
        self.cache = cache
        self.encrypter = encrypter
        self.model_loader = model_loader

    # -- the command -------------------------------------------------------------------------------------

    def decode(self, job: Job, handler: Handler) -> Any:
        """The handler's first argument: the unserialized (decrypted) command, or ``data``."""
        if job.command is not None:
            return job.command
        if not job.payload.is_queued_command:  # a string job: its data, never unserialized
            job.command = php_arrays(job.payload.data)
            return job.command
        text = job.payload.command
        if text is None:
            raise PayloadError(f"{job.name} (uuid {job.uuid}) has no data.command to unserialize")
        raw: bytes | str
        if job.payload.is_encrypted_command:
            if self.encrypter is None:
                raise RuntimeError(f"Unable to extract job payload: {job.name} is encrypted and APP_KEY is not set")
            try:
                raw = self.encrypter.decrypt(text, unserialize=True)
            except Exception as exc:
                raise RuntimeError(f"Cannot decrypt the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        else:
            raw = text  # the str itself: an ASCII command is read in place, without a copy at the peak
        try:
            job.command = loads_php_arrays(raw)
        except PHPSerializeError as exc:
            raise PHPSerializeError(f"Cannot unserialize the command of {job.name} (uuid {job.uuid}): {exc}") from exc
        return job.command

    # -- who runs it ---------------------------------------------------------------------------------------

    def php_only(self, job: Job) -> str | None:
        """Why only PHP's ``CallQueuedHandler`` can run this job as meant, or None.

        A debounced job (13.6+ ``#[DebounceFor]``: a non-empty ``debounceOwner`` in its command) must be
        deleted unsent when a newer dispatch superseded it, which is decided by the job's own
        ``debounceId()``/``debounceVia()`` PHP methods; laraq cannot evaluate them, so the job goes back
        to PHP, loudly, instead of running superseded copies. The verdict is kept on the job (an encrypted
        command is decrypted for it once)."""
        if job.php_only is None:
            job.php_only = self._debounced(job) or ""
        return job.php_only or None

    def _debounced(self, job: Job) -> str | None:
        text = job.payload.command
        if not text or not self._debounce:
            return None
        if job.payload.is_encrypted_command:
            if self.encrypter is None:
                return None  # the decode step reports the missing key
            try:
                text = self.encrypter.decrypt(text, unserialize=True).decode("utf-8", "replace")
            except Exception:
                return None  # the decode step reports it
        if _DEBOUNCED.search(text):
            return (f"{job.name} is debounced (#[DebounceFor], Laravel 13.6+): only PHP can tell whether a "
                    "newer dispatch superseded it")
        return None

    def php_reason(self, job: Job, handler: Handler) -> str | None:
        """Why this object job goes back to PHP although Python has its handler, or None; restores its
        models for the handler on the way (:func:`laraq.bus.models.prepare`). A command that cannot be
        decoded is not sent back: it fails in the handler's run, where PHP meets it too."""
        if not job.payload.is_queued_command:
            return None
        try:
            self.decode(job, handler)
        except Exception:
            return None
        reason = self.steps.unsupported(job) or schema.handler_reason(self.app.job_schemas.get(handler.name), handler)
        facts = self.steps.facts(job)
        if reason is None and facts.middleware:
            reason = middleware.unsupported(job, self.cache, self.app.rate_limiters)
        if reason is None:
            reason = models.prepare(job, self.model_loader, self.app.enums,
                                    php_settles=facts.batch_id is not None or facts.unique_id is not None
                                    or bool(handler.unique))
        return reason

    # -- call -------------------------------------------------------------------------------------------------

    def _enter(self, job: Job) -> middleware.Gate | None:
        """Before ``handle()``: the until-processing lock, then the job's middleware (None: none)."""
        self.steps.before_handle(job)
        return middleware.enter(job, self.cache, self.app.rate_limiters) if self.steps.facts(job).middleware else None

    def _missing_model(self, job: Job) -> None:
        """``handleModelNotFound`` (see :func:`laraq.bus.models.settle`): deletes the job or raises."""
        models.settle(job, self.app.job_schemas.get(getattr(job.handler, "name", "")))

    def call(self, job: Job, handler: Handler, runner: Runner, running: Any = None) -> None:
        """``handle()`` through the job's middleware (a ``ThrottlesExceptions`` around it may take the
        handler's exception, as PHP's catch does); raises what the job raised. ``running``: the worker's
        record of the run, handed to ``runner``."""
        if job.restore_error is not None:
            self._missing_model(job)
            return
        gate = self._enter(job)
        try:
            if gate is None or gate.proceed:
                runner.call(handler, self.decode(job, handler), job, running)
                if gate is not None:
                    gate.succeeded()
        except Exception as exc:
            if gate is None or isinstance(exc, JobAbandoned) or not gate.caught(job, exc):
                raise
        finally:
            if gate is not None:
                gate.exit()

    async def call_async(self, job: Job, handler: Handler, off_loop: OffLoop) -> None:
        """:meth:`call` for an ``async def`` handler, awaited on the worker's loop (the gate's blocking
        steps off it)."""
        argument = self.decode(job, handler)
        if job.restore_error is not None:
            await off_loop(self._missing_model, job)
            return
        gate = self._enter(job)
        try:
            if gate is None or gate.proceed:
                await handler.func(argument, job)
                if gate is not None:
                    await off_loop(gate.succeeded)
        except Exception as exc:
            if gate is None or isinstance(exc, JobAbandoned) or not await off_loop(gate.caught, job, exc):
                raise
        finally:
            if gate is not None:
                gate.exit()

    def after_success(self, job: Job) -> None:
        """After ``handle()`` returned, unless the job released or failed itself: the unique lock, the
        chain's next step, the batch record. Raises when that hand-over cannot be made (the worker then
        releases the job as after an exception, never deleting it with its chain lost)."""
        if job.restore_error is not None or job.is_released or job.has_failed:
            return
        try:
            self.steps.after_success(job)
        except Exception as exc:
            log.error("%s (uuid %s) ran, but what follows it could not be queued: %s", job.name, job.uuid, exc)
            raise

    # -- failed -----------------------------------------------------------------------------------------------

    def failed(self, job: Job, error: BaseException,
               run_coroutine: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        """``CallQueuedHandler::failed``, after the ``failed_jobs`` row: the Python ``failed`` callback, then
        PHP's side (unique lock, batch, chain ``catch``, the class's ``failed()``)."""
        try:
            callback = None if job.restore_error is not None else self.app.failed_callback(job.payload)
            if callback is not None:
                result = callback(job.command, job, error)
                if asyncio.iscoroutine(result):
                    run_coroutine(result)
        except Exception:
            log.exception("the failed() callback of %s raised", job.name)
        finally:
            self._php_failed(job, error)

    def _php_failed(self, job: Job, error: BaseException) -> None:
        handler = job.handler
        try:
            if job.command is None and handler is not None and job.payload.is_queued_command:
                self.decode(job, handler)  # failed before it ran (max attempts): still PHP's failed()
        except Exception as exc:
            log.warning("%s (uuid %s): cannot read its command for the failure steps: %s", job.name, job.uuid, exc)
        if isinstance(job.restore_error, models.ModelNotFoundError):
            return  # PHP cannot rebuild the command either: no failed(), catch or batch step runs
        try:
            retrying(lambda: self.steps.after_failure(job, error))
        except Exception as exc:
            log.error("%s (uuid %s): could not hand its failure steps (chain catch, batch, failed()) to PHP: %s",
                      job.name, job.uuid, exc)
