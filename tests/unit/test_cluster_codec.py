"""The cluster codec: every command, node and state survives encode -> JSON -> decode exactly."""

from __future__ import annotations

import contextlib
import json
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.cluster_codec import (
    COMMAND_TYPES,
    decode_command,
    decode_node,
    decode_state,
    encode_command,
    encode_node,
    encode_state,
)
from gpu_platform.domain.cluster_state import (
    BindJob,
    ClusterState,
    Command,
    FinishJob,
    JobBatch,
    NodeHeartbeat,
    RegisterNode,
    ReportThermal,
    SetQuota,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.testing.cluster_commands import cluster_commands, command_strategies
from gpu_platform.testing.strategies import described_nodes
from gpu_platform.testing.topology_builders import pairwise_topology

ALL_COMMANDS = set(typing.get_args(Command))


def via_json(record: dict[str, typing.Any]) -> dict[str, typing.Any]:
    loaded: dict[str, typing.Any] = json.loads(json.dumps(record, allow_nan=False))
    return loaded


def test_every_command_of_the_union_has_a_wire_name_and_a_test_strategy() -> None:
    assert len(ALL_COMMANDS) == 37  # 29 + 8 service commands
    assert set(COMMAND_TYPES.values()) == ALL_COMMANDS
    assert set(command_strategies()) == ALL_COMMANDS


@pytest.mark.parametrize("cls", sorted(ALL_COMMANDS, key=lambda c: c.__name__))
def test_each_command_type_round_trips_exactly_through_json(cls: type[typing.Any]) -> None:
    @settings(max_examples=40, deadline=None)
    @given(command_strategies()[cls])
    def check(command: Command) -> None:
        record = encode_command(command)
        assert record["v"] == 1
        assert record["type"] == cls.__name__
        assert decode_command(via_json(record)) == command

    check()


@settings(max_examples=100, deadline=None)
@given(described_nodes("n7"))
def test_a_node_with_gpu_states_labels_and_topology_round_trips(node: Node) -> None:
    assert decode_node(via_json(encode_node(node))) == node


def test_a_pairwise_topology_round_trips() -> None:
    topo = pairwise_topology("dgx", 4, {(0, 1): "PIX"}, nvlinks={(0, 3): 2}, numa=[0, 0, 1, 1])
    gpus = tuple(Gpu(f"G{i}", i, "dgx", Vendor.NVIDIA, "A100", 1 << 30) for i in range(4))
    node = Node("dgx", gpus, labels=(("rack", "r1"),), topology=topo)
    assert decode_node(via_json(encode_node(node))) == node


def test_an_unknown_command_type_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="LaunchMissiles"):
        decode_command({"v": 1, "type": "LaunchMissiles"})


def test_an_unknown_field_is_refused_by_name() -> None:
    record = encode_command(NodeHeartbeat("n0", 1.0))
    record["colour"] = "red"
    with pytest.raises(ValueError, match="colour"):
        decode_command(record)


def test_a_missing_field_is_refused() -> None:
    record = encode_command(StartJob("j", 1, 1.0))
    del record["epoch"]
    with pytest.raises(ValueError, match="StartJob"):
        decode_command(record)


def test_another_schema_version_is_refused() -> None:
    record = encode_command(NodeHeartbeat("n0", 1.0))
    record["v"] = 2
    with pytest.raises(ValueError, match="schema 2"):
        decode_command(record)


def test_a_gang_bind_keeps_its_peers_as_tuples() -> None:
    cmd = BindJob("j", "n0", (0, 1), 3.0, peers=(("n1", (2, 3)),), borrowing=True)
    back = decode_command(via_json(encode_command(cmd)))
    assert back == cmd
    assert isinstance(back, BindJob)
    assert isinstance(back.peers[0][1], tuple)


def test_a_bind_written_before_bind_and_start_were_one_command_decodes_as_a_bind_only() -> None:
    old = {"v": 1, "type": "BindJob", "job_id": "j", "node": "n0", "gpu_indices": [1]}
    old |= {"now": 2.0, "peers": [], "borrowing": False}  # the record as it was written
    assert decode_command(old) == BindJob("j", "n0", (1,), 2.0, start=False)


def test_a_job_batch_keeps_its_items_as_commands() -> None:
    batch = JobBatch((BindJob("j", "n0", (0,), 1.0, start=True), FinishJob("k", 3, 0, 2.0)))
    assert decode_command(via_json(encode_command(batch))) == batch


