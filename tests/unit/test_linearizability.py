"""The WGL linearizability checker: classic hand-made histories, the three models, and agreement
with a brute-force oracle (every real-time-respecting order) on small random histories."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.job import JobState
from gpu_platform.testing.linearizability import (
    CheckResult,
    Operation,
    Verdict,
    check,
    is_valid_linearization,
    single_partition,
)
from gpu_platform.testing.linearizability_data import parse_jepsen_etcd, parse_porcupine_kv
from gpu_platform.testing.linearizability_models import (
    JOB_TRANSITIONS,
    JobInput,
    JobOp,
    JobOutput,
    JobStoreModel,
    KvInput,
    KvModel,
    KvOp,
    KvOutput,
    RegisterInput,
    RegisterModel,
    RegisterOp,
    RegisterOutput,
)
from gpu_platform.testing.linearizability_report import explain

LIN, NOT, UNKNOWN = Verdict.LINEARIZABLE, Verdict.NOT_LINEARIZABLE, Verdict.UNKNOWN
R = RegisterModel()


def op(inp: Any, out: Any, call: float, ret: float | None, client: int = 0) -> Operation[Any, Any]:
    return Operation(inp, out, call, ret, client)


def read(value: int | None, call: float, ret: float | None) -> Operation[Any, Any]:
    return op(RegisterInput.read(), RegisterOutput(value=value), call, ret)


def write(value: int, call: float, ret: float | None) -> Operation[Any, Any]:
    out = None if ret is None else RegisterOutput()
    return op(RegisterInput.write(value), out, call, ret)


def cas(expected: int, new: int, ok: bool | None, call: float, ret: float | None) -> Any:
    out = None if ok is None else RegisterOutput(ok=ok)
    return op(RegisterInput.cas(expected, new), out, call, ret)


def verdict_with_valid_witness(model: Any, history: Sequence[Operation[Any, Any]]) -> Verdict:
    """check(), asserting that a LINEARIZABLE verdict comes with a witness that replays."""
    result = check(model, history)
    if result.verdict is LIN:
        assert result.linearization is not None
        assert is_valid_linearization(model, history, result.linearization)
    else:
        assert result.linearization is None
    return result.verdict


# ------------------------------------------------------------------ classic register histories
def test_an_empty_history_is_linearizable() -> None:
    result = check(R, [])
    assert result.verdict is LIN
    assert result.linearization == ()


def test_a_sequential_history_is_linearizable_in_its_own_order() -> None:
    history = [write(1, 0, 1), read(1, 2, 3), write(2, 4, 5), read(2, 6, 7)]
    result = check(R, history)
    assert result.verdict is LIN
    assert result.linearization == (0, 1, 2, 3)


def test_a_read_of_an_unset_register_sees_nothing() -> None:
    assert verdict_with_valid_witness(R, [read(None, 0, 1)]) is LIN
    assert verdict_with_valid_witness(R, [read(0, 0, 1)]) is NOT


def test_a_stale_read_after_a_completed_write_is_not_linearizable() -> None:
    history = [write(1, 0, 1), write(2, 2, 3), read(1, 4, 5)]
    assert verdict_with_valid_witness(R, history) is NOT


def test_concurrent_operations_that_can_be_ordered_are_linearizable() -> None:
    # 6.824 quiz example: a write overlapping two reads, one sees it and one does not
    history = [write(100, 0, 100), read(100, 25, 75), read(None, 30, 60)]
    assert verdict_with_valid_witness(R, history) is LIN


def test_a_read_cannot_undo_a_write_an_earlier_read_already_saw() -> None:
    # 6.824 quiz example: the first read sees 200, a later read (in real time) sees nothing
    history = [write(200, 0, 100), read(200, 10, 30), read(None, 40, 90)]
    assert verdict_with_valid_witness(R, history) is NOT


def test_operations_that_touch_in_time_count_as_concurrent() -> None:
    # the read returns at 5 and the write is called at 5: either order is allowed
    assert verdict_with_valid_witness(R, [read(None, 0, 5), write(1, 5, 9)]) is LIN
    assert verdict_with_valid_witness(R, [write(1, 5, 9), read(1, 0, 5)]) is LIN
    assert verdict_with_valid_witness(R, [write(1, 6, 9), read(1, 0, 5)]) is NOT


def test_a_successful_cas_swaps_only_the_expected_value() -> None:
    assert (
        verdict_with_valid_witness(R, [write(1, 0, 1), cas(1, 2, True, 2, 3), read(2, 4, 5)]) is LIN
    )
    assert verdict_with_valid_witness(R, [write(1, 0, 1), cas(0, 2, True, 2, 3)]) is NOT


def test_a_failed_cas_is_an_observation_that_the_value_differed() -> None:
    assert (
        verdict_with_valid_witness(R, [write(1, 0, 1), cas(0, 2, False, 2, 3), read(1, 4, 5)])
        is LIN
    )
    assert verdict_with_valid_witness(R, [write(1, 0, 1), cas(1, 2, False, 2, 3)]) is NOT


def test_a_cas_with_unknown_outcome_swaps_when_the_value_matched() -> None:
    history = [write(1, 0, 1), cas(1, 2, None, 2, 3), read(2, 4, 5)]
    assert verdict_with_valid_witness(R, history) is LIN
    history = [write(1, 0, 1), cas(1, 2, None, 2, 3), read(1, 4, 5)]
    assert verdict_with_valid_witness(R, history) is NOT


def test_a_pending_write_may_take_effect_later() -> None:
    history = [write(1, 0, None), read(None, 1, 2), read(1, 10, 11), read(1, 12, 13)]
    assert verdict_with_valid_witness(R, history) is LIN


def test_a_pending_write_may_never_take_effect() -> None:
    result = check(R, [write(1, 0, None), read(None, 1, 2), read(None, 10, 11)])
    assert result.verdict is LIN
    assert result.linearization is not None
    assert 0 not in result.linearization


def test_a_pending_write_cannot_take_effect_before_it_was_called() -> None:
    assert verdict_with_valid_witness(R, [read(1, 0, 1), write(1, 2, None)]) is NOT


def test_a_pending_write_takes_effect_at_most_once() -> None:
    history = [write(1, 0, None), read(1, 1, 2), write(2, 3, 4), read(1, 5, 6)]
    assert verdict_with_valid_witness(R, history) is NOT


def test_a_not_linearizable_partition_reports_its_longest_linearizable_prefix() -> None:
    history = [write(1, 0, 1), write(2, 2, 3), read(1, 4, 5)]
    result = check(R, history)
    failed = result.failed_partition
    assert failed is not None
    assert failed.linearization == (0, 1)
    assert failed.operations == (0, 1, 2)


def test_the_explanation_of_a_failure_shows_the_prefix_and_the_refused_operation() -> None:
    history = [write(1, 0, 1), write(2, 2, 3), read(1, 4, 5), write(3, 6, None)]
    text = explain(R, history, check(R, history))
    lines = text.splitlines()
    assert lines[0].startswith("not linearizable: a partition of 4 operations")
    assert "prefix found has 2" in lines[0]
    assert "#1 " in lines[2] and lines[2].endswith("=> state 2")
    frontier = lines[lines.index(next(x for x in lines if x.startswith("then none"))) + 1 :]
    assert [x.split()[0] for x in frontier] == ["#2"]  # the pending write is called too late
    assert frontier[0].endswith("REFUSED by the model")


def test_the_explanation_of_a_pass_is_one_line() -> None:
    history = [write(1, 0, 1), read(1, 2, 3)]
    assert (
        explain(R, history, check(R, history))
        == "linearizable: 2 operations, 1 partitions searched"
    )


def test_the_explanation_of_a_long_prefix_shows_only_its_end() -> None:
    history = [write(v, 2 * v, 2 * v + 1) for v in range(30)] + [read(7, 100, 101)]
    text = explain(R, history, check(R, history), show=3)
    assert "... 27 earlier operations" in text
    assert "#29 " in text and "#26 " not in text


def test_a_search_out_of_time_answers_unknown() -> None:
    # 16 overlapping writes and a read of a value nobody wrote: refuting it means trying
    # every subset of writes, far more than one slice of the search
    history = [write(v, 0, 100) for v in range(16)] + [read(99, 50, 60)]
    assert check(R, history, timeout_s=0).verdict is UNKNOWN
    assert check(R, [*history[:5], history[-1]]).verdict is NOT


def test_operations_must_return_after_they_are_called_and_pending_ones_have_no_output() -> None:
    with pytest.raises(ValueError, match="before its call"):
        read(1, 5, 4)
    with pytest.raises(ValueError, match="pending"):
        read(1, 5, None)


def test_a_partition_that_loses_or_repeats_an_operation_is_refused() -> None:
    class Broken(RegisterModel):
        def partition(self, history: Sequence[Any]) -> list[list[int]]:
            return [[0], [0]]

    with pytest.raises(ValueError, match="exactly once"):
        check(Broken(), [read(None, 0, 1), read(None, 0, 1)])


# ------------------------------------------------------------------ key-value map
def kv(kind: KvOp, key: str, value: str, call: float, ret: float | None) -> Any:
    if kind is KvOp.GET:
        return op(KvInput(kind, key), KvOutput(value), call, ret)
    return op(KvInput(kind, key, value), None if ret is None else KvOutput(), call, ret)


def test_kv_keys_are_checked_independently_and_the_witness_merges_them() -> None:
    history = [
        kv(KvOp.PUT, "a", "1", 0, 10),
        kv(KvOp.APPEND, "b", "x", 1, 3),
        kv(KvOp.GET, "b", "x", 4, 6),
        kv(KvOp.GET, "a", "1", 11, 12),
        kv(KvOp.APPEND, "b", "y", 7, 13),
        kv(KvOp.GET, "b", "xy", 14, 15),
    ]
    result = check(KvModel(), history)
    assert result.verdict is LIN
    assert len(result.partitions) == 2
    assert result.linearization is not None
    assert is_valid_linearization(KvModel(), history, result.linearization)


def test_kv_a_missing_key_reads_empty_and_appends_concatenate_in_order() -> None:
    ok = [
        kv(KvOp.GET, "k", "", 0, 1),
        kv(KvOp.APPEND, "k", "a", 2, 3),
        kv(KvOp.APPEND, "k", "b", 4, 5),
    ]
    assert verdict_with_valid_witness(KvModel(), [*ok, kv(KvOp.GET, "k", "ab", 6, 7)]) is LIN
    assert verdict_with_valid_witness(KvModel(), [*ok, kv(KvOp.GET, "k", "ba", 6, 7)]) is NOT


def test_kv_a_violation_on_one_key_makes_the_whole_history_not_linearizable() -> None:
    history = [
        kv(KvOp.PUT, "a", "1", 0, 1),
        kv(KvOp.GET, "a", "1", 2, 3),
        kv(KvOp.PUT, "b", "1", 0, 1),
        kv(KvOp.GET, "b", "2", 2, 3),
    ]
    result = check(KvModel(), history)
    assert result.verdict is NOT
    failed = result.failed_partition
    assert failed is not None
    assert failed.operations == (2, 3)


# ------------------------------------------------------------------ job store
def job(kind: JobOp, accepted: bool | None, call: float, ret: float | None, jid: str = "j") -> Any:
    out = None if accepted is None else JobOutput(accepted=accepted)
    outcome = JobState.COMPLETED if kind is JobOp.FINISH else None
    return op(JobInput(kind, jid, outcome), out, call, ret)


def get(state: JobState | None, call: float, ret: float, jid: str = "j") -> Any:
    return op(JobInput(JobOp.GET, jid), JobOutput(state=state), call, ret)


J = JobStoreModel()


def test_job_store_a_job_moves_through_its_lifecycle() -> None:
    history = [
        get(None, 0, 1),
        job(JobOp.SUBMIT, True, 2, 3),
        get(JobState.QUEUED, 4, 5),
        job(JobOp.START, True, 6, 7),
        get(JobState.RUNNING, 8, 9),
        job(JobOp.FINISH, True, 10, 11),
        get(JobState.COMPLETED, 12, 13),
        job(JobOp.CANCEL, False, 14, 15),
    ]
    assert verdict_with_valid_witness(J, history) is LIN


def test_job_store_a_job_id_cannot_be_submitted_twice() -> None:
    history = [job(JobOp.SUBMIT, True, 0, 2), job(JobOp.SUBMIT, True, 1, 3)]
    assert verdict_with_valid_witness(J, history) is NOT
    history = [job(JobOp.SUBMIT, True, 0, 2), job(JobOp.SUBMIT, False, 1, 3)]
    assert verdict_with_valid_witness(J, history) is LIN


def test_job_store_cancel_and_finish_cannot_both_win() -> None:
    start = [job(JobOp.SUBMIT, True, 0, 1), job(JobOp.START, True, 2, 3)]
    both = [job(JobOp.CANCEL, True, 4, 6), job(JobOp.FINISH, True, 5, 7)]
    assert verdict_with_valid_witness(J, start + both) is NOT
    one = [
        job(JobOp.CANCEL, False, 4, 6),
        job(JobOp.FINISH, True, 5, 7),
        get(JobState.COMPLETED, 8, 9),
    ]
    assert verdict_with_valid_witness(J, start + one) is LIN


def test_job_store_a_get_cannot_see_a_state_no_operation_produced() -> None:
    history = [job(JobOp.SUBMIT, True, 0, 1), get(JobState.RUNNING, 2, 3)]
    assert verdict_with_valid_witness(J, history) is NOT


def test_job_store_an_indeterminate_cancel_may_explain_a_cancelled_job() -> None:
    history = [
        job(JobOp.SUBMIT, True, 0, 1),
        job(JobOp.CANCEL, None, 2, None),
        get(JobState.CANCELLED, 5, 6),
    ]
    assert verdict_with_valid_witness(J, history) is LIN


def test_job_store_jobs_are_independent_partitions() -> None:
    history = [
        job(JobOp.SUBMIT, True, 0, 1, "a"),
        job(JobOp.SUBMIT, True, 0, 1, "b"),
        get(None, 2, 3, "c"),
    ]
    result = check(J, history)
    assert result.verdict is LIN
    assert [p.operations for p in result.partitions] == [(0,), (1,), (2,)]


JOB_STATES: list[JobState | None] = [None, *JobState]
JOB_INPUTS = [
    JobInput(JobOp.SUBMIT, "j"),
    JobInput(JobOp.START, "j"),
    JobInput(JobOp.FINISH, "j", JobState.COMPLETED),
    JobInput(JobOp.FINISH, "j", JobState.FAILED),
    JobInput(JobOp.CANCEL, "j"),
]


@pytest.mark.parametrize("state", JOB_STATES)
@pytest.mark.parametrize("inp", JOB_INPUTS)
def test_job_store_every_state_and_mutation_is_either_a_table_row_or_a_refusal(
    state: JobState | None, inp: JobInput
) -> None:
    row = JOB_TRANSITIONS.get((state, inp.op, inp.outcome))
    accepted_ok, accepted_state = J.step(state, inp, JobOutput(accepted=True))
    refused_ok, refused_state = J.step(state, inp, JobOutput(accepted=False))
    unknown_ok, unknown_state = J.step(state, inp, None)
    assert accepted_ok is (row is not None)
    assert refused_ok is (row is None)
    assert unknown_ok
    expected = row if row is not None else state
    assert accepted_state == refused_state == unknown_state == expected


@pytest.mark.parametrize("state", JOB_STATES)
def test_job_store_a_get_sees_exactly_the_state_and_changes_nothing(state: JobState | None) -> None:
    for seen in JOB_STATES:
        ok, after = J.step(state, JobInput(JobOp.GET, "j"), JobOutput(state=seen))
        assert ok is (seen == state)
        assert after == state


def test_job_store_finish_needs_a_terminal_outcome() -> None:
    with pytest.raises(ValueError, match="COMPLETED or FAILED"):
        JobInput(JobOp.FINISH, "j", JobState.RUNNING)
    with pytest.raises(ValueError, match="outcome"):
        JobInput(JobOp.FINISH, "j")
    with pytest.raises(ValueError, match="outcome"):
        JobInput(JobOp.CANCEL, "j", JobState.FAILED)


# ------------------------------------------------------------------ brute-force oracle
def brute_force_linearizable(model: Any, history: Sequence[Operation[Any, Any]]) -> bool:
    """Try every subset of pending operations and every order of the chosen operations that
    respects real time; linearizable iff the model accepts one of them. The search is global:
    one order of the whole history, each operation stepping its own object's state (so the
    checker's per-partition search and witness merge are checked, not assumed)."""
    completed = [i for i, o in enumerate(history) if o.ret is not None]
    pending = [i for i, o in enumerate(history) if o.ret is None]
    object_of = {i: n for n, part in enumerate(model.partition(history)) for i in part}

    def precedes(a: int, b: int) -> bool:
        ret = history[a].ret
        return ret is not None and ret < history[b].call

    for size in range(len(pending) + 1):
        for chosen in itertools.combinations(pending, size):
            for order in itertools.permutations(completed + list(chosen)):
                if any(
                    precedes(order[j], order[i])
                    for i in range(len(order))
                    for j in range(i + 1, len(order))
                ):
                    continue
                states: dict[int, Any] = {}
                for i in order:
                    state = states.get(object_of[i], model.init())
                    ok, states[object_of[i]] = model.step(
                        state, history[i].input, history[i].output
                    )
                    if not ok:
                        break
                else:
                    return True
    return False


