"""MIG and MPS controller contracts against the NVML adapter (on the MIG-scoped fake pynvml),
the MPS daemon adapter (real processes of a fake nvidia-cuda-mps-control) and the in-memory
FakeGpuController."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.mps import MpsDaemonController
from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.domain.allocation.mig_tables import A100_40GB
from gpu_platform.ports.outbound.gpu_controller import MigController, MpsController
from gpu_platform.testing.contracts.gpu_controller import (
    MigControllerContract,
    MpsControllerContract,
)
from gpu_platform.testing.fake_gpu_controller import FakeGpuController
from gpu_platform.testing.fake_mps_control import write_fake_mps_control
from gpu_platform.testing.fake_nvml_mig import FakeNvmlMig


class TestNvmlMigControllerOnFakeNvml(MigControllerContract):
    def make_controller(self) -> MigController:
        return NvmlMigController(FakeNvmlMig([(A100_40GB, True), (A100_40GB, False)]))


class TestFakeGpuControllerMig(MigControllerContract):
    def make_controller(self) -> MigController:
        return FakeGpuController({0: A100_40GB, 1: None})


class TestMpsDaemonControllerWithAFakeBinary(MpsControllerContract):
    @pytest.fixture(autouse=True)
    def _dirs(self, tmp_path: Path) -> None:
        self.tmp = tmp_path

    def make_mps(self) -> MpsController:
        exe = write_fake_mps_control(self.tmp)
        return MpsDaemonController(self.tmp / "pipe", self.tmp / "log", executable=str(exe))


class TestFakeGpuControllerMps(MpsControllerContract):
    def make_mps(self) -> MpsController:
        return FakeGpuController({0: None, 1: None})
