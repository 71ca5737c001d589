"""Raft consensus as a pure, sans-I/O state machine (shaped like etcd-io/raft's RawNode).

Modules: `types` (messages, entries, states), `quorum` (majority/joint arithmetic), `tracker`
(per-peer progress and flow control), `confchange` (membership changes), `storage` and `log`
(the Raft log), `readonly` (ReadIndex), `raft`, `leader` and `follower` (the protocol),
`rawnode` (the driver interface: tick/step/propose in, `Ready` out). See docs/raft.md.
"""

from gpu_platform.domain.consensus.confchange import ConfChangeError
from gpu_platform.domain.consensus.errors import (
    CompactedError,
    LogInvariantError,
    ProposalDroppedError,
    RaftError,
    SnapshotOutOfDateError,
    StepError,
    UnavailableError,
)
from gpu_platform.domain.consensus.raft import Config, Raft
from gpu_platform.domain.consensus.rawnode import RawNode, Ready, Status, bootstrap
from gpu_platform.domain.consensus.storage import MemoryStorage, Storage
from gpu_platform.domain.consensus.types import (
    NONE,
    ConfChange,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ReadOnlyOption,
    ReadState,
    Role,
    Snapshot,
    SnapshotMetadata,
    SoftState,
)

__all__ = [
    "NONE",
    "CompactedError",
    "ConfChange",
    "ConfChangeError",
    "ConfChangeSingle",
    "ConfChangeTransition",
    "ConfChangeType",
    "ConfState",
    "Config",
    "Entry",
    "EntryType",
    "HardState",
    "LogInvariantError",
    "MemoryStorage",
    "Message",
    "MessageType",
    "ProposalDroppedError",
    "Raft",
    "RaftError",
    "RawNode",
    "ReadOnlyOption",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotMetadata",
    "SnapshotOutOfDateError",
    "SoftState",
    "Status",
    "StepError",
    "Storage",
    "UnavailableError",
    "bootstrap",
]