def run_register(state: Any, inp: RegisterInput) -> tuple[RegisterOutput, Any]:
    if inp.op is RegisterOp.READ:
        return RegisterOutput(value=state), state
    if inp.op is RegisterOp.WRITE:
        return RegisterOutput(), inp.value
    swapped = state == inp.expected
    return RegisterOutput(ok=swapped), inp.value if swapped else state


def run_kv(state: dict[str, str], inp: KvInput) -> tuple[KvOutput, dict[str, str]]:
    value = state.get(inp.key, "")
    if inp.op is KvOp.GET:
        return KvOutput(value), state
    new = inp.value if inp.op is KvOp.PUT else value + inp.value
    return KvOutput(), {**state, inp.key: new}


def run_jobs(state: dict[str, Any], inp: JobInput) -> tuple[JobOutput, dict[str, Any]]:
    current = state.get(inp.job_id)
    if inp.op is JobOp.GET:
        return JobOutput(state=current), state
    new = JOB_TRANSITIONS.get((current, inp.op, inp.outcome))
    if new is None:
        return JobOutput(accepted=False), state
    return JobOutput(accepted=True), {**state, inp.job_id: new}


register_inputs = st.one_of(
    st.just(RegisterInput.read()),
    st.builds(RegisterInput.write, st.integers(0, 2)),
    st.builds(RegisterInput.cas, st.integers(0, 2), st.integers(0, 2)),
)
register_outputs = st.builds(RegisterOutput, st.sampled_from([None, 0, 1, 2]), st.booleans())
kv_inputs = st.builds(
    KvInput, st.sampled_from(list(KvOp)), st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])
)
kv_outputs = st.builds(KvOutput, st.sampled_from(["", "x", "y", "xy", "yx"]))
job_inputs = st.builds(
    lambda kind, jid, outcome: JobInput(kind, jid, outcome if kind is JobOp.FINISH else None),
    st.sampled_from(list(JobOp)),
    st.sampled_from(["a", "b"]),
    st.sampled_from([JobState.COMPLETED, JobState.FAILED]),
)
job_outputs = st.builds(JobOutput, st.booleans(), st.sampled_from(JOB_STATES))

