"""Entities and value objects: GPUs, nodes, jobs and allocations."""

from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import (
    TERMINAL_JOB_STATES,
    Allocation,
    Job,
    JobSpec,
    JobState,
)
from gpu_platform.domain.model.node import Inventory, Node, NodeState, NumaNode

__all__ = [
    "TERMINAL_JOB_STATES",
    "Allocation",
    "Gpu",
    "GpuState",
    "Inventory",
    "Job",
    "JobSpec",
    "JobState",
    "Node",
    "NodeState",
    "NumaNode",
    "Vendor",
]
