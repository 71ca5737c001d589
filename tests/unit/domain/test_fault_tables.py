"""The GPU and node tables are complete: every state against every input is either a listed
move or a named illegal pair, and the illegal pairs raise."""

from __future__ import annotations

import itertools

import pytest

from gpu_platform.domain.errors import IllegalTransition
from gpu_platform.domain.faults.gpu_fsm import (
    GPU_ILLEGAL,
    GPU_STATES,
    GPU_TRANSITIONS,
    GpuEffect,
    GpuInput,
    gpu_transition,
)
from gpu_platform.domain.faults.node_fsm import (
    NODE_ILLEGAL,
    NODE_TRANSITIONS,
    NodeEffect,
    NodeInput,
    node_transition,
)
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.node import NodeState

HARDWARE = (GpuInput.DEGRADE, GpuInput.NEED_RESET, GpuInput.LOST)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(GPU_STATES, GpuInput)))
def test_every_gpu_state_and_input_is_a_listed_move_or_a_named_illegal_pair(
    state: GpuState, event: GpuInput
) -> None:
    listed = (state, event) in GPU_TRANSITIONS
    assert listed != ((state, event) in GPU_ILLEGAL), "each pair is exactly one of the two"
    if listed:
        assert gpu_transition(state, event) == GPU_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalTransition):
            gpu_transition(state, event)


def test_derived_gpu_states_are_not_in_the_table() -> None:
    for state, _ in GPU_TRANSITIONS:
        assert state not in (GpuState.ALLOCATED, GpuState.IN_USE)
    for _, (new, _) in GPU_TRANSITIONS.items():
        assert new in GPU_STATES


def test_hardware_faults_are_legal_in_every_gpu_state() -> None:
    for state, event in itertools.product(GPU_STATES, HARDWARE):
        assert (state, event) in GPU_TRANSITIONS


def test_no_hardware_fault_ever_leaves_a_gpu_placeable() -> None:
    for state, event in itertools.product(GPU_STATES, HARDWARE):
        assert gpu_transition(state, event)[0] is not GpuState.AVAILABLE


def test_a_fault_that_takes_a_gpu_out_of_service_stops_its_jobs() -> None:
    for (state, event), (_new, effects) in GPU_TRANSITIONS.items():
        if event in HARDWARE and state in (GpuState.AVAILABLE, GpuState.DRAINING):
            assert GpuEffect.STOP_JOBS in effects, (state, event)


def test_only_a_reset_or_an_operator_returns_a_gpu_to_service() -> None:
    for (state, event), (new, _) in GPU_TRANSITIONS.items():
        if new is GpuState.AVAILABLE and state is not GpuState.AVAILABLE:
            assert event in (GpuInput.ONLINE, GpuInput.RESET_OK)


def test_draining_stops_nothing_and_forced_offline_always_stops_jobs() -> None:
    for state in GPU_STATES:
        if (state, GpuInput.DRAIN) in GPU_TRANSITIONS:
            assert GPU_TRANSITIONS[(state, GpuInput.DRAIN)][1] is GpuEffect.NONE
        assert GPU_TRANSITIONS[(state, GpuInput.OFFLINE_FORCE)] == (
            GpuState.OFFLINE,
            GpuEffect.STOP_JOBS,
        )


def test_a_reset_is_requested_only_when_entering_resetting() -> None:
    for (state, _), (new, effects) in GPU_TRANSITIONS.items():
        if GpuEffect.RESET in effects:
            assert new is GpuState.RESETTING and state is not GpuState.RESETTING


@pytest.mark.parametrize(("state", "event"), list(itertools.product(NodeState, NodeInput)))
def test_every_node_state_and_input_is_a_listed_move_or_a_named_illegal_pair(
    state: NodeState, event: NodeInput
) -> None:
    listed = (state, event) in NODE_TRANSITIONS
    assert listed != ((state, event) in NODE_ILLEGAL)
    if listed:
        assert node_transition(state, event) == NODE_TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalTransition):
            node_transition(state, event)


def test_a_node_goes_down_on_timeout_from_every_state_and_its_jobs_stop() -> None:
    for state in NodeState:
        assert NODE_TRANSITIONS[(state, NodeInput.TIMEOUT)] == (
            NodeState.DOWN,
            NodeEffect.STOP_JOBS,
        )


def test_a_down_node_comes_back_only_by_an_operator() -> None:
    for event in NodeInput:
        if (NodeState.DOWN, event) in NODE_TRANSITIONS:
            new, _ = NODE_TRANSITIONS[(NodeState.DOWN, event)]
            assert new is NodeState.DOWN or event is NodeInput.ONLINE


def test_a_missed_heartbeat_makes_a_ready_node_suspect_and_a_heartbeat_clears_it() -> None:
    assert node_transition(NodeState.READY, NodeInput.MISSED) == (
        NodeState.SUSPECT,
        NodeEffect.NONE,
    )
    assert node_transition(NodeState.SUSPECT, NodeInput.HEARTBEAT)[0] is NodeState.READY
