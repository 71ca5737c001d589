"""Domain/read models <-> protobuf messages."""

from __future__ import annotations

from typing import Any

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo

__all__ = ["array_to_pb", "gpu_to_pb", "job_to_pb", "spec_from_pb", "status_to_pb"]


def spec_from_pb(req: pb.SubmitJobRequest, default_tenant: str = "default") -> JobSpec:
    return JobSpec(
        command=tuple(req.command),
        **_share_from_pb(req),
        name=req.name,
        tenant=req.tenant or default_tenant,
        priority=req.priority,
        env=tuple(sorted(req.env.items())),
        cwd=req.cwd if req.HasField("cwd") else None,
        memory_bytes=req.memory_bytes if req.HasField("memory_bytes") else None,
        time_limit_s=req.time_limit_s if req.HasField("time_limit_s") else None,
        user=req.user if req.HasField("user") else None,
        tasks=req.tasks or 1,
        preemptible=req.preemptible if req.HasField("preemptible") else True,
        depends_on=tuple(req.depends_on),
        gpu_models=tuple(req.gpu_models),
        nvlink=req.nvlink or "preferred",
        numa=req.numa or "preferred",
        same_rack=req.same_rack or "preferred",
        mig_profile=req.mig_profile if req.HasField("mig_profile") else None,
        client_token=req.request_id if req.HasField("request_id") else None,
        image=req.image if req.HasField("image") else None,
        mounts=tuple(req.mounts),
    )


def _share_from_pb(req: pb.SubmitJobRequest) -> dict[str, Any]:
    """`gpus` and the sharing fields (a share of one GPU implies gpus 1)."""
    milli = req.gpu_milli if req.HasField("gpu_milli") else 1000
    if milli < 1000 and req.gpus > 1:
        raise InvalidRequest("gpu_milli", f"a share is of one GPU, got gpus {req.gpus}")
    return {
        "gpus": 1 if 0 < milli < 1000 else req.gpus,
        "gpu_milli": milli,
        "gpu_memory_bytes": req.gpu_memory_bytes if req.HasField("gpu_memory_bytes") else None,
        "cpu_milli": req.cpu_milli,
        "vendor": req.vendor or None,
        "sharing": req.sharing or None,
    }


def job_to_pb(job: Job, why: PendingReason | None = None) -> pb.Job:
    msg = pb.Job(
        id=job.id,
        name=job.spec.name,
        state=str(job.state),
        command=list(job.spec.command),
        gpus=job.spec.gpus,
        tasks=job.spec.tasks,
        preemptible=job.spec.preemptible,
        depends_on=list(job.spec.depends_on),
        gpu_models=list(job.spec.gpu_models),
        nvlink=job.spec.nvlink,
        numa=job.spec.numa,
        same_rack=job.spec.same_rack,
        tenant=job.spec.tenant,
        priority=job.spec.priority,
        attempt=job.attempt,
        faults=job.faults,
        interruptions=job.interruptions,
        submitted_at=job.submitted_at,
        reason=job.reason,
        history=[pb.HistoryEntry(at=t, state=str(s), reason=r) for t, s, r in job.history],
    )
    if job.started_at is not None:
        msg.started_at = job.started_at
    if job.finished_at is not None:
        msg.finished_at = job.finished_at
    if job.exit_code is not None:
        msg.exit_code = job.exit_code
    if job.spec.memory_bytes is not None:
        msg.memory_bytes = job.spec.memory_bytes
    if job.spec.time_limit_s is not None:
        msg.time_limit_s = job.spec.time_limit_s
    if job.spec.user is not None:
        msg.user = job.spec.user
    if job.spec.mig_profile is not None:
        msg.mig_profile = job.spec.mig_profile
    if job.spec.image is not None:
        msg.image = job.spec.image
    msg.mounts.extend(job.spec.mounts)
    msg.gpu_milli = job.spec.gpu_milli
    if job.spec.gpu_memory_bytes is not None:
        msg.gpu_memory_bytes = job.spec.gpu_memory_bytes
    msg.cpu_milli = job.spec.cpu_milli
    msg.vendor = job.spec.vendor or ""
    msg.sharing = job.spec.sharing or ""
    msg.borrowing = job.borrowing
    if job.array is not None:
        msg.array_id = job.array.array_id
        msg.array_index = job.array.index
        msg.array = job.array.array.text
    if why is not None:
        msg.pending.CopyFrom(pb.PendingReason(code=str(why.code), message=why.message))
    a = job.allocation
    if a is not None:
        msg.allocation.CopyFrom(
            pb.Allocation(
                node=a.node,
                gpu_indices=list(a.gpu_indices),
                gpu_uuids=list(a.gpu_uuids),
                numa_nodes=list(a.numa_nodes),
                epoch=a.epoch,
                tasks=[
                    pb.TaskSlot(
                        node=t.node,
                        gpu_indices=list(t.gpu_indices),
                        gpu_uuids=list(t.gpu_uuids),
                        numa_nodes=list(t.numa_nodes),
                    )
                    for t in a.tasks
                ],
            )
        )
    return msg


def gpu_to_pb(info: GpuInfo) -> pb.Gpu:
    g = info.gpu
    return pb.Gpu(
        node=g.node,
        index=g.index,
        uuid=g.uuid,
        vendor=str(g.vendor),
        model=g.model,
        memory_bytes=g.memory_bytes,
        numa_node=g.numa_node,
        pci_bus_id=g.pci_bus_id,
        state=str(info.state),
        job_id=info.job_id or "",
        shares=[
            pb.ShareHolder(
                job_id=s.job_id,
                gpu_milli=s.milli,
                pinned_memory_bytes=s.pinned_bytes,
                sharing=s.sharing,
            )
            for s in info.shares
        ],
    )


def status_to_pb(s: ClusterStatus) -> pb.ClusterStatus:
    return pb.ClusterStatus(
        inventory_source=s.inventory_source,
        simulated=s.simulated,
        nodes=s.nodes,
        gpus_total=s.gpus_total,
        gpus_free=s.gpus_free,
        jobs_by_state=s.jobs_by_state,
        notes=list(s.notes),
        gpus_shared=s.gpus_shared,
        shares=s.shares,
    )


def array_to_pb(info: ArrayInfo) -> pb.JobArray:
    spec = info.spec
    return pb.JobArray(
        id=info.id,
        array=info.array.text,
        count=info.array.count,
        throttle=info.array.throttle,
        tasks_by_state=info.states,
        waiting=info.waiting,
        submitted_at=info.submitted_at,
        name=spec.name,
        tenant=spec.tenant,
        command=list(spec.command),
        gpus=spec.gpus,
        tasks=spec.tasks,
        priority=spec.priority,
    )
