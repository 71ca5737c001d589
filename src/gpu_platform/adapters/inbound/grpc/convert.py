"""Domain/read models <-> protobuf messages, over the field mapping shared with REST
(`adapters.inbound.job_fields`). What stays here is proto3's shape: a field not set is absent
(an optional one unset, a plain one at its zero value), so a request passes only the fields it
has set and a read model drops its Nones; and a job's array is three flat fields."""

from __future__ import annotations

from typing import Any

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.job_fields import (
    array_values,
    gpu_values,
    job_values,
    spec_from_values,
    status_values,
)
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo

__all__ = ["array_to_pb", "gpu_to_pb", "job_to_pb", "spec_from_pb", "status_to_pb"]


def spec_from_pb(req: pb.SubmitJobRequest, default_tenant: str = "default") -> JobSpec:
    """The spec of `req`: the fields it has set (an unset one is the spec's default), its
    `request_id` as the idempotency token."""
    values = {fd.name: value for fd, value in req.ListFields()}
    values["client_token"] = values.pop("request_id", None)
    return spec_from_values(values, default_tenant)


def job_to_pb(job: Job, why: PendingReason | None = None) -> pb.Job:
    values = job_values(job, why)
    task = values.pop("array")
    if task is not None:
        values.update(array_id=task["id"], array_index=task["index"], array=task["array"])
    return pb.Job(**_set(values))


def gpu_to_pb(info: GpuInfo) -> pb.Gpu:
    return pb.Gpu(**_set(gpu_values(info)))


def status_to_pb(s: ClusterStatus) -> pb.ClusterStatus:
    return pb.ClusterStatus(**status_values(s))


def array_to_pb(info: ArrayInfo) -> pb.JobArray:
    return pb.JobArray(**array_values(info))


def _set(values: dict[str, Any]) -> dict[str, Any]:
    """The values that are set: None is proto3's absent field."""
    return {name: value for name, value in values.items() if value is not None}
