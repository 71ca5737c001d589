"""Gateway refusals in the OpenAI error shape: ``{"error": {"message", "type", "code"}}``.

400 invalid_request_error / invalid_json | missing_model | invalid_field
401 invalid_request_error / invalid_api_key
404 invalid_request_error / model_not_found | unknown_url (the gateway's own port)
405 invalid_request_error / method_not_allowed
413 invalid_request_error / request_too_large
429 rate_limit_error      / rate_limit_exceeded   (with Retry-After, whole seconds)
502 api_error             / upstream_error        (a replica broke off before answering)
503 api_error             / no_ready_replica      (with Retry-After: 1)
504 api_error             / upstream_timeout      (a replica said nothing for the read timeout)
"""

from __future__ import annotations

from typing import Any

__all__ = ["GatewayError"]

_TYPES = {429: "rate_limit_error", 502: "api_error", 503: "api_error", 504: "api_error"}


class GatewayError(Exception):
    """A refusal the gateway answers itself; `retry_after_s` becomes a Retry-After header."""

    def __init__(
        self, status: int, code: str, message: str, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        kind = _TYPES.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": None, "code": self.code}}
