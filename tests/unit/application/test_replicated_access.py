"""AccessControl over the replicated store (a real ClusterReplica, one voter committing
in-line): the bootstrap through the log, the import of a pre-replication store, and writes on a
server that does not lead."""

from __future__ import annotations

import pytest

from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.access_setup import ReplicatedAccessSetup
from gpu_platform.application.auth import AccessControl, digest_of
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.domain.access_state import BootstrapAdmin, CreateTenant, IssueToken
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.tenancy import Principal, Role, Unauthenticated
from gpu_platform.ports.outbound.access_store import TokenRecord
from gpu_platform.testing.access_fakes import InMemoryAccessStore
from gpu_platform.testing.fakes import ManualClock
from gpu_platform.testing.solo_replication import SoloReplication


def _server(
    solo: SoloReplication, legacy: InMemoryAccessStore | None = None
) -> tuple[AccessControl, ReplicatedAccessSetup]:
    store = ReplicatedAccessStore(solo)
    access = AccessControl(store, ManualClock())
    return access, ReplicatedAccessSetup(access, store, legacy or InMemoryAccessStore())


def test_the_leader_bootstraps_one_admin_through_the_log_and_only_its_digest_travels() -> None:
    solo = SoloReplication()
    access, setup = _server(solo)
    step = setup.step()
    assert step.done and step.issued is not None
    (command,) = [c for c in solo.commands if isinstance(c, BootstrapAdmin)]
    assert command.digest == digest_of(step.issued.secret)
    assert step.issued.secret not in repr(solo.commands)
    assert access.authenticate(step.issued.secret).role is Role.ADMIN
    again, other = _server(solo)  # a second server, after the first bootstrapped
    assert other.step().issued is None
    assert again.authenticate(step.issued.secret).role is Role.ADMIN


def test_tokens_of_the_old_store_are_imported_once_revoked_ones_as_revoked() -> None:
    legacy = InMemoryAccessStore()
    legacy.add_tenant("ops", 1.0)
    for name, role, revoked in (("root", Role.ADMIN, None), ("gone", Role.USER, 3.0)):
        digest = digest_of(f"old-{name}")
        legacy.add_token(TokenRecord(f"tok_{name}", digest, name, "ops", role, 2.0, revoked))
    solo = SoloReplication()
    access, setup = _server(solo, legacy)
    step = setup.step()
    assert step.done and step.imported == 2 and step.issued is None  # the old admin is live
    assert access.authenticate("old-root").role is Role.ADMIN
    with pytest.raises(Unauthenticated):
        access.authenticate("old-gone")
    _, rerun = _server(solo, legacy)
    assert rerun.step().imported == 0
    assert sum(isinstance(c, IssueToken) for c in solo.commands) == 2
    assert sum(isinstance(c, CreateTenant) for c in solo.commands) == 1


def test_a_follower_waits_for_the_leader_and_sends_writes_to_it() -> None:
    solo = SoloReplication()
    solo.leading = False
    legacy = InMemoryAccessStore()
    legacy.add_tenant("ops", 1.0)
    legacy.add_token(TokenRecord("tok_x", "x" * 64, "x", "ops", Role.USER, 2.0))
    access, setup = _server(solo, legacy)
    step = setup.step()
    assert not step.done and step.waiting == 1 and solo.commands == []
    root = Principal("root", "default", Role.ADMIN, "tok_root")
    with pytest.raises(LeaderElsewhere):
        access.create_tenant(root, "team-a")


def test_revoking_the_last_admin_through_the_service_is_refused_by_field() -> None:
    solo = SoloReplication()
    access, setup = _server(solo)
    issued = setup.step().issued
    assert issued is not None
    root = access.authenticate(issued.secret)
    with pytest.raises(InvalidRequest) as refused:
        access.revoke_token(root, issued.info.token_id)
    assert refused.value.field == "token_id"
    assert access.authenticate(issued.secret).role is Role.ADMIN
