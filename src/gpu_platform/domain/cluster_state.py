"""The cluster state machine: commands in, new state and events out.

Theory of operation: every change to jobs and allocations is a command applied by `apply`.
`apply` validates the command against the current state (a bind re-checks that its GPUs are free
and healthy; a report carries the epoch of the attempt it speaks for and is ignored when that
attempt is no longer current), moves jobs only through the job state machine, and returns the
events that describe what happened. It is deterministic — the same commands in the same order
give the same state — which is what lets a replicated log (Raft, issue 10) drive it.

A stopped attempt (cancel, preempt, abort) keeps its GPUs until its process is reported ended
(a FinishJob for its epoch); only then are they free for the next bind.

Faults and operations (`domain.faults.commands`) move GPUs and nodes through their own tables
(`faults.gpu_fsm`, `faults.node_fsm`). When a table says STOP_JOBS, every live attempt on the
GPU or node is stopped: the job is re-queued while it has attempts left (`JobSpec.max_attempts`
counts faults only, after a backoff), else it ends FAILED with the fault as its reason;
preemptions, forced offlines and lost attempts re-queue it as interruptions. A multi-GPU job is one
allocation, so it always restarts whole. New binds land only on AVAILABLE, cool GPUs of READY
nodes.

Membership (`domain.membership`): nodes arrive by RegisterNode (a replicated cluster starts
`empty`), tenant quotas by SetQuota, API server addresses by AnnounceServer. Job arrays
(`domain.job_arrays`): SubmitArray creates every task of an array in one command, CancelArray
cancels them all. Job commands live in `domain.job_commands`; a JobBatch
(`domain.job_batches`) applies many of them as one command. Tenants, tokens and revocations
(`domain.access_state`): CreateTenant, IssueToken, RevokeToken, BootstrapAdmin; run-as
grants: SetRunAsGrant, DeleteRunAsGrant.
`parts()` and `from_parts()` expose the whole state as plain values for snapshots
(`domain.cluster_codec`).

Invariants (`check_invariants`): every GPU is held by at most one whole-GPU job, or shared by
jobs asking a share of one GPU whose milli-GPU and pinned memory fit it (`domain.gpu_shares`),
never both; the held-GPU index and the share book equal the allocations of jobs that hold GPUs
(running, or releasing a stopped attempt); epochs are
unique and below `next_epoch`; no live attempt (SCHEDULED or RUNNING, not being stopped) holds
a DEGRADED, RESETTING or OFFLINE GPU or runs on a DOWN node; the indexes kept as commands apply
(RESETTING GPUs, jobs not yet ended) equal a full scan.

Change stamps (for a leader that keeps one placement view in step instead of rebuilding it):
every change that can alter where new work may land on a node (its state or its GPUs' states,
a GPU held or let go, a GPU too hot or cool again) moves that node to the end of an ordered
index with a fresh `change_stamp`; `changed_nodes_since(stamp)` lists them in O(changes). The
stamps are not replicated state (a restored or snapshot-installed state starts over).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gpu_platform.domain.access_state import (
    AccessCommand,
    AccessHandlers,
    AccessParts,
    BootstrapAdmin,
    CreateTenant,
    DeleteRunAsGrant,
    IssueToken,
    RevokeToken,
    SetRunAsGrant,
)
from gpu_platform.domain.allocation.mig_jobs import check_mig_request
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import (
    AttemptEnded,
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobFinished,
    JobRequeued,
    JobStarted,
    JobSubmitted,
    StaleReportIgnored,
)
from gpu_platform.domain.faults.commands import (
    CheckNodes,
    CompleteGpuReset,
    HardwareRecord,
    NodeHeartbeat,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    SetGpuAdmin,
    SetNodeAdmin,
)
from gpu_platform.domain.faults.gpu_fsm import GpuInput
from gpu_platform.domain.faults.job_fsm import JobEffect, JobInput, transition
from gpu_platform.domain.faults.policy import (
    FaultPolicy,
)
from gpu_platform.domain.faults.recovery import LIVE, SICK, FaultHandlers
from gpu_platform.domain.gpu_shares import ShareBook, check_share_request
from gpu_platform.domain.job_arrays import ArrayHandlers, CancelArray, SubmitArray
from gpu_platform.domain.job_batches import BatchHandlers, JobBatch, JobItem
from gpu_platform.domain.job_commands import (
    AbortJob,
    BindJob,
    CancelJob,
    FinishJob,
    RequeueJob,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.membership import (
    AnnounceServer,
    MembershipHandlers,
    RegisterNode,
    RemoveNode,
    SetQuota,
)
from gpu_platform.domain.model.gpu import Gpu, GpuState
from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState, TaskSlot
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.model.node import Inventory, Node, NodeState
from gpu_platform.domain.placement.first_fit import NodeView
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.domain.services.commands import SERVICE_COMMANDS, ServiceCommand
from gpu_platform.domain.services.model import Service
from gpu_platform.domain.services.table import ServiceTable

__all__ = [
    "AbortJob",
    "AnnounceServer",
    "BindJob",
    "BootstrapAdmin",
    "CancelArray",
    "CancelJob",
    "CheckNodes",
    "ClusterParts",
    "ClusterState",
    "Command",
    "CompleteGpuReset",
    "CreateTenant",
    "DeleteRunAsGrant",
    "FinishJob",
    "IssueToken",
    "JobBatch",
    "NodeHeartbeat",
    "RegisterNode",
    "RemoveNode",
    "ReportEcc",
    "ReportGpuLost",
    "ReportThermal",
    "ReportXid",
    "RequeueJob",
    "RevokeToken",
    "SetGpuAdmin",
    "SetNodeAdmin",
    "SetQuota",
    "SetRunAsGrant",
    "StartJob",
    "SubmitArray",
    "SubmitJob",
]


Command = (
    SubmitJob
    | BindJob
    | StartJob
    | FinishJob
    | CancelJob
    | RequeueJob
    | AbortJob
    | ReportXid
    | ReportEcc
    | ReportThermal
    | ReportGpuLost
    | CompleteGpuReset
    | SetGpuAdmin
    | SetNodeAdmin
    | NodeHeartbeat
    | CheckNodes
    | RegisterNode
    | RemoveNode
    | SetQuota
    | AnnounceServer
    | SubmitArray
    | CancelArray
    | JobBatch
    | ServiceCommand
    | AccessCommand
)


@dataclass(frozen=True, slots=True)
class ClusterParts:
    """Everything of a ClusterState that affects future `apply` results, as plain values (what
    a snapshot holds; see `domain.cluster_codec`). `nodes` and `jobs` are in the state's own
    order (registration, submission), which decides the order of events."""

    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    held: dict[str, str]
    reasons: dict[str, str]
    hot: dict[str, float]
    ecc_seen: dict[str, int]
    ecc_alerted: frozenset[str]
    last_heartbeat: dict[str, float]
    quotas: dict[str, Quota]
    servers: dict[int, tuple[str, str, str]]
    next_epoch: int
    next_seq: int
    services: tuple[Service, ...] = ()
    access: AccessParts = field(default_factory=AccessParts)


class _NodeTable(dict[str, Node]):
    """Nodes by name; every write re-indexes the node's RESETTING GPUs and stamps it changed."""

    def __init__(self, owner: ClusterState) -> None:
        super().__init__()
        self._owner = owner

    def __setitem__(self, name: str, node: Node) -> None:
        resetting = self._owner._resetting
        old = self.get(name)
        if old is not None:
            for gpu in old.gpus:
                resetting.pop(gpu.uuid, None)
        for gpu in node.gpus:
            if gpu.state is GpuState.RESETTING:
                resetting[gpu.uuid] = gpu
        super().__setitem__(name, node)
        self._owner._touch(name)

    def __delitem__(self, name: str) -> None:
        for gpu in self[name].gpus:
            self._owner._resetting.pop(gpu.uuid, None)
        super().__delitem__(name)
        self._owner._touch(name)  # a kept view drops it


