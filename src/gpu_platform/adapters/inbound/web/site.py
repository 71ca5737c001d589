"""What every dashboard route shares: the ports it reads, the templates, and the guard that
turns a request into a principal (or a redirect to the login form, or an error page).

    NoSession        page: 303 to /login; fragment, stream or POST: 401
    BadCsrf          403
    Forbidden        403 (an admin action is also recorded in the audit chain as refused)
    NotFound         404
    TooManyRequests  429 with Retry-After
    other DomainError 409 page naming the refusal
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote

from fastapi.concurrency import run_in_threadpool
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gpu_platform.adapters.inbound.web.session import BadCsrf, NoSession, Session, WebAuth
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.domain.errors import DomainError, InvalidRequest, NotFound
from gpu_platform.domain.model.telemetry import TelemetrySnapshot
from gpu_platform.domain.model.tenancy import Forbidden, Permission, Principal, TooManyRequests
from gpu_platform.domain.topology.matrix import TopologyMatrix
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.services import ServicesApi
from gpu_platform.ports.inbound.usage import UsageQueries

__all__ = ["EventSource", "Site", "Visitor"]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


class EventSource(Protocol):
    """Live domain events (the EventHub): `subscribe()` is a context manager yielding a
    queue.Queue of events, None marking events lost to overflow."""

    def subscribe(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Visitor:
    """The principal behind a request and its session."""

    who: Principal
    session: Session
    jobs: TenantScope

    def may(self, permission: Permission) -> bool:
        return self.who.may(permission)


def _when(t: float | None) -> str:
    if t is None or t <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _ago(seconds: float) -> str:
    if math.isinf(seconds) or seconds < 0:
        return "never"
    return f"{seconds:.1f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


@dataclass
class Site:
    """The dashboard's dependencies. `admin`, `usage`, `events`, `topology` and `telemetry`
    are optional: what is missing is said on the page rather than guessed."""

    jobs: JobService
    auth: WebAuth
    trail: AuditTrail
    admin: AdminService | None = None
    usage: UsageQueries | None = None
    events: EventSource | None = None
    topology: Callable[[str], TopologyMatrix | None] | None = None
    telemetry: Callable[[], TelemetrySnapshot] | None = None
    services: ServicesApi | None = None
    env: Environment = field(init=False)

    def __post_init__(self) -> None:
        self.env = Environment(
            loader=PackageLoader("gpu_platform.adapters.inbound.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["when"] = _when
        self.env.filters["ago"] = _ago
        self.env.filters["argv"] = shlex.join  # a command as a shell would take it

    def render(self, template: str, http_status: int = 200, /, **context: Any) -> HTMLResponse:
        body = self.env.get_template(template).render(**context)
        return HTMLResponse(body, status_code=http_status, headers=SECURITY_HEADERS)

    def admin_service(self) -> AdminService:
        """The AdminService, or NotFound when this server has none (no hardware actions)."""
        if self.admin is None:
            raise NotFound("admin service", "this server")
        return self.admin

    def visitor(self, request: Request) -> Visitor:
        session, who = self.auth.resolve(request)
        return Visitor(who, session, TenantScope(self.jobs, who, self.trail))

    def base(self, v: Visitor, page: str) -> dict[str, Any]:
        """The context every full page needs (navigation, who, CSRF token, flash messages)."""
        flash, v.session.flash[:] = list(v.session.flash), []
        return {
            "page": page,
            "who": v.who,
            "csrf": v.session.csrf,
            "auth_enabled": self.auth.enabled,
            "may_operate": v.may(Permission.HARDWARE_ADMIN) and self.admin is not None,
            "may_write": v.may(Permission.JOBS_WRITE),
            "live": self.events is not None,
            "flash": flash,
        }

    async def guard(
        self,
        request: Request,
        build: Callable[[Visitor], Awaitable[Response]],
        *,
        page: bool = True,
    ) -> Response:
        """Run `build` for the request's visitor, turning refusals into responses."""
        try:
            v = await run_in_threadpool(self.visitor, request)
            return await build(v)
        except NoSession:
            if page:
                target = quote(
                    request.url.path + ("?" + request.url.query if request.url.query else "")
                )
                return RedirectResponse(f"/login?next={target}", status_code=303)
            return self.error(401, "Not logged in", "Log in again to continue.")
        except BadCsrf as exc:
            return self.error(403, "Forbidden", str(exc))
        except Forbidden as exc:
            return self.error(403, "Forbidden", str(exc))
        except NotFound as exc:
            return self.error(404, "Not found", str(exc))
        except TooManyRequests as exc:
            r = self.error(429, "Too many requests", str(exc))
            r.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
            return r
        except InvalidRequest as exc:
            return self.error(422, f"Bad {exc.field}", str(exc))
        except DomainError as exc:
            return self.error(409, "Refused", str(exc))

    def error(self, status: int, title: str, detail: str) -> HTMLResponse:
        return self.render("error.html", status, title=title, detail=detail, page="", who=None)


def form_fields(raw: bytes) -> Mapping[str, str]:
    """An application/x-www-form-urlencoded body as a dict (the last value of each name)."""
    return dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
