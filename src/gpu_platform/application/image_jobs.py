"""ImageJobRouter: one node runner for both kinds of task, bare processes and containers.

A task whose LaunchSpec names an `image` goes to the container runner, any other to the
process runner. Stops, reaps and shutdown go to both (an attempt's tasks are all of one kind,
but a runner without the attempt answers "not mine" cheaply). Logs have one layout for both
runners under one root, so reads go to the process runner.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_platform.ports.outbound.job_runner import ExitReport, JobRunner, LaunchSpec

__all__ = ["ImageJobRouter"]


class ImageJobRouter:
    """Implements JobRunner over `bare` (processes) and `containers` (image tasks)."""

    def __init__(self, bare: JobRunner, containers: JobRunner) -> None:
        self.bare = bare
        self.containers = containers

    def _of(self, spec: LaunchSpec) -> JobRunner:
        return self.containers if spec.image is not None else self.bare

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        self._of(spec).start(spec, on_exit)

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        stopped_bare = self.bare.stop(job_id, epoch, grace_s)
        return self.containers.stop(job_id, epoch, grace_s) or stopped_bare

    def stop_all(self, grace_s: float) -> None:
        self.bare.stop_all(grace_s)
        self.containers.stop_all(grace_s)

    def reap(self, job_id: str, epoch: int) -> int:
        return self.bare.reap(job_id, epoch) + self.containers.reap(job_id, epoch)

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        return self.bare.read_log(job_id, attempt, tail_bytes, rank)

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        return self.bare.read_log_from(job_id, attempt, offset, max_bytes, rank)

    def close(self, grace_s: float = 10.0) -> None:
        """Stop every task of both runners, then the runners (those that can be closed)."""
        for runner in (self.containers, self.bare):
            close = getattr(runner, "close", None)
            if callable(close):
                close(grace_s)
            else:
                runner.stop_all(grace_s)
