"""The one place that turns a fault of the surroundings (Redis, TLS, ACLs, a database, ``APP_KEY``) into one
line with its cause and fix, and its exit code (:mod:`laraq.exitcodes`).

A TLS certificate Redis's CA or host name does not pass, or ``rediss://`` to a plain-text port, is a
settings fault (6), not an outage (3): restarting will not fix it. :func:`explain` is used by the worker
(at start and when Redis refuses it later) and by every ``laraq`` command (:mod:`laraq.cli.errors`).
"""

from __future__ import annotations

import redis

from laraq.exitcodes import EXIT_CONFIG, EXIT_DATABASE, EXIT_REDIS_AUTH, EXIT_REDIS_UNREACHABLE
from laraq.protocol.acl import Denial, denied
from laraq.protocol.encryption import DecryptError

__all__ = ["AUTH_MARKERS", "acl_message", "explain", "is_acl_denial", "one_line", "tls_advice", "tls_is_settings_fault"]

AUTH_MARKERS = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password", "HELLO must be called",
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


_CA_FIX = ("trust the CA that signed it: add ?ssl_ca_certs=/path/to/ca.pem to --redis-url or REDIS_URL (the file "
           "Laravel's redis 'context' => ['cafile' => ...] names), or install that CA in the system's trust store")


def tls_advice(text: str, url: str) -> tuple[str, str] | None:
    """``(what went wrong, the fix)`` for a TLS fault in a connection error's text, else ``None``; ``{where}``
    in the first marks where the server's address goes."""
    lower = text.lower()
    if "certificate verify failed" in lower or "certificate_verify_failed" in lower:
        if "mismatch" in lower or "not valid for" in lower:
            return ("the TLS certificate of Redis{where} is not valid for the host name connected to",
                    "connect with the name or address the certificate was issued for (REDIS_HOST), or reissue "
                    "the certificate with this one in its subjectAltName")
        if "expired" in lower or "not yet valid" in lower:
            return "the TLS certificate of Redis{where} is outside its validity dates", "renew the server's certificate"
        return "the TLS certificate of Redis{where} could not be verified", _CA_FIX
    if "wrong_version_number" in lower or "wrong version number" in lower or "unknown protocol" in lower:
        return ("Redis{where} did not answer the TLS handshake (a plain-text port?)",
                "use redis:// (REDIS_SCHEME=tcp) for a port without TLS, or the server's tls-port for rediss://")
    if "ssl" in lower or "tls" in lower:
        return "TLS to Redis{where} failed", "check the server's tls-port and certificate, and ssl_* options in the URL"
    if url.startswith("rediss://") and "timeout connecting" in lower:
        return ("no TLS handshake from Redis{where} (a plain-text port, or the server is not up)",
                "use redis:// (REDIS_SCHEME=tcp) if this port has no TLS, or start Redis there")
    if url.startswith("redis://") and ("connection reset by peer" in lower or "connection closed by server" in lower):
        return ("Redis{where} closed the connection at once (a TLS-only port?)",
                "use rediss:// (REDIS_SCHEME=tls) if the server expects TLS there, or start Redis there")
    return None


def tls_is_settings_fault(text: str) -> bool:
    """Is the TLS fault in ``text`` one that only a settings change fixes (a certificate the CA, host name
    or dates refuse; ``rediss://`` to a plain-text port), as opposed to one a down server also gives?"""
    lower = text.lower()
    return any(m in lower for m in ("certificate verify failed", "certificate_verify_failed",
                                    "wrong_version_number", "wrong version number", "unknown protocol"))


def acl_message(denial: Denial, where: str, text: str, redis_url: str | None) -> str:
    """One line for an ACL denial: what was refused, where, and the ``ACL SETUSER`` that grants it."""
    user = None
    if redis_url and "@" in redis_url.partition("://")[2]:
        user = redis_url.partition("://")[2].partition("@")[0].partition(":")[0] or None
    if denial.kind == "command":
        what = f"the command '{denial.command}'" if denial.command else "a command"
        inside = " inside a queue script (Redis checks the commands a script runs)" if denial.in_script else ""
        head = f"Redis{where} denied {what} to this ACL user{inside}"
    elif denial.kind == "key":
        head = f"Redis{where} denied this ACL user a key"
    else:
        head = f"Redis{where} denied this ACL user a Pub/Sub channel"
    return (f"{head} ({text}); grant it: {denial.grant(user)} - compat-docs/protocol.md ('ACL') lists "
            "everything a worker needs")


def is_acl_denial(exc: BaseException) -> bool:
    """Did Redis refuse ``exc``'s command (or a command its script ran) for lack of an ACL permission?"""
    return isinstance(exc, redis.ResponseError) and denied(one_line(exc)) is not None


def explain(exc: BaseException, *, redis_url: str | None = None) -> tuple[str, int] | None:
    """One line naming the cause and the fix, and the exit code, for a known fault; ``None`` otherwise.

    ``redis_url`` (already masked) names the server in Redis messages.
    """
    where = f" at {redis_url}" if redis_url else ""
    text = one_line(exc)
    if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and any(m.lower() in text.lower() for m in AUTH_MARKERS)):
        if "NOAUTH" in text or "HELLO must be called" in text or "Authentication required" in text:
            reason = "no password was sent but the server needs one"
        else:
            reason = f"the password or user is wrong: {text}"
        return f"Redis{where} refused the credentials ({reason}); {_AUTH_FIX}", EXIT_REDIS_AUTH
    if isinstance(exc, redis.ResponseError) and (denial := denied(text)) is not None:
        return acl_message(denial, where, text, redis_url), EXIT_REDIS_AUTH
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        tls = tls_advice(text, redis_url or "")
        if tls is not None:
            code = EXIT_CONFIG if tls_is_settings_fault(text) else EXIT_REDIS_UNREACHABLE
            return f"{tls[0].format(where=where)} ({text}); {tls[1]}", code
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