MODELS: dict[str, tuple[Any, Any, Any, Callable[[Any, Any], Any], Any]] = {
    "register": (RegisterModel(), register_inputs, register_outputs, run_register, None),
    "kv": (KvModel(), kv_inputs, kv_outputs, run_kv, {}),
    "jobs": (JobStoreModel(), job_inputs, job_outputs, run_jobs, {}),
}


def small_domain(model_name: str) -> tuple[list[Any], list[Any], list[Any]]:
    """States, inputs and outputs (None included) small enough to try every combination."""
    if model_name == "register":
        inputs = [RegisterInput.read()]
        inputs += [RegisterInput.write(v) for v in range(3)]
        inputs += [RegisterInput.cas(a, b) for a in range(3) for b in range(3)]
        outputs = [RegisterOutput(v, ok) for v in (None, 0, 1, 2) for ok in (True, False)]
        return [None, 0, 1, 2], inputs, [None, *outputs]
    if model_name == "kv":
        inputs = [KvInput(kind, "k", v) for kind in KvOp for v in ("x", "y")]
        return ["", "x", "xy"], inputs, [None, *(KvOutput(v) for v in ("", "x", "xy"))]
    outputs = [JobOutput(accepted, seen) for accepted in (True, False) for seen in JOB_STATES]
    return JOB_STATES, [*JOB_INPUTS, JobInput(JobOp.GET, "j")], [None, *outputs]


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_an_operation_declared_read_only_never_changes_the_state_where_it_is_accepted(
    model_name: str,
) -> None:
    model = MODELS[model_name][0]
    states, inputs, outputs = small_domain(model_name)
    declared = 0
    for inp, out in itertools.product(inputs, outputs):
        if not model.is_read_only(inp, out):
            continue
        declared += 1
        for state in states:
            ok, after = model.step(state, inp, out)
            if ok:
                assert after == state, (inp, out, state, after)
    assert declared > 0


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_an_unknown_output_is_accepted_from_every_state(model_name: str) -> None:
    model = MODELS[model_name][0]
    states, inputs, _ = small_domain(model_name)
    for state, inp in itertools.product(states, inputs):
        assert model.step(state, inp, None)[0]


