"""Agent stream payloads: launch specs, health findings and exits to and from the wire.

Flat frozen dataclasses travel as versioned JSON objects (`{"v": 1, ...}`) built from their
fields; the node travels in the cluster codec's form. A payload of an unknown version or kind
is a `ValueError` naming it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.domain.allocation.mps import MpsShare
from gpu_platform.domain.cluster_codec import decode_node, encode_node
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ReplicaProbe,
    ThermalReading,
    XidReport,
)
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import ExitReport, GangEnv, LaunchSpec

__all__ = [
    "exit_from_pb",
    "exit_to_pb",
    "finding_from_json",
    "finding_to_json",
    "node_from_json",
    "node_to_json",
    "spec_from_json",
    "spec_to_json",
]

_VERSION = 1
_FINDINGS: dict[str, type[HealthEvent]] = {
    "xid": XidReport,
    "ecc": EccReading,
    "thermal": ThermalReading,
    "lost": GpuLostReport,
    "heartbeat": Heartbeat,
    "replica": ReplicaProbe,
}
_KIND = {cls: kind for kind, cls in _FINDINGS.items()}
# Field names read once: dataclasses.fields() and asdict() cost microseconds per launch.
_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(LaunchSpec))
_GANG_FIELDS = tuple(f.name for f in dataclasses.fields(GangEnv))
_MPS_FIELDS = tuple(f.name for f in dataclasses.fields(MpsShare))


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps({"v": _VERSION, **doc}, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes, what: str) -> dict[str, Any]:
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("v") != _VERSION:
        raise ValueError(f"{what}: unsupported payload version {doc.get('v')!r}")
    doc.pop("v")
    return doc


def spec_to_json(spec: LaunchSpec) -> bytes:
    doc = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    doc["env"] = [list(kv) for kv in spec.env]
    doc["gang"] = _flat(spec.gang, _GANG_FIELDS)
    doc["mps"] = _flat(spec.mps, _MPS_FIELDS)
    return _dump(doc)


def _flat(value: object, names: tuple[str, ...]) -> dict[str, Any] | None:
    """A flat dataclass of scalars as a dict (asdict without its deep copy)."""
    return None if value is None else {name: getattr(value, name) for name in names}


def spec_from_json(data: bytes) -> LaunchSpec:
    doc = _load(data, "launch spec")
    for name, value in doc.items():
        if isinstance(value, list):
            doc[name] = tuple(value)
    doc["env"] = tuple((k, v) for k, v in doc["env"])
    doc["gang"] = GangEnv(**doc["gang"]) if doc["gang"] is not None else None
    doc["mps"] = MpsShare(**doc["mps"]) if doc["mps"] is not None else None
    return LaunchSpec(**{k: v for k, v in doc.items() if k in _SPEC_FIELDS})


def finding_to_json(event: HealthEvent) -> bytes:
    return _dump({"kind": _KIND[type(event)], **dataclasses.asdict(event)})


def finding_from_json(data: bytes) -> HealthEvent:
    doc = _load(data, "health finding")
    kind = doc.pop("kind")
    cls = _FINDINGS.get(kind)
    if cls is None:
        raise ValueError(f"health finding: unknown kind {kind!r}")
    return cls(**doc)


def node_to_json(node: Node) -> bytes:
    return json.dumps(encode_node(node), sort_keys=True, separators=(",", ":")).encode()


def node_from_json(data: bytes) -> Node:
    return decode_node(json.loads(data))


def exit_to_pb(seq: int, report: ExitReport) -> pb.TaskExit:
    return pb.TaskExit(
        seq=seq,
        job_id=report.job_id,
        epoch=report.epoch,
        rank=report.rank,
        has_exit_code=report.exit_code is not None,
        exit_code=report.exit_code or 0,
        has_signal=report.signal is not None,
        signal=report.signal or 0,
        timed_out_after_s=report.timed_out_after_s or 0.0,
        detail=report.detail,
        fenced=report.fenced,
    )


def exit_from_pb(msg: pb.TaskExit) -> ExitReport:
    return ExitReport(
        job_id=msg.job_id,
        epoch=msg.epoch,
        exit_code=msg.exit_code if msg.has_exit_code else None,
        signal=msg.signal if msg.has_signal else None,
        timed_out_after_s=msg.timed_out_after_s or None,
        rank=msg.rank,
        detail=msg.detail,
        fenced=msg.fenced,
    )