def test_a_batch_inside_a_batch_or_a_submit_in_one_is_refused_by_name() -> None:
    inner = encode_command(JobBatch((StartJob("j", 1, 1.0),)))
    with pytest.raises(ValueError, match="JobBatch cannot be an item"):
        decode_command({"v": 1, "type": "JobBatch", "items": [inner]})
    submit = encode_command(SubmitJob("j", JobSpec(command=("true",)), 1.0))
    with pytest.raises(ValueError, match="SubmitJob cannot be an item"):
        decode_command({"v": 1, "type": "JobBatch", "items": [submit]})


def _busy_state() -> ClusterState:
    state = ClusterState.empty(FaultPolicy())
    gpus = tuple(Gpu(f"G{i}", i, "n0", Vendor.NVIDIA, "A100", 1 << 30) for i in range(2))
    state.apply(RegisterNode(Node("n0", gpus, labels=(("rack", "r1"),)), 1.0))
    state.apply(SubmitJob("a", JobSpec(("x",), gpus=1), 2.0))
    state.apply(SubmitJob("b", JobSpec(("x",), gpus=1), 2.5))
    state.apply(BindJob("a", "n0", (0,), 3.0))
    state.apply(StartJob("a", 1, 4.0))
    state.apply(ReportThermal("n0", 1, 95.0, 0, 5.0))
    state.apply(SetQuota("team-a", Quota(4, cohort="c")))
    return state


def test_a_state_round_trips_with_jobs_holds_hot_gpus_and_quotas() -> None:
    state = _busy_state()
    record = via_json(encode_state(state))
    back = decode_state(record, FaultPolicy())
    assert encode_state(back) == encode_state(state)
    assert [j.id for j in back.jobs()] == ["a", "b"]
    assert back.holder(back.node("n0").gpu(0)) == "a"
    assert back.hot(back.node("n0").gpu(1))
    assert back.quotas == {"team-a": Quota(4, cohort="c")}
    back.check_invariants()


def test_a_state_whose_held_index_contradicts_its_jobs_is_refused() -> None:
    record = via_json(encode_state(_busy_state()))
    record["held"] = {}
    with pytest.raises(ValueError, match="held"):
        decode_state(record, FaultPolicy())


@settings(max_examples=60, deadline=None)
@given(st.lists(cluster_commands(), max_size=30))
def test_any_reachable_state_round_trips(commands: list[Command]) -> None:
    state = ClusterState.empty(FaultPolicy())
    for cmd in commands:
        with contextlib.suppress(DomainError):
            state.apply(cmd)
    record = encode_state(state)
    assert encode_state(decode_state(via_json(record), FaultPolicy())) == record


def test_nodes_of_one_hardware_type_decode_to_equal_values_that_share_their_parts() -> None:
    def node(name: str) -> Node:
        topo = pairwise_topology(name, 4, {(0, 1): "PIX"}, nvlinks={(0, 3): 2}, numa=[0, 0, 1, 1])
        gpus = tuple(Gpu(f"{name}-G{i}", i, name, Vendor.NVIDIA, "A100", 1 << 30) for i in range(4))
        return Node(name, gpus, topology=topo)

    a, b = (decode_node(via_json(encode_node(node(n)))) for n in ("dgx-a", "dgx-b"))
    assert (a, b) == (node("dgx-a"), node("dgx-b"))
    assert a.topology is not None and b.topology is not None
    assert a.topology.links
    assert all(x is y for x, y in zip(a.topology.links, b.topology.links, strict=True))
    assert a.topology.numa_nodes[0] is b.topology.numa_nodes[0]
    assert a.gpus[0].model is b.gpus[0].model


def test_an_equal_part_of_another_type_is_not_substituted() -> None:
    def decoded(numa: object) -> Node:
        node = encode_node(pairwise_topology_node("dgx-c"))
        node["topology"]["numa_nodes"][0][2] = numa  # memory_bytes: 1 == 1.0 == True
        return decode_node(via_json(node))

    kinds = [type(decoded(v).topology.numa_nodes[0].memory_bytes) for v in (1, 1.0, True)]
    assert kinds == [int, float, bool]


def pairwise_topology_node(name: str) -> Node:
    topo = pairwise_topology(name, 2, {(0, 1): "PIX"}, numa=[0, 1])
    return Node(name, (Gpu(f"{name}-G0", 0, name, Vendor.NVIDIA, "A100", 1 << 30),), topology=topo)
