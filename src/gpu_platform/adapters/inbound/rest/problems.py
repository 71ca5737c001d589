"""Errors as RFC 7807 problem details (`application/problem+json`).

Every error answer is `{"type", "title", "status", "detail"}`; a validation error (422) also
names the offending `field` (dotted, e.g. `command` or `env.BAD-KEY`) and lists every problem
in `errors`. A 401 carries `WWW-Authenticate: Bearer`, a 429 `Retry-After` (whole seconds).

    status  type (urn:gpu-platform:problem:…)   raised by
    401     unauthenticated                      no/unknown/revoked bearer token
    403     forbidden                            the role may not do this
    404     not-found                            unknown id (or another tenant's job)
    409     conflict                             refused by the current state
    413     payload-too-large                    body over max_request_bytes (`rest.body_limit`)
    422     invalid-request                      bad input; `field` names it
    429     too-many-requests                    rate limit or tenant admission limit
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.raft_node import NodeStopped
from gpu_platform.domain.errors import Conflict, IllegalTransition, InvalidRequest, NotFound
from gpu_platform.domain.model.tenancy import Forbidden, TooManyRequests, Unauthenticated

__all__ = [
    "COMMON_ERRORS",
    "CONFLICT",
    "NOT_FOUND",
    "PROBLEM_JSON",
    "Problem",
    "install_problem_handlers",
    "problem_openapi",
]

PROBLEM_JSON = "application/problem+json"
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_TITLES = {
    400: ("bad-request", "Bad request"),
    401: ("unauthenticated", "Authentication required"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    409: ("conflict", "Conflict"),
    413: ("payload-too-large", "Payload too large"),
    422: ("invalid-request", "Invalid request"),
    429: ("too-many-requests", "Too many requests"),
}


class FieldError(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 7807 problem details."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None
    errors: list[FieldError] | None = None


def _doc(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _doc("Unknown id")}
CONFLICT: dict[int | str, dict[str, Any]] = {409: _doc("Refused by the current state")}
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _doc("Missing, unknown or revoked bearer token"),
    403: _doc("The token's role may not do this"),
    422: _doc("Invalid input; `field` names it"),
    429: _doc("Rate or admission limit; see Retry-After"),
}


def problem(
    status: int,
    detail: str,
    *,
    field: str | None = None,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    slug, title = _TITLES.get(status, ("error", "Error"))
    body = Problem(
        type=f"urn:gpu-platform:problem:{slug}",
        title=title,
        status=status,
        detail=detail,
        field=field,
        errors=errors,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [FieldError(field=_loc(e["loc"]), message=e["msg"]) for e in exc.errors()]
        first = errors[0] if errors else FieldError(field="body", message="invalid")
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors) or "invalid request"
        return problem(422, detail, field=first.field, errors=errors)

    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, exc: InvalidRequest) -> JSONResponse:
        errors = [FieldError(field=exc.field, message=exc.reason)]
        return problem(422, str(exc), field=exc.field, errors=errors)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return problem(404, str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return problem(409, str(exc))

    @app.exception_handler(IllegalTransition)
    async def _illegal(_: Request, exc: IllegalTransition) -> JSONResponse:
        return problem(409, str(exc))

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        return problem(401, str(exc), headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(Forbidden)
    async def _forbidden(_: Request, exc: Forbidden) -> JSONResponse:
        return problem(403, str(exc))

    @app.exception_handler(TooManyRequests)
    async def _too_many(_: Request, exc: TooManyRequests) -> JSONResponse:
        retry = str(max(1, math.ceil(exc.retry_after_s)))
        return problem(429, str(exc), headers={"Retry-After": retry})

    @app.exception_handler(LeaderElsewhere)
    async def _elsewhere(request: Request, exc: LeaderElsewhere) -> Response:
        if exc.http_url:  # 307 keeps the method and body: the client repeats it there
            target = exc.http_url.rstrip("/") + request.url.path
            if request.url.query:
                target += "?" + request.url.query
            return RedirectResponse(target, status_code=307)
        return problem(503, str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(NodeStopped)
    async def _stopped(_: Request, exc: NodeStopped) -> JSONResponse:
        return problem(503, "server is shutting down", headers={"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = None if exc.headers is None else dict(exc.headers)
        return problem(exc.status_code, str(exc.detail), headers=headers)


def problem_openapi(app: FastAPI) -> None:
    """Document error answers as application/problem+json (FastAPI says application/json)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    for status, response in operation.get("responses", {}).items():
                        if status[:1] in "45":
                            response["content"] = {PROBLEM_JSON: {"schema": dict(_PROBLEM_REF)}}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
