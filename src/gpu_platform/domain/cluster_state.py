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
cancels them all. Job commands and their handlers live in `domain.job_commands`; a JobBatch
(`domain.job_batches`) applies many of them as one command. Tenants, tokens and revocations
(`domain.access_state`): CreateTenant, IssueToken, RevokeToken, BootstrapAdmin; run-as
grants: SetRunAsGrant, DeleteRunAsGrant.
Read-only queries live in `domain.cluster_queries`, the indexed node and job tables in
`domain.cluster_tables`. `parts()` and `from_parts()` expose the whole state as plain values
for snapshots (`domain.cluster_codec`).

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
from dataclasses import dataclass, field

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
from gpu_platform.domain.cluster_queries import ClusterQueries
from gpu_platform.domain.cluster_tables import JobTable, NodeTable
from gpu_platform.domain.errors import Conflict
from gpu_platform.domain.events import DomainEvent
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
from gpu_platform.domain.faults.policy import (
    FaultPolicy,
)
from gpu_platform.domain.faults.recovery import LIVE, SICK, FaultHandlers
from gpu_platform.domain.gpu_shares import ShareBook
from gpu_platform.domain.hardware_facts import HardwareFacts
from gpu_platform.domain.job_arrays import ArrayHandlers, CancelArray, SubmitArray
from gpu_platform.domain.job_batches import BatchHandlers, JobBatch, JobItem
from gpu_platform.domain.job_commands import (
    AbortJob,
    BindJob,
    CancelJob,
    FinishJob,
    JobHandlers,
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
from gpu_platform.domain.model.job import Job
from gpu_platform.domain.model.job_array import ArraySpec
from gpu_platform.domain.model.node import Inventory, Node, NodeState
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


class ClusterState(
    ClusterQueries,
    JobHandlers,
    FaultHandlers,
    MembershipHandlers,
    ArrayHandlers,
    AccessHandlers,
    BatchHandlers,
):
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
        self._facts: HardwareFacts | None = None  # kept between node writes (NodeTable)
        self._nodes: dict[str, Node] = NodeTable(self)
        for n in inventory.nodes:
            self._nodes[n.name] = n
        self._jobs: JobTable = JobTable()
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
        kept = self._facts
        assert kept is None or kept == HardwareFacts.of(self._nodes.values()), "stale facts"
        self.check_access_invariants()
        for gpu in self._resetting.values():
            assert self._nodes[gpu.node].gpu(gpu.index) is gpu, "stale RESETTING GPU"
        open_ids = [j.id for j in self._jobs.values() if not j.terminal or j.holds_gpus]
        assert list(self._jobs.open) == open_ids, "open-job index disagrees with the jobs"
