"""Random interleavings of faults, completions, drains, onlines, resets, heartbeats and stale
reports never lose a job, never run one twice, never place work on a GPU or node that is out of
service, and every job's epochs strictly increase."""

from __future__ import annotations

import contextlib

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_platform.domain.cluster_state import (
    BindJob,
    CancelJob,
    CheckNodes,
    ClusterState,
    Command,
    CompleteGpuReset,
    FinishJob,
    NodeHeartbeat,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    SetGpuAdmin,
    SetNodeAdmin,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, IllegalTransition
from gpu_platform.domain.events import (
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobRequeued,
    StaleReportIgnored,
)
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import TERMINAL_JOB_STATES, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, NodeState
from gpu_platform.domain.placement.first_fit import Placement, PlacementRequest, first_fit
from gpu_platform.testing.strategies import inventories

XIDS = st.sampled_from([13, 31, 43, 48, 54, 63, 79, 95, 109, 999])
ACTIONS = st.sampled_from(["drain", "offline", "online"])
POLICY = FaultPolicy(node_suspect_after_s=5, node_down_after_s=12, ecc_corrected_alert=10)


class FaultMachine(RuleBasedStateMachine):
    """The model: `procs` are the attempts whose process the (simulated) runner still has, each
    (job id, epoch) -> stopping? A stop effect marks it stopping; the runner later reports it
    ended (a FinishJob for its epoch), as the real runner does."""

    @initialize(inventory=inventories(max_nodes=3, max_gpus=4))
    def boot(self, inventory: Inventory) -> None:
        self.inv = inventory
        self.state = ClusterState(inventory, policy=POLICY)
        self.t = 0.0
        self.n = 0
        self.procs: dict[tuple[str, int], bool] = {}
        self.epochs: dict[str, list[int]] = {}
        self.ended_epochs: list[tuple[str, int]] = []
        self.final: dict[str, JobState] = {}

    # -- helpers ---------------------------------------------------------------------------

    def apply(self, command: Command) -> list[DomainEvent]:
        events = self.state.apply(command)
        for e in events:
            if isinstance(e, JobRequeued | JobAborted | JobCancelled) and e.stop is not None:
                key = (e.job_id, e.stop.epoch)
                if key in self.procs:
                    self.procs[key] = True
        return events

    def gpu_ref(self, data: st.DataObject) -> tuple[str, int]:
        node = data.draw(st.sampled_from([n for n in self.inv.nodes if n.gpus]))
        return node.name, data.draw(st.sampled_from([g.index for g in node.gpus]))

    def tick(self, seconds: float = 1.0) -> float:
        self.t += seconds
        return self.t

    # -- jobs ------------------------------------------------------------------------------

    @rule(gpus=st.integers(0, 4), attempts=st.integers(1, 3), backoff=st.sampled_from([0, 2]))
    def submit(self, gpus: int, attempts: int, backoff: float) -> None:
        if gpus > self.state.max_gpus_per_node():
            return
        self.n += 1
        spec = JobSpec(("x",), gpus=gpus, max_attempts=attempts, retry_backoff_s=backoff)
        self.apply(SubmitJob(f"j{self.n}", spec, self.tick()))

    @rule()
    def schedule(self) -> None:
        now = self.tick()
        for job in self.state.queued(now):
            placed = first_fit(PlacementRequest(job.spec.gpus), self.state.node_views())
            if not isinstance(placed, Placement):
                continue
            node = self.state.node(placed.node)
            assert node.state is NodeState.READY
            for g in placed.gpus:
                assert node.gpu(g.index).state is GpuState.AVAILABLE
                assert not self.state.hot(g) and self.state.holder(g) is None
            indices = tuple(g.index for g in placed.gpus)
            (bound,) = self.apply(BindJob(job.id, placed.node, indices, now))
            assert isinstance(bound, JobBound)
            epoch = bound.allocation.epoch
            assert all(e < epoch for e in self.epochs.get(job.id, [])), "epoch went backwards"
            self.epochs.setdefault(job.id, []).append(epoch)
            assert not any(k[0] == job.id for k in self.procs), "a second live copy of a job"
            self.procs[(job.id, epoch)] = False
            self.apply(StartJob(job.id, epoch, now))

    @precondition(lambda self: any(not s for s in self.procs.values()))
    @rule(data=st.data(), code=st.integers(0, 1))
    def a_process_exits(self, data: st.DataObject, code: int) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, s in self.procs.items() if not s)))
        del self.procs[key]
        self.ended_epochs.append(key)
        self.apply(FinishJob(key[0], key[1], code, self.tick()))

    @precondition(lambda self: any(self.procs.values()))
    @rule(data=st.data())
    def a_stopped_process_ends(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, s in self.procs.items() if s)))
        del self.procs[key]
        self.ended_epochs.append(key)
        self.apply(FinishJob(key[0], key[1], None, self.tick(), "killed by signal 15"))

    @precondition(lambda self: bool(self.ended_epochs))
    @rule(data=st.data(), start=st.booleans())
    def a_late_report_from_an_ended_attempt_is_ignored(
        self, data: st.DataObject, start: bool
    ) -> None:
        job_id, epoch = data.draw(st.sampled_from(self.ended_epochs))
        before = self.state.job(job_id)
        cmd: Command = (
            StartJob(job_id, epoch, self.tick())
            if start
            else FinishJob(job_id, epoch, 0, self.tick())
        )
        (event,) = self.apply(cmd)
        assert isinstance(event, StaleReportIgnored)
        assert self.state.job(job_id) == before

    @precondition(lambda self: self.n > 0)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = f"j{data.draw(st.integers(1, self.n))}"
        try:
            self.apply(CancelJob(job_id, self.tick()))
        except Conflict:
            assert self.state.job(job_id).terminal

    # -- faults ----------------------------------------------------------------------------

    @rule(data=st.data(), xid=XIDS)
    def xid(self, data: st.DataObject, xid: int) -> None:
        node, index = self.gpu_ref(data)
        self.apply(ReportXid(node, index, xid, self.tick()))

    @rule(data=st.data(), unc=st.integers(0, 2), pending=st.booleans(), failed=st.booleans())
    def ecc(self, data: st.DataObject, unc: int, pending: bool, failed: bool) -> None:
        node, index = self.gpu_ref(data)
        self.apply(ReportEcc(node, index, 12, unc, pending, failed and unc == 2, self.tick()))

    @rule(data=st.data(), temp=st.sampled_from([40.0, 85.0, 95.0]))
    def thermal(self, data: st.DataObject, temp: float) -> None:
        node, index = self.gpu_ref(data)
        self.apply(ReportThermal(node, index, temp, 0, self.tick()))

    @rule(data=st.data())
    def gpu_lost(self, data: st.DataObject) -> None:
        node, index = self.gpu_ref(data)
        self.apply(ReportGpuLost(node, index, self.tick()))

    @precondition(lambda self: bool(self.state.resets_due()))
    @rule(data=st.data(), ok=st.booleans())
    def a_reset_finishes(self, data: st.DataObject, ok: bool) -> None:
        gpu = data.draw(st.sampled_from(self.state.resets_due()))
        self.apply(CompleteGpuReset(gpu.node, gpu.index, ok, self.tick()))

    # -- operations and heartbeats -----------------------------------------------------------

    @rule(data=st.data(), action=ACTIONS, force=st.booleans())
    def operator_acts_on_a_gpu(self, data: st.DataObject, action: str, force: bool) -> None:
        node, index = self.gpu_ref(data)
        with contextlib.suppress(Conflict, IllegalTransition):
            self.apply(SetGpuAdmin(node, index, action, "op", self.tick(), force))  # type: ignore[arg-type]

    @rule(data=st.data(), action=ACTIONS, force=st.booleans())
    def operator_acts_on_a_node(self, data: st.DataObject, action: str, force: bool) -> None:
        node = data.draw(st.sampled_from([n.name for n in self.inv.nodes]))
        with contextlib.suppress(Conflict, IllegalTransition):
            self.apply(SetNodeAdmin(node, action, "op", self.tick(), force))  # type: ignore[arg-type]

    @rule(data=st.data(), wait=st.sampled_from([1.0, 6.0, 13.0]))
    def time_passes_and_some_nodes_report_in(self, data: st.DataObject, wait: float) -> None:
        now = self.tick(wait)
        for node in self.inv.nodes:
            if data.draw(st.booleans()):
                self.apply(NodeHeartbeat(node.name, now))
        self.apply(CheckNodes(now))

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def the_state_machine_holds_its_invariants(self) -> None:
        if hasattr(self, "state"):
            self.state.check_invariants()

    @invariant()
    def no_job_is_lost_or_duplicated_and_each_has_one_legal_state(self) -> None:
        if not hasattr(self, "state"):
            return
        jobs = self.state.jobs()
        assert [j.id for j in jobs] == [f"j{i}" for i in range(1, self.n + 1)]
        for job in jobs:
            assert job.state in JobState
            if job.id in self.final:
                assert job.state is self.final[job.id], "a finished job changed state"
            elif job.terminal:
                self.final[job.id] = job.state
            if job.state is JobState.FAILED and job.exit_code is None:
                assert job.reason, "a job failed without a reason"

    @invariant()
    def at_most_one_process_per_job_and_per_gpu(self) -> None:
        if not hasattr(self, "state"):
            return
        per_job = [job_id for job_id, _ in self.procs]
        assert len(per_job) == len(set(per_job)), "two live copies of one job"
        gpus: list[str] = []
        for job_id, epoch in self.procs:
            job = self.state.job(job_id)
            assert job.allocation is not None and job.allocation.epoch == epoch
            assert job.holds_gpus, "a process runs on GPUs its job no longer holds"
            gpus += job.allocation.gpu_uuids
        assert len(gpus) == len(set(gpus)), "two processes share a GPU"

    @invariant()
    def a_terminal_job_has_no_running_attempt(self) -> None:
        if not hasattr(self, "state"):
            return
        for (job_id, _), stopping in self.procs.items():
            if self.state.job(job_id).state in TERMINAL_JOB_STATES:
                assert stopping, "a finished job's process is not being stopped"


FaultMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
TestFaultRecovery = FaultMachine.TestCase
