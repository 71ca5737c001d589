"""Allocation: buddy allocator and compaction plans, MIG slice placement, MPS share accounting."""

from gpu_platform.domain.allocation.buddy import (
    ALIGNMENT_BYTES,
    AllocationFailed,
    BuddyAllocator,
    BuddySnapshot,
    BuddyStats,
    InvalidFree,
)
from gpu_platform.domain.allocation.compaction import (
    CompactionPlan,
    Move,
    NoCompaction,
    apply_plan,
    plan_compaction,
)
from gpu_platform.domain.allocation.mps import MpsLedger, MpsShare, mps_environment

__all__ = [
    "ALIGNMENT_BYTES",
    "AllocationFailed",
    "BuddyAllocator",
    "BuddySnapshot",
    "BuddyStats",
    "CompactionPlan",
    "InvalidFree",
    "Move",
    "MpsLedger",
    "MpsShare",
    "NoCompaction",
    "apply_plan",
    "mps_environment",
    "plan_compaction",
]
