"""The QuotaStore contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.ports.outbound.quota_store import QuotaStore

__all__ = ["QuotaStoreContract"]


class QuotaStoreContract:
    """Subclass and provide `make_store`: a factory; calling it again must reopen the same data."""

    @pytest.fixture
    def make_store(self) -> Callable[[], QuotaStore]:
        raise NotImplementedError

    def test_it_satisfies_the_port(self, make_store: Callable[[], QuotaStore]) -> None:
        assert isinstance(make_store(), QuotaStore)

    def test_quotas_survive_a_reopen_with_every_field(
        self, make_store: Callable[[], QuotaStore]
    ) -> None:
        full = Quota(8, 80 << 30, 64_000, 4, 2, "research")
        make_store().save_quota("team-a", full)
        make_store().save_quota("team-b", Quota(2))
        assert make_store().load_quotas() == {"team-a": full, "team-b": Quota(2)}

    def test_saving_again_replaces_and_none_removes(
        self, make_store: Callable[[], QuotaStore]
    ) -> None:
        store = make_store()
        store.save_quota("team-a", Quota(8))
        store.save_quota("team-a", Quota(4, cohort="c"))
        assert make_store().load_quotas() == {"team-a": Quota(4, cohort="c")}
        store.save_quota("team-a", None)
        store.save_quota("nobody", None)  # removing what is not there is fine
        assert make_store().load_quotas() == {}
