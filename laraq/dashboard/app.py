"""The dashboard as a Starlette (ASGI) app: :func:`create_app` builds it, ``laraq dashboard`` serves it
with uvicorn, and a team can mount it in its own ASGI app (``Mount("/queues", app=create_app(ops, ...))``).

Pages are rendered on the server from Jinja2 templates (autoescaped: payload text is always HTML-escaped)
and read the same with JavaScript off; ``static/dashboard.js`` re-fetches a live page every few seconds
and swaps its ``<main>`` in place. Every request but ``/login`` and ``/static`` passes :class:`Guard`
first (credentials, and a loopback ``Host`` when the dashboard is open). Actions are POSTs carrying the
CSRF token; the first POST shows what would happen (the dry run's count for a retry) and asks, the
second, with ``confirm=yes``, acts and writes the journal (:mod:`laraq.dashboard.actions`).
``read_only`` turns every action off (403, and no forms on the pages).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from laraq.cli.common import Ops, fmt_time
from laraq.dashboard import actions, views
from laraq.dashboard.auth import COOKIE, LOOPBACK_HOSTS, Access
from laraq.dashboard.history import History

__all__ = ["Guard", "create_app"]

ACTIONS = ("pause", "resume", "restart", "retry", "forget", "undo", "cancel")
_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("laraq.dashboard", "templates"), autoescape=True)
    env.filters["ts"] = fmt_time
    return env


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` -> ``[::1]``)."""
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if ":" in header else header


class Guard:
    """ASGI middleware: a request without credentials (or, when open, with a ``Host`` that is not loopback)
    gets 401 (the login form, or a basic-auth challenge) and reaches no page."""

    def __init__(self, app: ASGIApp, access: Access, env: jinja2.Environment,
                 allowed_hosts: Sequence[str] = LOOPBACK_HOSTS) -> None:
        self.app, self.access, self.env, self.allowed_hosts = app, access, env, tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = scope.get("path", "")[len(scope.get("root_path", "")):] if scope.get("root_path") else scope["path"]
        if self.access.open:
            if _host_name(request.headers.get("host") or "") not in self.allowed_hosts:
                await HTMLResponse("this dashboard answers only on a loopback address", 421)(scope, receive, send)
                return
        elif not (path == "/login" or path.startswith("/static/")) and not self.access.allows(
                request.headers, request.cookies):
            await _unauthorized(request, self.access, self.env)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _unauthorized(request: Request, access: Access, env: jinja2.Environment) -> Response:
    headers = dict(_HEADERS)
    if access.basic is not None and not access.token:
        headers["WWW-Authenticate"] = 'Basic realm="laraq dashboard", charset="UTF-8"'
    body = env.get_template("login.html").render(
        base=request.scope.get("root_path", ""), token=bool(access.token), basic=access.basic is not None,
        error=None, page="login", live=False, read_only=True, csrf="")
    return HTMLResponse(body, 401, headers=headers)


