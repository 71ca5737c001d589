"""The RunAsStore contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.ports.outbound.run_as_store import RunAsStore

__all__ = ["RunAsStoreContract"]


class RunAsStoreContract:
    """Subclass and provide `make_store`: a factory; calling it again must reopen the same data."""

    @pytest.fixture
    def make_store(self) -> Callable[[], RunAsStore]:
        raise NotImplementedError

    def test_it_satisfies_the_port(self, make_store: Callable[[], RunAsStore]) -> None:
        assert isinstance(make_store(), RunAsStore)

    def test_grants_survive_a_reopen_with_every_field(
        self, make_store: Callable[[], RunAsStore]
    ) -> None:
        rooted = RunAsGrant("ops", ("daemon", "root"), allow_root=True)
        make_store().save_grant("ops", rooted)
        make_store().save_grant("team-a", RunAsGrant("team-a", ("alice",)))
        assert make_store().load_grants() == {
            "ops": rooted,
            "team-a": RunAsGrant("team-a", ("alice",)),
        }

    def test_saving_again_replaces_and_none_removes(
        self, make_store: Callable[[], RunAsStore]
    ) -> None:
        store = make_store()
        store.save_grant("team-a", RunAsGrant("team-a", ("alice",)))
        store.save_grant("team-a", RunAsGrant("team-a", ("bob", "carol")))
        assert make_store().load_grants() == {"team-a": RunAsGrant("team-a", ("bob", "carol"))}
        store.save_grant("team-a", None)
        store.save_grant("nobody", None)  # removing what is not there is fine
        assert make_store().load_grants() == {}
