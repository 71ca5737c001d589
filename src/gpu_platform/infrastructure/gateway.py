"""Wiring of the OpenAI-compatible gateway: its settings, its model routes, and where it is
served: in front of the REST app (outermost, so its requests skip the REST middleware), or,
with `gateway_port` set, on a port of its own, served by a uvicorn server on its own thread and
event loop (httptools when installed), so the REST API and dashboard never share its loop."""

from __future__ import annotations

import importlib.util
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from gpu_platform.adapters.inbound.gateway import GatewaySettings, OpenAiGateway
from gpu_platform.adapters.inbound.gateway.errors import GatewayError, send_error
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

__all__ = ["GatewayServer", "gateway_routes", "gateway_settings", "install_gateway"]


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
    if settings.gateway != "on" or settings.gateway_port is not None:
        return  # off, or served by GatewayServer on its own port
    app.add_middleware(
        OpenAiGateway,
        routes=routes,
        access=access,
        settings=gateway_settings(settings),
        metrics=metrics,
        ledger=ledger,
    )


async def _not_found(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """What the gateway's own port answers outside the OpenAI paths."""
    if scope["type"] == "http":
        path = scope["path"]
        await send_error(send, GatewayError(404, "unknown_url", f"no such path: {path}"))


class GatewayServer:
    """The gateway on `gateway_port`: a uvicorn server on its own thread and event loop."""

    def __init__(
        self,
        settings: Settings,
        routes: ModelRoutes,
        access: AccessService,
        metrics: GatewayMetrics,
        ledger: ServingLedger,
        tls_options: dict[str, Any] | None = None,
    ) -> None:
        assert settings.gateway_port is not None
        self.gateway = OpenAiGateway(
            _not_found,
            routes=routes,
            access=access,
            settings=gateway_settings(settings),
            metrics=metrics,
            ledger=ledger,
        )
        fast = importlib.util.find_spec("httptools") is not None
        config = uvicorn.Config(
            self.gateway,
            host=settings.host,
            port=settings.gateway_port,
            http="httptools" if fast else "h11",
            loop="asyncio",
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_keep_alive=75,  # as nginx: a client rarely reuses a connection being closed
            timeout_graceful_shutdown=5,
            **(tls_options or {}),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gateway", daemon=True)

    def start(self, timeout_s: float = 30.0) -> None:
        """Serve; returns once the port accepts connections (raises if it could not bind)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise RuntimeError("the gateway's port could not be opened (see the log)")

    @property
    def port(self) -> int:
        """The port it listens on (the one it was given, or the one it got for 0)."""
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self._server.config.port

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
