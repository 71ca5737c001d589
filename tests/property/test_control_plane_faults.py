"""The control plane's own property test (no oversubscription, nothing lost, completed jobs
never run again, live processes belong to current attempts) with faults, operator actions,
GPU resets and crash-restarts mixed in; GPU states persist across restarts."""

from __future__ import annotations

import contextlib

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.errors import Conflict
from gpu_platform.domain.faults.health import EccReading, GpuLostReport, XidReport
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.testing.fakes import FakeJobRunner, InMemoryHardwareStore, RecordingPublisher
from tests.property.test_no_oversubscription import ControlPlaneMachine

XIDS = st.sampled_from([13, 43, 48, 54, 79, 95, 999])


class FaultyControlPlaneMachine(ControlPlaneMachine):
    def _new_plane(self) -> None:
        if not hasattr(self, "hardware"):
            self.hardware = InMemoryHardwareStore()
        self.runner = FakeJobRunner()
        self.sim = SimulatedHardware(self.inventory, heartbeats=False)
        self.plane = ControlPlane(
            self.inventory,
            self.store,
            self.runner,
            self.clock,
            self.ids,
            RecordingPublisher(),
            hardware=self.hardware,
            gpu_reset=self.sim,
        )

    def _gpu(self, data: st.DataObject) -> tuple[str, int]:
        node = data.draw(st.sampled_from([n for n in self.inventory.nodes if n.gpus]))
        return node.name, data.draw(st.sampled_from([g.index for g in node.gpus]))

    @rule(data=st.data(), xid=XIDS)
    def an_xid_hits_a_gpu(self, data: st.DataObject, xid: int) -> None:
        self.plane.report_health(XidReport(*self._gpu(data), xid))

    @rule(data=st.data(), pending=st.booleans(), failed=st.booleans())
    def an_ecc_reading_arrives(self, data: st.DataObject, pending: bool, failed: bool) -> None:
        node, index = self._gpu(data)
        self.plane.report_health(EccReading(node, index, 0, 1, pending, failed))

    @rule(data=st.data())
    def a_gpu_falls_off_the_bus(self, data: st.DataObject) -> None:
        self.plane.report_health(GpuLostReport(*self._gpu(data)))

    @rule(
        data=st.data(), action=st.sampled_from(["drain", "offline", "online"]), force=st.booleans()
    )
    def an_operator_acts(self, data: st.DataObject, action: str, force: bool) -> None:
        node, index = self._gpu(data)
        with contextlib.suppress(Conflict):
            if data.draw(st.booleans()):
                self.plane.gpu_action(node, index, action, reason="p", actor="t", force=force)  # type: ignore[arg-type]
            else:
                self.plane.node_action(node, action, reason="p", actor="t", force=force)  # type: ignore[arg-type]

    @invariant()
    def gpu_states_survive_restarts_and_nothing_runs_on_a_sick_gpu(self) -> None:
        if not hasattr(self, "plane"):
            return
        stored = {r.name: r.state for r in self.hardware.load_hardware() if r.kind == "gpu"}
        for info in self.plane.gpus():
            own = next(
                g.state for n in self.inventory.nodes for g in n.gpus if g.uuid == info.gpu.uuid
            )
            assert own is GpuState.AVAILABLE  # the inventory itself is never mutated
            if info.gpu.uuid in stored:
                assert str(info.gpu.state) == stored[info.gpu.uuid]
        sick = {
            i.gpu.uuid
            for i in self.plane.gpus()
            if i.gpu.state in (GpuState.DEGRADED, GpuState.RESETTING, GpuState.OFFLINE)
        }
        for spec in self.runner.live():
            job = self.plane.get(spec.job_id)
            if not job.releasing and job.allocation and job.allocation.epoch == spec.epoch:
                assert sick.isdisjoint(spec.gpu_uuids), "a live attempt on a sick GPU"


FaultyControlPlaneMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None
)
TestFaultyControlPlane = FaultyControlPlaneMachine.TestCase
