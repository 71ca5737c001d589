"""Wire fields of GPU sharing (docs/allocation.md, "Shares of one GPU"): mixed into the job
body and the job and GPU read models (`job_schemas.py`, `cluster_schemas.py`); their mapping
to and from a JobSpec, a share included, is `adapters.inbound.job_fields`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["ShareFieldsIn", "ShareFieldsOut", "ShareOut"]


class ShareFieldsIn(BaseModel):
    """Sharing fields of POST /v1/jobs (and arrays)."""

    gpu_milli: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="a share of one GPU in milli-GPU (250 = a quarter; implies gpus 1; "
        "1000 = the whole GPU)",
    )
    gpu_memory_bytes: int | None = Field(
        None,
        gt=0,
        description="a share's pinned device memory (the MPS limit); whole GPUs: the least "
        "memory each must have. Never more than the cluster's largest GPU",
    )
    cpu_milli: int = Field(
        0, ge=0, le=1 << 30, description="CPU milli-cores per task (placed and enforced)"
    )
    vendor: Literal["nvidia", "amd", "intel"] | None = Field(
        None, description="GPU vendor (default: any)"
    )
    sharing: Literal["mps", "timeslice"] | None = Field(
        None, description="how a share runs (default: mps on NVIDIA, timeslice elsewhere)"
    )


class ShareFieldsOut(BaseModel):
    """Sharing fields of a job as read back."""

    gpu_milli: int = 1000
    gpu_memory_bytes: int | None = None
    cpu_milli: int = 0
    vendor: str | None = None
    sharing: str | None = None


class ShareOut(BaseModel):
    """One job's share of a GPU."""

    job_id: str
    gpu_milli: int
    pinned_memory_bytes: int
    sharing: str
