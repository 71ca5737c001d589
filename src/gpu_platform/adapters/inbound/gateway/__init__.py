"""The OpenAI-compatible gateway: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`
and `GET /v1/models`, proxied to the replicas that serve each model (docs/gateway.md). Served
in front of the REST app (`OpenAiGateway`, ASGI) or on its own port (`GatewayHttpServer`)."""

from gpu_platform.adapters.inbound.gateway.asgi import OpenAiGateway
from gpu_platform.adapters.inbound.gateway.handler import (
    GATEWAY_PATHS,
    GatewayHandler,
    GatewaySettings,
)
from gpu_platform.adapters.inbound.gateway.http_server import GatewayHttpServer

__all__ = [
    "GATEWAY_PATHS",
    "GatewayHandler",
    "GatewayHttpServer",
    "GatewaySettings",
    "OpenAiGateway",
]
