"""Readers for public cluster traces (CSV in, domain value objects out)."""

from gpu_platform.adapters.outbound.traces.openb import read_nodes, read_tasks
from gpu_platform.adapters.outbound.traces.pod_jobs import read_pod_jobs

__all__ = ["read_nodes", "read_pod_jobs", "read_tasks"]
