"""The cluster replica as a Raft state machine: the same log gives the same state and results
on every replica, whether it applied the log straight through or restored a snapshot taken at
any point; duplicated envelopes are applied once; malformed entries change nothing."""

from __future__ import annotations

import contextlib
import json
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.application.cluster_replica import Applied, ClusterReplica
from gpu_platform.domain.cluster_codec import encode_state
from gpu_platform.domain.cluster_state import (
    BindJob,
    CancelJob,
    ClusterState,
    Command,
    FinishJob,
    RegisterNode,
    ReportXid,
    RequeueJob,
    SetNodeAdmin,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import DomainError, InvalidRequest
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.placement.first_fit import Placement, PlacementRequest, first_fit
from gpu_platform.testing.cluster_commands import cluster_commands
from gpu_platform.testing.strategies import nodes

POLICY = FaultPolicy(node_suspect_after_s=5, node_down_after_s=12, ecc_corrected_alert=10)


def replica() -> ClusterReplica:
    return ClusterReplica(POLICY, threading.RLock())


@st.composite
def logs(draw: st.DrawFn, max_size: int = 40) -> list[Command]:
    """Nodes register first, then commands; half of them are what a scheduler and runner would
    send next (submit, bind to free GPUs, start, finish with the current epoch), drawn against a
    scratch state so that logs reach running, stopped and re-queued jobs; the rest are random."""
    scratch = ClusterState.empty(POLICY)
    log: list[Command] = []

    def add(cmd: Command) -> None:
        log.append(cmd)
        with contextlib.suppress(DomainError):
            scratch.apply(cmd)

    for i in range(draw(st.integers(1, 3))):
        add(RegisterNode(draw(nodes(f"n{i}", max_gpus=4)), 0.0))
    for step in range(draw(st.integers(0, max_size))):
        now = float(step + 1)
        live = [j for j in scratch.jobs() if j.holds_gpus and j.allocation is not None]
        queued = scratch.queued(now)
        kind = draw(st.sampled_from(["random", "submit", "bind", "start", "finish", "stop"]))
        if kind == "submit":
            gpus = draw(st.integers(0, 2))
            add(SubmitJob(f"j{len(scratch.jobs())}", JobSpec(("x",), gpus=gpus), now))
        elif kind == "bind" and queued:
            job = queued[0]
            placed = first_fit(PlacementRequest(job.spec.gpus), scratch.node_views())
            if isinstance(placed, Placement):
                indices = tuple(g.index for g in placed.gpus)
                add(BindJob(job.id, placed.node, indices, now))
        elif kind == "stop" and live:
            job = draw(st.sampled_from(live))
            assert job.allocation is not None
            epoch, node = job.allocation.epoch, job.allocation.node
            add(
                draw(
                    st.sampled_from(
                        [
                            CancelJob(job.id, now),
                            RequeueJob(job.id, epoch, now, "preempted"),
                            ReportXid(node, (job.allocation.gpu_indices or (0,))[0], 79, now),
                            SetNodeAdmin(node, "offline", "maintenance", now, force=True),
                        ]
                    )
                )
            )
        elif kind in ("start", "finish") and live:
            job = draw(st.sampled_from(live))
            assert job.allocation is not None
            if kind == "start":
                add(StartJob(job.id, job.allocation.epoch, now))
            else:
                code = draw(st.sampled_from([0, 1, None]))
                add(FinishJob(job.id, job.allocation.epoch, code, now))
        else:
            add(draw(cluster_commands(job_ids=("j0", "j1", "j2", "j3"))))
    return log


def entries(replica: ClusterReplica, commands: list[Command]) -> list[bytes]:
    return [replica.encode(c, f"c{i}") for i, c in enumerate(commands)]


def outcome(applied: Applied) -> tuple[object, ...]:
    """An Applied as comparable values (exceptions compare by identity)."""
    error = applied.error
    return applied.events, type(error), str(error), applied.duplicate


def feed(replica: ClusterReplica, log: list[bytes], first: int = 1) -> list[Applied]:
    results = []
    for i, data in enumerate(log, start=first):
        results.append(replica.apply(i, data))
        replica.state.check_invariants()
    return results


@settings(max_examples=40, deadline=None)
@given(logs(), st.data())
def test_a_snapshot_taken_anywhere_then_the_rest_of_the_log_gives_the_same_state_and_events(
    commands: list[Command], data: st.DataObject
) -> None:
    straight = replica()
    log = entries(straight, commands)
    expected = feed(straight, log)

    cut = data.draw(st.integers(0, len(log)), label="cut")
    before = replica()
    feed(before, log[:cut])
    after = replica()
    after.restore(before.snapshot())
    assert after.applied_index == cut
    rest = feed(after, log[cut:], first=cut + 1)

    assert [outcome(r) for r in rest] == [outcome(r) for r in expected[cut:]]
    assert encode_state(after.state) == encode_state(straight.state)
    assert after.snapshot() == straight.snapshot()


@settings(max_examples=40, deadline=None)
@given(logs(max_size=25), st.data())
def test_a_duplicated_envelope_is_applied_once_and_answers_with_its_first_result(
    commands: list[Command], data: st.DataObject
) -> None:
    once = replica()
    log = entries(once, commands)
    first = feed(once, log)

    twice = replica()
    results: list[tuple[int, Applied]] = []
    index = 0
    cut = data.draw(st.integers(0, len(log)), label="restore at")
    for i, entry in enumerate(log):
        if i == cut:  # dedupe must survive a snapshot and restore
            restored = replica()
            restored.restore(twice.snapshot())
            twice = restored
        for _ in range(data.draw(st.integers(1, 3), label="copies")):
            index += 1
            results.append((i, twice.apply(index, entry)))
    assert encode_state(twice.state) == encode_state(once.state)
    for i, applied in results:
        if applied.duplicate:
            # the first result, or (restored from a snapshot, which keeps no results) nothing
            assert outcome(applied)[:3] in (outcome(first[i])[:3], ((), type(None), "None"))
        else:
            assert outcome(applied) == outcome(first[i])


@settings(max_examples=40, deadline=None)
@given(logs(), st.lists(st.binary(max_size=20), max_size=5), st.data())
def test_two_replicas_fed_the_same_log_with_garbage_end_with_identical_snapshots(
    commands: list[Command], garbage: list[bytes], data: st.DataObject
) -> None:
    a, b = replica(), replica()
    log = entries(a, commands)
    for junk in garbage:
        log.insert(data.draw(st.integers(0, len(log)), label="at"), junk)
    results_a, results_b = feed(a, log), feed(b, log)
    assert a.snapshot() == b.snapshot()
    assert [outcome(r) for r in results_a] == [outcome(r) for r in results_b]
    for r in results_a:
        if r.error is not None and getattr(r.error, "field", None) == "entry":
            assert isinstance(r.error, InvalidRequest)
            assert r.events == ()


@settings(max_examples=10, deadline=None)
@given(logs(max_size=15))
def test_a_snapshot_streamed_job_by_job_is_the_same_bytes_as_one_canonical_dump(
    commands: list[Command],
) -> None:
    r = replica()
    feed(r, entries(r, commands))
    streamed = r.snapshot()
    whole = {
        "v": 1,
        "applied_index": r.applied_index,
        "state": encode_state(r.state),
        "seen": json.loads(streamed)["seen"],
    }
    dumped = json.dumps(whole, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    assert streamed == dumped


@settings(max_examples=30, deadline=None)
@given(logs(), st.lists(st.integers(0, 60), max_size=4), st.data())
def test_snapshots_taken_as_the_log_is_applied_reuse_only_what_did_not_change(
    commands: list[Command], at: list[int], data: st.DataObject
) -> None:
    """The bytes kept between snapshots never go stale: each snapshot, taken at random points
    (some abandoned half-way), equals a fresh replica's that restored the same state."""
    r = replica()
    log = entries(r, commands)
    stops = sorted({min(i, len(log)) for i in at})
    done = 0
    for stop in [*stops, len(log)]:
        feed(r, log[done:stop], first=done + 1)
        done = stop
        if data.draw(st.booleans(), label="abandon one half-way"):
            chunks = r.snapshot_chunks()
            next(chunks)
            chunks.close()
        taken = r.snapshot()
        fresh = replica()
        fresh.restore(taken)
        assert fresh.snapshot() == taken
        whole = {
            "v": 1,
            "applied_index": r.applied_index,
            "state": encode_state(r.state),
            "seen": json.loads(taken)["seen"],
        }
        assert taken == json.dumps(whole, sort_keys=True, separators=(",", ":")).encode()
