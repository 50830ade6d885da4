"""Who may read the dashboard and act through it.

* :class:`Access` holds the credentials: none (open: only for a loopback bind), a bearer token, basic
  auth, or both. A request carries the token as ``Authorization: Bearer``, as basic auth, or as the
  session cookie ``POST /login`` sets (an HMAC of the token under a secret made at start-up, never the
  token itself). Comparisons are constant-time.
* :func:`check_bind` refuses a bind that is not loopback without credentials.
* :meth:`Access.csrf_token` is the token every action form carries (an HMAC under the same start-up
  secret): a page of another site cannot read it, so it cannot make a browser act.
* An open dashboard answers only requests whose ``Host`` is a loopback name (:data:`LOOPBACK_HOSTS`),
  so a page of another site cannot reach it through DNS rebinding.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["COOKIE", "LOOPBACK_HOSTS", "Access", "check_bind", "is_loopback"]

COOKIE = "laraq_dashboard"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """The dashboard's credentials (see the module docstring)."""

    token: str | None = None
    #: ``(user, password)`` for HTTP basic auth
    basic: tuple[str, str] | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @property
    def open(self) -> bool:
        return not self.token and self.basic is None

    def _mac(self, what: str) -> str:
        return hmac.new(self.secret, what.encode("utf-8"), hashlib.sha256).hexdigest()

    def csrf_token(self) -> str:
        return self._mac("csrf")

    def csrf_ok(self, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(str(sent), self.csrf_token())

    def session_for(self, token: str) -> str | None:
        """The session cookie's value when ``token`` is the dashboard's token, else None."""
        if self.token and hmac.compare_digest(token.encode("utf-8"), self.token.encode("utf-8")):
            return self._mac("session:" + self.token)
        return None

    def allows(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool:
        """True when the request's headers or cookies carry valid credentials (always when open)."""
        if self.open:
            return True
        header = headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token:
            if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode()):
                return True
            cookie = cookies.get(COOKIE, "")
            if cookie and hmac.compare_digest(cookie, self._mac("session:" + self.token)):
                return True
        if self.basic is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            same_user = hmac.compare_digest(user.encode(), self.basic[0].encode())
            same_password = hmac.compare_digest(password.encode(), self.basic[1].encode())
            return same_user and same_password
        return False


def check_bind(host: str, access: Access) -> None:
    """Raise ValueError when ``host`` is not loopback and ``access`` is open."""
    if not is_loopback(host) and access.open:
        raise ValueError(f"binding the dashboard to {host!r} (not loopback) needs a token (--token or "
                         "LARAQ_DASHBOARD_TOKEN) or basic auth (--basic-auth USER:PASSWORD)")
