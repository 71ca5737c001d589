"""The OpenAI-compatible gateway: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`
and `GET /v1/models` on the REST port, proxied to the replicas that serve each model
(docs/gateway.md)."""

from gpu_platform.adapters.inbound.gateway.asgi import GATEWAY_PATHS, GatewaySettings, OpenAiGateway

__all__ = ["GATEWAY_PATHS", "GatewaySettings", "OpenAiGateway"]
