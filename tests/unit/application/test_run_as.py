"""RunAsAccounts: admins set run-as grants (stored, audited), everyone else is refused, and
AdmissionControl checks every submit and array against them."""

from __future__ import annotations

import json

import pytest

from gpu_platform.application.admission import AdmissionControl
from gpu_platform.application.auth_scope import AuditTrail
from gpu_platform.application.run_as import RunAsAccounts
from gpu_platform.application.run_as_replica import ReplicatedRunAsStore
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.domain.model.tenancy import Forbidden, Principal, Role
from gpu_platform.testing.access_fakes import InMemoryAuditLog
from gpu_platform.testing.fakes import InMemoryRunAsStore, ManualClock
from gpu_platform.testing.solo_replication import SoloReplication

ADMIN = Principal("ada", "default", Role.ADMIN)
OPERATOR = Principal("otto", "default", Role.OPERATOR)


def service(store: InMemoryRunAsStore | None = None) -> tuple[RunAsAccounts, InMemoryAuditLog]:
    audit = InMemoryAuditLog()
    trail = AuditTrail(audit, ManualClock())
    return RunAsAccounts(store or InMemoryRunAsStore(), trail), audit


def test_an_admin_grant_is_stored_audited_and_survives_a_restart() -> None:
    store = InMemoryRunAsStore()
    run_as, audit = service(store)
    made = run_as.grant(ADMIN, "team-a", ["bob", "alice", "bob"])
    assert made == RunAsGrant("team-a", ("alice", "bob"))
    again, _ = service(store)
    assert again.grants(ADMIN) == [made]
    entry = json.loads(audit.lines[-1])
    assert (entry["action"], entry["target"], entry["outcome"]) == (
        "run_as.set", "tenant team-a", "ok"
    )  # fmt: skip


def test_only_admins_may_see_or_change_grants_and_refusals_are_audited() -> None:
    run_as, audit = service()
    with pytest.raises(Forbidden):
        run_as.grant(OPERATOR, "team-a", ["alice"])
    with pytest.raises(Forbidden):
        run_as.grants(OPERATOR)
    with pytest.raises(Forbidden):
        run_as.revoke(OPERATOR, "team-a")
    assert json.loads(audit.lines[0])["outcome"].startswith("refused")
    assert run_as.grants(ADMIN) == []


def test_root_is_granted_only_with_allow_root_and_revoking_removes_the_grant() -> None:
    run_as, _ = service()
    with pytest.raises(InvalidRequest, match="accounts"):
        run_as.grant(ADMIN, "ops", ["root"])
    run_as.grant(ADMIN, "ops", ["root"], allow_root=True)
    run_as.check(JobSpec(("true",), tenant="ops", user="root"))
    run_as.revoke(ADMIN, "ops")
    with pytest.raises(InvalidRequest, match="user"):
        run_as.check(JobSpec(("true",), tenant="ops", user="root"))
    with pytest.raises(NotFound):
        run_as.revoke(ADMIN, "ops")


class _Refusing:
    """A JobService that must never be reached."""

    def submit(self, spec: JobSpec) -> object:
        raise AssertionError("a refused job reached the control plane")

    def submit_array(self, spec: JobSpec, array: object) -> object:
        raise AssertionError("a refused array reached the control plane")


def test_admission_refuses_a_job_or_array_naming_an_account_not_granted() -> None:
    run_as, _ = service()
    run_as.grant(ADMIN, "team-a", ["alice"])
    gate = AdmissionControl(_Refusing(), run_as=run_as.check)  # type: ignore[arg-type]
    for user, tenant in (("root", "team-a"), ("alice", "team-b"), ("bob", "team-a")):
        spec = JobSpec(("true",), tenant=tenant, user=user)
        with pytest.raises(InvalidRequest) as refused:
            gate.submit(spec)
        assert refused.value.field == "user"
        with pytest.raises(InvalidRequest):
            gate.submit_array(spec, "0-3")


def test_a_shared_store_is_read_on_every_check_so_a_grant_applied_from_the_log_counts() -> None:
    replication = SoloReplication()
    here = RunAsAccounts(ReplicatedRunAsStore(replication), shared=True)
    spec = JobSpec(command=("true",), tenant="team-a", user="alice")
    with pytest.raises(InvalidRequest):
        here.check(spec)
    # another server's write arrives only through the log, not through `here`
    ReplicatedRunAsStore(replication).save_grant("team-a", RunAsGrant("team-a", ("alice",)))
    here.check(spec)
    assert here.grants(ADMIN) == [RunAsGrant("team-a", ("alice",))]
    here.revoke(ADMIN, "team-a")
    with pytest.raises(InvalidRequest):
        here.check(spec)
