"""MIG use cases over the MigController port: read a GPU's layout, plan room for a profile
(read-only), and carry a plan out.

`plan_profile` only reads the device, so it is safe on a production GPU (and on a GPU with MIG
off, where the layout is simply empty). `apply_mig_plan` destroys the instances the plan moves,
re-creates them at their new starts, then creates the requested instance; the jobs on moved
instances must have been stopped by the caller first. GPU-instance ids change on re-creation;
the returned mapping says old id -> new id.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.allocation.mig import (
    MigLayout,
    MigNoFit,
    MigReconfigurationPlan,
    layout_from_instances,
    plan_reconfiguration,
)
from gpu_platform.domain.allocation.mig_tables import MigGpuModel
from gpu_platform.ports.outbound.gpu_controller import MigController, MigInstanceInfo

__all__ = ["AppliedMigPlan", "apply_mig_plan", "plan_profile", "read_layout"]


@dataclass(frozen=True, slots=True)
class AppliedMigPlan:
    created: MigInstanceInfo
    renamed: dict[str, int]  # moved instance: old GPU-instance id -> new one


def read_layout(ctl: MigController, gpu_index: int, model: MigGpuModel) -> MigLayout:
    """The GPU's live instances as a domain layout (ids are the GPU-instance ids)."""
    infos = ctl.list_mig_instances(gpu_index)
    return layout_from_instances(
        model, ((str(i.gpu_instance_id), i.profile_id, i.start) for i in infos)
    )


def plan_profile(
    ctl: MigController, gpu_index: int, model: MigGpuModel, profile_name: str
) -> MigReconfigurationPlan | MigNoFit:
    """Read-only: where `profile_name` would go, moving the fewest live instances."""
    layout = read_layout(ctl, gpu_index, model)
    return plan_reconfiguration(layout, model.profile(profile_name))


def apply_mig_plan(
    ctl: MigController, gpu_index: int, plan: MigReconfigurationPlan
) -> AppliedMigPlan:
    for instance_id in plan.destroy:
        ctl.destroy_mig_instance(gpu_index, int(instance_id))
    renamed: dict[str, int] = {}
    for inst in plan.create:
        made = ctl.create_mig_instance(gpu_index, inst.profile.profile_id, inst.start)
        renamed[inst.instance_id] = made.gpu_instance_id
    created = ctl.create_mig_instance(gpu_index, plan.new.profile.profile_id, plan.new.start)
    return AppliedMigPlan(created, renamed)
