"""Wire models of jobs and job arrays: the submit bodies (validated at the edge, 422 names the
field) with their conversion to a JobSpec, and the read models of a job, its allocation, history
and why it waits.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from gpu_platform.adapters.inbound.job_fields import array_values, job_values, spec_from_values
from gpu_platform.adapters.inbound.rest.sharing_schemas import ShareFieldsIn, ShareFieldsOut
from gpu_platform.domain.model.job import MAX_TASKS, Job, JobSpec, check_container_fields
from gpu_platform.domain.model.spec_checks import ENV_KEY_PATTERN
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo

__all__ = [
    "AllocationOut",
    "ArrayOut",
    "ArraySubmit",
    "ArrayTaskOut",
    "HistoryOut",
    "JobOut",
    "JobSubmit",
    "NonEmpty",
    "PendingOut",
    "TaskSlotOut",
]


NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class JobSubmit(ShareFieldsIn):
    """POST /v1/jobs body."""

    model_config = ConfigDict(extra="forbid")

    command: list[NonEmpty] = Field(
        min_length=1,
        max_length=4096,
        description="argv; command[0] is the program (total size capped by max_argv_bytes)",
    )
    gpus: int = Field(0, ge=0, le=4096, description="whole GPUs on one node, per task")
    tasks: int = Field(
        1, ge=1, le=MAX_TASKS, description="tasks of a gang (all start together or none)"
    )
    preemptible: StrictBool = Field(
        True, description="may be stopped and re-queued for higher-priority work"
    )
    gpu_models: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=32, description="accepted GPU models (empty = any)"
    )
    nvlink: Literal["none", "preferred", "required"] = Field(
        "preferred", description="every GPU pair of a task fabric-linked (NVLink/XGMI)"
    )
    numa: Literal["none", "preferred", "required"] = Field(
        "preferred", description="a task's GPUs on one NUMA node"
    )
    same_rack: Literal["none", "preferred", "required"] = Field(
        "preferred", description="a gang's nodes under one rack label"
    )
    depends_on: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=64, description="jobs that must COMPLETE first"
    )
    mig_profile: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        description="one MIG instance of this profile (e.g. 1g.10gb) on one GPU; needs gpus=1",
    )
    image: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        pattern=r"^\S+$",
        description="run the command in this container image (the node's container runtime)",
    )
    mounts: list[Annotated[str, StringConstraints(pattern=r"^/[^:]*:/[^:]*(:ro|:rw)?$")]] = Field(
        default_factory=list, max_length=64, description="bind mounts HOST:CONTAINER[:ro]"
    )
    name: str = Field("", max_length=128)

    @field_validator("image")
    @classmethod
    def _image_reference(cls, image: str | None) -> str | None:
        # the domain's rule: its "blank" is str.isspace (e.g. \x1f), wider than the pattern's \S
        check_container_fields(image, ())
        return image

    @field_validator("mounts")
    @classmethod
    def _mounts_need_an_image(cls, mounts: list[str], info: ValidationInfo) -> list[str]:
        if mounts and info.data.get("image") is None:
            raise ValueError("mounts need an image: a bare process already sees the host's files")
        return mounts

    tenant: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="default: the caller's tenant; users may only name their own",
    )
    priority: int = Field(0, ge=-1000, le=1000)
    env: dict[Annotated[str, StringConstraints(pattern=ENV_KEY_PATTERN)], str] = Field(
        default_factory=dict,
        max_length=1024,
        json_schema_extra={"additionalProperties": False},  # keys must match the pattern
        description="extra environment (count and size capped by max_env_vars/max_env_bytes)",
    )
    cwd: str | None = Field(None, description="working directory on the node")
    memory_bytes: int | None = Field(None, gt=0, description="host memory cap in bytes")
    time_limit_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="run-time limit per attempt, s"
    )
    user: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="run as this account on the node",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description="attempts ended by faults (GPU, XID, node loss) before the job ends FAILED;"
        " preemptions, forced offlines and control-plane restarts do not count",
    )
    retry_backoff_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="wait before a re-queued attempt, doubled per attempt",
    )

    def to_spec(self, default_tenant: str = "default") -> JobSpec:
        return spec_from_values(self.model_dump(), default_tenant)


class ArraySubmit(JobSubmit):
    """POST /v1/arrays body: a job body plus `array`; one job per index."""

    array: str = Field(
        min_length=1,
        max_length=4096,
        description="Slurm's --array syntax: 0-999, 1,3,5 or 0-15:4, then %N for at most N "
        "tasks running at once (indices below the server's max_array_size)",
        examples=["0-999%64"],
    )


class ArrayTaskOut(BaseModel):
    """The array a job is a task of (its id is `<array id>_<index>`)."""

    id: str
    index: int
    array: str = Field(description="the array's indices and throttle, Slurm's syntax")


class ArrayOut(BaseModel):
    """A job array: the spec every task runs and how many tasks are in each state."""

    id: str
    array: str = Field(description="indices and throttle, Slurm's syntax (e.g. 0-999%64)")
    count: int
    throttle: int = Field(description="most tasks running at once (0 = no limit)")
    tasks_by_state: dict[str, int]
    waiting: str = Field(description="indices of the tasks still queued ('' = none)")
    task_ids: str = Field(description="task job ids are <id>_<index>, e.g. the first one")
    submitted_at: float
    name: str
    tenant: str
    command: list[str]
    gpus: int
    tasks: int
    priority: int

    @classmethod
    def of(cls, info: ArrayInfo) -> ArrayOut:
        return cls.model_validate(array_values(info))


class TaskSlotOut(BaseModel):
    node: str
    gpu_indices: list[int]
    gpu_uuids: list[str]
    numa_nodes: list[int]


class AllocationOut(BaseModel):
    """Task 0's node and GPUs (the only task of an ordinary job), and every task in `tasks`."""

    node: str
    gpu_indices: list[int]
    gpu_uuids: list[str]
    numa_nodes: list[int]
    epoch: int
    tasks: list[TaskSlotOut]


class PendingOut(BaseModel):
    """Why a QUEUED job waits (as of the last scheduling cycle)."""

    code: str = Field(
        description="quota, capacity, topology, reservation, dependency, preemption, "
        "admission, backoff or array_throttle"
    )
    message: str


class HistoryOut(BaseModel):
    at: float
    state: str
    reason: str


class JobOut(ShareFieldsOut):
    id: str
    name: str
    state: str
    command: list[str]
    gpus: int
    tasks: int
    preemptible: bool
    depends_on: list[str]
    gpu_models: list[str]
    nvlink: str
    numa: str
    same_rack: str
    mig_profile: str | None = None
    image: str | None = None
    mounts: list[str] = []
    memory_bytes: int | None
    time_limit_s: float | None
    user: str | None
    tenant: str
    priority: int
    max_attempts: int
    retry_backoff_s: float
    not_before: float
    attempt: int
    faults: int = 0
    interruptions: int = 0
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str
    allocation: AllocationOut | None
    history: list[HistoryOut]
    borrowing: bool = False
    pending: PendingOut | None = None
    array: ArrayTaskOut | None = Field(None, description="set for a task of a job array")

    @classmethod
    def of(cls, job: Job, why: PendingReason | None = None) -> JobOut:
        return cls.model_validate(job_values(job, why))
