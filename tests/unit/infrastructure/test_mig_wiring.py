"""The composition root wraps the process runner in the MigJobRunner when mig_controller=nvml
(and only then), with this node's GPU models."""

from __future__ import annotations

from pathlib import Path

import pytest
from dependency_injector import providers

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.application.mig_jobs import MigJobRunner
from gpu_platform.application.mps_jobs import MpsJobRunner
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import InMemoryGpuDiscovery


@pytest.mark.parametrize(("setting", "kind"), [("nvml", MigJobRunner), ("none", ProcessJobRunner)])
def test_the_runner_gives_mig_jobs_instances_only_when_a_controller_is_configured(
    tmp_path: Path, inventory: Inventory, setting: str, kind: type
) -> None:
    settings = Settings(server_id=0, data_dir=tmp_path, isolation="none", mig_controller=setting)  # type: ignore[arg-type]
    container = Container(settings=settings)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    runner = container.adapters.runner()
    try:  # replica probes (services) around the MPS runner (shares of one GPU join a daemon)
        assert isinstance(runner, ReplicaProbes)
        assert isinstance(runner.inner, MpsJobRunner) and isinstance(runner.inner.inner, kind)
    finally:
        container.adapters.shutdown_resources()
