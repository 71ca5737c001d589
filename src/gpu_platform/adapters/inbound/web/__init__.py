"""The web dashboard: server-rendered pages (Jinja2) made live by htmx over one
server-sent-events stream, mounted on the REST app at `/`. docs/dashboard.md describes it."""

from gpu_platform.adapters.inbound.web.app import install_dashboard
from gpu_platform.adapters.inbound.web.site import Site

__all__ = ["Site", "install_dashboard"]
