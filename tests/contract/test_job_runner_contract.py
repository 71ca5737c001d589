from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.testing.contracts import JobRunnerContract, RunnerKit
from gpu_platform.testing.fakes import FakeJobRunner


def _poll(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


class TestProcessJobRunner(JobRunnerContract):
    @pytest.fixture
    def kit(self, tmp_path: Path) -> Iterator[RunnerKit]:
        runner = ProcessJobRunner(tmp_path / "jobs")
        yield RunnerKit(
            runner=runner,
            exits=lambda code, out: (
                sys.executable,
                "-c",
                f"print({out!r}); raise SystemExit({code})",
            ),
            forever=(sys.executable, "-c", "import time; time.sleep(600)"),
            missing=("/nonexistent/program",),
            settle=lambda cond: _poll(cond, 10.0),
            quiesce=lambda: time.sleep(0.3),
        )
        runner.close(grace_s=1)


class TestFakeJobRunner(JobRunnerContract):
    @pytest.fixture
    def kit(self) -> RunnerKit:
        runner = FakeJobRunner()

        def settle(cond: Callable[[], bool]) -> bool:
            runner.deliver()
            return cond()

        return RunnerKit(
            runner=runner,
            exits=lambda code, out: ("fake-exit", str(code), out),
            forever=("fake-forever",),
            missing=("no-such-program",),
            settle=settle,
            quiesce=runner.deliver,
        )
