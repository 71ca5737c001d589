"""Model routes from a JSON file, for replicas the platform does not run (an existing
OpenAI-compatible server, a demo, the tests), and the empty routes.

    {"models": [{"model": "tiny", "service": "tiny", "tenant": "default",
                 "replicas": [{"replica_id": "r1", "url": "http://10.0.0.5:8000",
                               "ready": true, "draining": false}]}]}

The file is re-read when it changes (its inode, size or modification time), so replacing it
(write a new file, rename it over) updates routing without a restart. A file that does not
parse leaves the last good routes in place and is logged once per change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from gpu_platform.ports.inbound.model_routes import ModelRoute, ModelRoutes, ReplicaAddress

__all__ = [
    "CombinedModelRoutes",
    "JsonFileModelRoutes",
    "NoModelRoutes",
    "routes_from_json",
    "routes_to_json",
]

_log = structlog.get_logger(__name__)


def routes_to_json(routes: Mapping[str, ModelRoute]) -> dict[str, Any]:
    return {
        "models": [
            {
                "model": r.model,
                "service": r.service,
                "tenant": r.tenant,
                "replicas": [
                    {
                        "replica_id": a.replica_id,
                        "url": a.url,
                        "ready": a.ready,
                        "draining": a.draining,
                    }
                    for a in r.replicas
                ],
            }
            for r in routes.values()
        ]
    }


def routes_from_json(doc: Any) -> dict[str, ModelRoute]:
    """Parse the file's document; ValueError naming the bad field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), list):
        raise ValueError("field 'models': a list is required")
    found: dict[str, ModelRoute] = {}
    for i, m in enumerate(doc["models"]):
        try:
            replicas = tuple(
                ReplicaAddress(
                    str(a["replica_id"]),
                    str(a["url"]).rstrip("/"),
                    bool(a.get("ready", True)),
                    bool(a.get("draining", False)),
                )
                for a in m.get("replicas", [])
            )
            route = ModelRoute(
                str(m["model"]), str(m.get("service", m["model"])), str(m["tenant"]), replicas
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"field 'models[{i}]': {exc!r}") from None
        found[route.model] = route
    return found


class NoModelRoutes:
    """ModelRoutes with no model: the gateway answers 404 to every model."""

    def routes(self) -> Mapping[str, ModelRoute]:
        return {}


class CombinedModelRoutes:
    """The models of several sources; an earlier source wins a name both serve. With one
    source serving anything, its mapping is returned as it is (no copy per request)."""

    def __init__(self, *sources: ModelRoutes) -> None:
        self.sources = sources

    def routes(self) -> Mapping[str, ModelRoute]:
        parts = [p for p in (s.routes() for s in self.sources) if p]
        if len(parts) <= 1:
            return parts[0] if parts else {}
        merged: dict[str, ModelRoute] = {}
        for part in reversed(parts):
            merged.update(part)
        return merged


class JsonFileModelRoutes:
    """ModelRoutes read from `path` (see the module docstring); a missing file is no model."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._routes: Mapping[str, ModelRoute] = {}

    def routes(self) -> Mapping[str, ModelRoute]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._routes = None, {}
            return self._routes
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen != self._seen:
            self._seen = seen
            try:
                self._routes = routes_from_json(json.loads(self.path.read_bytes()))
            except (OSError, ValueError) as exc:
                _log.warning("model routes file not loaded", path=str(self.path), error=str(exc))
        return self._routes
