"""RegisterNode, SetQuota and AnnounceServer: nodes, quotas and API servers as replicated state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_platform.domain.cluster_state import (
    AnnounceServer,
    BindJob,
    CheckNodes,
    ClusterState,
    RegisterNode,
    ReportThermal,
    ReportXid,
    SetNodeAdmin,
    SetQuota,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, InvalidRequest
from gpu_platform.domain.events import (
    GpuStateChanged,
    NodeRegistered,
    NodeStateChanged,
    QuotaChanged,
    ServerAnnounced,
)
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.testing.topology_builders import pairwise_topology

POLICY = FaultPolicy(node_suspect_after_s=5, node_down_after_s=12)


def node(name: str = "n0", uuids: tuple[str, ...] = ("A", "B"), **kw: object) -> Node:
    gpus = tuple(
        Gpu(u, i, name, Vendor.NVIDIA, "A100", 80 << 30, numa_node=0) for i, u in enumerate(uuids)
    )
    return Node(name, gpus, **kw)  # type: ignore[arg-type]


def registered(*nodes: Node) -> ClusterState:
    state = ClusterState.empty(POLICY)
    for n in nodes:
        state.apply(RegisterNode(n, 0.0))
    return state


def test_an_empty_cluster_refuses_gpu_jobs_until_a_node_registers() -> None:
    state = ClusterState.empty(POLICY)
    assert state.nodes == ()
    with pytest.raises(InvalidRequest, match="gpus"):
        state.apply(SubmitJob("j", JobSpec(("x",), gpus=1), 0.0))
    assert state.apply(RegisterNode(node(), 1.0)) == [NodeRegistered("n0", 2, replaced=False)]
    state.apply(SubmitJob("j", JobSpec(("x",), gpus=1), 2.0))
    state.check_invariants()


def test_a_new_node_is_ready_and_heard_from_at_registration() -> None:
    state = ClusterState.empty(POLICY)
    state.apply(RegisterNode(node(), 10.0))
    assert state.node("n0").state is NodeState.READY
    assert state.apply(CheckNodes(14.0)) == []
    (changed,) = state.apply(CheckNodes(15.0))
    assert changed == NodeStateChanged("n0", NodeState.READY, NodeState.SUSPECT, changed.reason)


def test_a_new_node_keeps_the_state_it_reports() -> None:
    state = registered(node(state=NodeState.DRAINING))
    assert state.node("n0").state is NodeState.DRAINING


def test_re_registering_the_same_gpus_is_a_heartbeat() -> None:
    state = registered(node())
    state.apply(CheckNodes(6.0))
    assert state.node("n0").state is NodeState.SUSPECT
    events = state.apply(RegisterNode(node(), 7.0))
    assert events == [NodeStateChanged("n0", NodeState.SUSPECT, NodeState.READY, "heartbeat")]
    assert state.apply(RegisterNode(node(), 8.0)) == []


def test_re_registering_does_not_bring_a_down_node_back() -> None:
    state = registered(node())
    state.apply(CheckNodes(20.0))
    assert state.node("n0").state is NodeState.DOWN
    assert state.apply(RegisterNode(node(), 21.0)) == []
    assert state.node("n0").state is NodeState.DOWN


def test_re_registering_keeps_gpu_fault_states_and_refreshes_labels_and_topology() -> None:
    state = registered(node())
    state.apply(ReportXid("n0", 1, 79, 1.0))  # fell off the bus
    assert state.node("n0").gpu(1).state is GpuState.OFFLINE
    topo = pairwise_topology("n0", 2, {(0, 1): "PIX"})
    state.apply(RegisterNode(node(labels=(("rack", "r9"),), topology=topo), 2.0))
    now = state.node("n0")
    assert now.gpu(1).state is GpuState.OFFLINE
    assert now.labels == (("rack", "r9"),)
    assert now.topology == topo


def test_a_node_with_other_gpus_is_replaced_keeping_the_states_of_gpus_it_still_has() -> None:
    state = registered(node(uuids=("A", "B")))
    state.apply(ReportXid("n0", 0, 79, 1.0))
    state.apply(ReportThermal("n0", 1, 95.0, 0, 1.0))  # B is hot
    events = state.apply(RegisterNode(node(uuids=("A", "C", "D")), 2.0))
    assert events[0] == NodeRegistered("n0", 3, replaced=True)
    now = state.node("n0")
    assert [g.uuid for g in now.gpus] == ["A", "C", "D"]
    assert now.gpu(0).state is GpuState.OFFLINE
    assert now.gpu(1).state is GpuState.AVAILABLE
    state.check_invariants()  # B's thermal record went with B


def test_a_node_cannot_change_gpus_while_a_job_holds_one() -> None:
    state = registered(node())
    state.apply(SubmitJob("j", JobSpec(("x",), gpus=1), 1.0))
    state.apply(BindJob("j", "n0", (1,), 2.0))
    with pytest.raises(Conflict, match="node n0"):
        state.apply(RegisterNode(node(uuids=("A", "Z")), 3.0))
    assert [g.uuid for g in state.node("n0").gpus] == ["A", "B"]


def test_a_gpu_uuid_already_on_another_node_is_a_conflict() -> None:
    state = registered(node("n0", ("A", "B")))
    with pytest.raises(Conflict, match="GPU B is already registered on n0"):
        state.apply(RegisterNode(node("n1", ("B", "C")), 1.0))
    assert [n.name for n in state.nodes] == ["n0"]


def test_a_node_reporting_a_job_derived_gpu_state_is_refused() -> None:
    bad = node()
    bad = replace(bad, gpus=(replace(bad.gpus[0], state=GpuState.IN_USE), bad.gpus[1]))
    with pytest.raises(InvalidRequest, match="node"):
        ClusterState.empty(POLICY).apply(RegisterNode(bad, 0.0))


def test_an_operator_offline_node_stays_down_through_re_registration() -> None:
    state = registered(node())
    state.apply(SetNodeAdmin("n0", "offline", "maintenance", 1.0))
    state.apply(RegisterNode(node(), 2.0))
    assert state.node("n0").state is NodeState.DOWN


def test_a_replaced_node_reports_gpu_changes_only_through_its_event() -> None:
    state = registered(node())
    events = state.apply(RegisterNode(node(uuids=("A",)), 1.0))
    assert not any(isinstance(e, GpuStateChanged) for e in events)


def test_quotas_are_set_replaced_and_removed() -> None:
    state = ClusterState.empty(POLICY)
    q = Quota(8, borrowing_limit=2, cohort="research")
    assert state.apply(SetQuota("team-a", q)) == [QuotaChanged("team-a", q)]
    state.apply(SetQuota("team-b", Quota(1)))
    assert state.quotas == {"team-a": q, "team-b": Quota(1)}
    assert state.apply(SetQuota("team-a", None)) == [QuotaChanged("team-a", None)]
    assert state.quotas == {"team-b": Quota(1)}


def test_a_quota_needs_a_tenant() -> None:
    with pytest.raises(InvalidRequest, match="tenant"):
        ClusterState.empty(POLICY).apply(SetQuota("", Quota(1)))


def test_announced_servers_are_remembered_and_re_announcements_replace_them() -> None:
    state = ClusterState.empty(POLICY)
    events = state.apply(AnnounceServer(1, "http://10.0.0.1:8080", "10.0.0.1:50051", 1.0))
    assert events == [ServerAnnounced(1, "http://10.0.0.1:8080", "10.0.0.1:50051")]
    state.apply(AnnounceServer(2, "http://10.0.0.2:8080", "10.0.0.2:50051", 2.0))
    state.apply(AnnounceServer(1, "http://10.0.0.9:8080", "10.0.0.9:50051", 3.0, "10.0.0.9:50053"))
    assert state.servers == {
        1: ("http://10.0.0.9:8080", "10.0.0.9:50051", "10.0.0.9:50053"),
        2: ("http://10.0.0.2:8080", "10.0.0.2:50051", ""),
    }


def test_a_server_needs_an_http_url() -> None:
    with pytest.raises(InvalidRequest, match="http_url"):
        ClusterState.empty(POLICY).apply(AnnounceServer(1, "", "h:1", 0.0))
