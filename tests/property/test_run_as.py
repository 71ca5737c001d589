"""Run-as grants (domain.model.run_as) against a brute-force oracle: a job may name an account
only if its tenant's grant lists it, root only when granted with allow_root, and naming none
is always allowed (the node's default job account)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.run_as import (
    ROOT,
    RunAsGrant,
    check_cwd,
    check_run_as,
    make_grant,
)

ACCOUNTS = st.sampled_from([ROOT, "nobody", "alice", "bob", "svc-train", "_ci"])
TENANTS = st.sampled_from(["a", "b", "c"])
GRANTS = st.dictionaries(
    TENANTS, st.tuples(st.lists(ACCOUNTS, min_size=1, max_size=4), st.booleans()), max_size=3
)


def built(raw: dict[str, tuple[list[str], bool]]) -> dict[str, RunAsGrant]:
    """The grants an admin could make from `raw` (those listing root without allow_root are
    refused and so absent)."""
    out = {}
    for tenant, (accounts, allow_root) in raw.items():
        if ROOT in accounts and not allow_root:
            with pytest.raises(InvalidRequest, match="accounts"):
                make_grant(tenant, accounts, allow_root)
            continue
        out[tenant] = make_grant(tenant, accounts, allow_root)
    return out


@settings(max_examples=200)
@given(raw=GRANTS, user=st.one_of(st.none(), ACCOUNTS), tenant=TENANTS)
def test_a_job_may_run_as_an_account_only_if_its_tenant_was_granted_it(
    raw: dict[str, tuple[list[str], bool]], user: str | None, tenant: str
) -> None:
    grants = built(raw)
    oracle = user is None or (
        tenant in raw and user in raw[tenant][0] and (raw[tenant][1] or ROOT not in raw[tenant][0])
    )
    try:
        check_run_as(user, tenant, grants)
        allowed = True
    except InvalidRequest as exc:
        allowed = False
        assert exc.field == "user"
    assert allowed == oracle
    if user == ROOT and allowed:  # root only ever through an explicit allow_root
        assert grants[tenant].allow_root


@settings(max_examples=100)
@given(accounts=st.lists(ACCOUNTS.filter(lambda a: a != ROOT), min_size=1, max_size=6))
def test_a_grant_is_the_same_whatever_the_order_or_repeats_of_its_accounts(
    accounts: list[str],
) -> None:
    grant = make_grant("t", accounts)
    assert grant == make_grant("t", list(reversed(accounts)) + accounts[:1])
    assert grant.accounts == tuple(sorted(set(accounts))) and not grant.allow_root


@pytest.mark.parametrize("name", ["0", "1000", "Root", "a b", "../etc", "x" * 33, "", "-x"])
def test_numeric_ids_and_names_no_account_can_have_are_refused_naming_user(name: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_run_as(name, "a", {"a": RunAsGrant("a", ("alice",))})
    assert refused.value.field == "user"
    with pytest.raises(InvalidRequest) as refused:
        make_grant("a", [name])
    assert refused.value.field == "accounts"


def test_allow_root_without_root_grants_no_root() -> None:
    assert make_grant("a", ["alice"], allow_root=True) == RunAsGrant("a", ("alice",))
    with pytest.raises(InvalidRequest, match="accounts"):
        make_grant("a", [])


PARTS = st.lists(st.sampled_from(["data", "jobs", "x", ".", "..", "", "srv"]), max_size=5)


@settings(max_examples=200)
@given(parts=PARTS, absolute=st.booleans())
def test_a_cwd_is_accepted_only_if_absolute_plain_and_outside_the_data_directory(
    parts: list[str], absolute: bool
) -> None:
    cwd = ("/" if absolute else "") + "/".join(parts)
    names = [p for p in cwd.split("/") if p]
    plain = cwd.startswith("/") and "//" not in cwd and not {".", ".."} & set(names)
    inside = names[:2] == ["srv", "data"]  # the protected directory is /srv/data
    try:
        check_cwd(cwd, ["/srv/data"])
        accepted = True
    except InvalidRequest as exc:
        accepted = False
        assert exc.field == "cwd"
    assert accepted == (plain and not inside), cwd
