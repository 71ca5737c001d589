"""The AccessStore and AuditLog contracts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.ports.outbound.access_store import AccessStore, TokenRecord
from gpu_platform.ports.outbound.audit_log import AuditLog

__all__ = ["AccessStoreContract", "AuditLogContract"]


def _token(token_id: str, digest: str, role: Role = Role.USER) -> TokenRecord:
    return TokenRecord(token_id, digest, f"holder-{token_id}", "t1", role, 10.0)


class AccessStoreContract:
    """Subclass and provide `make_store`: calling it again must reopen the same data."""

    @pytest.fixture
    def make_store(self) -> Callable[[], AccessStore]:
        raise NotImplementedError

    def test_tenants_are_idempotent_and_listed_by_name(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        store = make_store()
        store.add_tenant("zeta", 1.0)
        store.add_tenant("alpha", 2.0)
        store.add_tenant("zeta", 3.0)
        assert make_store().tenants() == [("alpha", 2.0), ("zeta", 1.0)]

    def test_a_token_is_found_by_its_digest_and_survives_a_reopen(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        make_store().add_tenant("t1", 1.0)
        make_store().add_token(_token("tok_a", "d" * 64, Role.OPERATOR))
        again = make_store()
        assert again.token_by_digest("d" * 64) == _token("tok_a", "d" * 64, Role.OPERATOR)
        assert again.token_by_digest("e" * 64) is None

    def test_duplicate_ids_or_digests_are_refused(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        store = make_store()
        store.add_tenant("t1", 1.0)
        store.add_token(_token("tok_a", "a" * 64))
        with pytest.raises(ValueError):
            store.add_token(_token("tok_a", "b" * 64))
        with pytest.raises(ValueError):
            store.add_token(_token("tok_b", "a" * 64))
        assert [t.token_id for t in store.tokens()] == ["tok_a"]

    def test_revoking_keeps_the_first_time_and_unknown_ids_say_so(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        store = make_store()
        store.add_tenant("t1", 1.0)
        store.add_token(_token("tok_a", "a" * 64))
        assert store.revoke_token("tok_a", 20.0)
        assert store.revoke_token("tok_a", 30.0)
        assert not store.revoke_token("tok_zz", 30.0)
        found = make_store().token_by_digest("a" * 64)
        assert found is not None and found.revoked_at == 20.0

    def test_the_last_live_admin_token_cannot_be_revoked(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        store = make_store()
        store.add_tenant("t1", 1.0)
        store.add_token(_token("tok_a", "a" * 64, Role.ADMIN))
        store.add_token(_token("tok_b", "b" * 64, Role.ADMIN))
        assert store.revoke_token("tok_a", 20.0)
        with pytest.raises(InvalidRequest) as refused:
            store.revoke_token("tok_b", 21.0)
        assert refused.value.field == "token_id"
        found = make_store().token_by_digest("b" * 64)
        assert found is not None and found.revoked_at is None

    def test_a_first_admin_is_added_only_while_no_live_admin_exists(
        self, make_store: Callable[[], AccessStore]
    ) -> None:
        store = make_store()
        assert store.add_first_admin(_token("tok_a", "a" * 64, Role.ADMIN))
        assert not store.add_first_admin(_token("tok_b", "b" * 64, Role.ADMIN))
        again = make_store()
        assert [t.token_id for t in again.tokens()] == ["tok_a"]
        assert [n for n, _ in again.tenants()] == ["t1"]


class AuditLogContract:
    """Subclass and provide `make_log`: calling it again must reopen the same log."""

    @pytest.fixture
    def make_log(self) -> Callable[[], AuditLog]:
        raise NotImplementedError

    def test_entries_come_back_oldest_first_with_their_chain_fields(
        self, make_log: Callable[[], AuditLog]
    ) -> None:
        log = make_log()
        for i in range(5):
            log.append({"action": f"a{i}", "n": i})
        tail = make_log().tail(3)
        assert [e["action"] for e in tail] == ["a2", "a3", "a4"]
        assert [e["seq"] for e in tail] == [3, 4, 5]
        assert tail[1]["prev"] == tail[0]["hash"] and tail[2]["prev"] == tail[1]["hash"]

    def test_reserved_names_are_refused(self, make_log: Callable[[], AuditLog]) -> None:
        with pytest.raises(ValueError):
            make_log().append({"hash": "forged"})
