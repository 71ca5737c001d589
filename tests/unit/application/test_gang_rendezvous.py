"""A gang's MASTER_ADDR:MASTER_PORT is named by the leader, the same for every task, and two
attempts live on one node at once never get the same port."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.control.rendezvous import (
    DEFAULT_GANG_PORT_BASE,
    GANG_PORT_SPAN,
    master_endpoint,
)
from gpu_platform.domain.model.job import TaskSlot
from gpu_platform.domain.model.node import Node

BASE = DEFAULT_GANG_PORT_BASE


def addressed(address: str | None) -> Node:
    node = default_node("node-a")
    labels = dict(node.labels)
    if address is not None:
        labels["address"] = address
    return replace(node, labels=tuple(sorted(labels.items())))


def slots(*first_gpus: int) -> tuple[TaskSlot, ...]:
    return tuple(TaskSlot("node-a", (g,), (f"GPU-{g}",)) for g in first_gpus)


def test_a_node_without_an_address_leaves_the_port_to_its_runner() -> None:
    assert master_endpoint("j-1", addressed(None), slots(0), BASE) == ("127.0.0.1", 0)


def test_a_routable_node_s_port_is_the_base_plus_rank_zero_s_first_gpu() -> None:
    assert master_endpoint("j-1", addressed("10.0.0.7"), slots(3, 0), BASE) == (
        "10.0.0.7",
        BASE + 3,
    )
    assert master_endpoint("j-2", addressed("10.0.0.7"), slots(3), 40000) == ("10.0.0.7", 40003)


@given(st.sets(st.integers(0, 63), min_size=2, max_size=8), st.sampled_from(["10.1.2.3", "gpu7"]))
def test_live_gangs_with_rank_zero_on_one_node_never_share_a_port(
    first_gpus: set[int], address: str
) -> None:
    node = addressed(address)
    ports = [master_endpoint(f"j-{g}", node, slots(g), BASE)[1] for g in first_gpus]
    assert len(set(ports)) == len(ports)


def test_loopback_and_gpu_less_gangs_hash_into_the_upper_half_of_the_range() -> None:
    for address, tasks in (("127.0.0.1", slots(0)), ("10.0.0.7", ())):
        _, port = master_endpoint(
            "j-9", addressed(address), tasks or (TaskSlot("a", (), ()),), BASE
        )
        assert BASE + GANG_PORT_SPAN // 2 <= port < BASE + GANG_PORT_SPAN
    # the same job on the same node gets the same port on any leader (no state is kept)
    assert master_endpoint("j-9", addressed("127.0.0.1"), slots(1), BASE) == master_endpoint(
        "j-9", addressed("127.0.0.1"), slots(1), BASE
    )
