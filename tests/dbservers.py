"""Throw-away MariaDB/MySQL and PostgreSQL servers for the failed-job store tests.

Each server gets a fresh data directory under ``/tmp``, listens on a free loopback port, and is stopped
and deleted at the end of the session. When running as root, the server runs as an unprivileged
account (``mysql`` / ``postgres``, else ``nobody``) because PostgreSQL refuses to run as root.
:func:`mariadb_unavailable` / :func:`postgres_unavailable` return a human reason when the binaries are
not installed: the ``mariadb``/``postgres`` fixtures then skip locally and fail under CI (``.ci/run``
installs both). ``pause()``/``resume()`` restart a server on the same port with the same data, for the
tests of a database restarted under a running worker.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service_user(*candidates: str) -> pwd.struct_passwd | None:
    """The account to run a server as (None: run as ourselves, i.e. we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in (*candidates, "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged account to run the database server as")


def _workdir(prefix: str, owner: pwd.struct_passwd | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return path


def _run_as(owner: pwd.struct_passwd | None, workdir: Path | None = None) -> dict[str, Any]:
    """``subprocess`` arguments that run a server tool as ``owner`` in its own ``workdir``.

    The tool's temporary files go to ``workdir/tmp``: an inherited ``TMPDIR`` (a test runner's or a
    sandbox's private temp dir) is often not writable by the unprivileged account, and InnoDB then
    aborts ``mariadb-install-db`` with "Can't create/write to file ... Permission denied".
    """
    extra: dict[str, Any] = {}
    if workdir is not None:
        tmp = workdir / "tmp"
        tmp.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(tmp, owner.pw_uid, owner.pw_gid)
        extra = {"cwd": str(workdir), "env": {**os.environ, "TMPDIR": str(tmp), "HOME": str(workdir)}}
    if owner is None:
        return extra
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": [], **extra}


def _terminate(proc: subprocess.Popen[bytes], signal: int) -> None:
    """Stop a server process with ``signal`` (SIGKILL after 30 s) and reap it."""
    if proc.poll() is None:
        proc.send_signal(signal)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return "(no log)"


# -- MariaDB / MySQL -----------------------------------------------------------------------------


def _mariadb_binaries() -> tuple[str, str] | None:
    server = shutil.which("mariadbd") or shutil.which("mysqld") or next(
        (p for p in ("/usr/sbin/mariadbd", "/usr/sbin/mysqld") if os.path.exists(p)), None)
    installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if server and installer:
        return server, installer
    return None


def mariadb_unavailable() -> str | None:
    if _mariadb_binaries() is None:
        return "MariaDB/MySQL server binaries not installed (apt-get install mariadb-server)"
    try:
        import pymysql  # noqa: F401
    except ImportError:
        return "pymysql not installed (pip install pymysql)"
    return None


class MariaDBServer:
    """A private ``mariadbd`` with ``--skip-grant-tables`` on 127.0.0.1:<free port>."""

    database = "laraq_test"

    def __init__(self) -> None:
        bins = _mariadb_binaries()
        if bins is None:
            raise RuntimeError(mariadb_unavailable() or "no MariaDB")
        server, installer = bins
        self.owner = _service_user("mysql")
        self.dir = _workdir("laraq-mariadb-", self.owner)
        self.data = self.dir / "data"
        self.socket = self.dir / "mysqld.sock"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        user_args = [f"--user={self.owner.pw_name}"] if self.owner else []
        install = subprocess.run(
            [installer, "--no-defaults", f"--datadir={self.data}", "--skip-test-db",
             "--auth-root-authentication-method=normal", *user_args],
            capture_output=True, text=True, timeout=180, **_run_as(self.owner, self.dir),
        )
        if install.returncode != 0:
            self.cleanup()
            raise RuntimeError(f"{installer} failed:\n{install.stdout}\n{install.stderr}")
        self._server, self._user_args = server, user_args
        self._start(create=True)

    def _start(self, *, create: bool = False) -> None:
        server, user_args = self._server, self._user_args
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [server, "--no-defaults", f"--datadir={self.data}", f"--socket={self.socket}",
                 f"--port={self.port}", "--bind-address=127.0.0.1", "--skip-grant-tables",
                 f"--pid-file={self.dir / 'mysqld.pid'}", "--innodb-buffer-pool-size=16M",
                 "--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci",
                 f"--tmpdir={self.dir / 'tmp'}", *user_args],
                stdout=log, stderr=subprocess.STDOUT, **_run_as(self.owner, self.dir),
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = self._connect(None)
                if create:
                    with conn.cursor() as cur:
                        cur.execute(f"create database if not exists `{self.database}` "
                                    "character set utf8mb4 collate utf8mb4_unicode_ci")
                    conn.commit()
                conn.close()
                break
            except Exception as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"mariadbd did not start: {exc}\n{_log_tail(self.log)}") from None
                time.sleep(0.2)

    def pause(self) -> None:
        """Stop the server, keeping its data and port (a database restart: :meth:`resume` brings it back)."""
        _terminate(self.proc, 15)

    def resume(self) -> None:
        """Start the paused server again on the same port with the same data."""
        self._start()

    def _connect(self, database: str | None) -> Any:
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               database=database, charset="utf8mb4", connect_timeout=2)

    def connect(self) -> Any:
        return self._connect(self.database)

    @property
    def env(self) -> dict[str, str]:
        """The ``DB_*`` variables a Laravel app would use to reach this server."""
        return {"DB_CONNECTION": "mysql", "DB_HOST": "127.0.0.1", "DB_PORT": str(self.port),
                "DB_DATABASE": self.database, "DB_USERNAME": "root", "DB_PASSWORD": ""}

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            _terminate(proc, 15)
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# -- PostgreSQL ---------------------------------------------------------------------------------


