"""The JobStore contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.domain.faults.job_fsm import JobInput, transition
from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState
from gpu_platform.domain.model.job_array import ArraySpec, ArrayTask
from gpu_platform.ports.outbound.job_store import JobStore

__all__ = ["JobStoreContract"]


def _job(i: int, state: JobState = JobState.QUEUED) -> Job:
    spec = JobSpec(command=("python3", "-c", f"print({i})"), gpus=i % 3, env=(("K", str(i)),))
    return Job(f"j-{i:04d}", spec, state, 1000.0 + i, seq=i)


class JobStoreContract:
    """Subclass and provide `make_store`: a factory; calling it again must reopen the same data."""

    @pytest.fixture
    def make_store(self) -> Callable[[], JobStore]:
        raise NotImplementedError

    def test_a_saved_job_is_read_back_equal(self, make_store: Callable[[], JobStore]) -> None:
        store = make_store()
        job = _job(1)
        store.save([job])
        assert store.get(job.id) == job
        assert store.load() == [job]

    def test_restart_policy_and_backoff_survive_a_reopen(
        self, make_store: Callable[[], JobStore]
    ) -> None:
        spec = JobSpec(("true",), gpus=1, max_attempts=5, retry_backoff_s=2.5)
        job = Job("j-rp", spec, JobState.QUEUED, 1.0, seq=1, not_before=9.5)
        make_store().save([job])
        assert make_store().get("j-rp") == job

    def test_the_tasks_of_a_job_array_and_a_bound_one_survive_a_reopen(
        self, make_store: Callable[[], JobStore]
    ) -> None:
        spec, array = JobSpec(("true",), gpus=1), ArraySpec((0, 4, 8, 9), throttle=2)
        history = ((1.0, JobState.QUEUED, "admitted"),)
        tasks = [
            Job(
                f"j-a_{i}",
                spec,
                JobState.QUEUED,
                1.0,
                seq=k,
                reason="admitted",
                history=history,
                array=ArrayTask("j-a", i, array),
            )
            for k, i in enumerate(array.indices, start=1)
        ]
        alloc = Allocation("node-0", (1,), ("GPU-1",), epoch=3)
        tasks[2], _ = transition(tasks[2], JobInput.BIND, 2.0, reason="bound", allocation=alloc)
        make_store().save(tasks)
        assert make_store().load() == tasks
        assert make_store().get("j-a_9") == tasks[3]

    def test_an_unknown_id_reads_as_none(self, make_store: Callable[[], JobStore]) -> None:
        assert make_store().get("j-missing") is None

    def test_saving_again_replaces_the_record(self, make_store: Callable[[], JobStore]) -> None:
        store = make_store()
        job = _job(2)
        alloc = Allocation("n0", (0, 1), ("GPU-a", "GPU-b"), epoch=7, numa_nodes=(0,))
        bound, _ = transition(job, JobInput.BIND, 2000.0, reason="bound", allocation=alloc)
        store.save([job])
        store.save([bound])
        assert store.get(job.id) == bound
        assert len(store.load()) == 1

    def test_load_returns_jobs_in_submission_order(
        self, make_store: Callable[[], JobStore]
    ) -> None:
        store = make_store()
        jobs = [_job(i) for i in (5, 1, 3)]
        store.save(jobs)
        assert [j.seq for j in store.load()] == [1, 3, 5]

    def test_records_survive_reopening(self, make_store: Callable[[], JobStore]) -> None:
        store = make_store()
        jobs = [_job(i) for i in range(1, 4)]
        store.save(jobs)
        store.close()
        assert make_store().load() == jobs

    # The factory is reused across examples on purpose: the expectation starts from load().
    # Subclasses share this method, hence differing executors.
    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        st.lists(
            st.tuples(st.integers(0, 9), st.sampled_from(list(JobState)), st.text(max_size=20)),
            max_size=12,
        )
    )
    def test_the_store_holds_the_last_snapshot_of_every_job(
        self, make_store: Callable[[], JobStore], writes: list[tuple[int, JobState, str]]
    ) -> None:
        store = make_store()
        expected = {j.id: j for j in store.load()}
        for i, state, reason in writes:
            job = replace(_job(i, state), reason=reason)
            store.save([job])
            expected[job.id] = job
        assert store.load() == sorted(expected.values(), key=lambda j: j.seq)
        store.close()