@st.composite
def histories(draw: st.DrawFn, model_name: str) -> list[Operation[Any, Any]]:
    """Up to 6 operations with random overlapping intervals. Outputs come from running the
    operations at random linearization points inside their intervals (pending ones take
    effect or not); then, often, one output is replaced by a random one."""
    _, inputs, outputs, run, init = MODELS[model_name]
    n = draw(st.integers(0, 6))
    specs = []
    for _ in range(n):
        call = draw(st.integers(0, 12))
        ret = call + draw(st.integers(0, 6))
        pending = draw(st.integers(0, 4)) == 0
        point = draw(st.integers(call, ret))
        effect = draw(st.booleans()) if pending else True
        specs.append((draw(inputs), call, ret, pending, point, effect))
    results: dict[int, Any] = {}
    state = init
    tiebreak = draw(st.permutations(range(n)))
    for k in sorted(range(n), key=lambda k: (specs[k][4], tiebreak[k])):
        if specs[k][5]:
            results[k], state = run(state, specs[k][0])
    corrupt = draw(st.integers(-1, n - 1)) if n else -1
    history = []
    for k, (inp, call, ret, pending, _, _) in enumerate(specs):
        if pending:
            history.append(Operation(inp, None, call, None, k))
            continue
        out = draw(outputs) if k == corrupt else results[k]
        history.append(Operation(inp, out, call, ret, k))
    return history


