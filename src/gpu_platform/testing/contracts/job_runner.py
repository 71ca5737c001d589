"""The JobRunner contract.

A `RunnerKit` gives the suite a runner plus the adapter's way to express three programs (one
that exits with a code after printing, one that runs until stopped, one that does not exist),
`settle(cond)`, which waits until `cond()` holds (polling real processes; delivering exits for
the fake) and returns it, and `quiesce()`, which lets pending work happen before a check that
something did NOT happen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from gpu_platform.ports.outbound.job_runner import ExitReport, JobRunner, LaunchError, LaunchSpec

__all__ = ["JobRunnerContract", "RunnerKit"]


@dataclass
class RunnerKit:
    runner: JobRunner
    exits: Callable[[int, str], tuple[str, ...]]
    forever: tuple[str, ...]
    missing: tuple[str, ...]
    settle: Callable[[Callable[[], bool]], bool]
    quiesce: Callable[[], None]


def _spec(argv: tuple[str, ...], job: str = "j-contract", epoch: int = 1) -> LaunchSpec:
    return LaunchSpec(job, epoch, 1, argv, (("CONTRACT", "1"),), (0, 1), ("GPU-a", "GPU-b"))


class JobRunnerContract:
    """Subclass and provide `kit`."""

    @pytest.fixture
    def kit(self) -> RunnerKit:
        raise NotImplementedError

    def test_an_exit_is_reported_once_with_its_code(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        kit.runner.start(_spec(kit.exits(3, "")), reports.append)
        assert kit.settle(lambda: len(reports) == 1)
        assert reports == [ExitReport("j-contract", 1, 3, None)]
        kit.quiesce()
        assert len(reports) == 1

    def test_output_lands_in_the_attempt_log(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        kit.runner.start(_spec(kit.exits(0, "hello-from-job")), reports.append)
        assert kit.settle(lambda: len(reports) == 1)
        assert "hello-from-job" in kit.runner.read_log("j-contract", 1, 4096)
        assert (
            kit.runner.read_log("j-contract", 1, 5)
            == kit.runner.read_log("j-contract", 1, 4096)[-5:]
        )

    def test_a_missing_program_raises_and_is_never_reported(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        with pytest.raises(LaunchError):
            kit.runner.start(_spec(kit.missing), reports.append)
        kit.quiesce()
        assert reports == []

    def test_a_mig_profile_without_a_mig_instance_is_refused_and_never_reported(
        self, kit: RunnerKit
    ) -> None:
        reports: list[ExitReport] = []
        spec = replace(_spec(kit.exits(0, "")), mig_profile="1g.10gb")
        with pytest.raises(LaunchError, match=r"1g\.10gb"):
            kit.runner.start(spec, reports.append)
        kit.quiesce()
        assert reports == []

    def test_a_stopped_attempt_is_reported_as_signalled(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        kit.runner.start(_spec(kit.forever), reports.append)
        assert kit.runner.stop("j-contract", 1, grace_s=5)
        # Idempotent: a second stop is harmless. It may already answer False, if the
        # attempt ended and was reported in between.
        kit.runner.stop("j-contract", 1, grace_s=5)
        assert kit.settle(lambda: len(reports) == 1)
        assert reports[0].exit_code is None
        assert reports[0].signal is not None

    def test_stopping_an_unknown_attempt_does_nothing_and_says_so(self, kit: RunnerKit) -> None:
        assert kit.runner.stop("j-nobody", 42, grace_s=1) is False

    def test_stop_all_ends_every_attempt(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        for epoch in (1, 2, 3):
            kit.runner.start(_spec(kit.forever, epoch=epoch), reports.append)
        kit.runner.stop_all(grace_s=5)
        assert kit.settle(lambda: len(reports) == 3)
        assert sorted(r.epoch for r in reports) == [1, 2, 3]

    def test_the_log_of_an_unknown_attempt_is_empty(self, kit: RunnerKit) -> None:
        assert kit.runner.read_log("j-nobody", 1, 100) == ""
        assert kit.runner.read_log_from("j-nobody", 1, 0, 100) == b""

    def test_the_log_reads_from_any_offset(self, kit: RunnerKit) -> None:
        reports: list[ExitReport] = []
        kit.runner.start(_spec(kit.exits(0, "0123456789")), reports.append)
        assert kit.settle(lambda: len(reports) == 1)
        whole = kit.runner.read_log_from("j-contract", 1, 0, 1 << 20)
        assert whole.startswith(b"0123456789")
        assert kit.runner.read_log_from("j-contract", 1, 3, 4) == b"3456"
        assert kit.runner.read_log_from("j-contract", 1, len(whole), 10) == b""

    def test_reaping_an_attempt_with_no_leftovers_kills_nothing(self, kit: RunnerKit) -> None:
        assert kit.runner.reap("j-nobody", 99) == 0
