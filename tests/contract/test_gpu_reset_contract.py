from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.nvml import NvidiaSmiGpuReset
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.testing.agent_fakes import AcceptingListener, connect
from gpu_platform.testing.contracts import GpuResetContract, ResetKit
from gpu_platform.testing.fakes import FakeJobRunner


class TestSimulatedGpuReset(GpuResetContract):
    @pytest.fixture
    def reset_kit(self, inventory: Inventory) -> Iterator[ResetKit]:
        started: list[SimulatedHardware] = []

        def make(healthy: bool) -> tuple[GpuReset, str, int]:
            sim = SimulatedHardware(inventory, heartbeats=False)
            sim.start(lambda _: None)
            started.append(sim)
            if not healthy:
                sim.inject("reset-fail on gpu 2")
            return sim, inventory.nodes[0].name, 2

        yield make
        for sim in started:
            sim.stop()


class TestAgentHubGpuReset(GpuResetContract):
    """The leader's reset for agent nodes: the node's agent resets with its simulator."""

    @pytest.fixture
    def reset_kit(self, inventory: Inventory) -> Iterator[ResetKit]:
        started: list[SimulatedHardware] = []

        def make(healthy: bool) -> tuple[GpuReset, str, int]:
            sim = SimulatedHardware(inventory, heartbeats=False)
            node = inventory.nodes[0]
            agent = Agent(node, FakeJobRunner(), (sim,), gpu_reset=sim, injector=sim)
            agent.start()
            started.append(sim)
            hub = AgentHub()
            hub.attach(AcceptingListener())
            connect(hub, agent)
            if not healthy:
                sim.inject("reset-fail on gpu 2")
            return hub, node.name, 2

        yield make
        for sim in started:
            sim.stop()


class TestNvidiaSmiGpuReset(GpuResetContract):
    """Over stand-in `nvidia-smi` executables (CI has no GPU; never reset a real one here)."""

    @pytest.fixture
    def reset_kit(self, tmp_path: Path) -> ResetKit:
        def make(healthy: bool) -> tuple[GpuReset, str, int]:
            exe = tmp_path / ("ok" if healthy else "fails") / "nvidia-smi"
            exe.parent.mkdir(exist_ok=True)
            body = "exit 0" if healthy else 'echo "Unable to reset GPU: in use" >&2; exit 3'
            exe.write_text(f"#!/bin/sh\n{body}\n")
            exe.chmod(0o755)
            return NvidiaSmiGpuReset("n1", binary=str(exe)), "n1", 0

        return make
