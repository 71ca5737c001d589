"""A job's fields on the wire, mapped once for REST and gRPC (the CLI speaks REST: its
submit body goes through `JobSubmit`, which refuses an unknown field).

Submitting: the REST body (`rest.job_schemas.JobSubmit`) and the proto message
(`SubmitJobRequest`) carry the fields of `domain.model.job.JobSpec` under the same names,
`BODY_FIELDS`: every field but `client_token` (REST's `Idempotency-Key` header, gRPC's
`request_id`) and `spread` (set by the services' reconciler, never by a client).
`spec_values` gives a spec's values in wire form (lists, `env` a dict); `spec_from_values`
builds a spec back from such values, where an absent or None value is the spec's default
(gRPC passes only the fields a message has set: `grpc.convert`). The rule "a share of one GPU
implies gpus 1" lives here, for both.

Reading: `job_values`, `array_values`, `gpu_values` and `status_values` give a job (with why
it waits), an array, a GPU and the cluster's status as plain values, nested ones as dicts,
None for "not set". REST validates them into its read models; gRPC drops the Nones (proto3:
not set) and flattens a job's `array`. A field added to
a view but not to a proto message fails there (the message refuses an unknown keyword); the
tests pin every wire's names against these (tests/unit/adapters/test_job_fields.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.model.sharing import MILLI
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo

__all__ = [
    "BODY_FIELDS",
    "JOB_SPEC_FIELDS",
    "SPEC_FIELDS",
    "array_values",
    "gpu_values",
    "job_values",
    "spec_from_values",
    "spec_values",
    "status_values",
]

SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobSpec))
BODY_FIELDS: tuple[str, ...] = tuple(n for n in SPEC_FIELDS if n not in ("client_token", "spread"))
# a job as read back shows its spec, but not its environment and working directory
JOB_SPEC_FIELDS: tuple[str, ...] = tuple(n for n in BODY_FIELDS if n not in ("env", "cwd"))
_LISTS = ("command", "depends_on", "gpu_models", "mounts")
# a job's own fields and a GPU's, as they are
_JOB_FIELDS = (
    "not_before",
    "attempt",
    "faults",
    "interruptions",
    "submitted_at",
    "started_at",
    "finished_at",
    "exit_code",
    "reason",
    "borrowing",
)
_GPU_FIELDS = ("node", "index", "uuid", "model", "memory_bytes", "numa_node", "pci_bus_id")


def spec_values(spec: JobSpec) -> dict[str, Any]:
    """Every field of `spec` by name, the tuples as lists and `env` as a dict."""
    values = {name: getattr(spec, name) for name in SPEC_FIELDS}
    values.update({name: list(values[name]) for name in _LISTS}, env=dict(spec.env))
    return values


def spec_from_values(values: Mapping[str, Any], default_tenant: str) -> JobSpec:
    """The spec of wire `values`: a field absent or None takes JobSpec's default, an empty
    tenant is `default_tenant` (the caller's), `env` is kept as sorted pairs. A share of one
    GPU (`gpu_milli` below 1000) implies gpus 1; with more GPUs it is InvalidRequest."""
    given = {name: values[name] for name in SPEC_FIELDS if values.get(name) is not None}
    given.update({name: tuple(values.get(name) or ()) for name in _LISTS})
    given.update(
        env=tuple(sorted(dict(values.get("env") or {}).items())),
        tenant=values.get("tenant") or default_tenant,
    )
    gpus, milli = given.get("gpus", 0), given.setdefault("gpu_milli", MILLI)
    if milli < MILLI and gpus > 1:
        raise InvalidRequest(
            "gpu_milli", f"a share is of one GPU, got gpus {gpus}; above 1, whole GPUs"
        )
    if 0 < milli < MILLI:
        given["gpus"] = 1
    return JobSpec(**given)


def job_values(job: Job, why: PendingReason | None = None) -> dict[str, Any]:
    """`job` as read back: its spec's JOB_SPEC_FIELDS, where it stands, where it runs
    (`allocation`: task 0's slot and every task's), its history, why it waits (`pending`) and
    the array it is a task of (`array`: id, index and the array's text)."""
    spec = spec_values(job.spec)
    a, task = job.allocation, job.array
    return {
        "id": job.id,
        "state": str(job.state),
        **{name: spec[name] for name in JOB_SPEC_FIELDS},
        **{name: getattr(job, name) for name in _JOB_FIELDS},
        "allocation": None
        if a is None
        else {
            **_slot(a),
            "epoch": a.epoch,
            "tasks": [_slot(t) for t in a.tasks],
        },
        "history": [{"at": t, "state": str(s), "reason": r} for t, s, r in job.history],
        "pending": None if why is None else {"code": str(why.code), "message": why.message},
        "array": None
        if task is None
        else {"id": task.array_id, "index": task.index, "array": task.array.text},
    }


def _slot(t: Any) -> dict[str, Any]:
    """A task's slot (or an allocation's task 0): node, GPU indices and uuids, NUMA nodes."""
    return {
        "node": t.node,
        "gpu_indices": list(t.gpu_indices),
        "gpu_uuids": list(t.gpu_uuids),
        "numa_nodes": list(t.numa_nodes),
    }


def array_values(info: ArrayInfo) -> dict[str, Any]:
    """A job array: its indices and throttle, tasks by state, the ids of its tasks
    (`task_ids`: the first one's) and the spec fields every task shares."""
    spec = info.spec
    return {
        "id": info.id,
        "array": info.array.text,
        "count": info.array.count,
        "throttle": info.array.throttle,
        "tasks_by_state": info.states,
        "waiting": info.waiting,
        "task_ids": f"{info.id}_{info.array.first}",
        "submitted_at": info.submitted_at,
        "name": spec.name,
        "tenant": spec.tenant,
        "command": list(spec.command),
        "gpus": spec.gpus,
        "tasks": spec.tasks,
        "priority": spec.priority,
    }


def gpu_values(info: GpuInfo) -> dict[str, Any]:
    """A GPU: what it is, its state and holder (None = free), why and whether it runs hot,
    and the jobs sharing it (milli-GPU and pinned device memory in bytes each)."""
    g = info.gpu
    return {
        **{name: getattr(g, name) for name in _GPU_FIELDS},
        "vendor": str(g.vendor),
        "state": str(info.state),
        "job_id": info.job_id,
        "reason": info.reason,
        "hot": info.hot,
        "shares": [
            {
                "job_id": s.job_id,
                "gpu_milli": s.milli,
                "pinned_memory_bytes": s.pinned_bytes,
                "sharing": s.sharing,
            }
            for s in info.shares
        ],
    }


def status_values(s: ClusterStatus) -> dict[str, Any]:
    """The cluster's status: every field of ClusterStatus, `notes` as a list."""
    values = {f.name: getattr(s, f.name) for f in fields(ClusterStatus)}
    values["notes"] = list(s.notes)
    return values
