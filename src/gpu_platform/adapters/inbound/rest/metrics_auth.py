"""Who may scrape `/metrics` when `metrics_auth = token`.

The exposition names every tenant, job ids and GPU-hours, so with `metrics_auth = token` a
scrape needs a bearer token (401 without one) whose role only reads: viewer, or an operator or
admin. A user token (it can submit jobs; it belongs to one tenant) gets 403. Prometheus sends
the token with `authorization: {credentials_file: ...}` in its scrape config (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Depends

from gpu_platform.adapters.inbound.rest.auth import Auth
from gpu_platform.domain.model.tenancy import Forbidden, Principal, Role

__all__ = ["METRICS_AUTH_MODES", "SCRAPER_ROLES", "metrics_scraper"]

METRICS_AUTH_MODES = ("none", "token")
SCRAPER_ROLES = frozenset({Role.VIEWER, Role.OPERATOR, Role.ADMIN})


def metrics_scraper(auth: Auth) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the principal of a token allowed to scrape (else 401 / 403)."""
    principal = auth.principal

    async def scraper(who: Principal = Depends(principal)) -> Principal:
        if who.role not in SCRAPER_ROLES:
            raise Forbidden(
                f"principal {who.name!r} (role {who.role}) may not read /metrics: it needs a "
                "viewer, operator or admin token (metrics_auth = token)"
            )
        return who

    return scraper
