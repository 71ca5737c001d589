"""The ContainerRuntime contract on the fake, and the JobRunner contract on the container runner
over the fake (tests/containers runs both against a real Docker daemon)."""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.containers import ContainerJobRunner
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec
from gpu_platform.testing.container_fakes import FakeContainerRuntime
from gpu_platform.testing.contracts import JobRunnerContract, RunnerKit
from gpu_platform.testing.contracts.container_runtime import ContainerRuntimeContract, RuntimeKit


def poll(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


class InImage:
    """The container runner seen through specs without an image: each gets `image`."""

    def __init__(self, runner: ContainerJobRunner, image: str) -> None:
        self.runner, self.image = runner, image

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        self.runner.start(replace(spec, image=self.image), on_exit)

    def __getattr__(self, name: str) -> object:
        return getattr(self.runner, name)


def runner_kit(runner: ContainerJobRunner, image: str) -> RunnerKit:
    return RunnerKit(
        runner=InImage(runner, image),  # type: ignore[arg-type]
        exits=lambda code, out: ("sh", "-c", f"echo {shlex.quote(out)}; exit {code}"),
        forever=("sleep", "600"),
        missing=("/nonexistent/program",),
        settle=poll,
        quiesce=lambda: time.sleep(0.3),
    )


class TestFakeContainerRuntime(ContainerRuntimeContract):
    @pytest.fixture
    def kit(self) -> Iterator[RuntimeKit]:
        runtime = FakeContainerRuntime()
        yield RuntimeKit(runtime, "fake/python:3", f"gp-contract-{uuid.uuid4().hex[:8]}")
        runtime.remove_all()


class TestContainerJobRunnerOnTheFake(JobRunnerContract):
    @pytest.fixture
    def kit(self, tmp_path: Path) -> Iterator[RunnerKit]:
        runtime = FakeContainerRuntime()
        runner = ContainerJobRunner(runtime, tmp_path / "jobs", owner="node-contract")
        yield runner_kit(runner, "fake/python:3")
        runner.close(grace_s=1)
        runtime.remove_all()
