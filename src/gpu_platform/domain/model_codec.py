"""Domain values <-> JSON-able dicts: jobs, nodes (GPUs, NUMA, topology) and quotas.

Pure and exact: `decode_x(encode_x(v)) == v` for every value (tuples come back as tuples, enums
as enums). Every record carries `"v"`; a record of another version raises ValueError. The job
record is also the SQLite store's format (`adapters.outbound.storage`), so its field names are
frozen; readers default fields that older records lack.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any, TypeVar, cast

from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState, TaskSlot
from gpu_platform.domain.model.job_array import ArrayTask, format_array, parse_stored_array
from gpu_platform.domain.model.node import Node, NodeState, NumaNode
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
    Nic,
    Package,
    PciKind,
    PciNode,
)
from gpu_platform.domain.scheduling.model import Quota

__all__ = [
    "SCHEMA_VERSION",
    "decode_node",
    "decode_quota",
    "decode_spec",
    "encode_node",
    "encode_quota",
    "encode_spec",
    "job_from_dict",
    "job_to_dict",
]

SCHEMA_VERSION = 1


def _check_version(data: dict[str, Any], what: str) -> None:
    if data.get("v") != SCHEMA_VERSION:
        raise ValueError(f"{what} record schema {data.get('v')!r} is not {SCHEMA_VERSION}")


# -- jobs ------------------------------------------------------------------------------------


def job_to_dict(job: Job, *, with_spec: bool = True) -> dict[str, Any]:
    """The job record; without `with_spec` the "spec" key is left out (a caller that writes
    many jobs sharing one spec, an array's tasks, encodes it once and adds it itself)."""
    spec = job.spec
    alloc = job.allocation
    record: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "id": job.id,
        "seq": job.seq,
        "state": job.state.value,
        "submitted_at": job.submitted_at,
        "attempt": job.attempt,
        "faults": job.faults,
        "interruptions": job.interruptions,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "exit_code": job.exit_code,
        "reason": job.reason,
        "releasing": job.releasing,
        "not_before": job.not_before,
        "borrowing": job.borrowing,
        "history": [[t, s.value, r] for t, s, r in job.history],
        "spec": encode_spec(spec) if with_spec else None,
        "array": None
        if job.array is None
        else [job.array.array_id, job.array.index, format_array(job.array.array)],
        "allocation": None
        if alloc is None
        else {
            "node": alloc.node,
            "gpu_indices": list(alloc.gpu_indices),
            "gpu_uuids": list(alloc.gpu_uuids),
            "epoch": alloc.epoch,
            "numa_nodes": list(alloc.numa_nodes),
            "peers": [
                [p.node, list(p.gpu_indices), list(p.gpu_uuids), list(p.numa_nodes)]
                for p in alloc.peers
            ],
        },
    }
    if not with_spec:
        del record["spec"]
    return record


def job_from_dict(data: dict[str, Any]) -> Job:
    _check_version(data, "job")
    a = data["allocation"]
    return Job(
        id=data["id"],
        seq=data["seq"],
        spec=decode_spec(data["spec"]),
        state=JobState(data["state"]),
        submitted_at=data["submitted_at"],
        attempt=data["attempt"],
        faults=data.get("faults", 0),
        interruptions=data.get("interruptions", 0),
        allocation=None
        if a is None
        else Allocation(
            node=a["node"],
            gpu_indices=tuple(a["gpu_indices"]),
            gpu_uuids=tuple(a["gpu_uuids"]),
            epoch=a["epoch"],
            numa_nodes=tuple(a["numa_nodes"]),
            peers=tuple(
                TaskSlot(node, tuple(idx), tuple(uuids), tuple(numa))
                for node, idx, uuids, numa in a.get("peers", ())
            ),
        ),
        started_at=data["started_at"],
        finished_at=data["finished_at"],
        exit_code=data["exit_code"],
        reason=data["reason"],
        releasing=data["releasing"],
        not_before=data.get("not_before", 0.0),
        borrowing=data.get("borrowing", False),
        history=tuple((t, JobState(st), r) for t, st, r in data["history"]),
        array=_decode_array(data.get("array")),
    )


def _decode_array(value: Any) -> ArrayTask | None:
    if value is None:
        return None
    array_id, index, text = value
    return ArrayTask(str(array_id), int(index), parse_stored_array(str(text)))


