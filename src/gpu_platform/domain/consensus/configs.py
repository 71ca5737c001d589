"""Membership: installing a snapshot's configuration, applying configuration changes, and
leaving a joint configuration once it is applied (etcd raft's `restore`, `applyConfChange`,
`switchToConfig` and the auto-leave in `advance`).

Functions over `Raft` (not methods), like `leader.py` and `follower.py`; `Raft` keeps thin
methods of the same names for its callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.consensus import leader
from gpu_platform.domain.consensus.confchange import Changer, restore
from gpu_platform.domain.consensus.tracker import Progress, ProgressTracker, TrackerConfig
from gpu_platform.domain.consensus.types import (
    NONE,
    ConfChange,
    ConfState,
    Entry,
    EntryType,
    Role,
    Snapshot,
)

if TYPE_CHECKING:
    from gpu_platform.domain.consensus.raft import Raft

__all__ = ["advance_applied", "apply_conf_change", "restore_snapshot", "switch_to_config"]

_F, _L = Role.FOLLOWER, Role.LEADER


def restore_snapshot(r: Raft, s: Snapshot) -> bool:
    """Install snapshot `s`; False if it is stale or not needed."""
    meta = s.metadata
    if meta.index <= r.raft_log.committed:
        return False
    if r.state is not _F:
        r.become_follower(r.term + 1, NONE)  # defensive: never restore as leader
        return False
    cs = meta.conf_state
    if r.id not in (*cs.voters, *cs.learners, *cs.voters_outgoing):
        return False  # a snapshot of a configuration we are not part of
    if r.raft_log.match_term(meta.index, meta.term):
        # We already have the snapshot's last entry: just fast-forward the commit.
        r.raft_log.commit_to(meta.index)
        return False
    r.raft_log.restore(s)
    r.prs = ProgressTracker(r.prs.max_inflight)
    cfg, prs = restore(cs, r.raft_log.last_index(), r.prs.max_inflight)
    switch_to_config(r, cfg, prs)
    return True


def apply_conf_change(r: Raft, cc: ConfChange) -> ConfState:
    """Apply a committed configuration change; the resulting configuration."""
    changer = Changer(r.prs.config, r.prs.progress, r.raft_log.last_index(), r.prs.max_inflight)
    if cc.leave_joint():
        cfg, prs = changer.leave_joint()
    else:
        joint, auto_leave = cc.enter_joint()
        if joint:
            cfg, prs = changer.enter_joint(auto_leave, cc.changes)
        else:
            cfg, prs = changer.simple(cc.changes)
    return switch_to_config(r, cfg, prs)


def switch_to_config(r: Raft, cfg: TrackerConfig, prs: dict[int, Progress]) -> ConfState:
    r.prs.config = cfg
    r.prs.progress = prs
    cs = cfg.conf_state()
    pr = prs.get(r.id)
    r.is_learner = pr is not None and pr.is_learner
    if (pr is None or r.is_learner) and r.state is _L:
        leader.step_down_removed(r)
        return cs
    if r.state is not _L or not cs.voters:
        return cs
    if leader.maybe_commit(r):
        leader.bcast_append(r)
    else:
        for i, _ in r.prs.visit():
            if i != r.id:
                leader.maybe_send_append(r, i, send_if_empty=False)
    if r.lead_transferee != NONE and r.lead_transferee not in cfg.voters.ids():
        r.lead_transferee = NONE
    return cs


def advance_applied(r: Raft, applied: int) -> None:
    """The application applied everything up to `applied` (called by RawNode.advance)."""
    old = r.raft_log.applied
    r.raft_log.applied_to(applied)
    if r.prs.config.auto_leave and old <= r.pending_conf_index <= applied and r.state is _L:
        # Leave the joint configuration automatically by proposing an empty change.
        leader.append_entry(r, [Entry(0, 0, EntryType.CONF_CHANGE, ConfChange().encode())])
        r.pending_conf_index = r.raft_log.last_index()
