"""Wiring of the OpenAI-compatible gateway: its settings, its model routes, and its place in
front of the REST app (outermost, so its requests skip the REST middleware)."""

from __future__ import annotations

from fastapi import FastAPI

from gpu_platform.adapters.inbound.gateway import GatewaySettings, OpenAiGateway
from gpu_platform.adapters.outbound.model_routes_file import (
    CombinedModelRoutes,
    JsonFileModelRoutes,
)
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.gateway.limits import LimitSettings
from gpu_platform.infrastructure.config import Settings
from gpu_platform.ports.inbound.access import AccessService
from gpu_platform.ports.inbound.model_routes import ModelRoutes
from gpu_platform.ports.outbound.gateway_metrics import GatewayMetrics

__all__ = ["gateway_routes", "gateway_settings", "install_gateway"]


def gateway_settings(settings: Settings) -> GatewaySettings:
    return GatewaySettings(
        limits=LimitSettings(
            requests_per_second=settings.gateway_requests_per_second,
            request_burst=settings.gateway_request_burst,
            tokens_per_minute=settings.gateway_tokens_per_minute,
        ),
        retries=settings.gateway_retries,
        max_body_bytes=settings.gateway_max_body_bytes,
        read_timeout_s=settings.gateway_read_timeout_seconds,
        session_header=settings.gateway_session_header,
    )


def gateway_routes(settings: Settings, services: ModelRoutes) -> ModelRoutes:
    """The routes the gateway reads: the services' replicas, and the routes file's models
    when one is set (a service wins a name both serve)."""
    if settings.gateway_routes_file is not None:
        return CombinedModelRoutes(services, JsonFileModelRoutes(settings.gateway_routes_file))
    return services


def install_gateway(
    app: FastAPI,
    settings: Settings,
    routes: ModelRoutes,
    access: AccessService,
    metrics: GatewayMetrics,
    ledger: ServingLedger,
) -> None:
    if settings.gateway != "on":
        return
    app.add_middleware(
        OpenAiGateway,
        routes=routes,
        access=access,
        settings=gateway_settings(settings),
        metrics=metrics,
        ledger=ledger,
    )
