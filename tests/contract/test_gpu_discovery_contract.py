from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.sim import FileGpuDiscovery, SimulatedGpuDiscovery
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery
from gpu_platform.testing.contracts import GpuDiscoveryContract
from gpu_platform.testing.fakes import InMemoryGpuDiscovery


class TestSimulatedGpuDiscovery(GpuDiscoveryContract):
    @pytest.fixture
    def discovery(self) -> GpuDiscovery:
        return SimulatedGpuDiscovery()


class TestFileGpuDiscovery(GpuDiscoveryContract):
    @pytest.fixture
    def discovery(self, tmp_path: Path) -> GpuDiscovery:
        path = tmp_path / "inventory.toml"
        path.write_text(
            '[[nodes]]\nname = "a"\ngpus = 4\nnuma_nodes = 2\n'
            '[[nodes]]\nname = "b"\ngpus = 2\nmodel = "H100-SXM5-80GB"\n'
        )
        return FileGpuDiscovery(path)


class TestInMemoryGpuDiscovery(GpuDiscoveryContract):
    @pytest.fixture
    def discovery(self, inventory: Inventory) -> GpuDiscovery:
        return InMemoryGpuDiscovery(inventory)
