"""POST /v1/jobs without FastAPI's per-request machinery for the common case (issue 21).

FastAPI answers a submit by resolving a dependency graph (bearer scheme, `X-Actor`, principal,
tenant scope, `Idempotency-Key`), validating the body and then validating the returned model
again before encoding it: on the live server that cost more event-loop CPU than the HTTP
parsing and the submit itself. This handler takes the route's place and does the same steps
directly, in the same order and with the same models:

    read the body → (not plain? hand over) → principal: authenticate, admit → tenant scope
    → spec (+ Idempotency-Key) → submit in a batch (submit_batches: the submits that arrive
    together share one group commit, on one thread) → 201 JobOut, encoded as FastAPI does

"Plain" means: `Content-Type: application/json`, a JSON body that `JobSubmit` accepts, and at
most one non-empty `Authorization`, `X-Actor` and `Idempotency-Key` each that pass the route's
own checks. Anything else goes to FastAPI's handler for the route before anything with a side
effect has run (the body it reads is the cached one), so every 4xx answer is FastAPI's own and
no rate-limit token or audit record is taken twice. Errors raised once the principal is asked
(401, 429, 404, 409, 422 from the domain...) leave this handler the way they leave FastAPI's,
through the app's problem handlers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import copy_context
from dataclasses import replace
from functools import partial
from typing import Annotated, Any

from fastapi import FastAPI
from fastapi.routing import APIRoute, request_response
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import StringConstraints, TypeAdapter
from starlette.requests import Request
from starlette.responses import Response

from gpu_platform.adapters.inbound.rest.auth import ACTOR_MAX_LENGTH, Auth
from gpu_platform.adapters.inbound.rest.schemas import JobOut, JobSubmit
from gpu_platform.adapters.inbound.rest.submit_batches import SubmitBatches
from gpu_platform.domain.model.job import CLIENT_TOKEN_PATTERN

__all__ = ["FastSubmit", "install_fast_submit"]

Handler = Callable[[Request], Awaitable[Response]]

_KEY = TypeAdapter(Annotated[str, StringConstraints(pattern=CLIENT_TOKEN_PATTERN)])
_BODY = TypeAdapter(JobSubmit)
_OUT = TypeAdapter(JobOut)
_WANTED = (b"content-type", b"authorization", b"x-actor", b"idempotency-key")


class _Raising:
    """A `receive` that raises what reading the body raised, for FastAPI to handle its way."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def __call__(self) -> Any:
        raise self.error


def _plain_headers(raw: list[tuple[bytes, bytes]]) -> dict[bytes, str] | None:
    """The headers the route reads, or None where FastAPI should judge them."""
    found: dict[bytes, str] = {}
    for name, value in raw:
        if name in _WANTED:
            if name in found or not value:
                return None
            found[name] = value.decode("latin-1")
    if found.get(b"content-type") != "application/json":
        return None
    if len(found.get(b"x-actor", "")) > ACTOR_MAX_LENGTH:
        return None
    key = found.get(b"idempotency-key")
    if key is not None:
        try:
            _KEY.validate_python(key)
        except Exception:  # FastAPI's handler answers it (422)
            return None
    return found


def _bearer(authorization: str | None) -> tuple[bool, str | None]:
    """(plain, token) as HTTPBearer(auto_error=False) reads it; not plain: let FastAPI read it."""
    if authorization is None:
        return True, None
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not (scheme and credentials) or scheme.lower() != "bearer":
        return False, None
    return True, credentials


class FastSubmit:
    """The submit route's handler: the plain case here, the rest by FastAPI's `slow`.
    `answered` and `handed_over` count the two (for tests and profiles)."""

    def __init__(self, auth: Auth, slow: Handler) -> None:
        self.auth = auth
        self.slow = slow
        self.answered = 0
        self.handed_over = 0
        self.batches = SubmitBatches()

    async def _hand_over(self, request: Request) -> Response:
        self.handed_over += 1
        return await self.slow(request)

    async def __call__(self, request: Request) -> Response:
        headers = _plain_headers(request.scope["headers"])
        if headers is None:
            return await self._hand_over(request)
        try:
            body = await request.body()
        except Exception as error:  # re-raised inside FastAPI's own handling
            return await self._hand_over(Request(request.scope, _Raising(error)))
        plain, secret = _bearer(headers.get(b"authorization"))
        try:
            if not plain or not body:
                raise ValueError("not plain")
            submit = _BODY.validate_python(json.loads(body), from_attributes=True)
        except Exception:  # invalid: FastAPI's handler names the field (422)
            return await self._hand_over(request)
        self.answered += 1
        client = request.scope.get("client")
        source = client[0] if client is not None else ""
        auth = self.auth
        who = auth.identify(secret, source, headers.get(b"x-actor", "anonymous"))
        jobs = auth.tenant_scope(who)
        spec = submit.to_spec(default_tenant=who.tenant)
        key = headers.get(b"idempotency-key")
        if key is not None:
            spec = replace(spec, client_token=key)
        # the context goes along (read consistency, trace)
        job = await self.batches.call(partial(copy_context().run, jobs.submit, spec))
        content = _OUT.dump_json(JobOut.of(job), by_alias=True)  # as FastAPI encodes it
        return Response(content, 201, media_type="application/json")


def install_fast_submit(app: FastAPI, auth: Auth) -> FastSubmit:
    """Answer `POST /v1/jobs` (declared on `app` as usual) with a `FastSubmit`."""
    for route in app.router.routes:
        if (
            isinstance(route, APIRoute)
            and route.path == "/v1/jobs"
            and "POST" in (route.methods or ())
        ):
            handler = FastSubmit(auth, route.get_route_handler())
            route.app = request_response(handler)
            return handler
    raise LookupError("no POST /v1/jobs route to speed up")
