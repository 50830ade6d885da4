"""Handing the PHP half of a job's outcome to PHP: a signed ``CallQueuedClosure`` job that PHP's stock
``queue:work`` runs (Laravel's ``Illuminate\\Queue\\CallQueuedClosure`` holding a
``Laravel\\SerializableClosure\\SerializableClosure`` with a ``Signed`` / ``Native`` payload).

Some of what Laravel's ``CallQueuedHandler`` does around ``handle()`` can only be done by PHP: the
next job of a chain is ``unserialize()``d and dispatched (its payload may depend on ``backoff()``,
``retryUntil()``, ``displayName()``, ``ShouldBeEncrypted``, ``ShouldBeUnique``, 13's attributes and
the app's payload hooks), a batch's ``then``/``catch``/``finally`` callbacks are PHP closures, a chain's
``catch`` callbacks too, ``uniqueId()`` may be a method, and the job class may have a ``failed()``
method. When a job laraq ran needs any of that, laraq pushes one continuation job whose closure calls
Laravel's own ``CallQueuedHandler`` steps on the original payload:

* before the handler: ``ensureUniqueJobLockIsReleased`` (``ShouldBeUniqueUntilProcessing``, key by method);
* success: ``ensureUniqueJobLockIsReleased`` (only when laraq did not release the lock itself, and not
  for a ``ShouldBeUniqueUntilProcessing`` class, whose lock went before ``handle()``),
  ``ensureNextJobInChainIsDispatched`` and ``ensureSuccessfulBatchJobIsRecorded`` - the protected
  methods of the version that runs it, reached by binding the closure to ``CallQueuedHandler``'s scope;
* failure: ``CallQueuedHandler::failed($data, $e, $uuid, $job)`` - unique lock, batch failure record,
  chain ``catch`` callbacks and the class's ``failed()`` method, exactly as ``Job::fail`` runs them.

The job object those steps see is a ``RedisJob`` built from the original body (its ``uuid()`` is the
original job's, which the batch bookkeeping keys on). The closure is signed the way Laravel signs a
queued closure: ``base64(HMAC-SHA256(serialized Native closure, APP_KEY))`` (checked against the
``closure`` entries of the wire corpus, Laravel 8.83 to 13.x). Its code is fixed; the job's data only
travels in its ``use`` variables. The continuation is retried like any job and lands in
``failed_jobs`` if it cannot run, so a chain never ends silently.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from laraq.protocol.payload import build_object_payload
from laraq.protocol.serializer import PHPObject, dumps
from laraq.protocol.versions import LaravelVersion

__all__ = ["CLOSURE_CLASS", "CONTINUATION_TAG", "continuation_payload", "continuation_title", "is_continuation",
           "signed_closure"]

CLOSURE_CLASS = "Illuminate\\Queue\\CallQueuedClosure"
#: The ``displayName`` of every continuation starts with this (so laraq and humans can tell them apart).
#: The rest is the kind only (``chain``, ``batch``, ``chain + batch``, ``unique lock``, ``failed``): Horizon
#: keys its metrics by this name, so it is stable per kind and never carries a job's uuid.
CONTINUATION_TAG = "laraq continuation"
#: What continuations were called before (``Closure (laraq continuation: … <uuid>)``); still recognised.
_OLD_TAG = "Closure (laraq continuation"

_NATIVE = "Laravel\\SerializableClosure\\Serializers\\Native"
_SIGNED = "Laravel\\SerializableClosure\\Serializers\\Signed"
_SERIALIZABLE = "Laravel\\SerializableClosure\\SerializableClosure"
_HANDLER = "Illuminate\\Queue\\CallQueuedHandler"

# The closures' PHP source. They run with CallQueuedHandler's class scope (protected methods reachable).
#
# $counts (null, or [pendingJobs, failedJobs]): laraq already wrote the batch row's counts at the job's
# moment (laraq.stores.batches), so for this one step the app's BatchRepository is a DatabaseBatchRepository
# whose decrementPendingJobs/incrementFailedJobs return those counts instead of counting again; the rest
# of Batch::recordSuccessfulJob/recordFailedJob (cancel, events, progress/then/catch/finally) is the app's own.
_REPLAY = (
    "    $real = $replay = null;\n"
    "    if (is_array($counts)) {\n"
    "        $real = app(\\Illuminate\\Bus\\BatchRepository::class);\n"
    "        if ($real instanceof \\Illuminate\\Bus\\DatabaseBatchRepository) {\n"
    "            $replay = (function () use ($counts) {\n"
    "                return new class($this->factory, $this->connection, $this->table, $counts)"
    " extends \\Illuminate\\Bus\\DatabaseBatchRepository {\n"
    "                    private $laraqCounts;\n"
    "                    public function __construct($factory, $connection, $table, $counts) {\n"
    "                        parent::__construct($factory, $connection, $table);\n"
    "                        $this->laraqCounts = $counts;\n"
    "                    }\n"
    "                    public function decrementPendingJobs(string $batchId, string $jobId) {\n"
    "                        return new \\Illuminate\\Bus\\UpdatedBatchJobCounts("
    "(int) $this->laraqCounts[0], (int) $this->laraqCounts[1]);\n"
    "                    }\n"
    "                    public function incrementFailedJobs(string $batchId, string $jobId) {\n"
    "                        return new \\Illuminate\\Bus\\UpdatedBatchJobCounts("
    "(int) $this->laraqCounts[0], (int) $this->laraqCounts[1]);\n"
    "                    }\n"
    "                };\n"
    "            })->call($real);\n"
    "            app()->instance(\\Illuminate\\Bus\\BatchRepository::class, $replay);\n"
    "        }\n"
    "    }\n"
    "    try {\n"
)
_RESTORE = (
    "    } finally {\n"
    "        if ($replay !== null) {\n"
    "            app()->instance(\\Illuminate\\Bus\\BatchRepository::class, $real);\n"
    "        }\n"
    "    }\n"
)
_JOB = ("$job = new \\Illuminate\\Queue\\Jobs\\RedisJob(app(), app('queue')->connection($connection), "
        "$body, $body, $connection, $queue);")

SUCCESS_CODE = (
    "function () use ($data, $body, $connection, $queue, $steps, $counts) {\n"
    "    $handler = app(\\Illuminate\\Queue\\CallQueuedHandler::class);\n"
    f"    {_JOB}\n"
    + _REPLAY +
    "    $command = $handler->setJobInstanceIfNecessary($job, $handler->getCommand($data));\n"
    "    $untilProcessing = $command instanceof \\Illuminate\\Contracts\\Queue\\ShouldBeUniqueUntilProcessing;\n"
    "    if (in_array('unique-now', $steps, true)\n"
    "            || (in_array('unique', $steps, true) && ! $untilProcessing)) {\n"
    "        $handler->ensureUniqueJobLockIsReleased($command);\n"
    "    }\n"
    "    if (in_array('chain', $steps, true)) {\n"
    "        $handler->ensureNextJobInChainIsDispatched($command);\n"
    "    }\n"
    "    if (in_array('batch', $steps, true)) {\n"
    "        $handler->ensureSuccessfulBatchJobIsRecorded($command);\n"
    "    }\n"
    + _RESTORE +
    "}"
)

FAILURE_CODE = (
    "function () use ($data, $body, $connection, $queue, $uuid, $class, $message, $counts) {\n"
    "    $handler = app(\\Illuminate\\Queue\\CallQueuedHandler::class);\n"
    f"    {_JOB}\n"
    + _REPLAY +
    "    try {\n"
    "        $e = class_exists($class) && is_subclass_of($class, \\Throwable::class)\n"
    "            ? new $class($message) : new \\RuntimeException($message);\n"
    "    } catch (\\Throwable $ignored) {\n"
    "        $e = new \\RuntimeException($message);\n"
    "    }\n"
    "    $handler->failed($data, $e, $uuid, $job);\n"
    + _RESTORE +
    "}"
)


def signed_closure(code: str, use: dict[str, Any], key: bytes, *, scope: str | None = None) -> PHPObject:
    """A ``SerializableClosure`` of ``code`` with ``use`` variables, signed with the raw ``APP_KEY``."""
    native = dumps(PHPObject.build(_NATIVE, {
        "use": use, "function": code, "scope": scope, "this": None, "self": secrets.token_hex(16),
    }))
    digest = base64.b64encode(hmac.new(key, native, hashlib.sha256).digest()).decode("ascii")
    signed = PHPObject.build(_SIGNED, {"serializable": native, "hash": digest})
    return PHPObject.build(_SERIALIZABLE, {"serializable": signed})


def continuation_payload(
    version: LaravelVersion,
    key: bytes,
    *,
    code: str,
    use: dict[str, Any],
    about: str,
) -> bytes:
    """The body of a ``CallQueuedClosure`` job running ``code`` in ``CallQueuedHandler``'s scope; ``about``
    is the continuation's kind (its name is :func:`continuation_title`).

    Retried 5 times (10 s, 30 s, 60 s, 120 s apart) so a passing outage of the database or of Redis on
    the PHP side does not lose it; after that it is in ``failed_jobs`` with PHP's own exception.
    """
    closure = signed_closure(code, use, key, scope=_HANDLER)
    command = dumps(PHPObject.build(CLOSURE_CLASS, {"closure": closure})).decode("utf-8")
    return build_object_payload(
        version, command_name=CLOSURE_CLASS, command=command, display_name=continuation_title(about),
        max_tries=5, backoff="10,30,60,120",
    ).encode("utf-8")


def continuation_title(kind: str) -> str:
    """The ``displayName`` (Horizon's job name) of a continuation of this kind."""
    return f"{CONTINUATION_TAG}: {kind}"


def is_continuation(display_name: str | None) -> bool:
    text = str(display_name or "")
    return text.startswith(CONTINUATION_TAG) or text.startswith(_OLD_TAG)
