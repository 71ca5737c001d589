"""Job <-> JSON-able dict for the SQLite store; the codec itself is pure and lives in the domain
(`domain.model_codec`), where the replicated cluster state uses it too."""

from __future__ import annotations

from gpu_platform.domain.model_codec import SCHEMA_VERSION, job_from_dict, job_to_dict

__all__ = ["SCHEMA_VERSION", "job_from_dict", "job_to_dict"]
