"""Hypothesis strategies for the job wire tests: specs any client may submit (valid for the
domain, REST's validation and proto3), jobs in every state, arrays, GPUs and statuses."""

from __future__ import annotations

from hypothesis import strategies as st

from gpu_platform.domain.gpu_shares import Share
from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState, TaskSlot
from gpu_platform.domain.model.job_array import ArraySpec, ArrayTask
from gpu_platform.domain.scheduling.model import PendingCode, PendingReason
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
_text = st.text(alphabet="abc xyz-_/:é", max_size=12)
_env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
_affinity = st.sampled_from(["none", "preferred", "required"])
_time = st.floats(min_value=0, max_value=2e9, allow_nan=False)
_mount = st.tuples(_word, _word, st.sampled_from(["", ":ro", ":rw"])).map(
    lambda t: f"/{t[0]}:/{t[1]}{t[2]}"
)


@st.composite
def job_specs(draw: st.DrawFn) -> JobSpec:
    """Any spec a client may submit: whole GPUs or a share of one, gangs, wishes, limits."""
    share = draw(st.booleans())
    image = draw(st.none() | _word.map(lambda w: f"reg/{w}:1"))
    vendor = draw(st.none() | st.sampled_from(["nvidia", "amd", "intel"]))
    tasks = 1 if share else draw(st.integers(1, 16))
    gpus = 1 if share else draw(st.integers(0, 64))
    mig = None if share or gpus != 1 else draw(st.none() | st.just("1g.10gb"))
    sharing = None
    if share:
        modes = ["mps", "timeslice"] if vendor in (None, "nvidia") else ["timeslice"]
        sharing = draw(st.none() | st.sampled_from(modes))
    return JobSpec(
        command=tuple(draw(st.lists(_word, min_size=1, max_size=4))),
        gpus=gpus,
        name=draw(_text),
        tenant=draw(_word),
        priority=draw(st.integers(-1000, 1000)),
        env=tuple(sorted(draw(st.dictionaries(_env_name, _text, max_size=3)).items())),
        cwd=draw(st.none() | _word.map(lambda w: "/" + w)),
        memory_bytes=draw(st.none() | st.integers(1, 1 << 40)),
        time_limit_s=draw(st.none() | st.floats(min_value=0.5, max_value=1e6)),
        user=draw(st.none() | _word),
        max_attempts=draw(st.integers(1, 100)),
        retry_backoff_s=draw(st.floats(min_value=0, max_value=3600)),
        tasks=tasks,
        preemptible=draw(st.booleans()),
        depends_on=tuple(draw(st.lists(_word, max_size=3))),
        gpu_models=tuple(draw(st.lists(_word, max_size=3))),
        nvlink=draw(_affinity),
        numa=draw(_affinity),
        same_rack=draw(_affinity),
        mig_profile=mig,
        client_token=draw(st.none() | _word),
        image=image,
        mounts=tuple(draw(st.lists(_mount, max_size=2))) if image else (),
        gpu_milli=draw(st.integers(1, 999)) if share else 1000,
        gpu_memory_bytes=draw(st.none() | st.integers(1, 1 << 36)) if gpus else None,
        cpu_milli=draw(st.integers(0, 64000)),
        vendor=vendor,
        sharing=sharing,
    )


_slots = st.builds(
    TaskSlot,
    node=_word,
    gpu_indices=st.just((0, 1)),
    gpu_uuids=st.tuples(_word, _word).map(lambda t: ("a" + t[0], "b" + t[1])),
    numa_nodes=st.lists(st.integers(0, 3), max_size=2).map(tuple),
)


@st.composite
def allocations(draw: st.DrawFn) -> Allocation:
    n = draw(st.integers(0, 3))
    return Allocation(
        node=draw(_word),
        gpu_indices=tuple(range(n)),
        gpu_uuids=tuple(f"GPU-0-{i}" for i in range(n)),
        epoch=draw(st.integers(0, 1 << 40)),
        numa_nodes=tuple(draw(st.lists(st.integers(0, 3), max_size=2))),
        peers=tuple(
            TaskSlot(f"peer{k}", (0,), (f"GPU-{k + 1}-0",), (0,))
            for k in range(draw(st.integers(0, 2)))
        ),
    )


_arrays = st.lists(st.integers(0, 50), min_size=1, max_size=5, unique=True).flatmap(
    lambda idx: st.builds(
        ArraySpec, indices=st.just(tuple(sorted(idx))), throttle=st.integers(0, 8)
    )
)

jobs = st.builds(
    Job,
    id=_word,
    spec=job_specs(),
    state=st.sampled_from(list(JobState)),
    submitted_at=_time,
    attempt=st.integers(0, 50),
    faults=st.integers(0, 50),
    interruptions=st.integers(0, 50),
    allocation=st.none() | allocations(),
    started_at=st.none() | _time,
    finished_at=st.none() | _time,
    exit_code=st.none() | st.integers(-255, 255),
    reason=_text,
    not_before=_time,
    borrowing=st.booleans(),
    history=st.lists(st.tuples(_time, st.sampled_from(list(JobState)), _text), max_size=3).map(
        tuple
    ),
    array=st.none() | st.builds(ArrayTask, array_id=_word, index=st.integers(0, 99), array=_arrays),
)

reasons = st.none() | st.builds(
    PendingReason, code=st.sampled_from(list(PendingCode)), message=_text
)

array_infos = st.builds(
    ArrayInfo,
    id=_word,
    spec=job_specs(),
    array=_arrays,
    submitted_at=_time,
    states=st.dictionaries(st.sampled_from([str(s) for s in JobState]), st.integers(0, 99)),
    waiting=_text,
)

gpu_infos = st.builds(
    GpuInfo,
    gpu=st.builds(
        Gpu,
        uuid=_word,
        index=st.integers(0, 7),
        node=_word,
        vendor=st.sampled_from(list(Vendor)),
        model=_word,
        memory_bytes=st.integers(0, 1 << 40),
        numa_node=st.integers(-1, 3),
        pci_bus_id=_word,
    ),
    state=st.sampled_from(list(GpuState)),
    job_id=st.none() | _word,
    reason=_text,
    hot=st.booleans(),
    shares=st.lists(
        st.builds(
            Share,
            job_id=_word,
            milli=st.integers(1, 999),
            pinned_bytes=st.integers(0, 1 << 36),
            sharing=st.sampled_from(["mps", "timeslice"]),
        ),
        max_size=3,
    ).map(tuple),
)

statuses = st.builds(
    ClusterStatus,
    inventory_source=_word,
    simulated=st.booleans(),
    nodes=st.integers(0, 99),
    gpus_total=st.integers(0, 999),
    gpus_free=st.integers(0, 999),
    jobs_by_state=st.dictionaries(st.sampled_from([str(s) for s in JobState]), st.integers(0, 99)),
    notes=st.lists(_text, max_size=2).map(tuple),
    gpus_shared=st.integers(0, 99),
    shares=st.integers(0, 99),
)
