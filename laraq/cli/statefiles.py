"""laraq's own files on this machine: the state directory and the private files the commands write.

:func:`state_dir` is the one place that says where laraq keeps local state (``$LARAQ_STATE_DIR``, else
``$XDG_STATE_HOME/laraq``, else ``~/.local/state/laraq``): the fallback ``failed_jobs.sqlite`` of
``laraq work`` and the bulk-retry journals of ``laraq retry``. The directory is created ``0700``; an
existing one that other users may write to is reported (:func:`state_dir_problem`), never changed.

:func:`open_private` opens every file that holds job data (journals, exports, the local failed-job
database): a new file is created ``0600`` with ``O_EXCL|O_NOFOLLOW``, so a file or symbolic link planted at
a predictable name makes the command stop with one message instead of writing job payloads where
someone else reads them. A file that is resumed on purpose (a journal named again, the database opened
again) is opened with ``O_NOFOLLOW`` and must be a regular file owned by this user; one being written is
set to ``0600``, one being read must not be writable by others.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Literal

__all__ = ["How", "PrivateFileError", "open_private", "state_dir", "state_dir_problem", "touch_private"]

#: ``new``: create, refuse anything already there; ``append``: create, or resume a file of ours;
#: ``replace``: create, or empty a file of ours; ``read``: an existing file of ours
How = Literal["new", "append", "replace", "read"]

_FLAGS: dict[str, int] = {
    "new": os.O_WRONLY | os.O_APPEND,
    "append": os.O_WRONLY | os.O_APPEND,
    "replace": os.O_WRONLY | os.O_TRUNC,
    "read": os.O_RDONLY,
}


class PrivateFileError(OSError):
    """A path laraq will not write job data to (or read it back from): the message names it and why."""


def state_dir() -> Path:
    """laraq's state directory, created ``0700`` (its parents with the usual mode) when missing."""
    base = os.environ.get("LARAQ_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "laraq")
    path = Path(base)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    return path


def state_dir_problem(path: Path) -> str | None:
    """Why ``path`` (the state directory) is not private, or None: other users may write to it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"the laraq state directory {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}): "
                f"they can replace the files laraq keeps there; run chmod 700 {path}")
    return None


def _refuse(path: str | os.PathLike[str], why: str) -> PrivateFileError:
    return PrivateFileError(f"refusing to use {os.fspath(path)}: {why}")


def _open_fd(path: str | os.PathLike[str], how: How) -> int:
    flags = _FLAGS[how] | os.O_NOFOLLOW | os.O_CLOEXEC
    if how != "read":
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if how == "new":
                kind = "a symbolic link" if os.path.islink(path) else "a file"
                raise _refuse(path, f"{kind} is already there (laraq creates this file itself)") from None
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "it is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "it is not a regular file")
        if st.st_uid != os.geteuid():
            raise _refuse(path, f"it belongs to uid {st.st_uid}, not to this user ({os.geteuid()})")
        if how == "read":
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise _refuse(path, f"other users may write to it (mode {stat.S_IMODE(st.st_mode):o}); "
                                    f"run chmod 600 {os.fspath(path)} if it is yours as it stands")
        elif stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(path: str | os.PathLike[str], how: How) -> IO[str]:
    """``path`` as a UTF-8 text file, opened as ``how`` says (see the module docstring)."""
    fd = _open_fd(path, how)
    return os.fdopen(fd, "r" if how == "read" else "a" if how in ("new", "append") else "w", encoding="utf-8")


def touch_private(path: str | os.PathLike[str]) -> None:
    """Make sure ``path`` is a ``0600`` regular file of this user (created empty when missing)."""
    os.close(_open_fd(path, "append"))
