"""`ReplicatedRunAsStore`: the RunAsStore port over the replicated cluster state (issue 20).

Run-as grants live in the access state (`domain.access_state`: SetRunAsGrant,
DeleteRunAsGrant), so every server, leader or follower, checks a job's `user` against the same
grants, and they survive a failover. Reads look at this server's own replica under its lock;
writes commit through the log and, on a server that does not lead, raise LeaderElsewhere like
any other write (see `access_replica.ReplicatedAccessStore`, whose commit path this shares).
Other servers write these grants too, so `RunAsAccounts` reads them with `shared=True`.
"""

from __future__ import annotations

from gpu_platform.application.access_replica import Replicated, ReplicatedAccessStore
from gpu_platform.domain.access_state import DeleteRunAsGrant, SetRunAsGrant
from gpu_platform.domain.model.run_as import RunAsGrant

__all__ = ["ReplicatedRunAsStore"]


class ReplicatedRunAsStore:
    """Implements RunAsStore; see the module docstring."""

    def __init__(self, replication: Replicated, *, commit_timeout_s: float = 10.0) -> None:
        self._replication = replication
        self._access = ReplicatedAccessStore(replication, commit_timeout_s=commit_timeout_s)

    def load_grants(self) -> dict[str, RunAsGrant]:
        # Every submit checks them: read without the state's lock (which a scheduling cycle
        # may hold); the grants are replaced whole, never changed in place (`run_as_grants`).
        return self._replication.state.run_as_grants()

    def save_grant(self, tenant: str, grant: RunAsGrant | None) -> None:
        if grant is None:
            self._access.commit(DeleteRunAsGrant(tenant))
        else:
            self._access.commit(SetRunAsGrant(tenant, grant.accounts, grant.allow_root))
