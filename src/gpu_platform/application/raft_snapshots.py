"""The Raft driver's snapshots: storing the applier's, and the member addresses they carry.

`SnapshotKeeping` is a mixin of `RaftNode` (`raft_node`), run on the Raft loop: it stores a
snapshot the applier made (staged or streamed), then compacts the log; writes a pending commit
move first, so the stored commit index covers the snapshot; keeps the stored snapshot naming
every member (a server joining with an empty log is caught up from it); and puts the members'
addresses before the state machine's bytes (`raft_membership`), learning them back on restore.
Split from `raft_node` only for size; it shares `RaftNode`'s attributes and is not used alone.
"""

from __future__ import annotations

import logging
import time

from gpu_platform.application.raft_applier import MadeSnapshot
from gpu_platform.application.raft_membership import snapshot_header, unwrap_snapshot
from gpu_platform.application.raft_node_types import RaftNodeConfig
from gpu_platform.domain.consensus import ConfState, HardState, Snapshot
from gpu_platform.ports.outbound.raft import RaftStorage, RaftTransport, SnapshotStaging

__all__ = ["SnapshotKeeping"]

# The driver's lines keep `raft_node`'s logger name (this module was split from it).
log = logging.getLogger("gpu_platform.application.raft_node")


class SnapshotKeeping:
    """Storing snapshots and compacting; member addresses in and out of snapshots."""

    config: RaftNodeConfig
    storage: RaftStorage
    transport: RaftTransport
    _hard: HardState  # the durable hard state
    _unsaved_commit: HardState | None  # a commit move not written yet
    _conf_state: ConfState
    _shown_conf: ConfState
    _conf_wait: int
    _slow_s: float

    def _save_commit(self) -> None:
        """Write a pending commit move (before a snapshot, whose index it must cover; on stop)."""
        hs = self._unsaved_commit
        if hs is not None:
            self.storage.save(hs, (), None, sync=False)
            self._hard = hs
            self._unsaved_commit = None

    def _snapshot_lacks_members(self, index: int) -> bool:
        """A server joining with an empty log is caught up by snapshot, and the core refuses a
        snapshot whose configuration does not name its receiver: keep the stored one current."""
        cs = self._conf_state
        snap = self.storage.snapshot_metadata()
        named = {*snap.conf_state.voters, *snap.conf_state.learners}
        members = {*cs.voters, *cs.learners, *cs.voters_outgoing, *cs.learners_next}
        return not members <= named and index > snap.index

    def _snapshot_header(self, cs: ConfState) -> bytes:
        """The members' addresses put before the state machine's bytes (`wrap_snapshot`)."""
        members = {*cs.voters, *cs.learners, *cs.voters_outgoing, *cs.learners_next}
        return snapshot_header({i: a for i, a in self.transport.addresses.items() if i in members})

    def _store_snapshot(self, made: MadeSnapshot) -> None:
        """Store the applier's snapshot (unless one as new arrived meanwhile), then compact."""
        t0 = time.monotonic()
        try:
            self._store_snapshot_now(made)
        finally:
            took = time.monotonic() - t0
            if took > self._slow_s:
                log.warning(
                    "raft node %d: storing snapshot %d took %.0f ms",
                    self.config.id,
                    made.index,
                    took * 1000,
                )

    def _store_snapshot_now(self, made: MadeSnapshot) -> None:
        s = self.storage
        try:
            if made.index > s.snapshot_metadata().index and made.index <= s.last_index():
                self._save_commit()  # the stored commit index must cover the snapshot's
                staged = made.take()
                if staged is not None and isinstance(s, SnapshotStaging):
                    s.store_staged(made.index, made.conf_state, staged)  # written ahead
                else:
                    s.create_snapshot(made.index, made.conf_state, made.pieces())
        finally:
            made.close()
        if self._conf_wait and s.snapshot_metadata().index >= self._conf_wait:
            self._conf_wait = 0
            self._shown_conf = self._conf_state
        compact_to = made.index - self.config.compact_keep
        if s.first_index() <= compact_to <= s.snapshot_metadata().index:
            s.compact(compact_to)

    def _restore_addresses(self, snap: Snapshot) -> bytes:
        """Learn the addresses of members we lack from a snapshot; returns the state
        machine's part of it."""
        addresses, data = unwrap_snapshot(snap.data)
        known = self.transport.addresses
        for node_id, address in addresses.items():
            if node_id != self.config.id and node_id not in known:
                self.transport.add_peer(node_id, address)
        return data
