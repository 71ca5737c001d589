"""Turn domain events into logs (metrics live in infrastructure/metrics.py)."""

from gpu_platform.adapters.outbound.observability.log_events import StructlogEventPublisher

__all__ = ["StructlogEventPublisher"]
