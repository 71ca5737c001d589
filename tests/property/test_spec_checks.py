"""One validator for job specs, whichever API they come through (issue 19, item 9)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpu_platform.adapters.inbound.rest.schemas import JobSubmit
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.spec_checks import check_values, env_key_problem

KEYS = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
    st.from_regex(r"[0-9][A-Za-z0-9_]{0,5}", fullmatch=True),
)


def rest_accepts_key(key: str) -> bool:
    try:
        JobSubmit(command=["true"], env={key: "v"})
    except ValidationError:
        return False
    return True


@given(key=KEYS)
def test_rest_and_the_shared_check_agree_on_every_env_key(key: str) -> None:
    shared_ok = env_key_problem(key) is None
    assert rest_accepts_key(key) == shared_ok
    spec = JobSpec(("true",), env=((key, "v"),))
    if shared_ok:
        check_values(spec)
    else:
        with pytest.raises(InvalidRequest, match=r"^env: "):
            check_values(spec)


@given(
    before=st.text(max_size=8), after=st.text(max_size=8), where=st.sampled_from(["argv", "env"])
)
def test_a_nul_byte_anywhere_execve_would_see_is_refused(
    before: str, after: str, where: str
) -> None:
    value = f"{before}\0{after}"
    if where == "argv":
        spec, field = JobSpec(("true", value)), "command"
    else:
        spec, field = JobSpec(("true",), env=(("K", value),)), "env"
    with pytest.raises(InvalidRequest, match=f"^{field}: "):
        check_values(spec)


@given(
    limit=st.one_of(st.floats(allow_nan=True, allow_infinity=True, min_value=None), st.none()),
)
def test_only_finite_time_limits_pass(limit: float | None) -> None:
    if limit is not None and not math.isnan(limit) and limit <= 0:
        return  # JobSpec itself refuses those
    spec = JobSpec(("true",), time_limit_s=limit)
    if limit is None or math.isfinite(limit):
        check_values(spec)
    else:
        with pytest.raises(InvalidRequest, match=r"^time_limit_s: "):
            check_values(spec)
