"""A small HTTP client for the REST API; every failure becomes one readable line and an exit
code (docs/cli.md):

    0 ok   1 refused/other error   2 usage   3 server unreachable   4 authentication or
    permission (401/403)   5 not found (404)   6 invalid input (422)   7 overloaded, retry
    later (429)   8 audit chain broken (`audit verify`)
"""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

__all__ = ["EXIT", "ApiClient", "ApiError"]

EXIT = {
    "ok": 0,
    "error": 1,
    "usage": 2,
    "unreachable": 3,
    "auth": 4,
    "not_found": 5,
    "invalid": 6,
    "overloaded": 7,
    "audit_broken": 8,
}
_BY_STATUS = {401: 4, 403: 4, 404: 5, 422: 6, 429: 7}
_RETRY_STATUS = frozenset({502, 503, 504})  # no leader yet, or a proxy lost it: safe to retry


class ApiError(Exception):
    """A request failed; str() is one line suitable for the terminal; `exit_code` per EXIT."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ApiClient:
    """`token` is sent as `Authorization: Bearer`; `cacert` is the CA bundle that an https
    server's certificate must chain to (default: the system roots)."""

    def __init__(
        self,
        server: str,
        timeout: float | None = 30.0,
        token: str | None = None,
        cacert: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify: ssl.SSLContext | bool = True
        if cacert:
            try:
                verify = ssl.create_default_context(cafile=cacert)
            except (OSError, ssl.SSLError) as exc:
                raise ApiError(f"--cacert {cacert}: {exc}", EXIT["usage"]) from None
        self._http = httpx.Client(
            base_url=self.server, timeout=timeout, headers=headers, verify=verify
        )

    def _unreachable(self, exc: Exception) -> ApiError:
        return ApiError(
            f"cannot reach the server at {self.server} ({exc}; is `gpu-platform serve` running? "
            "set --server or GPU_PLATFORM_SERVER)",
            EXIT["unreachable"],
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; a follower's 307 to the leader is followed (up to 3 hops) with the same
        method, body and token (httpx would drop the token on a redirect to another port)."""
        target = path
        try:
            for _ in range(4):
                response = self._http.request(method, target, **kwargs)
                if response.status_code not in (307, 308) or "location" not in response.headers:
                    break
                target = response.headers["location"]
        except httpx.ConnectError as exc:
            raise self._unreachable(exc) from None
        except httpx.HTTPError as exc:
            raise ApiError(f"request to {self.server}{path} failed: {exc}") from None
        if response.status_code >= 400:
            raise ApiError(_explain(response), _BY_STATUS.get(response.status_code, 1))
        return response

    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[bytes]:
        """The response body in chunks as it arrives; errors as for `request`."""
        try:
            with self._http.stream(method, path, **kwargs) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(_explain(response), _BY_STATUS.get(response.status_code, 1))
                yield from response.iter_raw()
        except httpx.ConnectError as exc:
            raise self._unreachable(exc) from None
        except httpx.HTTPError as exc:
            raise ApiError(f"request to {self.server}{path} failed: {exc}") from None

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None  # 204: no body

    def submit(
        self, body: dict[str, Any], *, key: str | None = None, retry_for: float = 30.0
    ) -> Any:
        """POST a job under an `Idempotency-Key` (a fresh UUID unless given), retried while the
        outcome is unknown or the cluster has no leader yet (unreachable, timeout, 502-504),
        for up to `retry_for` seconds: the server keeps one job per key, so a retry that
        crosses a redirect or a leader change never creates it twice."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        deadline, pause = time.monotonic() + retry_for, 0.1
        while True:
            try:
                response = self._http.request("POST", "/v1/jobs", json=body, headers=headers)
                for _ in range(3):  # a follower's 307 to the leader
                    if response.status_code not in (307, 308) or "location" not in response.headers:
                        break
                    target = response.headers["location"]
                    response = self._http.request("POST", target, json=body, headers=headers)
                retry = response.status_code in _RETRY_STATUS
            except httpx.TransportError as exc:
                if time.monotonic() >= deadline:
                    if isinstance(exc, httpx.ConnectError):
                        raise self._unreachable(exc) from None
                    raise ApiError(f"submit to {self.server} failed: {exc}") from None
                retry = True
            if not retry or time.monotonic() >= deadline:
                break
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        if response.status_code >= 400:
            raise ApiError(_explain(response), _BY_STATUS.get(response.status_code, 1))
        return response.json()


def _explain(response: httpx.Response) -> str:
    """One line from a problem+json answer (or whatever the server said)."""
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text.strip()}
    detail = body.get("detail", "") if isinstance(body, dict) else str(body)
    if isinstance(detail, list):  # FastAPI's shape, from older servers
        detail = "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', [])[1:]) or 'request'}: {d.get('msg', '')}"
            for d in detail
        )
    retry = response.headers.get("Retry-After")
    if retry:
        detail = f"{detail} (retry after {retry}s)"
    return f"{detail} (HTTP {response.status_code})"
