"""Job batches (`domain.job_batches`): applying a batch is applying its items one by one —
the same state, each item's events or refusal — directly, through the replicated log's
encoding, and after a snapshot taken between any two entries; a bind that starts equals a
bind followed by its start."""

from __future__ import annotations

import contextlib
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.domain.cluster_codec import encode_state
from gpu_platform.domain.cluster_state import (
    BindJob,
    ClusterState,
    Command,
    JobBatch,
    RegisterNode,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.events import BatchItemRefused, DomainEvent, JobBound
from gpu_platform.domain.job_batches import BATCHABLE, split_outcomes
from gpu_platform.domain.model.job import JobSpec, JobState
from tests.property.test_cluster_replica import POLICY, logs


def _one_by_one(state: ClusterState, batch: JobBatch) -> list[list[DomainEvent] | str]:
    """Each item applied as its own command: its events, or its refusal's message."""
    out: list[list[DomainEvent] | str] = []
    for item in batch.items:
        try:
            out.append(state.apply(item))
        except DomainError as exc:
            out.append(f"{type(exc).__name__}: {exc}")
        state.check_invariants()
    return out


def _as_compared(outcomes: list[list[DomainEvent] | BatchItemRefused]) -> list[object]:
    return [o.error if isinstance(o, BatchItemRefused) else o for o in outcomes]


@st.composite
def batched_logs(draw: st.DrawFn) -> tuple[list[Command], list[Command]]:
    """A log (`test_cluster_replica.logs`: accepted and refused commands, running, stopped
    and re-queued jobs), and the same log with runs of job commands gathered into batches
    (binds made to start, as the leader sends them, half of the time)."""
    flat = draw(logs(max_size=20))
    items: list[Command] = []
    batched: list[Command] = []
    run: list[Command] = []

    def close() -> None:
        if run:
            batched.append(JobBatch(tuple(run)))  # type: ignore[arg-type]
            run.clear()

    for drawn in flat:
        cmd = drawn
        if isinstance(cmd, BindJob) and draw(st.booleans()):
            cmd = BindJob(cmd.job_id, cmd.node, cmd.gpu_indices, cmd.now, cmd.peers, start=True)
        if isinstance(cmd, BATCHABLE):
            run.append(cmd)
            items.append(cmd)
            if draw(st.integers(0, 3)) == 0:
                close()
        else:
            close()
            batched.append(cmd)
            items.append(cmd)
    close()
    return items, batched


def _apply_all(state: ClusterState, commands: list[Command]) -> None:
    for cmd in commands:
        with contextlib.suppress(DomainError):
            state.apply(cmd)
        state.check_invariants()


@settings(max_examples=20, deadline=None)
@given(batched_logs())
def test_a_batch_gives_the_state_and_the_events_of_its_items_applied_one_by_one(
    logs_: tuple[list[Command], list[Command]],
) -> None:
    items, batched = logs_
    apart, together = ClusterState.empty(POLICY), ClusterState.empty(POLICY)
    for cmd in batched:
        if isinstance(cmd, JobBatch) and cmd.items:  # an empty one is refused whole
            expected = _one_by_one(apart, cmd)
            events = together.apply(cmd)
            together.check_invariants()
            assert _as_compared(split_outcomes(cmd, events)) == expected
            flat = [e for o in expected if not isinstance(o, str) for e in o]
            assert [e for e in events if not isinstance(e, BatchItemRefused)] == flat
            assert encode_state(together) == encode_state(apart)
        else:
            _apply_all(apart, [cmd])
            _apply_all(together, [cmd])
    reference = ClusterState.empty(POLICY)
    _apply_all(reference, items)
    assert encode_state(together) == encode_state(reference)


@settings(max_examples=10, deadline=None)
@given(batched_logs(), st.data())
def test_a_replica_replaying_batches_from_the_log_or_a_snapshot_ends_as_one_fed_the_items(
    logs_: tuple[list[Command], list[Command]], data: st.DataObject
) -> None:
    items, batched = logs_
    plain = ClusterReplica(POLICY, threading.RLock())
    for i, cmd in enumerate(items, start=1):
        plain.apply(i, plain.encode(cmd, f"i{i}"))
    log = [plain.encode(cmd, f"b{i}") for i, cmd in enumerate(batched, start=1)]
    cut = data.draw(st.integers(0, len(log)), label="snapshot after")
    first = ClusterReplica(POLICY, threading.RLock())
    for i, entry in enumerate(log[:cut], start=1):
        first.apply(i, entry)
    replay = ClusterReplica(POLICY, threading.RLock())
    replay.restore(first.snapshot())
    for i, entry in enumerate(log[cut:], start=cut + 1):
        replay.apply(i, entry)
        replay.state.check_invariants()
    assert encode_state(replay.state) == encode_state(plain.state)


def test_a_bind_that_starts_is_a_bind_then_its_start() -> None:
    def fresh() -> ClusterState:
        state = ClusterState.empty(POLICY)
        state.apply(RegisterNode(build_node("n0", 2), 0.0))
        state.apply(SubmitJob("j", JobSpec(("x",), gpus=1), 1.0))
        return state

    one, two = fresh(), fresh()
    events = one.apply(BindJob("j", "n0", (1,), 2.0, start=True))
    bound = two.apply(BindJob("j", "n0", (1,), 2.0))
    assert isinstance(bound[0], JobBound)
    started = two.apply(StartJob("j", bound[0].allocation.epoch, 2.0))
    assert events == bound + started
    assert one.job("j").state is JobState.RUNNING
    assert encode_state(one) == encode_state(two)


def test_an_empty_batch_is_refused_and_changes_nothing() -> None:
    state = ClusterState.empty(POLICY)
    before = encode_state(state)
    try:
        state.apply(JobBatch(()))
    except DomainError as exc:
        assert "items" in str(exc)
    else:  # pragma: no cover - the assertion below says why
        raise AssertionError("an empty batch was accepted")
    assert encode_state(state) == before
