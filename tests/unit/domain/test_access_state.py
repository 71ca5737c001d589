"""Tenants, tokens and revocations as cluster-state commands (issue 20.4): the apply rules,
the invariants over random command sequences, and the snapshot round trip."""

from __future__ import annotations

import contextlib
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.domain.access_state import (
    BootstrapAdmin,
    CreateTenant,
    DeleteRunAsGrant,
    IssueToken,
    RevokeToken,
    SetRunAsGrant,
    TokenIssued,
    TokenRevoked,
)
from gpu_platform.domain.cluster_codec import decode_state, encode_state
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.errors import Conflict, DomainError, InvalidRequest, NotFound
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.testing.cluster_commands import command_strategies


def _issue(token_id: str, role: Role = Role.USER, tenant: str = "team-a") -> IssueToken:
    return IssueToken(token_id, token_id * 4, f"holder-{token_id}", tenant, role, 10.0)


def _state_with_tokens() -> ClusterState:
    s = ClusterState.empty()
    s.apply(CreateTenant("team-a", 1.0))
    s.apply(_issue("adm1", Role.ADMIN))
    s.apply(_issue("usr1"))
    return s


def test_a_tenant_is_created_once_and_a_bad_name_is_refused_by_field() -> None:
    s = ClusterState.empty()
    assert s.apply(CreateTenant("team-a", 1.0))
    assert s.apply(CreateTenant("team-a", 2.0)) == []  # idempotent, first time kept
    assert [(t.name, t.created_at) for t in s.tenant_entries()] == [("team-a", 1.0)]
    with pytest.raises(InvalidRequest) as bad:
        s.apply(CreateTenant("no spaces", 1.0))
    assert bad.value.field == "tenant"


def test_a_token_needs_its_tenant_and_unique_id_and_digest() -> None:
    s = _state_with_tokens()
    with pytest.raises(NotFound):
        s.apply(_issue("x", tenant="nobody"))
    with pytest.raises(Conflict):
        s.apply(_issue("usr1"))
    with pytest.raises(Conflict):  # same digest under another id
        s.apply(IssueToken("other", "usr1" * 4, "n", "team-a", Role.USER, 1.0))
    found = s.token_by_digest("usr1" * 4)
    assert found is not None and found.token_id == "usr1" and found.live


def test_revoking_keeps_the_first_time_and_an_unknown_id_is_not_found() -> None:
    s = _state_with_tokens()
    assert s.apply(RevokeToken("usr1", 20.0)) == [TokenRevoked("usr1")]
    assert s.apply(RevokeToken("usr1", 30.0)) == []
    found = s.token_by_digest("usr1" * 4)
    assert found is not None and found.revoked_at == 20.0
    with pytest.raises(NotFound):
        s.apply(RevokeToken("nope", 1.0))


def test_the_last_live_admin_token_cannot_be_revoked() -> None:
    s = _state_with_tokens()
    with pytest.raises(InvalidRequest) as refused:
        s.apply(RevokeToken("adm1", 20.0))
    assert refused.value.field == "token_id" and "last live admin" in str(refused.value)
    s.apply(_issue("adm2", Role.ADMIN))
    assert s.apply(RevokeToken("adm1", 21.0)) == [TokenRevoked("adm1")]
    with pytest.raises(InvalidRequest):
        s.apply(RevokeToken("adm2", 22.0))


def test_bootstrap_issues_one_admin_only_while_none_is_live() -> None:
    s = ClusterState.empty()
    events = s.apply(BootstrapAdmin("boot1", "b" * 64, "bootstrap-admin", "default", 5.0))
    assert TokenIssued("boot1", "default", Role.ADMIN) in events
    with pytest.raises(Conflict):  # a second server racing to bootstrap loses
        s.apply(BootstrapAdmin("boot2", "c" * 64, "bootstrap-admin", "default", 6.0))
    assert [t.token_id for t in s.token_entries()] == ["boot1"]


ACCESS = [CreateTenant, IssueToken, RevokeToken, BootstrapAdmin, SetRunAsGrant, DeleteRunAsGrant]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(*(command_strategies()[c] for c in ACCESS)), max_size=25))
def test_any_access_history_keeps_the_invariants_and_never_loses_the_last_admin(
    commands: list[Command],
) -> None:
    s = ClusterState.empty()
    had_admin = False
    for command in commands:
        with contextlib.suppress(DomainError):
            s.apply(command)
        s.check_invariants()
        live = [t for t in s.token_entries() if t.live and t.role is Role.ADMIN]
        had_admin = had_admin or bool(live)
        assert live or not had_admin, "every live admin token was revoked"
    again = decode_state(json.loads(json.dumps(encode_state(s))), FaultPolicy())
    assert again.access_parts() == s.access_parts()


def test_a_snapshot_carries_tenants_and_token_digests_and_restores_them() -> None:
    replica = ClusterReplica(FaultPolicy(), threading.RLock())
    for index, command in enumerate(
        [CreateTenant("team-a", 1.0), _issue("adm1", Role.ADMIN), _issue("usr1")], start=1
    ):
        replica.apply(index, replica.encode(command, f"c{index}"))
    replica.apply(4, replica.encode(RevokeToken("usr1", 9.0), "c4"))
    snapshot = replica.snapshot()
    assert b"usr1usr1usr1usr1" in snapshot  # the digest, as stored
    other = ClusterReplica(FaultPolicy(), threading.RLock())
    other.restore(snapshot)
    assert other.state.access_parts() == replica.state.access_parts()
    revoked = other.state.token_by_digest("usr1" * 4)
    assert revoked is not None and revoked.revoked_at == 9.0


def test_a_state_record_from_before_replicated_auth_decodes_with_no_tokens() -> None:
    record = encode_state(_state_with_tokens())
    del record["access"]
    old = decode_state(record, FaultPolicy())
    assert old.token_entries() == [] and old.tenant_entries() == []
