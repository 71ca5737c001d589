"""Wiring of the OpenAI-compatible gateway: its settings, its model routes, and where it is
served: in front of the REST app (outermost, so its requests skip the REST middleware), or,
with `gateway_port` set, on a port of its own, served by the gateway's lean HTTP/1.1 server
(`GatewayHttpServer`) on its own thread and event loop, so the REST API and dashboard never
share its loop."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any

from fastapi import FastAPI

from gpu_platform.adapters.inbound.gateway import (
    GatewayHandler,
    GatewayHttpServer,
    GatewaySettings,
    OpenAiGateway,
)
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
    handler = _handler(settings, routes, access, metrics, ledger)
    app.add_middleware(OpenAiGateway, handler=handler)


def _handler(
    settings: Settings,
    routes: ModelRoutes,
    access: AccessService,
    metrics: GatewayMetrics,
    ledger: ServingLedger,
) -> GatewayHandler:
    return GatewayHandler(
        routes=routes,
        access=access,
        settings=gateway_settings(settings),
        metrics=metrics,
        ledger=ledger,
    )


class GatewayServer:
    """The gateway on `gateway_port`: a GatewayHttpServer on its own thread and event loop."""

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
        self.handler = _handler(settings, routes, access, metrics, ledger)
        self._host = settings.host
        self._port = settings.gateway_port
        self._tls = _ssl_context(tls_options) if tls_options else None
        self._http = GatewayHttpServer(self.handler, keep_alive_s=75.0)  # as nginx
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._http.start(self._host, self._port, self._tls))
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def start(self, timeout_s: float = 30.0) -> None:
        """Serve; returns once the port accepts connections (raises if it could not bind)."""
        self._thread.start()
        if not self._started.wait(timeout_s) or self._error is not None:
            self.stop()
            raise RuntimeError(f"the gateway's port could not be opened: {self._error}")

    @property
    def port(self) -> int:
        """The port it listens on (the one it was given, or the one it got for 0)."""
        return self._http.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(self._http.stop(grace_s=5.0), self._loop)
        try:
            done.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def _ssl_context(options: dict[str, Any]) -> ssl.SSLContext:
    """The server side of TLS from TlsFiles.uvicorn_options (the REST port's settings)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(options["ssl_certfile"], options["ssl_keyfile"])
    if options.get("ssl_ca_certs"):
        context.load_verify_locations(options["ssl_ca_certs"])
        context.verify_mode = options.get("ssl_cert_reqs", ssl.CERT_REQUIRED)
    return context
