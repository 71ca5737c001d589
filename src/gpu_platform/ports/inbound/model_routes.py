"""Inbound port: where the OpenAI-compatible gateway sends a request for a model.

The serving side (services and their replicas) implements `ModelRoutes`; the gateway only
reads it. `routes()` is called on every proxied request, so it must be cheap (a dict the
serving side keeps up to date, not a scan of the cluster state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    """One replica that answers the OpenAI HTTP API at `url` (e.g. ``http://10.0.0.5:31002``)."""

    replica_id: str
    url: str
    ready: bool = True  # passed its readiness check
    draining: bool = False  # being replaced or removed: finish what it has, take nothing new


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """A model name as clients write it in ``"model"``, and the replicas that serve it."""

    model: str
    service: str
    tenant: str
    replicas: tuple[ReplicaAddress, ...]


class ModelRoutes(Protocol):
    def routes(self) -> Mapping[str, ModelRoute]:
        """Every servable model by name; replicas not ready are listed with ready=False."""
        ...
