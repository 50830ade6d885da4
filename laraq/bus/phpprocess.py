"""One persistent PHP process per worker process that runs the PHP half of a job in the app itself, at
the moment ``queue:work`` runs it (Laravel's ``Illuminate\\Queue\\CallQueuedHandler``).

:class:`PhpProcess` starts ``php laraq/bus/php/lifecycle.php APP REQUEST_FD REPLY_FD`` in the app's
directory, which boots the app once (its autoloader, ``bootstrap/app.php``, the console kernel) and then
answers requests on two pipes of their own, passed to it as extra file descriptors (``php://fd/N``) and
never the app's stdin, stdout or stderr. Each frame is one JSON object on one line (``json_encode``
escapes every newline), and each carries an ``id``: the boot reply is id 0, each request takes the next
id and its reply must carry that id. A reply with another id, or a line that is not such an object, is a
protocol error: the process is stopped and the request fails. PHP's stdin is ``/dev/null``; its stdout
(and what the app writes to its output buffer during a step) goes to the worker's stderr, so nothing the
app prints (a log channel on ``php://stdout``, a ``failed()`` that echoes user text) is ever read as a
reply. On request it calls, on the command it unserializes from the job's original payload, the app's
own ``CallQueuedHandler`` methods:

* ``ensureUniqueJobLockIsReleased`` (before the handler for ``ShouldBeUniqueUntilProcessing``, after a
  success otherwise),
* ``ensureNextJobInChainIsDispatched`` (the next chain step, queued by the app's own dispatcher),
* ``ensureSuccessfulBatchJobIsRecorded`` (``Batch::recordSuccessfulJob``: counts under the
  repository's row lock, ``progress``/``then``/``finally``),
* ``failed`` (unique lock, ``Batch::recordFailedJob`` with the cancel, chain ``catch`` callbacks, the
  command's own ``failed()``).

It never calls ``handle()``. The process is started on first use, restarted on the next request if it
died (a request that was in flight when it died is reported as failed, never replayed: it may have
half run), and a request that takes longer than ``timeout`` seconds kills it. Requests are serialized
(one lock), so a worker with ``--concurrency`` > 1 shares its one process.

:func:`app_on_host` is where a worker decides the app is on its host (``--php-app``, or an ``--env-file``
inside a directory with ``artisan``); the configuration reader may later replace it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SCRIPT", "PhpProcess", "PhpStepError", "app_on_host"]

log = logging.getLogger("laraq.worker.worker")

SCRIPT = Path(__file__).resolve().parent / "php" / "lifecycle.php"

#: Where the PHP process' stdout goes: the worker's own stderr (file descriptor 2).
STDERR_FD = 2


class PhpStepError(RuntimeError):
    """A ``CallQueuedHandler`` step could not be run by the in-process PHP (the message says why)."""


def app_on_host(php_app: str | os.PathLike[str] | None, env_file: str | os.PathLike[str] | None,
                *, php: str = "php") -> Path | None:
    """The Laravel app directory this worker's host can boot, or None.

    ``--php-app PATH`` names it (an error when it has no ``artisan``); otherwise the directory of
    ``--env-file`` is the app when it holds ``artisan`` and ``bootstrap/app.php``. PHP must be on PATH.
    """
    if php_app:
        path = Path(php_app).resolve()
        if not (path / "artisan").is_file() or not (path / "bootstrap" / "app.php").is_file():
            raise ValueError(f"--php-app {php_app}: not a Laravel app (no artisan or bootstrap/app.php there)")
        if shutil.which(php) is None:
            raise ValueError(f"--php-app {php_app}: the php binary is not on PATH")
        return path
    if env_file:
        path = Path(env_file).resolve().parent
        if (path / "artisan").is_file() and (path / "bootstrap" / "app.php").is_file() and shutil.which(php):
            return path
    return None


class PhpProcess:
    """The app's ``CallQueuedHandler`` in a PHP process of its own, driven over two pipes of its own
    (JSON lines with request ids; the app's stdout is not one of them)."""

    def __init__(self, base_path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                 php: str = "php", timeout: float = 120.0, boot_timeout: float = 60.0) -> None:
        self.base_path = Path(base_path)
        self.env = dict(env) if env is not None else None
        self.php = php
        self.timeout = timeout
        self.boot_timeout = boot_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        #: the worker's end of the request pipe (written) and of the reply pipe (read)
        self._requests: int | None = None
        self._replies: int | None = None
        self._lock = threading.Lock()
        self._buffer = b""
        #: the id of the last request sent (the boot reply is id 0)
        self._last_id = 0
        #: The app's ``app()->version()`` as the process reported it at boot.
        self.laravel: str | None = None
        #: How many times the process was started (1 after the first request).
        self.starts = 0

    def __repr__(self) -> str:
        return f"<PhpProcess {self.base_path} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- the steps ------------------------------------------------------------------------------------

    def success(self, body: bytes, connection: str, queue: str, steps: list[str]) -> None:
        """``ensureUniqueJobLockIsReleased`` / ``ensureNextJobInChainIsDispatched`` /
        ``ensureSuccessfulBatchJobIsRecorded`` as ``steps`` say (``unique-now``, ``unique``, ``chain``, ``batch``)."""
        self.request({"op": "success", "body": base64.b64encode(body).decode("ascii"), "connection": connection,
                      "queue": queue, "steps": steps})

    def failed(self, body: bytes, connection: str, queue: str, uuid: str, exc_class: str, message: str) -> None:
        """``CallQueuedHandler::failed``: unique lock, batch failure record and cancel, chain catch, ``failed()``."""
        self.request({"op": "failed", "body": base64.b64encode(body).decode("ascii"), "connection": connection,
                      "queue": queue, "uuid": uuid, "class": exc_class, "message": message})

    def classes(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """What the app says of these classes: ``exists``, ``unique`` (``"until_processing"``, ``"unique"``
        or None: the ``ShouldBeUnique`` interfaces it implements) and ``runs_in_python`` (it uses a trait
        named ``RunsInPython``)."""
        reply = self.request({"op": "classes", "classes": list(names)})
        facts = reply.get("classes")
        if not isinstance(facts, dict):
            raise PhpStepError("the PHP process answered the class question without classes")
        return {str(k): v for k, v in facts.items() if isinstance(v, dict)}

    def ping(self) -> None:
        """Boot the process now (the worker does it at start, so a broken app is said at once)."""
        self.request({"op": "ping"})

    # -- the process --------------------------------------------------------------------------------

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request (with the next id) and wait for the reply with that id, which is returned;
        raises :class:`PhpStepError` on any failure."""
        with self._lock:
            self._last_id += 1
            request_id = self._last_id
            frame = json.dumps({**message, "id": request_id}, separators=(",", ":")).encode("utf-8") + b"\n"
            self._ensure_started()
            try:
                self._write(frame)
            except OSError:
                # it died between two requests: nothing of this request ran, so start a new one and send again
                self._stop()
                self._ensure_started()
                try:
                    self._write(frame)
                except OSError as exc:
                    self._stop()
                    raise PhpStepError(f"the PHP process of {self.base_path} cannot be written to: {exc}") from exc
            reply = self._read_reply(request_id, self.timeout, what=str(message.get("op")))
        if not reply.get("ok"):
            raise PhpStepError(str(reply.get("error") or "the PHP step failed without a message"))
        return reply

    def _write(self, frame: bytes) -> None:
        """One whole frame onto the request pipe."""
        assert self._requests is not None
        view = memoryview(frame)
        while view:
            view = view[os.write(self._requests, view):]

    def _ensure_started(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return
        if proc is not None:
            log.warning("the PHP process of %s exited (status %s): starting a new one", self.base_path,
                        proc.returncode)
            self._stop()
        env = None if self.env is None else {**os.environ, **self.env}
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            # the pipes keep their numbers in the child (pass_fds); the app's stdout is the worker's stderr
            proc = subprocess.Popen([self.php, str(SCRIPT), str(self.base_path), str(request_read), str(reply_write)],
                                    stdin=subprocess.DEVNULL, stdout=STDERR_FD,
                                    pass_fds=(request_read, reply_write), cwd=self.base_path, env=env)
        except OSError as exc:
            os.close(request_write)
            os.close(reply_read)
            raise PhpStepError(f"cannot start {self.php} for the app at {self.base_path}: {exc}") from exc
        finally:
            os.close(request_read)
            os.close(reply_write)
        self._proc, self._requests, self._replies, self._buffer = proc, request_write, reply_read, b""
        self.starts += 1
        ready = self._read_reply(0, self.boot_timeout, what="boot")
        if ready.get("ready") is not True:
            self._stop()
            raise PhpStepError(f"the PHP process of {self.base_path} did not say it was ready at boot: stopped")
        self.laravel = str(ready.get("laravel") or "") or None
        log.info("PHP process %d booted the app at %s (Laravel %s)", proc.pid, self.base_path, self.laravel)

    def _read_reply(self, request_id: int, timeout: float, *, what: str) -> dict[str, Any]:
        """The next frame on the reply pipe, which must be the reply to ``request_id``."""
        proc, fd = self._proc, self._replies
        assert proc is not None and fd is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                newline = self._buffer.find(b"\n")
                if newline >= 0:
                    line, self._buffer = self._buffer[:newline], self._buffer[newline + 1:]
                    return self._check_reply(line, request_id, what)
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._stop()
                    raise PhpStepError(f"the PHP process of {self.base_path} did not answer {what} within "
                                       f"{timeout:g}s: stopped")
                chunk = os.read(fd, 65536)
                if not chunk:
                    status = proc.wait()
                    self._stop()
                    raise PhpStepError(f"the PHP process of {self.base_path} exited (status {status}) during "
                                       f"{what}; see its error output above")
                self._buffer += chunk

    def _check_reply(self, line: bytes, request_id: int, what: str) -> dict[str, Any]:
        """``line`` as the reply to ``request_id``; anything else stops the process (the two sides no
        longer agree on which reply answers which request)."""
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if isinstance(reply, dict) and type(reply.get("id")) is int and reply["id"] == request_id:
            return reply
        self._stop()
        if isinstance(reply, dict):
            cause = f"a reply to request {reply.get('id')!r}"
        else:
            cause = f"a frame that is not a JSON object ({line[:200]!r})"
        raise PhpStepError(f"the PHP process of {self.base_path} answered {what} (request {request_id}) with "
                           f"{cause}: protocol error, stopped")

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        for fd in (self._requests, self._replies):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._requests = self._replies = None
        self._buffer = b""
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def close(self) -> None:
        """Stop the process (it also ends by itself when the worker's end of the request pipe closes)."""
        with self._lock:
            self._stop()