class _JobTable(dict[str, Job]):
    """Jobs by id; keeps the ids of jobs that have not ended (`open`, submission order)."""

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[str, None] = {}

    def __setitem__(self, job_id: str, job: Job) -> None:
        if job.terminal and not job.holds_gpus:
            self.open.pop(job_id, None)
        else:
            self.open[job_id] = None
        super().__setitem__(job_id, job)


class ClusterState(FaultHandlers, MembershipHandlers, ArrayHandlers, AccessHandlers, BatchHandlers):
    """Nodes, GPUs, jobs and allocations; mutated only through `apply`.

    `hardware` restores persisted GPU and node states (records naming unknown GPUs or nodes
    are skipped: the hardware changed); `policy` holds the fault thresholds."""

    def __init__(
        self,
        inventory: Inventory,
        jobs: Iterable[Job] = (),
        *,
        hardware: Iterable[HardwareRecord] = (),
        policy: FaultPolicy = FaultPolicy(),
    ) -> None:
        self.change_stamp = 0
        self._changed: dict[str, int] = {}  # node -> stamp of its last change, oldest first
        self._resetting: dict[str, Gpu] = {}  # uuid -> GPU, while RESETTING
        self._nodes: dict[str, Node] = _NodeTable(self)
        for n in inventory.nodes:
            self._nodes[n.name] = n
        self._jobs: _JobTable = _JobTable()
        self._held: dict[str, str] = {}  # gpu uuid -> job id (whole GPUs)
        self._shares = ShareBook()  # shares of one GPU, CPU per node (domain.gpu_shares)
        self.policy = policy
        self._reasons: dict[str, str] = {}  # gpu uuid or node name -> why it is in its state
        self._hot: dict[str, float] = {}  # gpu uuid -> last temperature, while too hot
        self._ecc_seen: dict[str, int] = {}  # gpu uuid -> uncorrected count already acted on
        self._ecc_alerted: set[str] = set()
        self._last_heartbeat: dict[str, float] = {}
        self._quotas: dict[str, Quota] = {}
        self._servers: dict[int, tuple[str, str, str]] = {}
        self._arrays: dict[str, ArraySpec] = {}  # array id -> spec (derived from its tasks)
        self.services = ServiceTable()  # long-running services (domain.services)
        self._init_access()
        self._restore_hardware(hardware)
        self.next_epoch = 1
        self.next_seq = 1
        for job in sorted(jobs, key=lambda j: j.seq):
            self._jobs[job.id] = job
            self.next_seq = max(self.next_seq, job.seq + 1)
            if job.allocation is not None:
                self.next_epoch = max(self.next_epoch, job.allocation.epoch + 1)
            if job.holds_gpus:
                assert job.allocation is not None
                self._shares.hold(job, self._gpus_by_uuid())
                for uuid in () if job.shares_gpu else job.allocation.all_gpu_uuids:
                    if uuid in self._held:
                        raise Conflict(
                            f"restored jobs {self._held[uuid]} and {job.id} share {uuid}"
                        )
                    self._held[uuid] = job.id
        self._index_arrays(self._jobs.values())

    def _touch(self, node: str) -> None:
        """Stamp `node` changed (see the module docstring)."""
        self.change_stamp += 1
        self._changed.pop(node, None)
        self._changed[node] = self.change_stamp

    def changed_nodes_since(self, stamp: int) -> list[str]:
        """Nodes changed after `stamp` (a `change_stamp` read earlier), newest first."""
        out = []
        for node, at in reversed(self._changed.items()):
            if at <= stamp:
                break
            out.append(node)
        return out

    @classmethod
    def empty(cls, policy: FaultPolicy = FaultPolicy()) -> ClusterState:
        """A cluster with no nodes yet: they arrive by RegisterNode."""
        return cls(Inventory((), source="replicated", simulated=False), policy=policy)

    @classmethod
    def from_parts(cls, parts: ClusterParts, policy: FaultPolicy) -> ClusterState:
        """The state `parts` describes; raises ValueError when they contradict each other."""
        state = cls(
            Inventory(parts.nodes, source="replicated", simulated=False), parts.jobs, policy=policy
        )
        if state._held != parts.held:
            raise ValueError("held-GPU index disagrees with the jobs' allocations")
        if parts.next_epoch < state.next_epoch or parts.next_seq < state.next_seq:
            raise ValueError("next_epoch/next_seq behind the jobs' epochs and sequence numbers")
        state._reasons = dict(parts.reasons)
        state._hot = dict(parts.hot)
        state._ecc_seen = dict(parts.ecc_seen)
        state._ecc_alerted = set(parts.ecc_alerted)
        state._last_heartbeat = dict(parts.last_heartbeat)
        state._quotas = dict(parts.quotas)
        state._servers = dict(parts.servers)
        state.next_epoch = parts.next_epoch
        state.next_seq = parts.next_seq
        state.services = ServiceTable(parts.services)
        state._init_access(parts.access)
        return state

    def parts(self) -> ClusterParts:
        """A copy of the state as plain values (O(nodes + jobs))."""
        return ClusterParts(
            nodes=tuple(self._nodes.values()),
            jobs=tuple(self._jobs.values()),
            held=dict(self._held),
            reasons=dict(self._reasons),
            hot=dict(self._hot),
            ecc_seen=dict(self._ecc_seen),
            ecc_alerted=frozenset(self._ecc_alerted),
            last_heartbeat=dict(self._last_heartbeat),
            quotas=dict(self._quotas),
            servers=dict(self._servers),
            next_epoch=self.next_epoch,
            next_seq=self.next_seq,
            services=self.services.services(),
            access=self.access_parts(),
        )

    # -- queries ---------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes.values())

    @property
    def quotas(self) -> dict[str, Quota]:
        """Tenant quotas (a copy), by tenant name."""
        return dict(sorted(self._quotas.items()))

    @property
    def servers(self) -> dict[int, tuple[str, str, str]]:
        """Announced servers (a copy): server id -> (http_url, grpc_address, agent_address)."""
        return dict(sorted(self._servers.items()))

    def node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFound("node", name) from None

    def job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound("job", job_id) from None

    def jobs(self) -> tuple[Job, ...]:
        """All jobs in submission order."""
        return tuple(self._jobs.values())

    def open_jobs(self) -> list[Job]:
        """Jobs that have not ended, or ended but still hold GPUs (being stopped), in
        submission order; O(such jobs), however many ended jobs the state keeps."""
        jobs = self._jobs
        return [jobs[i] for i in jobs.open]

    def queued(self, now: float | None = None) -> list[Job]:
        """QUEUED jobs in FIFO order (submission sequence), leaving out those whose previous
        attempt is still being stopped and, given `now`, those still in restart backoff."""
        jobs = self._jobs
        ready = (
            j
            for j in (jobs[i] for i in jobs.open)
            if j.state is JobState.QUEUED
            and not j.releasing
            and (now is None or j.not_before <= now)
        )
        return sorted(ready, key=_seq)

    def holder(self, gpu: Gpu) -> str | None:
        """The id of the job holding `gpu`, if any (the first sharer of a shared GPU)."""
        return next(iter(self.holders(gpu.uuid)), None)

    def holders(self, uuid: str) -> tuple[str, ...]:
        """Ids of the jobs holding GPU `uuid`: its whole-GPU job, or every job sharing it."""
        whole = self._held.get(uuid)
        return (whole,) if whole is not None else self._shares.sharers(uuid)

    @property
    def share_book(self) -> ShareBook:
        """Shares per GPU and CPU per node (read only; `domain.gpu_shares`)."""
        return self._shares

    def _gpus_by_uuid(self) -> dict[str, Gpu]:
        return {g.uuid: g for n in self._nodes.values() for g in n.gpus}

    def gpu_state(self, gpu: Gpu) -> GpuState:
        """Effective state: the GPU's own state when it is not AVAILABLE (a fault or an operator
        took it out), else ALLOCATED/IN_USE while a job holds it, else AVAILABLE."""
        gpu = self._gpu(gpu.node, gpu.index)
        holders = self.holders(gpu.uuid)
        if not holders or gpu.state is not GpuState.AVAILABLE:
            return gpu.state
        jobs = [self._jobs[h] for h in holders]
        running = any(j.state is JobState.RUNNING and not j.releasing for j in jobs)
        return GpuState.IN_USE if running else GpuState.ALLOCATED

    def node_views(self) -> list[NodeView]:
        """The placement snapshot: READY nodes, each with the GPUs where new work may land
        now — free, AVAILABLE and not too hot."""
        return [
            NodeView(n.name, tuple(g for g in n.gpus if self._placeable(n, g)))
            for n in self._nodes.values()
            if n.state is NodeState.READY
        ]

    def free_gpus(self, name: str) -> frozenset[int]:
        """Indices of node `name`'s GPUs where new work may land now (as `node_views`)."""
        node = self.node(name)
        return frozenset(g.index for g in node.gpus if self._placeable(node, g))

    def free_shares(self, name: str) -> dict[int, int]:
        """Free milli-GPU per GPU index of node `name` where new work may land now: 1000 for
        a free GPU, what its shares leave for a shared one (GPUs with nothing free left out)."""
        node = self.node(name)
        out = {}
        for g in node.gpus:
            if self._placeable(node, g, shared_ok=True):
                free = self._shares.free_milli(g)
                if free > 0:
                    out[g.index] = free
        return out

    def cpu_used(self, name: str) -> int:
        """CPU milli-cores the jobs bound on node `name` asked for."""
        return self._shares.cpu.get(name, 0)

    def _placeable(self, node: Node, gpu: Gpu, shared_ok: bool = False) -> bool:
        return (
            node.state is NodeState.READY
            and gpu.schedulable
            and gpu.uuid not in self._hot
            and gpu.uuid not in self._held
            and (shared_ok or gpu.uuid not in self._shares.gpus)
        )

    def reason(self, name: str) -> str:
        """Why a GPU (by uuid) or node (by name) is in its current state ('' if never said)."""
        return self._reasons.get(name, "")

    def hot(self, gpu: Gpu) -> bool:
        """True while the thermal policy keeps new work off `gpu`."""
        return gpu.uuid in self._hot

    def resets_due(self) -> list[Gpu]:
        """RESETTING GPUs that no attempt holds any more: the controller may reset them now.
        O(RESETTING GPUs): the index is kept as GPUs change state."""
        return [g for g in self._resetting.values() if not self.holders(g.uuid)]

    def max_gpus_per_node(self) -> int:
        return max((len(n.gpus) for n in self._nodes.values()), default=0)

    # -- commands --------------------------------------------------------------------------

    def apply(self, command: Command) -> list[DomainEvent]:
        """Apply one command; return its events. Raises DomainError subclasses on bad commands."""
        if isinstance(command, SERVICE_COMMANDS):
            return self.services.apply(command)
        match command:
            case SubmitJob():
                return self._submit(command)
            case JobBatch():
                return self._apply_batch(command)
            case BindJob():
                return self._bind(command)
            case StartJob():
                return self._start(command)
            case FinishJob():
                return self._finish(command)
            case CancelJob():
                return self._cancel(command)
            case RequeueJob():
                return self._requeue(command)
            case AbortJob():
                return self._abort(command)
            case ReportXid():
                return self._xid(command)
            case ReportEcc():
                return self._ecc(command)
            case ReportThermal():
                return self._thermal(command)
            case ReportGpuLost():
                gpu = self._gpu(command.node, command.gpu_index)
                return self._gpu_input(gpu, GpuInput.LOST, command.detail, command.now)
            case CompleteGpuReset():
                return self._reset_done(command)
            case SetGpuAdmin():
                return self._gpu_admin(command)
            case SetNodeAdmin():
                return self._node_admin(command)
            case NodeHeartbeat():
                return self._heartbeat(command)
            case CheckNodes():
                return self._check_nodes(command)
            case RegisterNode():
                return self._register(command)
            case RemoveNode():
                return self._remove_node(command)
            case SetQuota():
                return self._set_quota(command)
            case AnnounceServer():
                return self._announce(command)
            case SubmitArray():
                return self._submit_array(command)
            case CancelArray():
                return self._cancel_array(command)
            case CreateTenant() | IssueToken() | RevokeToken() | BootstrapAdmin():
                return list(self._apply_access(command))
            case SetRunAsGrant() | DeleteRunAsGrant():  # run-as grants, also access state
                return list(self._apply_access(command))
        raise TypeError(f"unknown command {command!r}")  # pragma: no cover

    def _apply_item(self, command: JobItem) -> list[DomainEvent]:
        return self.apply(command)

    def _submit(self, cmd: SubmitJob) -> list[DomainEvent]:
        if cmd.job_id in self._jobs:
            first = self._jobs[cmd.job_id].spec
            token = cmd.spec.client_token
            if token is not None and first.client_token == token:
                if first == cmd.spec:  # a retry of one submission: the job exists once
                    return []
                raise Conflict(f"client token {token!r} was used for a different request")
            raise Conflict(f"job {cmd.job_id} already exists")
        spec = cmd.spec
        self._check_spec(spec)
        job = Job(cmd.job_id, spec, JobState.PENDING, cmd.now, seq=self.next_seq)
        job, _ = transition(job, JobInput.ACCEPT, cmd.now, reason="admitted")
        self.next_seq += 1
        self._jobs[job.id] = job
        return [JobSubmitted(job.id, spec.gpus * spec.tasks)]

    def _check_spec(self, spec: JobSpec) -> None:
        """Refuse (InvalidRequest) a spec this cluster could never run."""
        if spec.gpu_models and spec.gpus:
            known = {g.model for n in self._nodes.values() for g in n.gpus}
            if not known & set(spec.gpu_models):
                raise InvalidRequest(
                    "gpu_models",
                    f"no GPU of model {' or '.join(spec.gpu_models)} in the cluster "
                    f"(it has {', '.join(sorted(known)) or 'none'}); it could never be placed",
                )
        check_share_request(spec, self._gpus_by_uuid().values())
        if spec.mig_profile is not None:
            models = (g.model for n in self._nodes.values() for g in n.gpus)
            check_mig_request(spec.mig_profile, spec.gpus, models, spec.gpu_models)
        capacity = self.max_gpus_per_node()
        if spec.gpus > capacity:
            raise InvalidRequest(
                "gpus",
                f"requests {spec.gpus} GPUs but the largest node has {capacity}; "
                "this job could never be placed",
            )
        if spec.tasks > 1:
            slots = sum(len(n.gpus) // spec.gpus if spec.gpus else 1 for n in self._nodes.values())
            if spec.tasks > slots:
                raise InvalidRequest(
                    "tasks",
                    f"a gang of {spec.tasks} tasks x {spec.gpus} GPUs needs more room than the "
                    f"whole cluster has ({slots} such tasks); it could never be placed",
                )
        # another tenant's job answers as an unknown one: no probing which ids exist
        unknown = [
            d
            for d in spec.depends_on
            if d not in self._jobs or self._jobs[d].spec.tenant != spec.tenant
        ]
        if unknown:
            raise InvalidRequest("depends_on", f"no such job: {', '.join(unknown)}")

    def _bind(self, cmd: BindJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if job.state is not JobState.QUEUED:
            raise Conflict(f"job {job.id} is {job.state}, not QUEUED")
        if job.releasing:
            raise Conflict(f"job {job.id}: its previous attempt is still being stopped")
        wanted = ((cmd.node, cmd.gpu_indices), *cmd.peers)
        if len(wanted) != job.spec.tasks:
            raise Conflict(f"job {job.id} has {job.spec.tasks} tasks, got {len(wanted)} slots")
        slots = [self._slot(job, node, indices) for node, indices in wanted]
        self._check_cpu(job, [s.node for s in slots])
        uuids = [u for slot in slots for u in slot.gpu_uuids]
        if len(set(uuids)) != len(uuids):
            raise Conflict(f"job {job.id}: two tasks bound to one GPU")
        first = slots[0]
        allocation = Allocation(
            node=first.node,
            gpu_indices=first.gpu_indices,
            gpu_uuids=first.gpu_uuids,
            epoch=self.next_epoch,
            numa_nodes=first.numa_nodes,
            peers=tuple(slots[1:]),
        )
        self.next_epoch += 1
        job, _ = transition(job, JobInput.BIND, cmd.now, reason="bound", allocation=allocation)
        job = replace(job, borrowing=cmd.borrowing)
        self._jobs[job.id] = job
        self._shares.hold(job, {g.uuid: g for s in slots for g in self._slot_gpus(s)})
        for uuid in () if job.shares_gpu else allocation.all_gpu_uuids:
            self._held[uuid] = job.id
        for name in allocation.nodes:
            self._touch(name)
        bound: list[DomainEvent] = [JobBound(job.id, allocation, job.attempt)]
        if cmd.start:  # bind and start in one command (domain.job_commands)
            return bound + self._start(StartJob(job.id, allocation.epoch, cmd.now))
        return bound

    def _slot(self, job: Job, name: str, indices: tuple[int, ...]) -> TaskSlot:
        """Validate one task's GPUs on `name` for a bind; raise Conflict/NotFound if unusable."""
        node = self._nodes.get(name)
        if node is None:
            raise NotFound("node", name)
        if len(indices) != job.spec.gpus or len(set(indices)) != job.spec.gpus:
            raise Conflict(f"job {job.id} needs {job.spec.gpus} distinct GPUs, got {indices}")
        if node.state is not NodeState.READY:  # checked for every job, GPU-less ones too
            raise Conflict(f"node {node.name} is {node.state}")
        gpus = []
        for index in indices:
            try:
                gpu = node.gpu(index)
            except KeyError:
                raise NotFound("gpu", f"{node.name}/{index}") from None
            if not gpu.schedulable:
                raise Conflict(f"gpu {node.name}/{index} is {gpu.state}")
            if gpu.uuid in self._hot:
                raise Conflict(f"gpu {node.name}/{index} is too hot")
            if gpu.uuid in self._held:
                raise Conflict(f"gpu {node.name}/{index} is held by {self._held[gpu.uuid]}")
            if job.shares_gpu:
                why = self._shares.refusal(gpu, job)
                if why is not None:
                    raise Conflict(f"gpu {node.name}/{index}: {why}")
            elif gpu.uuid in self._shares.gpus:
                sharers = ", ".join(self._shares.sharers(gpu.uuid))
                raise Conflict(f"gpu {node.name}/{index} is shared by {sharers}")
            gpus.append(gpu)
        return TaskSlot(
            node=node.name,
            gpu_indices=tuple(g.index for g in gpus),
            gpu_uuids=tuple(g.uuid for g in gpus),
            numa_nodes=tuple(sorted({g.numa_node for g in gpus if g.numa_node >= 0})),
        )

    def _slot_gpus(self, slot: TaskSlot) -> list[Gpu]:
        node = self._nodes[slot.node]
        return [node.gpu(i) for i in slot.gpu_indices]

    def _check_cpu(self, job: Job, nodes: list[str]) -> None:
        """Conflict unless every node has the CPU milli-cores its tasks of `job` ask for."""
        want = job.spec.cpu_milli
        for name in dict.fromkeys(nodes) if want else ():
            cap = self._nodes[name].cpus * 1000
            need = want * nodes.count(name)
            if cap and self.cpu_used(name) + need > cap:
                raise Conflict(
                    f"node {name}: {self.cpu_used(name)} of {cap} CPU milli-cores are asked "
                    f"for; job {job.id} needs {need} more"
                )

    def _current(self, job: Job, epoch: int, states: tuple[JobState, ...]) -> bool:
        return job.state in states and job.allocation is not None and job.allocation.epoch == epoch

    def _start(self, cmd: StartJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED,)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"start report while {job.state}")]
        job, _ = transition(job, JobInput.START, cmd.now, reason="started")
        self._jobs[job.id] = job
        return [JobStarted(job.id, cmd.epoch)]

    def _finish(self, cmd: FinishJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        alloc = job.allocation
        if job.releasing and alloc is not None and alloc.epoch == cmd.epoch:
            self._jobs[job.id] = replace(job, releasing=False)
            self._unhold(job.id, alloc)
            return [AttemptEnded(job.id, cmd.epoch, cmd.exit_code)]
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"exit report while {job.state}")]
        ok = cmd.exit_code == 0 and job.state is JobState.RUNNING
        event = JobInput.COMPLETE if ok else JobInput.FAIL
        reason = cmd.reason or ("exited 0" if ok else f"exited {cmd.exit_code}")
        job, effects = transition(job, event, cmd.now, reason=reason, exit_code=cmd.exit_code)
        self._release(job, effects)
        return [JobFinished(job.id, cmd.epoch, job.state, cmd.exit_code, reason)]

    def _cancel(self, cmd: CancelJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if job.terminal:
            raise Conflict(f"job {job.id} already ended {job.state}")
        job, effects = transition(job, JobInput.CANCEL, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        stop = job.allocation if JobEffect.STOP_PROCESS in effects else None
        return [JobCancelled(job.id, stop)]

    def _abort(self, cmd: AbortJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"abort while {job.state}")]
        job, effects = transition(job, JobInput.ABORT, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        return [JobAborted(job.id, job.allocation, cmd.reason)]

    def _requeue(self, cmd: RequeueJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"requeue while {job.state}")]
        stop = job.allocation
        job, effects = transition(job, JobInput.PREEMPT, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        job, _ = transition(job, JobInput.REQUEUE, cmd.now, reason=cmd.reason)
        self._jobs[job.id] = replace(job, interruptions=job.interruptions + 1)
        return [JobRequeued(job.id, stop, cmd.reason)]

    def _release(self, job: Job, effects: JobEffect) -> None:
        self._jobs[job.id] = job
        if JobEffect.RELEASE_GPUS in effects and job.allocation is not None:
            self._unhold(job.id, job.allocation)

    def _unhold(self, job_id: str, allocation: Allocation) -> None:
        self._shares.unhold(self._jobs[job_id], allocation)
        for uuid in allocation.all_gpu_uuids:
            if self._held.get(uuid) == job_id:
                del self._held[uuid]
        for name in allocation.nodes:
            self._touch(name)

    # -- invariants ------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if any invariant of the module docstring is broken."""
        expected: dict[str, str] = {}
        epochs: set[int] = set()
        for job in self._jobs.values():
            if job.allocation is not None:
                assert job.allocation.epoch < self.next_epoch, "epoch from the future"
            if job.holds_gpus:
                assert job.allocation is not None
                assert job.allocation.epoch not in epochs, "two live attempts share an epoch"
                epochs.add(job.allocation.epoch)
                for uuid in () if job.shares_gpu else job.allocation.all_gpu_uuids:
                    assert uuid not in expected, (
                        f"gpu {uuid} held by {expected.get(uuid)} and {job.id}"
                    )
                    expected[uuid] = job.id
        assert expected == self._held, "held-GPU index disagrees with job allocations"
        gpus = self._gpus_by_uuid()
        assert self._shares.same_as(ShareBook.of(self._jobs.values(), gpus)), "share book stale"
        self._shares.check(gpus)
        assert not set(self._shares.gpus) & set(self._held), "a whole-GPU job shares its GPU"
        for job in self._jobs.values():
            if job.state in LIVE and not job.releasing:
                assert job.allocation is not None
                for slot in job.allocation.tasks:
                    node = self._nodes[slot.node]
                    assert node.state is not NodeState.DOWN, f"{job.id} live on DOWN {node.name}"
                    for index in slot.gpu_indices:
                        state = node.gpu(index).state
                        assert state not in SICK, f"{job.id} live on {state} {node.name}/{index}"
        uuids = {g.uuid for n in self._nodes.values() for g in n.gpus}
        assert set(self._hot) <= uuids, "thermal record for an unknown GPU"
        resetting = {
            g.uuid for n in self._nodes.values() for g in n.gpus if g.state is GpuState.RESETTING
        }
        assert set(self._resetting) == resetting, "RESETTING index disagrees with the GPUs"
        self.check_access_invariants()
        for gpu in self._resetting.values():
            assert self._nodes[gpu.node].gpu(gpu.index) is gpu, "stale RESETTING GPU"
        open_ids = [j.id for j in self._jobs.values() if not j.terminal or j.holds_gpus]
        assert list(self._jobs.open) == open_ids, "open-job index disagrees with the jobs"


def _seq(job: Job) -> int:
    return job.seq
