"""Readers for public cluster traces (CSV in, domain value objects out)."""

from gpu_platform.adapters.outbound.traces.openb import read_nodes, read_tasks

__all__ = ["read_nodes", "read_tasks"]
