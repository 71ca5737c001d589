"""Jobs on MIG instances: which GPU models can host a profile, and which instance a job gets.

Theory of operation. A MIG job (`JobSpec.mig_profile`) holds one whole GPU through the ordinary
scheduler (gpus=1); the GPU must be a model whose MIG table (`mig_tables`) has the profile.
When the attempt starts, the node gives it one GPU instance of that profile on that GPU:
`choose_slice` reuses a live instance of the profile when there is a usable one (it has a MIG
device, i.e. a compute instance), else asks the planner (`mig.plan_reconfiguration`) for a
placement, moving the fewest live instances, or says why none exists. The job is exclusive on
its GPU, so no other job of ours runs on the instances a plan moves.

All functions here are pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from gpu_platform.domain.allocation.mig import (
    MigInstance,
    MigLayout,
    MigNoFit,
    MigReconfigurationPlan,
    plan_reconfiguration,
)
from gpu_platform.domain.allocation.mig_tables import MIG_MODELS, MigGpuModel
from gpu_platform.domain.errors import InvalidRequest

__all__ = [
    "check_mig_request",
    "choose_slice",
    "known_mig_profiles",
    "mig_model",
    "models_hosting",
]

_VENDOR_PREFIX = "NVIDIA "  # NVML's nvmlDeviceGetName says "NVIDIA A100-SXM4-80GB"


def mig_model(gpu_model: str) -> MigGpuModel | None:
    """The MIG table of a GPU model as discovery names it (with or without NVML's "NVIDIA "
    prefix); None when we have no MIG table for it."""
    return MIG_MODELS.get(gpu_model.removeprefix(_VENDOR_PREFIX))


def known_mig_profiles() -> tuple[str, ...]:
    """Every profile name of every MIG table, sorted."""
    return tuple(sorted({p.name for m in MIG_MODELS.values() for p in m.profiles}))


def models_hosting(profile: str, gpu_models: Iterable[str]) -> frozenset[str]:
    """Of `gpu_models` (names as discovery reports them), those whose MIG table has `profile`."""
    out = set()
    for name in gpu_models:
        model = mig_model(name)
        if model is not None and any(p.name == profile for p in model.profiles):
            out.add(name)
    return frozenset(out)


def check_mig_request(
    profile: str, gpus: int, cluster_models: Iterable[str], wanted: Collection[str] = ()
) -> frozenset[str]:
    """The cluster's GPU models that can host a job asking for `profile` on `gpus` GPUs, of
    the `wanted` models (empty = any).

    Raises InvalidRequest("mig_profile", ...) for an unknown profile, a GPU count other than 1
    (a MIG job holds one GPU) or a cluster with no such GPU model that has the profile."""
    known = known_mig_profiles()
    if profile not in known:
        raise InvalidRequest(
            "mig_profile", f"unknown MIG profile {profile!r}; known: {', '.join(known)}"
        )
    if gpus != 1:
        raise InvalidRequest("mig_profile", f"a MIG job holds one GPU: gpus must be 1, got {gpus}")
    models = sorted(set(cluster_models))
    hosts = models_hosting(profile, models)
    if wanted:
        hosts &= frozenset(wanted)
    if not hosts:
        raise InvalidRequest(
            "mig_profile",
            f"no GPU{' of model ' + ' or '.join(wanted) if wanted else ''} in the cluster "
            f"can host {profile} (it has {', '.join(models) or 'none'}); "
            "it could never be placed",
        )
    return hosts


def choose_slice(
    layout: MigLayout, profile: str, usable: Collection[str]
) -> MigInstance | MigReconfigurationPlan | MigNoFit:
    """The instance a job asking for `profile` gets on this GPU.

    `usable` are the ids of live instances that have a MIG device (a compute instance). A
    usable live instance of the profile wins (lowest start); otherwise the planner's
    placement (an empty-move plan when the profile fits as things stand), or why none fits.
    Raises InvalidRequest("mig_profile", ...) when the board has no such profile."""
    try:
        wanted = layout.model.profile(profile)
    except KeyError as e:
        raise InvalidRequest("mig_profile", e.args[0]) from e
    for inst in layout.instances:  # sorted by start
        if inst.profile.name == wanted.name and inst.instance_id in usable:
            return inst
    return plan_reconfiguration(layout, wanted)
