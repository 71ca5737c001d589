"""Wiring of the API servers: TLS material, the REST app (with dashboard and gateway), the
gRPC server and the gateway on its own port.
`_`-named factories are container.py's providers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider

from gpu_platform.adapters.inbound.agent_tcp_server import AGENT_ALPN
from gpu_platform.adapters.inbound.grpc import GrpcServer
from gpu_platform.adapters.inbound.rest import create_app
from gpu_platform.adapters.inbound.web import Site, install_dashboard
from gpu_platform.adapters.inbound.web.session import WebAuth
from gpu_platform.adapters.outbound.observability.event_hub import EventHub
from gpu_platform.adapters.tcp_security import client_context
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.admission import AdmissionControl
from gpu_platform.application.auth import AccessControl
from gpu_platform.application.auth_scope import AuditTrail
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.run_as import RunAsAccounts
from gpu_platform.application.services import ServiceManager
from gpu_platform.application.usage import UsageService
from gpu_platform.infrastructure.api_workers import ApiWorkers, api_socket, submit_socket
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.dcgm_metrics import DcgmCollector, service_labels
from gpu_platform.infrastructure.gateway import GatewayServer, install_gateway
from gpu_platform.infrastructure.metrics import Metrics
from gpu_platform.ports.inbound.model_routes import ModelRoutes
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery, GpuTelemetry

__all__ = [
    "agent_transport",
    "tls_files",
]


def tls_files(settings: Settings) -> TlsFiles | None:
    """The server's TLS material, or None for plaintext; half a pair is a ConfigError."""
    cert, key, ca = settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    if (cert is None) != (key is None):
        raise ConfigError("TLS needs both tls_cert_file and tls_key_file")
    if cert is None or key is None:
        if ca is not None:
            raise ConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        return None
    for name, path in (("tls_cert_file", cert), ("tls_key_file", key), ("tls_client_ca_file", ca)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{name}: {path} is not a readable file")
    return TlsFiles(cert, key, ca)


def agent_transport(settings: Settings, tls: TlsFiles | None) -> dict[str, Any]:
    """`AgentClient`'s transport arguments for `settings.agent_transport` (TLS: `tls`)."""
    if settings.agent_transport == "tcp":
        context = None if tls is None else client_context(tls, AGENT_ALPN)
        return {"transport": "tcp", "tls": context}
    credentials = None if tls is None else tls.grpc_channel_credentials()
    return {"transport": "grpc", "credentials": credentials}


def _rest_app(
    settings: Settings,
    plane: ControlPlane,
    metrics: Metrics,
    tracer: TracerProvider,
    discovery: GpuDiscovery,
    usage: UsageService,
    jobs: AdmissionControl,
    access: AccessControl,
    trail: AuditTrail,
    events: EventHub,
    run_as: RunAsAccounts,
    routes: ModelRoutes,
    ledger: ServingLedger,
    services: ServiceManager,
) -> FastAPI:
    metrics.watch(lambda: plane)
    metrics.watch_usage(lambda: usage)
    telemetry = discovery if isinstance(discovery, GpuTelemetry) else None
    if telemetry is not None:
        metrics.watch_gpus(DcgmCollector(telemetry.snapshot, service_labels(lambda: plane)))
    app = create_app(
        jobs,
        admin=plane,
        metrics=metrics.render,
        tracer_provider=tracer,
        usage=usage,
        api_metrics=metrics.api,
        access=access,
        trail=trail,
        run_as=run_as,
        services=services,
        max_request_bytes=settings.max_request_bytes,
        metrics_auth=settings.metrics_auth,
    )
    site = Site(
        jobs,
        WebAuth(access),
        trail,
        admin=plane,
        usage=usage,
        events=events,
        topology=plane.topology,
        telemetry=None if telemetry is None else telemetry.snapshot,
        services=services,
    )
    install_dashboard(app, site)
    install_gateway(app, settings, routes, access, metrics.gateway, ledger)
    return app


def _gateway_server(
    settings: Settings,
    routes: ModelRoutes,
    access: AccessControl,
    metrics: Metrics,
    ledger: ServingLedger,
    tls: TlsFiles | None,
) -> Iterator[GatewayServer | None]:
    """With `gateway_port` set, the gateway on its own port, serving from here on."""
    if settings.gateway != "on" or settings.gateway_port is None:
        yield None
        return
    options = tls.uvicorn_options() if tls is not None else None
    server = GatewayServer(settings, routes, access, metrics.gateway, ledger, options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _grpc_server(
    settings: Settings,
    plane: ControlPlane,
    events: EventHub,
    tracer: TracerProvider,
    metrics: Metrics,
    jobs: AdmissionControl,
    access: AccessControl,
    trail: AuditTrail,
    run_as: RunAsAccounts,
    services: ServiceManager,
) -> Iterator[GrpcServer | None]:
    if settings.grpc_port < 0:
        yield None
        return
    unix = api_socket(settings) if settings.api_workers else None
    server = GrpcServer(
        jobs,
        settings.host,
        settings.grpc_port,
        events=events,
        tracer_provider=tracer,
        api_metrics=metrics.api,
        admin=plane,
        access=access,
        trail=trail,
        tls=tls_files(settings),
        run_as=run_as,
        serving=services,
        max_message_bytes=settings.max_request_bytes,
        unix_socket=None if unix is None else str(unix),
        submit_socket=None if unix is None else str(submit_socket(settings)),
    )
    server.start()
    if unix is None:
        yield server
        server.stop(grace_s=2.0)
        return
    workers = ApiWorkers(settings, unix)
    try:
        server.port = workers.start()
        server.address = f"{settings.host}:{server.port}"
        yield server
    finally:
        workers.stop()
        server.stop(grace_s=2.0)
