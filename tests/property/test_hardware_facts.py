"""The hardware facts a submit is checked against (`domain.hardware_facts`), kept between node
writes, against the walk over every GPU that submits did before: for any cluster shaped by any
sequence of node writes (registrations of any shape, removals, faults, admin actions) and any
spec, a submit is refused exactly when, and with exactly the message, the walk refuses it."""

from __future__ import annotations

import contextlib
from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.domain.allocation.mig_jobs import check_mig_request
from gpu_platform.domain.cluster_state import ClusterState, Command, RegisterNode, RemoveNode
from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.domain.gpu_shares import check_share_request
from gpu_platform.domain.hardware_facts import HardwareFacts
from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.testing.cluster_commands import cluster_commands
from gpu_platform.testing.strategies import described_nodes

NODES = ("n0", "n1", "n2")
GIB = 1 << 30
MODELS = ("A100-SXM4-80GB", "H100-SXM5-80GB", "MI300X", "V100-SXM2-32GB")


def _walk(state: ClusterState, spec: JobSpec) -> None:
    """The hardware checks of a submit as they were: a walk over every GPU of every node."""
    nodes = state.nodes
    if spec.gpu_models and spec.gpus:
        known = {g.model for n in nodes for g in n.gpus}
        if not known & set(spec.gpu_models):
            raise InvalidRequest(
                "gpu_models",
                f"no GPU of model {' or '.join(spec.gpu_models)} in the cluster "
                f"(it has {', '.join(sorted(known)) or 'none'}); it could never be placed",
            )
    check_share_request(spec, {g.uuid: g for n in nodes for g in n.gpus}.values())
    if spec.mig_profile is not None:
        models = (g.model for n in nodes for g in n.gpus)
        check_mig_request(spec.mig_profile, spec.gpus, models, spec.gpu_models)
    capacity = max((len(n.gpus) for n in nodes), default=0)
    if spec.gpus > capacity:
        raise InvalidRequest(
            "gpus",
            f"requests {spec.gpus} GPUs but the largest node has {capacity}; "
            "this job could never be placed",
        )
    if spec.tasks > 1:
        slots = sum(len(n.gpus) // spec.gpus if spec.gpus else 1 for n in nodes)
        if spec.tasks > slots:
            raise InvalidRequest(
                "tasks",
                f"a gang of {spec.tasks} tasks x {spec.gpus} GPUs needs more room than the "
                f"whole cluster has ({slots} such tasks); it could never be placed",
            )


def _outcome(check: object, state: ClusterState, spec: JobSpec) -> tuple[str, str] | None:
    try:
        check(state, spec)  # type: ignore[operator]
    except InvalidRequest as exc:
        return (exc.field, str(exc))
    return None


def _kept(state: ClusterState, spec: JobSpec) -> None:
    state._check_spec(spec)


@st.composite
def _mixed_nodes(draw: st.DrawFn, name: str) -> Node:
    """A node of any shape, its GPUs of a drawn vendor, model and memory size."""
    node = draw(described_nodes(name, max_gpus=6))
    vendor = draw(st.sampled_from(list(Vendor)))
    model = draw(st.sampled_from(MODELS))
    memory = draw(st.sampled_from([16 * GIB, 40 * GIB, 80 * GIB, 192 * GIB]))
    gpus = tuple(replace(g, vendor=vendor, model=model, memory_bytes=memory) for g in node.gpus)
    return replace(node, gpus=gpus)


@st.composite
def _specs(draw: st.DrawFn) -> JobSpec:
    try:
        return JobSpec(
            command=("x",),
            gpus=draw(st.integers(0, 8)),
            tasks=draw(st.integers(1, 12)),
            vendor=draw(st.none() | st.sampled_from([v.value for v in Vendor])),
            gpu_memory_bytes=draw(st.none() | st.sampled_from([8 * GIB, 64 * GIB, 100 * GIB])),
            gpu_models=tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True))),
            mig_profile=draw(st.none() | st.sampled_from(["1g.10gb", "3g.40gb", "9g.9gb"])),
        )
    except (DomainError, ValueError):
        assume(False)
        raise


def _write(state: ClusterState, data: st.DataObject) -> None:
    """One node write or other command (refused ones leave the state as it was)."""
    name = data.draw(st.sampled_from(NODES))
    command: Command = data.draw(
        st.one_of(
            _mixed_nodes(name).map(lambda n: RegisterNode(n, 0.0)),
            st.just(RemoveNode(name, "retired", 0.0)),
            cluster_commands(NODES),
        )
    )
    with contextlib.suppress(DomainError):
        state.apply(command)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_submits_are_refused_exactly_as_the_walk_over_every_gpu_refused_them(
    data: st.DataObject,
) -> None:
    first = [data.draw(_mixed_nodes(n)) for n in NODES[: data.draw(st.integers(0, 3))]]
    state = ClusterState(Inventory(tuple(first), source="test", simulated=True))
    for _ in range(data.draw(st.integers(1, 8))):
        if data.draw(st.booleans()):
            _write(state, data)
        spec = data.draw(_specs())
        assert _outcome(_kept, state, spec) == _outcome(_walk, state, spec)
        assert state.hardware_facts() == HardwareFacts.of(state.nodes)  # kept = built afresh
    state.check_invariants()


@given(sizes=st.lists(st.integers(0, 9), max_size=6), per_task=st.integers(0, 9))
def test_slots_count_what_each_node_could_hold(sizes: list[int], per_task: int) -> None:
    facts = HardwareFacts(frozenset(), (), max(sizes, default=0), _sizes(sizes))
    brute = sum(size // per_task if per_task else 1 for size in sizes)
    assert facts.slots(per_task) == brute


def _sizes(sizes: list[int]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((s, sizes.count(s)) for s in set(sizes)))


def test_a_submit_checked_after_a_node_write_sees_that_node() -> None:
    state = ClusterState(Inventory((build_node("n0", 1),), source="test", simulated=True))
    two = JobSpec(command=("x",), gpus=2)
    assert _outcome(_kept, state, two) == (
        "gpus",
        "gpus: requests 2 GPUs but the largest node has 1; this job could never be placed",
    )
    state.apply(RegisterNode(build_node("n1", 4), 0.0))
    assert _outcome(_kept, state, two) is None
    state.apply(RemoveNode("n1", "retired", 0.0))
    assert _outcome(_kept, state, two) is not None
