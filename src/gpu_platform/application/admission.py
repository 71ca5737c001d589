"""Admission control: input limits and per-tenant backlog limits in front of a JobService.

`AdmissionControl` wraps any JobService. On `submit` it first checks the spec against
`InputLimits` (argv and env sizes, GPU count, name length; InvalidRequest naming the field,
which the APIs answer with 422 / INVALID_ARGUMENT), then the tenant's backlog: jobs waiting to
run (PENDING, QUEUED, PREEMPTED) and the GPUs they ask for. A submit that would take the tenant
past `max_queued_jobs` or `max_pending_gpus` is refused with TooManyRequests (429 /
RESOURCE_EXHAUSTED) — backpressure: the tenant retries once some of its backlog has started.
Every other call passes through unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpu_platform.application.control.commands import settle_here, settling_with
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.job_array import MAX_ARRAY_SIZE, ArraySpec, parse_array
from gpu_platform.domain.model.spec_checks import check_values
from gpu_platform.domain.model.tenancy import TooManyRequests
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo, JobService

__all__ = ["AdmissionControl", "AdmissionLimits", "InputLimits", "check_input"]

WAITING = frozenset({JobState.PENDING, JobState.QUEUED, JobState.PREEMPTED})


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bytes are UTF-8 bytes; argv bytes count each argument plus a NUL, env bytes each
    KEY=VALUE plus a NUL (as execve sees them)."""

    max_argv_bytes: int = 128 << 10
    max_argv_items: int = 4096
    max_env_bytes: int = 64 << 10
    max_env_vars: int = 256
    max_gpus: int = 1024
    max_name_length: int = 128
    max_array_size: int = MAX_ARRAY_SIZE  # array indices are 0..max_array_size-1


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Per tenant: jobs waiting to run, and the GPUs those jobs ask for. 0 = no limit."""

    max_queued_jobs: int = 0
    max_pending_gpus: int = 0
    retry_after_s: float = 5.0


def check_input(spec: JobSpec, limits: InputLimits) -> None:
    """Raise InvalidRequest naming the first field over its limit or with a value no job can
    have (NUL bytes, bad env keys, non-finite numbers: `spec_checks.check_values`)."""
    check_values(spec)
    argv = sum(len(a.encode()) + 1 for a in spec.command)
    if len(spec.command) > limits.max_argv_items:
        raise InvalidRequest(
            "command", f"{len(spec.command)} arguments, at most {limits.max_argv_items}"
        )
    if argv > limits.max_argv_bytes:
        raise InvalidRequest("command", f"{argv} bytes of argv, at most {limits.max_argv_bytes}")
    if len(spec.env) > limits.max_env_vars:
        raise InvalidRequest("env", f"{len(spec.env)} variables, at most {limits.max_env_vars}")
    env = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in spec.env)
    if env > limits.max_env_bytes:
        raise InvalidRequest("env", f"{env} bytes of environment, at most {limits.max_env_bytes}")
    if spec.gpus < 0 or spec.gpus > limits.max_gpus:
        raise InvalidRequest("gpus", f"{spec.gpus} GPUs, must be 0..{limits.max_gpus}")
    if len(spec.name) > limits.max_name_length:
        raise InvalidRequest(
            "name", f"{len(spec.name)} characters, at most {limits.max_name_length}"
        )


class AdmissionControl:
    """A JobService that checks input and tenant backlog limits before `inner.submit`."""

    def __init__(
        self,
        inner: JobService,
        limits: AdmissionLimits = AdmissionLimits(),
        input_limits: InputLimits = InputLimits(),
        run_as: Callable[[JobSpec], None] | None = None,
    ) -> None:
        """`run_as`: checks the job's `user` against its tenant's grant (RunAsAccounts)."""
        self._inner = inner
        self._run_as = run_as
        self.limits = limits
        self.input_limits = input_limits
        # Check-then-submit is atomic per server: the lock is held across the commit, which
        # this thread therefore settles itself (never parked behind it, front_core's batches).
        self._lock = threading.Lock()

    def submit(self, spec: JobSpec) -> Job:
        check_input(spec, self.input_limits)
        if self._run_as is not None:
            self._run_as(spec)
        limits = self.limits
        if not (limits.max_queued_jobs or limits.max_pending_gpus):
            return self._inner.submit(spec)
        with self._lock, settling_with(settle_here):
            self._check_backlog(spec, 1)
            return self._inner.submit(spec)

    def submit_array(self, spec: JobSpec, array: ArraySpec | str) -> ArrayInfo:
        """As `submit`, for every task: input limits, the largest index, the backlog."""
        check_input(spec, self.input_limits)
        if self._run_as is not None:
            self._run_as(spec)
        largest = self.input_limits.max_array_size
        if isinstance(array, str):
            array = parse_array(array, largest)
        elif array.last >= largest:
            raise InvalidRequest(
                "array", f"index {array.last} is above the largest allowed ({largest - 1})"
            )
        limits = self.limits
        if not (limits.max_queued_jobs or limits.max_pending_gpus):
            return self._inner.submit_array(spec, array)
        with self._lock, settling_with(settle_here):
            self._check_backlog(spec, array.count)
            return self._inner.submit_array(spec, array)

    def get_array(self, array_id: str) -> ArrayInfo:
        return self._inner.get_array(array_id)

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> ArrayInfo:
        return self._inner.cancel_array(array_id, reason)

    def _check_backlog(self, spec: JobSpec, count: int) -> None:
        """Raise TooManyRequests if `count` more jobs of `spec` pass the tenant's limits."""
        limits = self.limits
        waiting = [
            j
            for j in self._inner.list_jobs()
            if j.spec.tenant == spec.tenant and j.state in WAITING
        ]
        if limits.max_queued_jobs and len(waiting) + count > limits.max_queued_jobs:
            raise TooManyRequests(
                f"tenant {spec.tenant!r} has {len(waiting)} jobs waiting to run "
                f"(limit {limits.max_queued_jobs})",
                limits.retry_after_s,
            )
        demand = sum(j.spec.gpus * j.spec.tasks for j in waiting)
        wanted = spec.gpus * spec.tasks * count
        if limits.max_pending_gpus and demand + wanted > limits.max_pending_gpus:
            raise TooManyRequests(
                f"tenant {spec.tenant!r} waits for {demand} GPUs; {wanted} more would "
                f"pass its limit of {limits.max_pending_gpus}",
                limits.retry_after_s,
            )

    def get(self, job_id: str) -> Job:
        return self._inner.get(job_id)

    def list_jobs(self, state: str | None = None) -> list[Job]:
        return self._inner.list_jobs(state)

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job:
        return self._inner.cancel(job_id, reason)

    def why(self, job_id: str) -> PendingReason | None:
        return self._inner.why(job_id)

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        return self._inner.kill(job_id, reason)

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        return self._inner.logs(job_id, attempt, tail_bytes, rank)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        return self._inner.log_from(job_id, attempt, offset, max_bytes, rank)

    def gpus(self) -> list[GpuInfo]:
        return self._inner.gpus()

    def status(self) -> ClusterStatus:
        return self._inner.status()
