"""A scheduling cycle's entries for a deep queue are kept from the last cycle (issue 21): the
kept entries are always the ones a cycle would make afresh, whatever happened in between
(submits, cancels, binds, preemptions, nominations made and dropped)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.job import JobState
from gpu_platform.domain.scheduling.dependencies import unmet_dependencies
from tests.unit.application.test_control_plane_scheduling import Rig

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from([1, 2, 8]), st.integers(0, 3)),
        st.tuples(st.just("cancel"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("nominate"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("forget"), st.integers(0, 50), st.just(0)),
        st.tuples(st.just("cycle"), st.just(0), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_the_entries_kept_from_the_last_cycle_are_the_ones_made_afresh(
    ops: list[tuple[str, int, int]],
) -> None:
    rig = Rig(nodes=2)
    plane, shared = rig.plane, rig.plane._s
    sched = plane._scheduling
    ids: list[str] = []
    for op, a, b in ops:
        queued = [j for j in plane.list_jobs() if j.state is JobState.QUEUED]
        if op == "submit":
            ids.append(rig.submit(a, priority=b, preemptible=True))
        elif op == "cancel" and queued:
            plane.cancel(queued[a % len(queued)].id)
        elif op == "nominate" and queued:
            shared.nominated.add(queued[a % len(queued)].id)
        elif op == "forget" and shared.nominated:
            shared.nominated.discard(sorted(shared.nominated)[a % len(shared.nominated)])
        elif op == "cycle":
            rig.cycle()
        with shared.lock:
            queued = shared.state.queued(shared.now())
            kept = sched._pending_jobs(queued)
            fresh = [
                sched._pending_job(j)
                for j in queued
                if not (j.spec.depends_on and unmet_dependencies(j.spec, sched._state_of))
            ]
        assert kept == fresh


def test_a_job_nominated_after_a_cycle_reads_nominated_in_the_next() -> None:
    rig = Rig(nodes=1)
    rig.submit(8)
    rig.cycle()  # the node is full
    waiting = rig.submit(8)
    rig.cycle()  # its entry is kept
    rig.plane._s.nominated.add(waiting)
    with rig.plane._s.lock:
        state = rig.plane._s.state
        (entry,) = rig.plane._scheduling._pending_jobs(state.queued(rig.plane._s.now()))
    assert entry.id == waiting and entry.nominated
