"""laraq's exit codes and the one place that turns an exception kind into one line with its cause and fix.

artisan's codes are kept (0 stopped, 1 error, 2 usage, 12 memory); the codes 3-6 name faults of the
surroundings, so a process manager or a script can tell "Redis is down" from "the password is wrong"
without reading logs. The table is in ``compat-docs/worker.md`` ("Exit codes"). :func:`explain` is used by
the worker at start (:mod:`laraq.worker.startup`) and by every ``laraq`` command (:mod:`laraq.cli.errors`).
"""

from __future__ import annotations

import redis

from laraq.protocol.encryption import DecryptError

__all__ = [
    "EXIT_SUCCESS", "EXIT_ERROR", "EXIT_USAGE", "EXIT_REDIS_UNREACHABLE", "EXIT_REDIS_AUTH",
    "EXIT_DATABASE", "EXIT_CONFIG", "EXIT_MEMORY_LIMIT", "explain", "one_line",
]

EXIT_SUCCESS = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REDIS_UNREACHABLE = 3
EXIT_REDIS_AUTH = 4
EXIT_DATABASE = 5
EXIT_CONFIG = 6
EXIT_MEMORY_LIMIT = 12

_AUTH_MARKERS = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password", "HELLO must be called",
                 "Authentication required", "AUTH <password> called without any password")
_REDIS_FIX = "set REDIS_HOST/REDIS_PORT (or REDIS_URL) as in the app's .env, or pass --redis-url / --env-file"
_AUTH_FIX = ("set REDIS_PASSWORD (and REDIS_USERNAME for an ACL user) as in the app's .env, or put them in "
             "--redis-url redis://user:password@host:port/db")


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (at most 300 characters), or its class name when it has none."""
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _is_db_error(exc: BaseException) -> bool:
    mod = type(exc).__module__ or ""
    names = {c.__name__ for c in type(exc).__mro__}
    if mod.startswith(("sqlite3", "pymysql", "psycopg", "MySQLdb")):
        return bool(names & {"OperationalError", "ProgrammingError", "DatabaseError", "InterfaceError",
                             "Error", "InternalError"})
    return False


def explain(exc: BaseException, *, redis_url: str | None = None) -> tuple[str, int] | None:
    """One line naming the cause and the fix, and the exit code, for a known fault; ``None`` otherwise.

    ``redis_url`` (already masked) names the server in Redis messages.
    """
    where = f" at {redis_url}" if redis_url else ""
    text = one_line(exc)
    if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and any(m.lower() in text.lower() for m in _AUTH_MARKERS)):
        if "NOAUTH" in text or "HELLO must be called" in text or "Authentication required" in text:
            reason = "no password was sent but the server needs one"
        else:
            reason = f"the password or user is wrong: {text}"
        return f"Redis{where} refused the credentials ({reason}); {_AUTH_FIX}", EXIT_REDIS_AUTH
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return f"cannot reach Redis{where} ({text}); start it there, or {_REDIS_FIX}", EXIT_REDIS_UNREACHABLE
    if _is_db_error(exc):
        fix = ("run the app's migrations (`php artisan migrate`) so the table exists"
               if "no such table" in text or "doesn't exist" in text or "does not exist" in text
               else "start the database or fix DB_HOST/DB_PORT/DB_DATABASE/DB_USERNAME/DB_PASSWORD in the .env "
                    "(--env-file)")
        return f"database error ({text}); {fix}", EXIT_DATABASE
    if isinstance(exc, DecryptError):
        return f"cannot decrypt with APP_KEY ({text}); use the app's exact APP_KEY (--env-file)", EXIT_CONFIG
    return None