def encode_spec(spec: JobSpec) -> dict[str, Any]:
    """A job request (no version: it is always part of a versioned record)."""
    return {
        "command": list(spec.command),
        "gpus": spec.gpus,
        "name": spec.name,
        "tenant": spec.tenant,
        "priority": spec.priority,
        "env": [list(kv) for kv in spec.env],
        "cwd": spec.cwd,
        "memory_bytes": spec.memory_bytes,
        "time_limit_s": spec.time_limit_s,
        "user": spec.user,
        "max_attempts": spec.max_attempts,
        "retry_backoff_s": spec.retry_backoff_s,
        "tasks": spec.tasks,
        "preemptible": spec.preemptible,
        "depends_on": list(spec.depends_on),
        "gpu_models": list(spec.gpu_models),
        "nvlink": spec.nvlink,
        "numa": spec.numa,
        "same_rack": spec.same_rack,
        "mig_profile": spec.mig_profile,
        "client_token": spec.client_token,
        "image": spec.image,
        "mounts": list(spec.mounts),
        **_encode_share(spec),
    }


def decode_spec(s: dict[str, Any]) -> JobSpec:
    return JobSpec(
        command=tuple(s["command"]),
        gpus=s["gpus"],
        name=s["name"],
        tenant=s["tenant"],
        priority=s["priority"],
        env=tuple((k, v) for k, v in s["env"]),
        cwd=s["cwd"],
        memory_bytes=s.get("memory_bytes"),
        time_limit_s=s.get("time_limit_s"),
        user=s.get("user"),
        max_attempts=s.get("max_attempts", 3),
        retry_backoff_s=s.get("retry_backoff_s", 0.0),
        tasks=s.get("tasks", 1),
        preemptible=s.get("preemptible", True),
        depends_on=tuple(s.get("depends_on", ())),
        gpu_models=tuple(s.get("gpu_models", ())),
        nvlink=s.get("nvlink", "preferred"),
        numa=s.get("numa", "preferred"),
        same_rack=s.get("same_rack", "preferred"),
        mig_profile=s.get("mig_profile"),
        client_token=s.get("client_token"),
        image=s.get("image"),
        mounts=tuple(s.get("mounts", ())),
        gpu_milli=s.get("gpu_milli", 1000),
        gpu_memory_bytes=s.get("gpu_memory_bytes"),
        cpu_milli=s.get("cpu_milli", 0),
        vendor=s.get("vendor"),
        sharing=s.get("sharing"),
        spread=s.get("spread", ""),
    )


def _encode_share(spec: JobSpec) -> dict[str, Any]:
    """The sharing fields, only where they differ from the defaults (older records agree)."""
    out: dict[str, Any] = {}
    if spec.gpu_milli != 1000:
        out["gpu_milli"] = spec.gpu_milli
    if spec.gpu_memory_bytes is not None:
        out["gpu_memory_bytes"] = spec.gpu_memory_bytes
    if spec.cpu_milli:
        out["cpu_milli"] = spec.cpu_milli
    if spec.vendor is not None:
        out["vendor"] = spec.vendor
    if spec.sharing is not None:
        out["sharing"] = spec.sharing
    if spec.spread:
        out["spread"] = spec.spread
    return out


# -- nodes -----------------------------------------------------------------------------------


_V = TypeVar("_V")
_first_copy = lru_cache(maxsize=4096)(lambda value: value)


def _shared(value: _V) -> _V:
    """An equal value decoded before, if there is one (else `value`). Nodes of one hardware
    type repeat the same topology parts (PCI tree, links, NICs, CPU lists): ~50 KiB per node
    while each had its own copy, ~50 MiB at 1,024 nodes (issue 21). The values are immutable;
    an equal one whose repr differs (1 == 1.0 == True) is not substituted, so which copy is
    returned cannot be observed, not even in the canonical snapshot bytes."""
    first = cast(_V, _first_copy(value))
    return first if first is value or repr(first) == repr(value) else value


def _ints(values: Any) -> tuple[int, ...]:
    return _shared(tuple(int(v) for v in values))


