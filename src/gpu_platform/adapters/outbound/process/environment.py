"""What the platform puts in a task's environment, and the task's rendezvous port.

The vendor's visible-device masks (`visibility_env`; a MIG job gets its MIG device UUIDs),
torchrun's rendezvous variables (single-task ranks, or the gang's), MPS limits, nearest NICs,
the trace context and the attempt markers (`MARKER`, `TASK_MARKER`: how leftovers of an
attempt, or of one task, are found in /proc/*/environ). `master_port` picks or checks the
gang's MASTER_PORT. Used by the process runner and the container runner; split from
`runner` for size (`runner` re-exports these names).
"""

from __future__ import annotations

import socket
from typing import Literal

from gpu_platform.domain.allocation.mps import mps_environment
from gpu_platform.ports.outbound.job_runner import LaunchError, LaunchSpec

__all__ = [
    "MARKER",
    "TASK_MARKER",
    "free_port",
    "master_port",
    "task_environment",
    "visibility_env",
]

MARKER = "GPU_PLATFORM_ATTEMPT"
TASK_MARKER = "GPU_PLATFORM_TASK"  # <job>:<epoch>:<rank>: one task's processes, escapees too
_MASKS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
          "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")  # fmt: skip


def visibility_env(spec: LaunchSpec, mode: Literal["index", "uuid"] = "index") -> dict[str, str]:
    """The visible-device masks for the attempt's vendor. A job without GPUs gets every mask
    empty, so no runtime of any vendor sees a GPU. A MIG job sees only its MIG devices, named
    by their "MIG-..." UUIDs (what CUDA >= 11 and the container toolkit take) in both NVIDIA
    masks, whatever `mode` says: an index or the parent's UUID would expose the whole GPU."""
    env = dict.fromkeys(_MASKS, "")
    if not spec.gpu_indices:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
        return env
    # an MPS client names its GPU by UUID: an index would count among its daemon's devices
    by_uuid = mode == "uuid" or spec.mps is not None
    ids = spec.gpu_uuids if by_uuid else tuple(str(i) for i in spec.gpu_indices)
    if spec.mig_uuids:  # LaunchSpec guarantees vendor == "nvidia"
        ids = spec.mig_uuids
    mask = ",".join(ids)
    if spec.vendor == "nvidia":
        env.update(CUDA_VISIBLE_DEVICES=mask, NVIDIA_VISIBLE_DEVICES=mask)
    elif spec.vendor == "amd":
        env.update(ROCR_VISIBLE_DEVICES=mask, HIP_VISIBLE_DEVICES=mask)
    elif spec.vendor == "intel":
        env["ZE_AFFINITY_MASK"] = ",".join(str(i) for i in spec.gpu_indices)
    return {k: v for k, v in env.items() if v or k != "NVIDIA_VISIBLE_DEVICES"}


def task_environment(
    spec: LaunchSpec, mode: Literal["index", "uuid"], master_port: int
) -> dict[str, str]:
    """What the platform adds to a task's environment: the job's own variables, the vendor's
    visible-device masks, torchrun's rendezvous (overriding the user's: a wrong RANK would
    hang the gang), MPS limits, nearest NICs, the trace context and the attempt markers."""
    env = dict(spec.env)
    env.update(visibility_env(spec, mode))
    gang = spec.gang
    if gang is None:  # a lone task is its own world
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                   NODE_RANK="0", MASTER_ADDR="127.0.0.1")  # fmt: skip
    else:
        env.update(
            RANK=str(spec.rank),
            LOCAL_RANK=str(gang.local_rank),
            WORLD_SIZE=str(gang.world_size),
            LOCAL_WORLD_SIZE=str(gang.local_world_size),
            NODE_RANK=str(gang.node_rank),
            MASTER_ADDR=gang.master_addr,
        )
    env["MASTER_PORT"] = str(master_port)
    if spec.mps is not None:  # MPS client limits: compute share and pinned memory
        env.update(mps_environment(spec.mps))
    if spec.nics:  # NCCL/UCX: use the RDMA NICs nearest the job's GPUs
        env.setdefault("NCCL_IB_HCA", ",".join(spec.nics))
        env.setdefault("UCX_NET_DEVICES", ",".join(f"{n}:1" for n in spec.nics))
    if spec.traceparent:  # OpenTelemetry's environment carrier: the job joins its trace
        env.setdefault("TRACEPARENT", spec.traceparent)
    env["GPU_PLATFORM_JOB_ID"] = spec.job_id
    env[MARKER] = f"{spec.job_id}:{spec.epoch}"
    env[TASK_MARKER] = f"{spec.job_id}:{spec.epoch}:{spec.rank}"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def master_port(spec: LaunchSpec, picked: dict[tuple[str, int], int]) -> int:
    """The attempt's MASTER_PORT: the one the leader named for the gang (rank 0 checks that it
    can listen there, so a taken port fails the launch instead of hanging the gang), else one
    picked here, shared through `picked` by the attempt's tasks."""
    gang = spec.gang
    if gang is None:
        return free_port()
    if not gang.master_port:
        return picked.setdefault((spec.job_id, spec.epoch), free_port())
    if spec.rank == 0:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", gang.master_port))
            except OSError as exc:
                raise LaunchError(
                    f"MASTER_PORT {gang.master_port} is taken on this node ({exc.strerror}): "
                    "keep the gang port range (setting gang_port_base) free"
                ) from exc
    return gang.master_port
