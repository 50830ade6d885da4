"""How much of a message or an exception text a log line carries.

A handler that raises with a 10 MB message must not copy it into every log line (``failed_jobs`` keeps
the whole text, as PHP does). The worker's own log lines and ``laraq work``'s logging
(:mod:`laraq.production.logs`) cut texts with :func:`short`. This module imports nothing: any layer uses it.
"""

from __future__ import annotations

__all__ = ["MAX_LOGGED_TEXT", "short"]

#: Longest message and exception text a log line carries.
MAX_LOGGED_TEXT = 4000


def short(text: str, limit: int = MAX_LOGGED_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"
