"""Cluster commands and the whole cluster state <-> JSON-able dicts (the replicated log's and
snapshots' format).

Exact: `decode_command(encode_command(c)) == c` for every command in `cluster_state.Command`,
and `encode_state(decode_state(encode_state(s), p)) == encode_state(s)`. Records carry
`"v": 1`; a command record names its class in `"type"` and its fields by name. Unknown
types, versions and fields raise ValueError naming them.

The state record holds everything that affects future `apply` results (`ClusterParts`):
nodes with their GPU states, jobs, the held-GPU index, reasons, thermal and ECC records,
heartbeat times, quotas, announced servers, the epoch and sequence counters, and the access
state (tenants; tokens as digests, never secrets; run-as grants; a record without it, from
before issue 20, decodes with none). Nodes and jobs
are lists in the state's order; the rest are maps (JSON object keys are strings, so maps keyed
by non-strings are lists of pairs). Encoding is linear in nodes + jobs.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from gpu_platform.domain.access_state import AccessParts, TenantEntry, TokenEntry
from gpu_platform.domain.cluster_state import (
    AbortJob,
    AnnounceServer,
    BindJob,
    BootstrapAdmin,
    CancelArray,
    CancelJob,
    CheckNodes,
    ClusterParts,
    ClusterState,
    Command,
    CompleteGpuReset,
    CreateTenant,
    DeleteRunAsGrant,
    FinishJob,
    IssueToken,
    JobBatch,
    NodeHeartbeat,
    RegisterNode,
    RemoveNode,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    RequeueJob,
    RevokeToken,
    SetGpuAdmin,
    SetNodeAdmin,
    SetQuota,
    SetRunAsGrant,
    StartJob,
    SubmitArray,
    SubmitJob,
)
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.job_batches import BATCHABLE
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.model.job_array import ArraySpec, parse_stored_array
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.domain.model_codec import (
    SCHEMA_VERSION,
    decode_node,
    decode_quota,
    decode_spec,
    encode_node,
    encode_quota,
    encode_spec,
    job_from_dict,
    job_to_dict,
)
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.domain.services.codec import (
    decode_service,
    decode_service_spec,
    encode_service,
    encode_service_spec,
)
from gpu_platform.domain.services.commands import SERVICE_COMMANDS
from gpu_platform.domain.services.model import ServiceSpec

__all__ = [
    "COMMAND_TYPES",
    "decode_command",
    "decode_node",
    "decode_state",
    "encode_command",
    "encode_node",
    "encode_state",
    "encode_state_but_jobs",
]

#: Every command class by its wire name (the class name).
COMMAND_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        SubmitJob,
        BindJob,
        StartJob,
        FinishJob,
        CancelJob,
        RequeueJob,
        AbortJob,
        ReportXid,
        ReportEcc,
        ReportThermal,
        ReportGpuLost,
        CompleteGpuReset,
        SetGpuAdmin,
        SetNodeAdmin,
        NodeHeartbeat,
        CheckNodes,
        RegisterNode,
        RemoveNode,
        SetQuota,
        AnnounceServer,
        SubmitArray,
        CancelArray,
        JobBatch,
        *SERVICE_COMMANDS,
        CreateTenant,
        IssueToken,
        RevokeToken,
        BootstrapAdmin,
        SetRunAsGrant,
        DeleteRunAsGrant,
    )
}
#: Each command type's field names, in declaration order (read once: `fields()` is slow).
_NAMES: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in COMMAND_TYPES.items()
}
_FIELDS: dict[str, frozenset[str]] = {name: frozenset(names) for name, names in _NAMES.items()}


def _encode_value(value: object) -> object:
    """A command field: value objects by their codecs, tuples as lists, the rest as is."""
    if isinstance(value, JobSpec):
        return encode_spec(value)
    if isinstance(value, ArraySpec):
        return value.text
    if isinstance(value, Node):
        return encode_node(value)
    if isinstance(value, Quota):
        return encode_quota(value)
    if isinstance(value, ServiceSpec):
        return encode_service_spec(value)
    if isinstance(value, tuple):
        return [_encode_value(v) for v in value]
    if isinstance(value, BATCHABLE):  # a JobBatch's item
        return encode_command(value)
    return value


def _tuples(value: object) -> object:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _decode_quota_field(value: object) -> Quota | None:
    return None if value is None else decode_quota(_mapping(value, "quota"))


def _decode_items(value: object) -> tuple[object, ...]:
    """A JobBatch's items: a list of job command records (no batch inside a batch)."""
    if not isinstance(value, list):
        raise ValueError(f"items must be a list, got {type(value).__name__}")
    items = tuple(decode_command(v) for v in value)
    bad = next((i for i in items if not isinstance(i, BATCHABLE)), None)
    if bad is not None:
        raise ValueError(f"JobBatch: {type(bad).__name__} cannot be an item")
    return items


#: Fields holding value objects; every other field is a scalar or nested tuples of scalars.
_VALUE_FIELDS: dict[tuple[str, str], Callable[[Any], object]] = {
    ("SubmitJob", "spec"): lambda v: decode_spec(_mapping(v, "spec")),
    ("SubmitArray", "spec"): lambda v: decode_spec(_mapping(v, "spec")),
    ("SubmitArray", "array"): lambda v: parse_stored_array(str(v)),
    ("RegisterNode", "node"): lambda v: decode_node(_mapping(v, "node")),
    ("SetQuota", "quota"): _decode_quota_field,
    ("CreateService", "spec"): lambda v: decode_service_spec(_mapping(v, "spec")),
    ("UpdateService", "spec"): lambda v: decode_service_spec(_mapping(v, "spec")),
    ("IssueToken", "role"): lambda v: Role(str(v)),
    ("JobBatch", "items"): _decode_items,
}