def create_app(ops: Ops, *, access: Access | None = None, read_only: bool = False,
               journal: actions.Journal | None = None, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
               poll_seconds: float = 5.0, history: History | None = None) -> Starlette:
    """The dashboard over ``ops`` (the app's settings and connections, as every ``laraq`` command loads them).

    ``access``: the credentials (default: none, for a loopback bind only); ``read_only``: no actions;
    ``journal``: where actions are written (default: laraq's state directory); ``allowed_hosts``: the
    ``Host`` names an open dashboard answers; ``poll_seconds``: how often a live page refreshes; ``history``:
    the overview's last hour (default: a sample every 10 s, taken by a thread while the app's lifespan runs,
    and by an overview request finding the last sample old, so a mounted app without lifespan has it too)."""
    access = access or Access()
    history = history if history is not None else History()
    journal = journal or actions.Journal()
    env = _templates()

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        body = env.get_template(template).render(
            base=request.scope.get("root_path", ""), csrf=access.csrf_token(), read_only=read_only,
            poll=poll_seconds, prefix=ops.queue.prefix, **{"live": False, **context})
        return HTMLResponse(body, status, headers=_HEADERS)

    def reader(template: str, name: str, read: Callable[[Request], Any], *, live: bool = True) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            try:
                data = await run_in_threadpool(read, request)
            except ValueError as exc:
                return page(request, "error.html", 400, page=name, error=str(exc))
            return page(request, template, page=name, data=data, live=live)
        return endpoint

    def _int(request: Request, key: str, default: int = 1) -> int:
        try:
            return int(request.query_params.get(key, default))
        except ValueError:
            return default

    def read_jobs(request: Request) -> Any:
        return views.jobs(ops, request.path_params["queue"], request.query_params.get("state", "pending"),
                          page=_int(request, "page"), class_filter=request.query_params.get("class"),
                          ident=request.query_params.get("id"))

    def read_failed(request: Request) -> Any:
        return views.failed(ops, views.FailedQuery.from_mapping(request.query_params), page=_int(request, "page"))

    async def job(request: Request) -> Response:
        queue, ident = request.path_params["queue"], request.path_params["ident"]
        state = request.query_params.get("state")
        try:
            position = float(request.query_params["at"]) if "at" in request.query_params else None
        except ValueError:
            position = None
        if position is not None and not math.isfinite(position):
            position = None
        data = await run_in_threadpool(functools.partial(views.job_detail, ops, queue, ident, state=state,
                                                         position=position))
        return page(request, "job.html", 200 if data["found"] else 404, page="jobs", queue=queue, ident=ident,
                    found=data["found"], searched=data["searched"])

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return page(request, "login.html", page="login", token=bool(access.token), basic=access.basic is not None,
                        error=None)
        form = await request.form()
        session = access.session_for(str(form.get("token") or ""))
        if session is None:
            return page(request, "login.html", 401, page="login", token=bool(access.token),
                        basic=access.basic is not None, error="wrong token")
        response = RedirectResponse(request.scope.get("root_path", "") + "/", 303)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path=request.scope.get("root_path", "") or "/")
        return response

    async def act(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ACTIONS:
            return page(request, "error.html", 404, page="actions", error=f"no action {name!r}")
        if read_only:
            return page(request, "error.html", 403, page="actions", error="the dashboard is read-only (--read-only)")
        form = await request.form()
        if not access.csrf_ok(_text(form, "csrf")):
            return page(request, "error.html", 403, page="actions", error="missing or stale CSRF token: reload the page")
        try:
            return await _act(request, name, form)
        except ValueError as exc:
            return page(request, "error.html", 400, page="actions", error=str(exc))

    async def _act(request: Request, name: str, form: FormData) -> Response:
        client = request.client.host if request.client else None
        queue = _text(form, "queue")
        ids = [str(i) for i in form.getlist("ids") if str(i).strip()]
        query = views.FailedQuery.from_mapping(form)
        if name in ("pause", "resume") and not queue:
            raise ValueError(f"{name}: no queue given")
        if name == "cancel" and not _text(form, "batch"):
            raise ValueError("cancel: no batch given")
        if name == "undo":
            journal.retry_journal_named(_text(form, "journal"))  # ValueError: not one of ours
        elif name in ("retry", "forget") and not ids and query.as_params() == views.FailedQuery().as_params() \
                and _text(form, "all") != "yes":
            raise ValueError(f"{name}: select failed jobs, or filter and choose all that match")
        flt = query.retry_filter()
        confirmed = _text(form, "confirm") == "yes"
        fields = [(k, str(v)) for k, v in form.multi_items() if k not in ("confirm", "csrf")]
        if not confirmed:
            plan = await run_in_threadpool(actions.retry_plan, ops, flt, ids) if name in ("retry", "forget") else None
            return page(request, "confirm.html", page="actions", action=name, queue=queue, plan=plan, fields=fields,
                        batch=_text(form, "batch"))
        if name == "pause":
            result: Any = await run_in_threadpool(actions.pause, ops, queue, journal, client=client)
        elif name == "resume":
            result = await run_in_threadpool(actions.resume, ops, queue, journal, client=client)
        elif name == "restart":
            result = await run_in_threadpool(actions.restart, ops, journal, client=client)
        elif name == "retry":
            result = await run_in_threadpool(actions.retry, ops, flt, ids, journal, client=client)
        elif name == "undo":
            result = await run_in_threadpool(actions.undo, ops, _text(form, "journal"), journal, client=client)
        elif name == "cancel":
            result = await run_in_threadpool(actions.cancel, ops, _text(form, "batch"), journal, client=client)
        else:
            plan = await run_in_threadpool(actions.retry_plan, ops, flt, ids)
            result = await run_in_threadpool(actions.forget, ops, plan["ids"], journal, client=client)
        return page(request, "done.html", page="actions", action=name, result=result, journal_path=str(journal.path))

    def read_overview(request: Request) -> Any:
        with contextlib.suppress(Exception):  # a failed sample leaves a gap in the charts, not an error page
            history.maybe_sample(ops)
        return views.overview(ops, history)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(history.every):
                with contextlib.suppress(Exception):  # Redis away for a moment: the next tick tries again
                    history.maybe_sample(ops)

        thread = threading.Thread(target=sample, name="laraq-dashboard-history", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    routes = [
        Route("/", reader("overview.html", "overview", read_overview)),
        Route("/queues/{queue}", reader("jobs.html", "jobs", read_jobs)),
        Route("/queues/{queue}/jobs/{ident}", job),
        Route("/failed", reader("failed.html", "failed", read_failed)),
        Route("/workers", reader("workers.html", "workers", lambda r: views.workers(ops))),
        Route("/batches", reader("batches.html", "batches", lambda r: views.batches(ops, page=_int(r, "page")))),
        Route("/schedule", reader("schedule.html", "schedule", lambda r: views.schedule(ops))),
        Route("/transfers", reader("transfers.html", "transfers", lambda r: views.transfers(ops))),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/actions/{name}", act, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("laraq.dashboard", "static")]), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(Guard, access=access, env=env, allowed_hosts=allowed_hosts)
    return app


def _text(form: FormData, key: str) -> str:
    value = form.get(key)
    return value.strip() if isinstance(value, str) else ""
