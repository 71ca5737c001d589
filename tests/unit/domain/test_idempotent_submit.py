"""Submits that repeat a client token name one job: the replicated state creates it once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.cluster_state import ClusterState, SubmitJob
from gpu_platform.domain.errors import Conflict
from gpu_platform.domain.model.job import JobSpec, token_job_id
from gpu_platform.domain.model.node import Inventory


def fresh() -> ClusterState:
    return ClusterState(Inventory((default_node(),), source="sim", simulated=True))


def submit(state: ClusterState, spec: JobSpec, n: int) -> str:
    token = spec.client_token
    job_id = f"j-plain-{n}" if token is None else token_job_id(spec.tenant, token)
    state.apply(SubmitJob(job_id, spec, float(n)))
    return job_id


def test_a_repeated_token_creates_no_second_job_and_no_event() -> None:
    state = fresh()
    spec = JobSpec(("true",), gpus=1, client_token="t-1")
    job_id = submit(state, spec, 1)
    assert state.apply(SubmitJob(job_id, spec, 2.0)) == []
    assert [j.id for j in state.jobs()] == [job_id]


def test_a_token_reused_for_a_different_request_is_a_conflict() -> None:
    state = fresh()
    submit(state, JobSpec(("true",), gpus=1, client_token="t-1"), 1)
    with pytest.raises(Conflict, match="different request"):
        submit(state, JobSpec(("true",), gpus=2, client_token="t-1"), 2)


def test_tenants_do_not_share_tokens() -> None:
    assert token_job_id("team-a", "t-1") != token_job_id("team-b", "t-1")


def test_a_malformed_token_is_refused() -> None:
    with pytest.raises(ValueError, match="client_token"):
        JobSpec(("true",), client_token="two words")


SUBMITS = st.lists(
    st.tuples(st.sampled_from(["default", "team-a"]), st.none() | st.sampled_from("abcd")),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(submits=SUBMITS)
def test_jobs_are_one_per_distinct_tenant_and_token_plus_one_per_untokened_submit(
    submits: list[tuple[str, str | None]],
) -> None:
    state = fresh()
    for n, (tenant, token) in enumerate(submits):
        submit(state, JobSpec(("true",), gpus=1, tenant=tenant, client_token=token), n)
    tokened = {(t, k) for t, k in submits if k is not None}
    plain = sum(1 for _, k in submits if k is None)
    assert len(state.jobs()) == len(tokened) + plain
