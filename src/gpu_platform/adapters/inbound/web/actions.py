"""Logging in and out, and the actions the dashboard can take: the same AdminService and
JobService calls as the REST API, with the same roles, recorded in the same audit log.

    GET  /login                       the token form
    POST /login     token, next       303 to `next` with the session cookie; 401 on a bad token
    POST /logout    csrf              303 to /login
    POST /ui/actions/gpus/{node}/{index}   csrf, action (drain|offline|online), reason, force
    POST /ui/actions/nodes/{node}          csrf, action, reason, force
    POST /ui/actions/jobs/{id}/cancel      csrf

An action answers 303 back to the page it came from (`back`, a local path) with the outcome
as a one-time message; a refused action (409) says why there too. A role that may not act
gets 403 and the refusal is audited, as on the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from gpu_platform.adapters.inbound.web.session import (
    COOKIE,
    CSRF_HEADER,
    BadCsrf,
    NoSession,
    WebAuth,
)
from gpu_platform.adapters.inbound.web.site import Site, Visitor, form_fields
from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.domain.faults.commands import AdminAction
from gpu_platform.domain.model.tenancy import AccessError, Permission, Unauthenticated

__all__ = ["actions_router"]

ACTIONS = ("drain", "offline", "online")
MAX_REASON = 256


def _local(path: str | None, default: str = "/") -> str:
    """`path` if it is a path on this site (no scheme, no host), else `default`."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return default
    return path


def _action_form(form: Mapping[str, str]) -> tuple[AdminAction, str, bool]:
    action = form.get("action", "")
    if action not in ACTIONS:
        raise InvalidRequest("action", f"{action!r}: one of {', '.join(ACTIONS)}")
    reason = form.get("reason", "").strip()
    if len(reason) > MAX_REASON:
        raise InvalidRequest("reason", f"at most {MAX_REASON} characters")
    return cast(AdminAction, action), reason, form.get("force", "") in ("on", "true", "1")


def actions_router(site: Site) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    auth: WebAuth = site.auth

    @router.get("/login")
    async def login_form(request: Request, next: str = "/") -> Response:
        if not auth.enabled:  # nothing to ask: every caller is the anonymous admin
            session, _ = auth.login(None)
            r = RedirectResponse(_local(next), status_code=303)
            auth.set_cookie(request, r, session)
            return r
        return site.render("login.html", page="login", who=None, next=_local(next), error="")

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = form_fields(await request.body())
        target = _local(form.get("next"))
        try:
            source = request.client.host if request.client is not None else ""
            token = form.get("token", "").strip()
            session, _ = await run_in_threadpool(auth.login, token, source)
        except Unauthenticated:
            return site.render(
                "login.html",
                401,
                page="login",
                who=None,
                next=target,
                error="That token is not valid (unknown or revoked).",
            )
        r = RedirectResponse(target, status_code=303)
        auth.set_cookie(request, r, session)
        return r

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        form = form_fields(await request.body())
        try:
            session, _ = await run_in_threadpool(auth.resolve, request)
        except (NoSession, AccessError):
            return RedirectResponse("/login", status_code=303)
        try:
            auth.check_csrf(session, form.get("csrf") or request.headers.get(CSRF_HEADER))
        except BadCsrf as exc:
            return site.error(403, "Forbidden", str(exc))
        auth.sessions.drop(session.id)
        r = RedirectResponse("/login", status_code=303)
        r.delete_cookie(COOKIE, path="/")
        return r

    async def act(
        request: Request, audit_as: str, permission: Permission, do: Callable[..., str]
    ) -> Response:
        raw = await request.body()

        async def build(v: Visitor) -> Response:
            form = form_fields(raw)
            auth.check_csrf(v.session, form.get("csrf") or request.headers.get(CSRF_HEADER))
            if not v.may(permission):
                site.trail.record(
                    v.who, audit_as, "-", f"refused: role {v.who.role} lacks {permission}"
                )
                v.who.require(permission)
            back = _local(form.get("back"))
            try:
                done = await run_in_threadpool(do, v, form)
                v.session.flash.append(("ok", done))
            except InvalidRequest:
                raise
            except DomainError as exc:
                if isinstance(exc, AccessError):
                    raise
                v.session.flash.append(("error", f"refused: {exc}"))
            return RedirectResponse(back, status_code=303)

        return await site.guard(request, build, page=False)

    @router.post("/ui/actions/gpus/{node}/{index}")
    async def gpu_action(request: Request, node: str, index: int) -> Response:
        def do(v: Visitor, form: Mapping[str, str]) -> str:
            action, reason, force = _action_form(form)
            site.admin_service().gpu_action(
                node, index, action, reason=reason, actor=v.who.name, force=force
            )
            return f"{action}: GPU {node}:{index}"

        return await act(request, "hardware.action", Permission.HARDWARE_ADMIN, do)

    @router.post("/ui/actions/nodes/{node}")
    async def node_action(request: Request, node: str) -> Response:
        def do(v: Visitor, form: Mapping[str, str]) -> str:
            action, reason, force = _action_form(form)
            site.admin_service().node_action(
                node, action, reason=reason, actor=v.who.name, force=force
            )
            return f"{action}: node {node}"

        return await act(request, "hardware.action", Permission.HARDWARE_ADMIN, do)

    @router.post("/ui/actions/jobs/{job_id}/cancel")
    async def cancel(request: Request, job_id: str) -> Response:
        def do(v: Visitor, form: Mapping[str, str]) -> str:
            v.jobs.cancel(job_id, "cancelled from the dashboard")
            return f"cancel: job {job_id}"

        return await act(request, "job.cancel", Permission.JOBS_WRITE, do)

    return router
