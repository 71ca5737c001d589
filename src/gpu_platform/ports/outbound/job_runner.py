"""JobRunner: starts, stops and reports on the processes of job attempts on a node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.allocation.mps import MpsShare

__all__ = ["ExitReport", "GangEnv", "JobRunner", "JobRunnerWrapper", "LaunchError", "LaunchSpec"]


class LaunchError(Exception):
    """The attempt could not be started (program not found, permission, bad cwd)."""


@dataclass(frozen=True, slots=True)
class GangEnv:
    """Where one task sits in its gang (torchrun's variables): `world_size` tasks in all,
    `local_rank` of `local_world_size` tasks on this node, `node_rank` of the node among the
    gang's nodes; rank 0 listens on `master_addr`:`master_port` (0 = the runner picks one free
    port per attempt and gives every task of it the same)."""

    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int = 0


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """One attempt of one job. `env` is added to the runner's base environment. `cpus`/`mems`
    (host CPU ids and NUMA nodes) pin the attempt when non-empty; `memory_bytes` caps its
    host memory; `time_limit_s` bounds its run time (then it is stopped and reported timed out);
    `user` is the account to run as; `nics` are the RDMA NICs nearest its GPUs, best first;
    `mps` is the attempt's MPS share of its (single) GPU, when it runs as an MPS client.
    A gang attempt is started as one LaunchSpec per task: `rank` names the task and `gang`
    its place in the gang; the runner keys processes by (job_id, epoch, rank). `node` names the
    node the task runs on (a runner for many nodes routes by it); `tenant` owns the job;
    `traceparent` is the job's W3C trace context (exported to the task as TRACEPARENT).
    MIG: `mig_profile` is the MIG profile the job asked for on its (single, NVIDIA) GPU;
    `mig_uuids` are the MIG device UUIDs ("MIG-...") it may use. A runner that is given a
    profile without UUIDs refuses to launch (LaunchError): a MIG-aware runner
    (`application.mig_jobs.MigJobRunner`) fills them in first.
    Containers: `image` runs `argv` in that container image with the same promises (only its
    GPUs, its limits, its environment, its log; stopped on stop/time limit); `mounts` are
    "HOST:CONTAINER[:ro]" bind mounts. A runner without a container runtime refuses such a
    spec (LaunchError) rather than run it bare.
    Sharing: `cpu_milli` is the CPU time asked for (milli-cores; 0 = none asked), enforced by
    the attempt's CPU quota; `sharing` is "mps" or "timeslice" for a share of one GPU (None:
    the GPUs are the attempt's alone). With "mps" the runner joins the GPU's MPS daemon (one
    per GPU, started for its first client, stopped after its last) and exports `mps`.
    """

    job_id: str
    epoch: int
    attempt: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    cwd: str | None = None
    vendor: str = "nvidia"
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()
    memory_bytes: int | None = None
    time_limit_s: float | None = None
    user: str | None = None
    nics: tuple[str, ...] = ()
    mps: MpsShare | None = None
    rank: int = 0
    gang: GangEnv | None = None
    node: str = ""
    tenant: str = ""
    traceparent: str = ""
    mig_profile: str | None = None
    mig_uuids: tuple[str, ...] = ()
    image: str | None = None
    mounts: tuple[str, ...] = ()
    cpu_milli: int = 0
    sharing: str | None = None

    def __post_init__(self) -> None:
        if self.mig_uuids and self.vendor != "nvidia":
            raise ValueError(f"mig_uuids are NVIDIA MIG devices, not {self.vendor} ones")
        bad = [u for u in self.mig_uuids if not u.startswith("MIG-")]
        if bad:
            raise ValueError(f"MIG device UUIDs start with 'MIG-', got {', '.join(bad)}")


@dataclass(frozen=True, slots=True)
class ExitReport:
    """How task `rank` of an attempt ended: `exit_code` for a normal exit, `signal` when
    killed by one; `detail` says why when neither is known (the task was lost). `fenced`: the
    node's lease fence stopped it (its agent lost touch with the leader), so the attempt was
    lost with the node, not failed by the job."""

    job_id: str
    epoch: int
    exit_code: int | None
    signal: int | None = None
    timed_out_after_s: float | None = None
    rank: int = 0
    detail: str = ""
    fenced: bool = False

    @property
    def reason(self) -> str:
        if self.detail:
            return self.detail
        if self.timed_out_after_s is not None:
            return f"time limit of {self.timed_out_after_s:g}s exceeded"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exited {self.exit_code}"


@runtime_checkable
class JobRunner(Protocol):
    """Runs job attempts as processes on this node.

    Promises: `start` returns once the task is running, or raises LaunchError; each started
    task (rank) is reported to `on_exit` exactly once, from a runner thread, after it has ended
    and left no process behind. `stop` is idempotent and non-blocking: SIGTERM to every task of
    the attempt now, SIGKILL of each whole process group after `grace_s` seconds; it returns
    False when the runner has no live task of that attempt (never started, or all already
    reported), so no report will follow.
    `stop_all` blocks until every attempt has ended. `reap(job_id, epoch)` kills survivors of an
    attempt a previous incarnation started (after a crash). Thread-safe.
    """

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None: ...

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool: ...

    def stop_all(self, grace_s: float) -> None: ...

    def reap(self, job_id: str, epoch: int) -> int:
        """Kill processes left by attempt (job_id, epoch); return how many were killed."""
        ...

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        """The last `tail_bytes` of task `rank`'s combined stdout/stderr ('' if none)."""
        ...

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        """Up to `max_bytes` of task `rank`'s log starting at byte `offset` (b'' if none)."""
        ...


class JobRunnerWrapper:
    """A JobRunner around `inner` that adds to some calls and hands the rest on unchanged
    (MIG instances, MPS daemons and replica probes wrap a node's runner this way)."""

    def __init__(self, inner: JobRunner) -> None:
        self._inner = inner

    @property
    def inner(self) -> JobRunner:
        """The runner every attempt is started by."""
        return self._inner

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        self._inner.start(spec, on_exit)

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        return self._inner.stop(job_id, epoch, grace_s)

    def stop_all(self, grace_s: float) -> None:
        self._inner.stop_all(grace_s)

    def reap(self, job_id: str, epoch: int) -> int:
        return self._inner.reap(job_id, epoch)

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        return self._inner.read_log(job_id, attempt, tail_bytes, rank)

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        return self._inner.read_log_from(job_id, attempt, offset, max_bytes, rank)
