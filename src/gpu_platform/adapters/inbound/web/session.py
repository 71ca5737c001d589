"""Dashboard sessions: a login with a bearer token gives an HttpOnly, SameSite=Strict cookie
holding a random session id; the token stays on the server. Every request re-authenticates
the token through the AccessService, so revoking it ends its sessions, and the principal has
the same role as on the API.

Each session has a CSRF token that every POST must echo (form field `csrf` or header
`X-CSRF-Token`); with SameSite=Strict that is two independent guards. Sessions live in
memory: a restart of the server asks everyone to log in again.

Errors: `NoSession` (no cookie, an unknown id, or a token no longer valid) - pages redirect
to the login form, fragments and streams answer 401; `BadCsrf` - 403.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from gpu_platform.domain.model.tenancy import Principal, Unauthenticated
from gpu_platform.ports.inbound.access import AccessService

__all__ = ["COOKIE", "BadCsrf", "NoSession", "Session", "SessionStore", "WebAuth"]

COOKIE = "gpu_platform_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class NoSession(Exception):
    """The request has no valid session."""


class BadCsrf(Exception):
    """A POST without the session's CSRF token."""


@dataclass(slots=True)
class Session:
    id: str
    token: str | None  # None when authentication is off
    csrf: str
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, message) shown once


class SessionStore:
    """Thread-safe, bounded: past `capacity` sessions the least recently used goes."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, token: str | None) -> Session:
        s = Session(secrets.token_urlsafe(32), token, secrets.token_urlsafe(32))
        with self._lock:
            self._sessions[s.id] = s
            while len(self._sessions) > self._capacity:
                self._sessions.popitem(last=False)
        return s

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None:
                self._sessions.move_to_end(session_id)
            return s

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


class WebAuth:
    """Resolves a request's session cookie into the session and its principal."""

    def __init__(self, access: AccessService, sessions: SessionStore | None = None) -> None:
        self.access = access
        self.sessions = sessions or SessionStore()

    @property
    def enabled(self) -> bool:
        return self.access.enabled

    def login(self, token: str | None, source: str = "") -> tuple[Session, Principal]:
        """A new session for `token` (Unauthenticated if the server does not know it;
        TooManyRequests once `source` has tried too many bad tokens)."""
        who = self.access.authenticate(token if self.enabled else None, source)
        return self.sessions.create(token if self.enabled else None), who

    def resolve(self, request: Request) -> tuple[Session, Principal]:
        """The request's session and principal (rate-limited like an API call)."""
        session = self.sessions.get(request.cookies.get(COOKIE, ""))
        if session is None:
            raise NoSession("no session")
        try:
            source = request.client.host if request.client is not None else ""
            who = self.access.authenticate(session.token, source)
        except Unauthenticated:
            self.sessions.drop(session.id)
            raise NoSession("the session's token is no longer valid") from None
        self.access.admit(who)
        if not self.enabled:
            who = dataclasses.replace(who, name="dashboard")
        return session, who

    @staticmethod
    def check_csrf(session: Session, submitted: str | None) -> None:
        if not submitted or not hmac.compare_digest(submitted, session.csrf):
            raise BadCsrf("missing or wrong CSRF token")

    @staticmethod
    def set_cookie(request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            session.id,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