def _mapping(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def encode_command(command: Command) -> dict[str, Any]:
    """`{"v": 1, "type": <class name>, <field>: <value>, ...}`."""
    name = type(command).__name__
    names = _NAMES.get(name)
    if names is None or COMMAND_TYPES[name] is not type(command):
        raise ValueError(f"unknown command type {name!r}")
    record: dict[str, Any] = {"v": SCHEMA_VERSION, "type": name}
    for field in names:
        record[field] = _encode_value(getattr(command, field))
    return record


def decode_command(data: dict[str, Any]) -> Command:
    """Inverse of `encode_command`; raises ValueError naming an unknown type or field."""
    data = _mapping(data, "command")
    if data.get("v") != SCHEMA_VERSION:
        raise ValueError(f"command record schema {data.get('v')!r} is not {SCHEMA_VERSION}")
    name = data.get("type")
    if not isinstance(name, str) or name not in COMMAND_TYPES:
        raise ValueError(f"unknown command type {name!r}")
    given = set(data) - {"v", "type"}
    unknown = given - _FIELDS[name]
    if unknown:
        raise ValueError(f"{name}: unknown fields {', '.join(sorted(unknown))}")
    kwargs: dict[str, object] = {}
    for key in given:
        decode = _VALUE_FIELDS.get((name, key), _tuples)
        kwargs[key] = decode(data[key])
    try:
        command = COMMAND_TYPES[name](**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"{name}: {exc}") from None
    return typing.cast(Command, command)


def encode_state(state: ClusterState) -> dict[str, Any]:
    """The whole replicated state (see the module docstring); linear in nodes + jobs."""
    head, nodes, jobs = encode_state_but_jobs(state)
    return {
        **head,
        "nodes": [encode_node(n) for n in nodes],
        "jobs": [job_to_dict(j) for j in jobs],
    }


def encode_state_but_jobs(
    state: ClusterState,
) -> tuple[dict[str, Any], tuple[Node, ...], tuple[Job, ...]]:
    """`encode_state` without its "nodes" and "jobs" fields, and the nodes (`encode_node`)
    and jobs (`job_to_dict`) it would encode, in order: a caller can then encode them one at a
    time (a snapshot of 1,024 nodes and 100,000 jobs)."""
    p = state.parts()
    head = {
        "v": SCHEMA_VERSION,
        "held": p.held,
        "reasons": p.reasons,
        "hot": p.hot,
        "ecc_seen": p.ecc_seen,
        "ecc_alerted": sorted(p.ecc_alerted),
        "last_heartbeat": p.last_heartbeat,
        "quotas": {t: encode_quota(q) for t, q in p.quotas.items()},
        "servers": [[i, *where] for i, where in sorted(p.servers.items())],
        "next_epoch": p.next_epoch,
        "next_seq": p.next_seq,
        "access": _encode_access(p.access),
    } | ({"services": [encode_service(s) for s in p.services]} if p.services else {})
    return head, p.nodes, p.jobs


def decode_state(data: dict[str, Any], policy: FaultPolicy) -> ClusterState:
    """Inverse of `encode_state` under fault policy `policy` (which is configuration, not
    replicated state); raises ValueError on an inconsistent or foreign record."""
    data = _mapping(data, "state")
    if data.get("v") != SCHEMA_VERSION:
        raise ValueError(f"state record schema {data.get('v')!r} is not {SCHEMA_VERSION}")
    parts = ClusterParts(
        nodes=tuple(decode_node(n) for n in data["nodes"]),
        jobs=tuple(job_from_dict(j) for j in data["jobs"]),
        held=dict(data["held"]),
        reasons=dict(data["reasons"]),
        hot=dict(data["hot"]),
        ecc_seen=dict(data["ecc_seen"]),
        ecc_alerted=frozenset(data["ecc_alerted"]),
        last_heartbeat=dict(data["last_heartbeat"]),
        quotas={t: decode_quota(q) for t, q in data["quotas"].items()},
        servers={int(i): (http, grpc, agent) for i, http, grpc, agent in data["servers"]},
        next_epoch=int(data["next_epoch"]),
        next_seq=int(data["next_seq"]),
        services=tuple(decode_service(s) for s in data.get("services", ())),
        access=_decode_access(_mapping(data.get("access", {}), "access")),
    )
    return ClusterState.from_parts(parts, policy)


def _encode_access(access: AccessParts) -> dict[str, Any]:
    return {
        "tenants": [[t.name, t.created_at] for t in access.tenants],
        "tokens": [dataclasses.asdict(t) for t in access.tokens],
        "grants": [[g.tenant, list(g.accounts), g.allow_root] for g in access.grants],
    }


def _decode_access(data: dict[str, Any]) -> AccessParts:
    tokens = []
    for t in data.get("tokens", []):
        record = dict(_mapping(t, "token"))
        try:
            record["role"] = Role(str(record["role"]))
            tokens.append(TokenEntry(**record))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"token record: {exc}") from None
    return AccessParts(
        tenants=tuple(TenantEntry(str(n), float(at)) for n, at in data.get("tenants", [])),
        tokens=tuple(tokens),
        grants=tuple(
            RunAsGrant(str(t), tuple(str(a) for a in accounts), bool(root))
            for t, accounts, root in data.get("grants", [])
        ),
    )