@pytest.mark.parametrize("model_name", sorted(MODELS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_wgl_search_agrees_with_the_brute_force_oracle(
    model_name: str, data: st.DataObject
) -> None:
    model = MODELS[model_name][0]
    history = data.draw(histories(model_name))
    expected = LIN if brute_force_linearizable(model, history) else NOT
    assert verdict_with_valid_witness(model, history) is expected


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_generated_histories_cover_both_verdicts(model_name: str) -> None:
    """Guards the oracle test against a generator that only ever makes one kind of history."""
    model = MODELS[model_name][0]
    seen: set[Verdict] = set()

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(histories(model_name))
    def collect(history: list[Operation[Any, Any]]) -> None:
        seen.add(check(model, history).verdict)

    collect()
    assert seen == {LIN, NOT}


def test_single_partition_covers_the_whole_history() -> None:
    assert single_partition([object(), object(), object()]) == [[0, 1, 2]]


def test_results_are_frozen_values() -> None:
    result: CheckResult = check(R, [read(None, 0, 1)])
    with pytest.raises(AttributeError):
        result.verdict = NOT  # type: ignore[misc]


# ------------------------------------------------------------------ parsers
JEPSEN_LOG = """\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:write\t4
INFO  jepsen.util - 2\t:invoke\t:cas\t[4 1]
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:info\t:write\t:timed-out
INFO  jepsen.util - 2\t:fail\t:cas\t[4 1]
INFO  jepsen.util - 3\t:invoke\t:read\tnil
INFO  jepsen.util - 3\t:fail   :read   :timed-out
INFO  jepsen.util - 4   :invoke :cas    [1 2]
"""


def test_the_jepsen_parser_reads_results_failures_and_indeterminate_operations() -> None:
    history = parse_jepsen_etcd(JEPSEN_LOG)
    assert history == [
        Operation(RegisterInput.read(), RegisterOutput(value=None), 0, 3, 0),
        Operation(RegisterInput.write(4), None, 1, None, 1),  # :info: pending forever
        Operation(RegisterInput.cas(4, 1), RegisterOutput(ok=False), 2, 5, 2),
        # the failed read (process 3) did not happen; process 4 never completed
        Operation(RegisterInput.cas(1, 2), None, 8, None, 4),
    ]


def test_the_jepsen_parser_refuses_lines_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="not a Jepsen"):
        parse_jepsen_etcd("INFO  jepsen.util - 0\t:invoke\t:delete\tnil\n")
    with pytest.raises(ValueError, match="without an invocation"):
        parse_jepsen_etcd("INFO  jepsen.util - 0\t:ok\t:read\t3\n")
    with pytest.raises(ValueError, match="does not match"):
        parse_jepsen_etcd(
            "INFO  jepsen.util - 0\t:invoke\t:write\t3\nINFO  jepsen.util - 0\t:ok\t:write\t4\n"
        )


KV_LOG = """\
{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :invoke, :f :get, :key "0", :value nil}
{:process 0, :type :ok, :f :append, :key "0", :value "x 0 0 y"}
{:process 1, :type :ok, :f :get, :key "0", :value "x 0 0 y"}
{:process 2, :type :invoke, :f :put, :key "1", :value "z"}
{:process 2, :type :fail, :f :put, :key "1", :value "z"}
{:process 3, :type :invoke, :f :put, :key "1", :value "w"}
"""


def test_the_kv_parser_pairs_completions_with_their_process() -> None:
    history = parse_porcupine_kv(KV_LOG)
    assert history == [
        Operation(KvInput(KvOp.APPEND, "0", "x 0 0 y"), KvOutput(), 0, 2, 0),
        Operation(KvInput(KvOp.GET, "0"), KvOutput("x 0 0 y"), 1, 3, 1),
        Operation(KvInput(KvOp.PUT, "1", "w"), None, 6, None, 3),
    ]
    assert check(KvModel(), history).verdict is LIN


def test_the_kv_parser_refuses_lines_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="not a Porcupine kv"):
        parse_porcupine_kv('{:process 0, :type :invoke, :f :delete, :key "0", :value nil}\n')
    with pytest.raises(ValueError, match="takes no value"):
        parse_porcupine_kv('{:process 0, :type :invoke, :f :get, :key "0", :value "v"}\n')
