"""A small HTTP client for the REST API; every failure becomes one readable line and an exit
code (docs/cli.md):

    0 ok   1 refused/other error   2 usage   3 server unreachable   4 authentication or
    permission (401/403)   5 not found (404)   6 invalid input (422)   7 overloaded, retry
    later (429)   8 audit chain broken (`audit verify`)

Built on the standard library's http.client, not httpx: a CLI call pays for its imports, and
httpx (with its own CLI's rich/pygments/click) cost more than the rest of the call did.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

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

    def __init__(self, message: str, exit_code: int = 1, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.retryable = retryable  # the outcome is unknown, or no leader yet: safe to resend


class Response:
    """What the commands read of an answer: status, headers, body."""

    def __init__(self, status_code: int, headers: http.client.HTTPMessage, content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class ApiClient:
    """`token` is sent as `Authorization: Bearer`; `cacert` is the CA bundle that an https
    server's certificate must chain to (default: the system roots). One connection per
    request (a CLI call makes one or two)."""

    def __init__(
        self,
        server: str,
        timeout: float | None = 30.0,
        token: str | None = None,
        cacert: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._tls: ssl.SSLContext | None = None
        if urlsplit(self.server).scheme == "https":
            try:
                self._tls = ssl.create_default_context(cafile=cacert)
            except (OSError, ssl.SSLError) as exc:
                raise ApiError(f"--cacert {cacert}: {exc}", EXIT["usage"]) from None

    def _unreachable(self, exc: Exception) -> ApiError:
        return ApiError(
            f"cannot reach the server at {self.server} ({exc}; is `gpu-platform serve` running? "
            "set --server or GPU_PLATFORM_SERVER)",
            EXIT["unreachable"],
            retryable=True,
        )

    def _open(
        self,
        method: str,
        url: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send one request to `url` (absolute, or a path on the server) and read the head."""
        target = urlsplit(urljoin(self.server + "/", url))
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        if params:
            query = urlencode({k: _param(v) for k, v in params.items()})
            path += ("&" if "?" in path else "?") + query
        conn: http.client.HTTPConnection
        if target.scheme == "https":
            context = self._tls or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                target.netloc, timeout=self._timeout, context=context
            )
        else:
            conn = http.client.HTTPConnection(target.netloc, timeout=self._timeout)
        head = {"Accept": "application/json", **self._headers, **(headers or {})}
        data = None
        if json is not None:
            data = _dumps(json)
            head["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=head)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            conn.close()
            raise ApiError(f"request to {self.server}{url} failed: {exc}") from None
        except OSError as exc:  # refused, no route, name not found, connect timeout
            conn.close()
            raise self._unreachable(exc) from None
        try:
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiError(f"request to {self.server}{url} failed: {exc}", retryable=True) from None

    def request(self, method: str, path: str, **kwargs: Any) -> Response:
        """One call; a follower's 307 to the leader is followed (up to 3 hops) with the same
        method, body and token."""
        target = path
        for _ in range(4):
            conn, raw = self._open(method, target, **kwargs)
            try:
                content = raw.read()
            except (OSError, http.client.HTTPException) as exc:
                why = f"request to {self.server}{path} failed: {exc}"
                raise ApiError(why, retryable=True) from None
            finally:
                conn.close()
            response = Response(raw.status, raw.headers, content)
            location = raw.headers.get("location")
            if raw.status not in (307, 308) or not location:
                break
            target = location
            kwargs.pop("params", None)  # the location carries the query
        if response.status_code >= 400:
            code = response.status_code
            retry = code in _RETRY_STATUS
            raise ApiError(_explain(response), _BY_STATUS.get(code, 1), retryable=retry)
        return response

    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[bytes]:
        """The response body in chunks as it arrives; errors as for `request`."""
        conn, raw = self._open(method, path, **kwargs)
        try:
            if raw.status >= 400:
                response = Response(raw.status, raw.headers, raw.read())
                raise ApiError(_explain(response), _BY_STATUS.get(response.status_code, 1))
            while chunk := raw.read1(65536):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(f"request to {self.server}{path} failed: {exc}") from None
        finally:
            conn.close()

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
                return self.json("POST", "/v1/jobs", json=body, headers=headers)
            except ApiError as exc:
                if not exc.retryable or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(1.0, pause * 2)


def _param(value: Any) -> str:
    """Query values as httpx wrote them: booleans lower-case, None empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _explain(response: Response) -> str:
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
