"""AccessControl, TenantScope and AdmissionControl on in-memory fakes; the gRPC interceptor's
deadline check; the audit file refusing to extend a broken chain."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import Mock

import grpc
import pytest

from gpu_platform.adapters.inbound.grpc.auth import AuthInterceptor
from gpu_platform.adapters.outbound.storage import AuditChainBroken, JsonlAuditLog
from gpu_platform.application.auth import AccessControl, digest_of
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.audit_chain import verify
from gpu_platform.domain.model.tenancy import Forbidden, Role, Unauthenticated
from gpu_platform.testing.access_fakes import InMemoryAccessStore, InMemoryAuditLog
from gpu_platform.testing.fakes import ManualClock


def _access(**kw: object) -> tuple[AccessControl, InMemoryAccessStore, InMemoryAuditLog]:
    store, audit = InMemoryAccessStore(), InMemoryAuditLog()
    secrets = iter(f"secret-{i}" for i in range(100))
    access = AccessControl(store, ManualClock(), audit, new_secret=lambda: next(secrets), **kw)  # type: ignore[arg-type]
    return access, store, audit


def test_the_bootstrap_admin_is_created_once_and_only_its_digest_is_stored() -> None:
    access, store, audit = _access()
    issued = access.bootstrap()
    assert issued is not None and issued.info.role is Role.ADMIN
    assert access.bootstrap() is None  # a live admin exists: nothing new
    (record,) = store.tokens()
    assert record.digest == digest_of(issued.secret) and issued.secret not in repr(record)
    assert access.authenticate(issued.secret).role is Role.ADMIN
    assert verify(audit.lines) == 1 and "token.create" in audit.lines[0]


def test_with_auth_off_there_is_no_bootstrap_and_everyone_is_the_anonymous_admin() -> None:
    access, store, _ = _access(enabled=False)
    assert access.bootstrap() is None and store.tokens() == []
    assert access.authenticate(None).role is Role.ADMIN


def test_tokens_need_an_existing_tenant_and_an_admin_and_revocation_is_immediate() -> None:
    access, _, _ = _access()
    boot = access.bootstrap()
    assert boot is not None
    root = access.authenticate(boot.secret)
    with pytest.raises(NotFound):
        access.create_token(root, "ann", "nowhere", Role.USER)
    access.create_tenant(root, "a")
    ann = access.create_token(root, "ann", "a", Role.USER)
    who = access.authenticate(ann.secret)
    assert (who.name, who.tenant, who.role) == ("ann", "a", Role.USER)
    with pytest.raises(Forbidden):
        access.create_tenant(who, "b")
    access.revoke_token(root, ann.info.token_id)
    with pytest.raises(Unauthenticated):
        access.authenticate(ann.secret)
    with pytest.raises(NotFound):
        access.revoke_token(root, "tok_nope")


def test_a_call_whose_deadline_has_passed_is_not_run() -> None:
    access, _, _ = _access(enabled=False)
    context = Mock(spec=grpc.ServicerContext)
    context.time_remaining.return_value = 0.0
    context.abort.side_effect = grpc.RpcError()
    with pytest.raises(grpc.RpcError):
        AuthInterceptor(access)._admit(context)
    context.abort.assert_called_once()
    assert context.abort.call_args.args[0] is grpc.StatusCode.DEADLINE_EXCEEDED


def test_the_audit_file_continues_its_chain_and_refuses_to_extend_a_broken_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    log = JsonlAuditLog(path)
    log.append({"action": "one"})
    log.close()
    log = JsonlAuditLog(path)  # reopened: the chain goes on
    log.append({"action": "two"})
    log.close()
    lines = path.read_text().splitlines()
    assert verify(lines) == 2
    path.write_text(lines[0].replace("one", "uno") + "\n" + lines[1] + "\n")
    with pytest.raises(AuditChainBroken, match="line 1"):
        JsonlAuditLog(path)
