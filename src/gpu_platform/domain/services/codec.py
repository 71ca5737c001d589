"""Services <-> JSON-able dicts (for the replicated log and snapshots; exact round trips).

A spec or replica is an object of its fields (tuples as lists, env as [key, value] pairs);
a service is its fields with `spec` and `replicas` nested. Unknown fields raise ValueError
naming them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpu_platform.domain.services.model import Replica, Service, ServiceSpec

__all__ = ["decode_service", "decode_service_spec", "encode_service", "encode_service_spec"]


def encode_service_spec(spec: ServiceSpec) -> dict[str, Any]:
    doc = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    doc["command"] = list(spec.command)
    doc["env"] = [[k, v] for k, v in spec.env]
    return doc


def _fields(cls: type[Any], doc: dict[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ValueError(f"{what} must be an object")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(doc) - known
    if unknown:
        raise ValueError(f"{what}: unknown fields {', '.join(sorted(unknown))}")
    return dict(doc)


def decode_service_spec(doc: dict[str, Any]) -> ServiceSpec:
    data = _fields(ServiceSpec, doc, "service spec")
    data["command"] = tuple(data.get("command", ()))
    data["env"] = tuple((str(k), str(v)) for k, v in data.get("env", ()))
    return ServiceSpec(**data)


def encode_service(service: Service) -> dict[str, Any]:
    return {
        "spec": encode_service_spec(service.spec),
        "generation": service.generation,
        "created_at": service.created_at,
        "next_replica": service.next_replica,
        "deleting": service.deleting,
        "replicas": [dataclasses.asdict(r) for r in service.replicas],
    }


def decode_service(doc: dict[str, Any]) -> Service:
    data = _fields(Service, doc, "service")
    data["spec"] = decode_service_spec(data["spec"])
    data["replicas"] = tuple(
        Replica(**_fields(Replica, r, "replica")) for r in data.get("replicas", ())
    )
    return Service(**data)
