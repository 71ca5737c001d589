"""GatewayMetrics: what the OpenAI-compatible gateway reports for each proxied request.

Called on the event loop for every request: implementations must be cheap and must never
raise or block. Label values stay bounded: `model` is a served model's name or "" (the
request named none the caller may reach), `tenant` the caller's tenant or "" (not
authenticated). `NoGatewayMetrics` records nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["GatewayMetrics", "NoGatewayMetrics"]


@runtime_checkable
class GatewayMetrics(Protocol):
    def request_done(self, model: str, tenant: str, code: int, seconds: float) -> None:
        """A request ended with HTTP status `code` after `seconds` (to its last byte)."""
        ...

    def first_token(self, model: str, seconds: float) -> None:
        """A streamed response sent its first bytes `seconds` after the request arrived."""
        ...

    def tokens(self, model: str, tenant: str, prompt: int, completion: int) -> None:
        """A response reported (or the gateway counted) these prompt and completion tokens."""
        ...


class NoGatewayMetrics:
    """GatewayMetrics that records nothing."""

    def request_done(self, model: str, tenant: str, code: int, seconds: float) -> None:
        return None

    def first_token(self, model: str, seconds: float) -> None:
        return None

    def tokens(self, model: str, tenant: str, prompt: int, completion: int) -> None:
        return None
