"""Service values: what the user asked for (ServiceSpec), its replicas and where they stand.

A service wants `replicas` copies of one command running, each on `gpus` whole GPUs of one
node. Every replica runs as a job (so placement, isolation, quotas and preemption are the
jobs' own); the replica record says which job runs it now and what its health checks said.

Replica states (`ReplicaState`), derived from the replica record and its job:

- PENDING: its job waits to be placed (or was just submitted);
- STARTING: its job runs, the health check has not passed yet;
- READY: the health check passes (traffic may go to its address);
- UNHEALTHY: it was ready, the check fails now;
- BACKOFF: its job ended; a new one starts at `not_before` (exponential backoff);
- DRAINING: being removed (scale-down, rolling update, delete): takes no new traffic, its
  job is stopped once the drain time has passed.

Times are seconds of the caller's clock (`now` of the commands).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.sharing import check_share_fields

__all__ = [
    "ENGINES",
    "ENV_NAME_PATTERN",
    "NAME_PATTERN",
    "Replica",
    "ReplicaState",
    "Service",
    "ServiceSpec",
    "backoff_s",
    "check_spec",
]

NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_NAME = re.compile(NAME_PATTERN)
_ENV = re.compile(ENV_NAME_PATTERN)
ENGINES = ("custom", "vllm", "sglang", "llama.cpp", "transformers")
MAX_REPLICAS = 256


class ReplicaState(enum.StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    READY = "READY"
    UNHEALTHY = "UNHEALTHY"
    BACKOFF = "BACKOFF"
    DRAINING = "DRAINING"


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A service as the user asked for it. `command` is the argv of one replica (an engine's
    command line is filled in by `engines.engine_command`); `port_env` names the environment
    variable that carries the port the agent picked (`${PORT_ENV}` in the argv is replaced by
    it too); `health_path` is the HTTP path probed for readiness and liveness.
    `startup_timeout_s`: a replica not ready this long after its start is restarted;
    `unhealthy_timeout_s`: a ready replica failing its checks this long is restarted;
    `backoff_s`/`max_backoff_s`: the wait before restart k is backoff_s * 2**(k-1), capped;
    `drain_s`: how long a draining replica keeps running before it is stopped."""

    name: str
    command: tuple[str, ...]
    replicas: int = 1
    gpus: int = 0
    tenant: str = "default"
    priority: int = 0
    preemptible: bool = True
    port_env: str = "PORT"
    health_path: str = "/health"
    engine: str = "custom"
    model: str = ""
    env: tuple[tuple[str, str], ...] = ()
    startup_timeout_s: float = 600.0
    unhealthy_timeout_s: float = 30.0
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    drain_s: float = 2.0
    gpu_milli: int = 1000  # < 1000 (with gpus == 1): each replica a share of one GPU
    gpu_memory_bytes: int | None = None  # a share's pinned device memory (MPS limit)

    @property
    def served_model(self) -> str:
        """The name clients put in "model": the model, or the service name without one."""
        return self.model or self.name


def check_spec(spec: ServiceSpec) -> None:
    """Raise ValueError("<field>: why") for a spec no cluster could run."""

    def bad(name: str, why: str) -> ValueError:
        return ValueError(f"{name}: {why}")

    if not _NAME.fullmatch(spec.name):
        raise bad("name", "must be 1-63 of a-z, 0-9 and '-', starting and ending alphanumeric")
    if spec.engine == "custom" and (not spec.command or not spec.command[0]):
        raise bad("command", "must name a program")
    if not 0 <= spec.replicas <= MAX_REPLICAS:
        raise bad("replicas", f"must be in 0..{MAX_REPLICAS}")
    if spec.gpus < 0:
        raise bad("gpus", "must be >= 0")
    if not 1 <= spec.gpu_milli <= 1000:
        raise bad("gpu_milli", "must be in 1..1000 (1000 = whole GPUs)")
    if spec.gpu_milli < 1000 and spec.gpus != 1:
        raise bad("gpus", "a share of a GPU (gpu_milli < 1000) is a share of one GPU: gpus = 1")
    if spec.gpu_memory_bytes is not None and spec.gpu_memory_bytes <= 0:
        raise bad("gpu_memory_bytes", "must be > 0")
    try:  # every rule a replica's job spec must pass (one replica's request is a job's)
        check_share_fields(spec.gpus, spec.gpu_milli, spec.gpu_memory_bytes, 0, None, None, None)
    except InvalidRequest as exc:
        raise bad(exc.field, exc.reason) from None
    if not _ENV.fullmatch(spec.port_env):
        raise bad("port_env", "must be an environment variable name")
    if not spec.health_path.startswith("/"):
        raise bad("health_path", "must start with '/'")
    if spec.engine not in ENGINES:
        raise bad("engine", f"must be one of {', '.join(ENGINES)}")
    if spec.engine != "custom" and not spec.model:
        raise bad("model", f"engine {spec.engine} needs a model")
    for key, _ in spec.env:
        if not _ENV.fullmatch(key):
            raise bad("env", f"{key!r} is not an environment variable name")
    for name in ("startup_timeout_s", "unhealthy_timeout_s", "backoff_s", "max_backoff_s"):
        if not getattr(spec, name) > 0:
            raise bad(name, "must be > 0")
    if spec.drain_s < 0:
        raise bad("drain_s", "must be >= 0")


def backoff_s(spec: ServiceSpec, failures: int) -> float:
    """Seconds to wait before the restart that follows `failures` consecutive failures."""
    if failures <= 0:
        return 0.0
    return float(min(spec.max_backoff_s, spec.backoff_s * 2 ** min(failures - 1, 30)))


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica. `job_id` is the job running it now ('' while in backoff); `generation`
    is the spec generation it runs; `restarts` counts its job restarts; `failures` the
    consecutive ones (reset once it is ready); `epoch`/`address`/`ready`/`detail` are the
    last health report of the current job's attempt; `since` is when its current condition
    began (launch, ready, not ready, draining, ended)."""

    replica_id: str
    generation: int
    job_id: str = ""
    incarnation: int = 1
    restarts: int = 0
    failures: int = 0
    draining: bool = False
    ended: bool = False
    not_before: float = 0.0
    since: float = 0.0
    epoch: int = 0
    address: str = ""
    ready: bool = False
    was_ready: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Service:
    """A service: its current spec (at `generation`), its replicas in creation order, the
    number of the next replica id, and whether it is being deleted (it goes once its last
    replica has stopped)."""

    spec: ServiceSpec
    generation: int = 1
    created_at: float = 0.0
    next_replica: int = 1
    deleting: bool = False
    replicas: tuple[Replica, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.spec.name

    def replica(self, replica_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.replica_id == replica_id), None)
