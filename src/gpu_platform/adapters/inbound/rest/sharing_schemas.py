"""Wire fields of GPU sharing (docs/allocation.md, "Shares of one GPU"): mixed into the job
body and the job and GPU read models (`job_schemas.py`, `cluster_schemas.py`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.gpu_shares import Share
from gpu_platform.domain.model.job import JobSpec

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

    def share_spec(self, gpus: int) -> dict[str, Any]:
        """JobSpec keyword arguments, with `gpus` (a share implies 1)."""
        milli = 1000 if self.gpu_milli is None else self.gpu_milli
        if milli < 1000 and gpus > 1:
            raise InvalidRequest(
                "gpu_milli", f"a share is of one GPU, got gpus {gpus}; above 1, whole GPUs"
            )
        return {
            "gpus": 1 if milli < 1000 else gpus,
            "gpu_milli": milli,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "cpu_milli": self.cpu_milli,
            "vendor": self.vendor,
            "sharing": self.sharing,
        }


class ShareFieldsOut(BaseModel):
    """Sharing fields of a job as read back."""

    gpu_milli: int = 1000
    gpu_memory_bytes: int | None = None
    cpu_milli: int = 0
    vendor: str | None = None
    sharing: str | None = None

    @staticmethod
    def of_spec(spec: JobSpec) -> dict[str, Any]:
        return {
            "gpu_milli": spec.gpu_milli,
            "gpu_memory_bytes": spec.gpu_memory_bytes,
            "cpu_milli": spec.cpu_milli,
            "vendor": spec.vendor,
            "sharing": spec.sharing,
        }


class ShareOut(BaseModel):
    """One job's share of a GPU."""

    job_id: str
    gpu_milli: int
    pinned_memory_bytes: int
    sharing: str

    @classmethod
    def of(cls, share: Share) -> ShareOut:
        return cls(
            job_id=share.job_id,
            gpu_milli=share.milli,
            pinned_memory_bytes=share.pinned_bytes,
            sharing=share.sharing,
        )
