"""The ContainerRuntime and JobRunner contracts against a real Docker daemon."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.containers import ContainerJobRunner, DockerContainerRuntime
from gpu_platform.testing.contracts import JobRunnerContract, RunnerKit
from gpu_platform.testing.contracts.container_runtime import ContainerRuntimeContract, RuntimeKit
from tests.contract.test_container_runtime_contract import runner_kit


@pytest.fixture
def runtime(docker_address: str) -> Iterator[DockerContainerRuntime]:
    runtime = DockerContainerRuntime(docker_address)
    yield runtime
    runtime.close()


class TestDockerContainerRuntime(ContainerRuntimeContract):
    @pytest.fixture
    def kit(self, runtime: DockerContainerRuntime, base: str) -> RuntimeKit:
        return RuntimeKit(runtime, base, f"gp-contract-{uuid.uuid4().hex[:8]}")


class TestContainerJobRunnerOnDocker(JobRunnerContract):
    @pytest.fixture
    def kit(
        self, runtime: DockerContainerRuntime, base: str, tmp_path: Path
    ) -> Iterator[RunnerKit]:
        owner = f"node-contract-{uuid.uuid4().hex[:8]}"
        runner = ContainerJobRunner(runtime, tmp_path / "jobs", owner=owner)
        yield runner_kit(runner, base)
        runner.close(grace_s=1)
        assert runner.reconcile() == 0  # every container of the suite was removed