def _strs(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def _pairs(values: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in values)


def _encode_numa(n: NumaNode) -> list[Any]:
    return [n.id, list(n.cpus), n.memory_bytes]


def _decode_numa(d: Any) -> NumaNode:
    id_, cpus, memory = d
    return _shared(NumaNode(id_, _ints(cpus), memory))


def _encode_gpu(g: Gpu) -> dict[str, Any]:
    return {
        "uuid": g.uuid,
        "index": g.index,
        "vendor": g.vendor.value,
        "model": g.model,
        "memory_bytes": g.memory_bytes,
        "numa_node": g.numa_node,
        "pci_bus_id": g.pci_bus_id,
        "state": g.state.value,
    }


def _decode_gpu(d: dict[str, Any], node: str) -> Gpu:
    return Gpu(
        uuid=d["uuid"],
        index=d["index"],
        node=node,
        vendor=Vendor(d["vendor"]),
        model=sys.intern(d["model"]),
        memory_bytes=d["memory_bytes"],
        numa_node=d["numa_node"],
        pci_bus_id=sys.intern(d["pci_bus_id"]),
        state=GpuState(d["state"]),
    )


def encode_node(node: Node) -> dict[str, Any]:
    """A node with its GPUs (each with its own state), NUMA nodes, labels and topology."""
    return {
        "v": SCHEMA_VERSION,
        "name": node.name,
        "gpus": [_encode_gpu(g) for g in node.gpus],
        "numa_nodes": [_encode_numa(n) for n in node.numa_nodes],
        "cpus": node.cpus,
        "memory_bytes": node.memory_bytes,
        "labels": [list(kv) for kv in node.labels],
        "state": node.state.value,
        "topology": None if node.topology is None else _encode_topology(node.topology),
    }


def decode_node(data: dict[str, Any]) -> Node:
    """Inverse of `encode_node`; raises ValueError (or KeyError/TypeError) on a bad record."""
    _check_version(data, "node")
    name = data["name"]
    topo = data["topology"]
    return Node(
        name=name,
        gpus=tuple(_decode_gpu(g, name) for g in data["gpus"]),
        numa_nodes=tuple(_decode_numa(n) for n in data["numa_nodes"]),
        cpus=data["cpus"],
        memory_bytes=data["memory_bytes"],
        labels=_pairs(data["labels"]),
        state=NodeState(data["state"]),
        topology=None if topo is None else _decode_topology(topo),
    )


def _encode_topology(t: HostTopology) -> dict[str, Any]:
    return {
        "node": t.node,
        "source": t.source,
        "packages": [[p.id, list(p.numa_nodes), list(p.cpus), p.model] for p in t.packages],
        "numa_nodes": [_encode_numa(n) for n in t.numa_nodes],
        "numa_distances": [list(row) for row in t.numa_distances],
        "pci": [
            [
                p.id,
                p.kind.value,
                p.parent,
                p.numa_node,
                p.vendor_id,
                p.device_id,
                p.pci_class,
                p.name,
            ]
            for p in t.pci
        ],
        "gpus": [
            [
                g.index,
                g.pci_bus_id,
                g.vendor.value,
                g.model,
                g.uuid,
                g.numa_node,
                g.memory_bytes,
                list(g.cpus),
            ]
            for g in t.gpus
        ],
        "nics": [
            [n.name, n.pci_bus_id, n.kind, n.numa_node, n.link_layer, n.state, list(n.netdevs)]
            for n in t.nics
        ],
        "links": [[k.a, k.b, k.kind.value, k.count, k.bandwidth_mbps] for k in t.links],
        "measured_levels": [[m.a, m.b, m.level.value] for m in t.measured_levels],
        "labels": [list(kv) for kv in t.labels],
        "notes": list(t.notes),
    }


def _decode_topology(d: dict[str, Any]) -> HostTopology:
    return HostTopology(
        node=d["node"],
        source=d["source"],
        packages=tuple(
            _shared(Package(id_, _ints(numa), _ints(cpus), model))
            for id_, numa, cpus, model in d["packages"]
        ),
        numa_nodes=tuple(_decode_numa(n) for n in d["numa_nodes"]),
        numa_distances=tuple(_ints(row) for row in d["numa_distances"]),
        pci=tuple(
            _shared(PciNode(id_, PciKind(kind), parent, numa, vendor, device, cls, name))
            for id_, kind, parent, numa, vendor, device, cls, name in d["pci"]
        ),
        gpus=tuple(
            GpuSite(
                index,
                sys.intern(bus),
                Vendor(vendor),
                sys.intern(model),
                uuid,
                numa,
                memory,
                _ints(cpus),
            )
            for index, bus, vendor, model, uuid, numa, memory, cpus in d["gpus"]
        ),
        nics=tuple(
            _shared(Nic(name, bus, kind, numa, layer, state, _strs(netdevs)))
            for name, bus, kind, numa, layer, state, netdevs in d["nics"]
        ),
        links=tuple(
            _shared(Link(a, b, FabricKind(kind), count, bw)) for a, b, kind, count, bw in d["links"]
        ),
        measured_levels=tuple(
            MeasuredLevel(a, b, LinkLevel(lv)) for a, b, lv in d["measured_levels"]
        ),
        labels=_pairs(d["labels"]),
        notes=_strs(d["notes"]),
    )


# -- quotas ----------------------------------------------------------------------------------


def encode_quota(q: Quota) -> dict[str, Any]:
    return {
        "gpus": q.gpus,
        "gpu_memory_bytes": q.gpu_memory_bytes,
        "cpu_milli": q.cpu_milli,
        "borrowing_limit": q.borrowing_limit,
        "lending_limit": q.lending_limit,
        "cohort": q.cohort,
    }


def decode_quota(d: dict[str, Any]) -> Quota:
    return Quota(
        gpus=d["gpus"],
        gpu_memory_bytes=d["gpu_memory_bytes"],
        cpu_milli=d["cpu_milli"],
        borrowing_limit=d["borrowing_limit"],
        lending_limit=d["lending_limit"],
        cohort=d["cohort"],
    )
