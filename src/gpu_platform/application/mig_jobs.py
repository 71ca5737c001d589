"""MigJobRunner: gives a MIG job (`LaunchSpec.mig_profile`) an instance of its profile, then
starts it through the wrapped runner with that instance's MIG UUID.

The job holds its whole GPU (the scheduler gave it `gpu_indices == (n,)`), so any instance on
that GPU is free for it. `domain.allocation.mig_jobs.choose_slice` decides: reuse a live
instance of the profile that has a MIG device, else create one where the planner says (moving
the fewest live instances, `application.mig_planning.apply_mig_plan`), else refuse. Instances
are left in place when the attempt ends, for the next MIG job on that GPU.

Every failure is a LaunchError naming the GPU and the reason (MIG mode off, no room, driver
refusal, no MIG table for the GPU's model); the control plane then fails the attempt with it.
Calls to the controller are serialised (the port is not thread-safe per GPU).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace

import structlog

from gpu_platform.application.mig_planning import apply_mig_plan
from gpu_platform.domain.allocation.mig import MigInstance, MigNoFit, layout_from_instances
from gpu_platform.domain.allocation.mig_jobs import choose_slice, mig_model
from gpu_platform.domain.errors import DomainError
from gpu_platform.ports.outbound.gpu_controller import GpuControlError, MigController
from gpu_platform.ports.outbound.job_runner import (
    ExitReport,
    JobRunner,
    JobRunnerWrapper,
    LaunchError,
    LaunchSpec,
)

__all__ = ["MigJobRunner"]

log = structlog.get_logger(__name__)


class MigJobRunner(JobRunnerWrapper):
    """A JobRunner that resolves `mig_profile` to `mig_uuids` before delegating to `inner`.

    `gpu_models` maps this node's GPU indices to their model names (as discovery reports
    them); it picks the MIG table. Specs without a MIG profile pass through unchanged."""

    def __init__(
        self, inner: JobRunner, controller: MigController, gpu_models: Mapping[int, str]
    ) -> None:
        super().__init__(inner)
        self._ctl = controller
        self._models = dict(gpu_models)
        self._lock = threading.Lock()

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        if spec.mig_profile is not None and not spec.mig_uuids:
            spec = replace(spec, mig_uuids=(self.acquire(spec),))
        self._inner.start(spec, on_exit)

    def acquire(self, spec: LaunchSpec) -> str:
        """The MIG device UUID of an instance of `spec.mig_profile` on the job's GPU."""
        profile = spec.mig_profile
        assert profile is not None
        if len(spec.gpu_indices) != 1:
            raise LaunchError(f"a MIG job runs on one GPU, not {len(spec.gpu_indices)}")
        index = spec.gpu_indices[0]
        name = self._models.get(index, "")
        model = mig_model(name)
        if model is None:
            raise LaunchError(f"GPU {index} ({name or 'unknown model'}) has no MIG profile table")
        with self._lock:
            try:
                if not self._ctl.mig_enabled(index):
                    raise LaunchError(
                        f"GPU {index} is not in MIG mode (enable it: nvidia-smi -i {index} -mig 1)"
                    )
                infos = self._ctl.list_mig_instances(index)
                by_id = {str(i.gpu_instance_id): i for i in infos}
                layout = layout_from_instances(
                    model, ((k, i.profile_id, i.start) for k, i in by_id.items())
                )
                usable = {k for k, i in by_id.items() if i.uuid}
                choice = choose_slice(layout, profile, usable)
                if isinstance(choice, MigNoFit):
                    raise LaunchError(f"GPU {index}: no room for {profile}: {choice.reason}")
                if isinstance(choice, MigInstance):
                    uuid = by_id[choice.instance_id].uuid
                    how = "reused"
                else:
                    applied = apply_mig_plan(self._ctl, index, choice)
                    uuid = applied.created.uuid
                    how = f"created (moved {len(choice.destroy)})"
            except (GpuControlError, DomainError) as exc:
                raise LaunchError(f"GPU {index}: MIG {profile}: {exc}") from exc
        if not uuid:
            raise LaunchError(f"GPU {index}: the new {profile} instance has no MIG device")
        log.info("mig instance", job_id=spec.job_id, gpu=index, profile=profile, how=how, uuid=uuid)
        return uuid
