"""``laraq dashboard``: a web view of any Laravel Redis queue, with or without Horizon.

The pages read what the ``laraq`` commands read (:mod:`laraq.ops.inspect`, :mod:`laraq.production.holders`,
the failed-job store, heartbeats, Horizon's master and supervisor records, held transfers, the
scheduler's entries) and their actions call the same functions (``laraq retry``'s audited bulk retry,
``queue:pause``/``queue:resume``/``queue:restart`` through the app's cache store). The parts:

* :mod:`laraq.dashboard.app` - :func:`~laraq.dashboard.app.create_app`, the Starlette (ASGI) app, mountable
  in a team's own ASGI app;
* :mod:`laraq.dashboard.auth` - who may read and act: loopback only, a token or basic auth, CSRF tokens;
* :mod:`laraq.dashboard.views` - the data of each page, as plain values for the templates;
* :mod:`laraq.dashboard.actions` - pause, resume, restart, retry and forget, each written to a journal;
* ``templates/`` (Jinja2, autoescaped) and ``static/`` (a small script that refreshes a page in place).

Starlette, uvicorn and Jinja2 come with the ``dashboard`` extra (``pip install 'laraq[dashboard]'``); nothing
else in laraq imports this package.
"""

from __future__ import annotations

__all__ = ["create_app"]

from laraq.dashboard.app import create_app
