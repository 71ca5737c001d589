from __future__ import annotations

import importlib.util
import sys

import pytest

from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.application.mig_planning import apply_mig_plan, plan_profile, read_layout
from gpu_platform.domain.allocation.mig import MigNoFit, MigReconfigurationPlan
from gpu_platform.domain.allocation.mig_tables import A100_40GB, A100_80GB, H100_80GB
from gpu_platform.ports.outbound.gpu_controller import ControllerUnavailable, GpuControlError
from gpu_platform.testing.fake_nvml_mig import FakeNvmlMig, NVMLError

# Every pynvml name the adapter uses; checked against the real module where it is installed.
USED = [
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceGetComputeInstances",
    "nvmlComputeInstanceGetInfo",
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetUUID",
    "NVMLError",
    "NVML_DEVICE_MIG_ENABLE",
    "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED",
    "c_nvmlGpuInstancePlacement_t",
    "c_nvmlGpuInstance_t",
    "c_nvmlComputeInstance_t",
]


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py absent")
def test_every_nvml_name_the_adapter_calls_exists_in_nvidia_ml_py() -> None:
    import pynvml

    assert [name for name in USED if not hasattr(pynvml, name)] == []
    assert pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 == 9  # profile indices we iterate
    assert pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE == 4


def test_the_fake_offers_every_name_the_adapter_calls() -> None:
    fake = FakeNvmlMig([(A100_40GB, True)])
    assert [name for name in USED if not hasattr(fake, name)] == []


def test_a_missing_nvidia_ml_py_is_controller_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(ControllerUnavailable, match="nvidia-ml-py"):
        NvmlMigController().mig_enabled(0)


def test_a_missing_nvml_library_is_controller_unavailable() -> None:
    class NoLib(FakeNvmlMig):
        def nvmlInit(self) -> None:
            raise NVMLError(12)

    with pytest.raises(ControllerUnavailable):
        NvmlMigController(NoLib([(A100_40GB, True)])).mig_enabled(0)


def test_h100_three_slice_placements_are_four_memory_slices_at_zero_and_four() -> None:
    ctl = NvmlMigController(FakeNvmlMig([(H100_80GB, True)]))
    assert ctl.possible_placements(0, 9) == [(0, 4), (4, 4)]


def test_a_failed_compute_instance_creation_leaves_no_gpu_instance_behind() -> None:
    class NoCi(FakeNvmlMig):
        def nvmlGpuInstanceCreateComputeInstance(self, gi: object, profile_id: int) -> object:
            raise NVMLError(23)

    ctl = NvmlMigController(NoCi([(A100_80GB, True)]))
    with pytest.raises(GpuControlError):
        ctl.create_mig_instance(0, 9, 0)
    assert ctl.list_mig_instances(0) == []


def test_each_gpu_instance_gets_one_full_size_compute_instance() -> None:
    fake = FakeNvmlMig([(A100_80GB, True)])
    ctl = NvmlMigController(fake)
    made = ctl.create_mig_instance(0, 5, 0)  # 4g.40gb
    assert made.compute_instance_id == 0
    ctl.destroy_mig_instance(0, made.gpu_instance_id)
    assert fake.calls.count("nvmlComputeInstanceDestroy") == 1


def test_a_read_only_plan_on_a_gpu_with_mig_off_sees_an_empty_gpu() -> None:
    ctl = NvmlMigController(FakeNvmlMig([(H100_80GB, False)]))
    plan = plan_profile(ctl, 0, H100_80GB, "7g.80gb")
    assert isinstance(plan, MigReconfigurationPlan) and plan.destroy == ()


def test_a_plan_read_from_the_device_and_applied_makes_room_for_the_profile() -> None:
    fake = FakeNvmlMig([(A100_40GB, True)])
    ctl = NvmlMigController(fake)
    ctl.create_mig_instance(0, 19, 0)  # 1g.5gb at 0
    ctl.create_mig_instance(0, 19, 4)  # 1g.5gb at 4: no 3g half is free
    plan = plan_profile(ctl, 0, A100_40GB, "3g.20gb")
    assert isinstance(plan, MigReconfigurationPlan) and len(plan.destroy) == 1
    applied = apply_mig_plan(ctl, 0, plan)
    assert applied.created.profile_id == 9
    layout = read_layout(ctl, 0, A100_40GB)
    layout.check_invariants()
    assert sorted(i.profile.name for i in layout.instances) == ["1g.5gb", "1g.5gb", "3g.20gb"]


def test_a_plan_that_cannot_exist_is_reported_without_touching_the_gpu() -> None:
    fake = FakeNvmlMig([(A100_40GB, True)])
    ctl = NvmlMigController(fake)
    ctl.create_mig_instance(0, 5, 0)  # 4g
    ctl.create_mig_instance(0, 9, 4)  # 3g: all 7 compute slices used
    before = len(fake.calls)
    plan = plan_profile(ctl, 0, A100_40GB, "1g.5gb")
    assert isinstance(plan, MigNoFit)
    assert not any("Create" in c or "Destroy" in c for c in fake.calls[before:])
