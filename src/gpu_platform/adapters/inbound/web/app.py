"""Mount the dashboard on a FastAPI app: its pages, actions and streams, and the static
files (htmx and its SSE extension, vendored; the stylesheet; the log-follow script).

Routes stay out of the OpenAPI document: they are a user interface, not the API.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from gpu_platform.adapters.inbound.web.actions import actions_router
from gpu_platform.adapters.inbound.web.pages import pages_router
from gpu_platform.adapters.inbound.web.site import Site
from gpu_platform.adapters.inbound.web.stream import stream_router

__all__ = ["STATIC", "install_dashboard"]

STATIC = Path(__file__).with_name("static")


def install_dashboard(app: FastAPI, site: Site) -> None:
    """Add the dashboard's routes to `app` (at `/`, `/queue`, ..., `/ui/...`)."""
    app.include_router(actions_router(site))
    app.include_router(pages_router(site))
    app.include_router(stream_router(site))
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="dashboard-static")
