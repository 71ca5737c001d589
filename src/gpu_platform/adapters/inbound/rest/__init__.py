"""REST API (FastAPI)."""

from gpu_platform.adapters.inbound.rest.app import create_app

__all__ = ["create_app"]
