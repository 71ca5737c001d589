"""Histories with unknown outcomes, 404 reads, copies and running jobs, as `make chaos`
records them, through the real checker and `JobStoreModel`."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.job import JobState
from gpu_platform.testing.chaos_history import HistoryRecorder, operations_to_json, save_history
from gpu_platform.testing.linearizability import Operation, Verdict, check
from gpu_platform.testing.linearizability_models import (
    RUNS_ON_ITS_OWN,
    JobInput,
    JobOp,
    JobOutput,
    JobStoreModel,
)

Q, R, C = JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED


def op(kind: JobOp, out: JobOutput | None, call: float, ret: float | None, runs: bool = False):
    return Operation(JobInput(kind, "k", runs=runs), out, call, ret)


def read(state: JobState | None, call: float, copies: int | None = None, runs: bool = False):
    return op(JobOp.GET, JobOutput(True, state, copies), call, call + 1, runs)


def verdict(history: list[Operation[JobInput, JobOutput]]) -> Verdict:
    return check(JobStoreModel(), history, timeout_s=10).verdict


def test_an_acknowledged_job_that_a_later_read_finds_absent_is_reported_lost() -> None:
    history = [op(JobOp.SUBMIT, JobOutput(True), 0, 1), read(None, 5)]
    assert verdict(history) is Verdict.NOT_LINEARIZABLE


def test_a_final_listing_with_two_jobs_for_one_submission_is_reported_duplicated() -> None:
    history = [op(JobOp.SUBMIT, JobOutput(True), 0, 1), read(Q, 5, copies=2)]
    assert verdict(history) is Verdict.NOT_LINEARIZABLE
    assert verdict([op(JobOp.SUBMIT, JobOutput(True), 0, 1), read(Q, 5, copies=1)]) is (
        Verdict.LINEARIZABLE
    )


def test_an_indeterminate_submit_that_happened_is_accepted() -> None:
    history = [op(JobOp.SUBMIT, None, 0, None), read(Q, 5, copies=1)]
    assert verdict(history) is Verdict.LINEARIZABLE


def test_an_indeterminate_submit_that_did_not_happen_is_accepted() -> None:
    history = [op(JobOp.SUBMIT, None, 0, None), read(None, 5, copies=0)]
    assert verdict(history) is Verdict.LINEARIZABLE


def test_a_retry_after_an_unknown_outcome_creates_the_job_at_most_once() -> None:
    history = [
        op(JobOp.SUBMIT, None, 0, None),
        op(JobOp.RETRY, JobOutput(True), 2, 3),
        read(Q, 5, copies=1),
    ]
    assert verdict(history) is Verdict.LINEARIZABLE
    assert verdict([*history[:2], read(None, 5)]) is Verdict.NOT_LINEARIZABLE


def test_a_running_job_may_be_requeued_and_finish_but_never_runs_again() -> None:
    submit = op(JobOp.SUBMIT, JobOutput(True), 0, 1, runs=True)
    reads = [read(s, 2 + 2 * i, runs=True) for i, s in enumerate([R, Q, R, C])]
    assert verdict([submit, *reads]) is Verdict.LINEARIZABLE
    assert verdict([submit, *reads, read(R, 20, runs=True)]) is Verdict.NOT_LINEARIZABLE
    assert verdict([submit, *reads, read(None, 20, runs=True)]) is Verdict.NOT_LINEARIZABLE


def test_a_job_that_does_not_run_by_itself_must_not_be_seen_running() -> None:
    assert verdict([op(JobOp.SUBMIT, JobOutput(True), 0, 1), read(R, 2)]) is (
        Verdict.NOT_LINEARIZABLE
    )


def test_the_recorder_keeps_info_as_pending_and_leaves_failed_operations_out(tmp_path) -> None:
    rec: HistoryRecorder[JobInput, JobOutput] = HistoryRecorder()
    rec.ok(rec.invoke(0, JobInput(JobOp.SUBMIT, "a")), JobOutput(True))
    rec.info(rec.invoke(1, JobInput(JobOp.SUBMIT, "b")))
    rec.fail(rec.invoke(2, JobInput(JobOp.SUBMIT, "c")))
    rec.invoke(3, JobInput(JobOp.GET, "a"))  # never completed
    history = rec.history()
    assert [(o.input.job_id, o.pending) for o in history] == [
        ("a", False),
        ("b", True),
        ("a", True),
    ]
    assert rec.counts() == {"invoke": 1, "ok": 1, "info": 1, "fail": 1}
    result = check(JobStoreModel(), history)
    save_history(tmp_path / "h.json", model="JobStoreModel", records=rec.to_json(), result=result)
    saved = json.loads((tmp_path / "h.json").read_text())
    assert saved["verdict"] == "linearizable"
    assert [r["type"] for r in saved["operations"]] == ["ok", "info", "fail", "invoke"]
    assert saved["operations"][0]["input"] == {
        "op": "submit",
        "job_id": "a",
        "outcome": None,
        "runs": False,
    }
    assert [r["type"] for r in operations_to_json(history)] == ["ok", "info", "info"]


@st.composite
def job_lives(draw: st.DrawFn) -> tuple[list[Operation[JobInput, JobOutput]], bool]:
    """A running job's history as the server could produce it: a submit that was acknowledged
    or whose outcome is unknown (and then happened or not), reads of a walk through
    `RUNS_ON_ITS_OWN`, a final count. Also whether the job exists."""
    happened = draw(st.booleans())
    acked = happened and draw(st.booleans())
    t = 0.0
    history = [
        op(JobOp.SUBMIT, JobOutput(True) if acked else None, t, 1.0 if acked else None, True)
    ]
    state: JobState | None = Q if happened else None
    for _ in range(draw(st.integers(0, 6))):
        t += 2
        if state is not None:
            state = draw(st.sampled_from(sorted(RUNS_ON_ITS_OWN[state])))
        history.append(read(state, t, runs=True))
    history.append(read(state, t + 2, copies=int(state is not None), runs=True))
    return history, acked


@settings(max_examples=60, deadline=None)
@given(job_lives())
def test_every_life_of_a_running_job_is_accepted_and_losing_an_acknowledged_one_is_not(
    life: tuple[list[Operation[JobInput, JobOutput]], bool],
) -> None:
    history, acked = life
    assert verdict(history) is Verdict.LINEARIZABLE
    if acked:
        assert verdict([*history, read(None, 100, runs=True)]) is Verdict.NOT_LINEARIZABLE
