"""A small HTTP client for the REST API; every failure becomes one readable line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

__all__ = ["ApiClient", "ApiError"]


class ApiError(Exception):
    """A request failed; str() is one line suitable for the terminal."""


class ApiClient:
    def __init__(self, server: str, timeout: float | None = 30.0) -> None:
        self.server = server.rstrip("/")
        self._http = httpx.Client(base_url=self.server, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise ApiError(
                f"cannot reach the server at {self.server} (is `gpu-platform serve` running? "
                "set --server or GPU_PLATFORM_SERVER)"
            ) from None
        except httpx.HTTPError as exc:
            raise ApiError(f"request to {self.server}{path} failed: {exc}") from None
        if response.status_code >= 400:
            raise ApiError(_explain(response))
        return response

    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[bytes]:
        """The response body in chunks as it arrives; errors as for `request`."""
        try:
            with self._http.stream(method, path, **kwargs) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(_explain(response))
                yield from response.iter_raw()
        except httpx.ConnectError:
            raise ApiError(f"cannot reach the server at {self.server}") from None
        except httpx.HTTPError as exc:
            raise ApiError(f"request to {self.server}{path} failed: {exc}") from None

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()


def _explain(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text.strip()
    if isinstance(detail, list):
        parts = []
        for item in detail:
            loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc) or 'request'}: {item.get('msg', '')}")
        detail = "; ".join(parts)
    return f"{detail} (HTTP {response.status_code})"
