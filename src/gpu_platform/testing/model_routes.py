"""Model routes for tests: in memory (`StaticModelRoutes`), or written to the JSON file a real
server reads with `gateway_routes_file` (`StaticModelRoutes.write`), so a test can mark a
replica draining, not ready, or add and remove one while the server runs."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpu_platform.adapters.outbound.model_routes_file import routes_to_json
from gpu_platform.ports.inbound.model_routes import ModelRoute, ReplicaAddress

__all__ = ["StaticModelRoutes"]


class StaticModelRoutes:
    """A mutable ModelRoutes: `set_model`, `update_replica`, `remove_model`."""

    def __init__(self, routes: Iterable[ModelRoute] = ()) -> None:
        self._routes: dict[str, ModelRoute] = {r.model: r for r in routes}

    def routes(self) -> Mapping[str, ModelRoute]:
        return self._routes

    def set_model(
        self, model: str, tenant: str, replicas: Iterable[ReplicaAddress], service: str = ""
    ) -> None:
        self._routes = {
            **self._routes,
            model: ModelRoute(model, service or model, tenant, tuple(replicas)),
        }

    def update_replica(self, model: str, replica_id: str, **changes: bool | str) -> None:
        """Change `ready`, `draining` or `url` of one replica of `model`."""
        route = self._routes[model]
        replicas = tuple(
            dataclasses.replace(r, **changes) if r.replica_id == replica_id else r  # type: ignore[arg-type]
            for r in route.replicas
        )
        self._routes = {**self._routes, model: dataclasses.replace(route, replicas=replicas)}

    def remove_model(self, model: str) -> None:
        self._routes = {k: v for k, v in self._routes.items() if k != model}

    def write(self, path: Path) -> None:
        """Replace `path` atomically with these routes (the server sees all or nothing)."""
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(routes_to_json(self._routes)))
        os.replace(temporary, path)