def _postgres_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
                            if p.split("/")[-2].isdigit() else 0, reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")) and os.path.exists(os.path.join(candidate, "postgres")):
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).parent
    return None


def postgres_unavailable() -> str | None:
    if _postgres_bindir() is None:
        return "PostgreSQL server binaries not installed (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg 3 not installed (pip install 'psycopg[binary]')"
    return None


class PostgresServer:
    """A private ``postgres`` (trust auth) on 127.0.0.1:<free port>."""

    database = "laraq_test"

    def __init__(self) -> None:
        bindir = _postgres_bindir()
        if bindir is None:
            raise RuntimeError(postgres_unavailable() or "no PostgreSQL")
        self.owner = _service_user("postgres")
        self.dir = _workdir("laraq-pg-", self.owner)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        init = subprocess.run(
            [str(bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            capture_output=True, text=True, timeout=180, **_run_as(self.owner, self.dir),
        )
        if init.returncode != 0:
            self.cleanup()
            raise RuntimeError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        self._bindir = bindir
        self._start(create=True)

    def _start(self, *, create: bool = False) -> None:
        bindir = self._bindir
        with open(self.log, "ab") as log:
            if self.owner is not None:
                os.chown(self.log, self.owner.pw_uid, self.owner.pw_gid)
            self.proc = subprocess.Popen(
                [str(bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-h", "127.0.0.1",
                 "-k", str(self.dir), "-F", "-c", "fsync=off", "-c", "timezone=UTC"],
                stdout=log, stderr=subprocess.STDOUT, **_run_as(self.owner, self.dir),
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                import psycopg

                with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                                     autocommit=True, connect_timeout=2) as conn:
                    if create:
                        conn.execute(f'create database "{self.database}"')
                break
            except Exception as exc:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"postgres did not start: {exc}\n{_log_tail(self.log)}") from None
                time.sleep(0.2)

    def pause(self) -> None:
        """Stop the server (fast shutdown: open connections are cut), keeping its data and port."""
        _terminate(self.proc, 2)

    def resume(self) -> None:
        """Start the paused server again on the same port with the same data."""
        self._start()

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=self.database)

    @property
    def env(self) -> dict[str, str]:
        return {"DB_CONNECTION": "pgsql", "DB_HOST": "127.0.0.1", "DB_PORT": str(self.port),
                "DB_DATABASE": self.database, "DB_USERNAME": "postgres", "DB_PASSWORD": ""}

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            _terminate(proc, 2)  # SIGINT: fast shutdown
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
