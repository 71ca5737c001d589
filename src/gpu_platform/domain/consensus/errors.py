"""Errors of the consensus core.

DomainError
└── RaftError
    ├── CompactedError            the requested index was compacted into a snapshot
    ├── UnavailableError          the requested index is not in the log (yet)
    ├── SnapshotOutOfDateError    a snapshot older than the one already held
    ├── ProposalDroppedError      a proposal was dropped (no leader, transfer, pending change)
    ├── StepError                 a message that must not be stepped here (local type, ...)
    └── LogInvariantError         a broken invariant: a bug or a corrupted storage (never retry)
"""

from __future__ import annotations

from gpu_platform.domain.errors import DomainError

__all__ = [
    "CompactedError",
    "LogInvariantError",
    "ProposalDroppedError",
    "RaftError",
    "SnapshotOutOfDateError",
    "StepError",
    "UnavailableError",
]


class RaftError(DomainError):
    """Base of every consensus error."""


class CompactedError(RaftError):
    def __init__(self) -> None:
        super().__init__("requested index is unavailable due to compaction")


class UnavailableError(RaftError):
    def __init__(self) -> None:
        super().__init__("requested entry at index is unavailable")


class SnapshotOutOfDateError(RaftError):
    def __init__(self) -> None:
        super().__init__("requested index is older than the existing snapshot")


class ProposalDroppedError(RaftError):
    def __init__(self, why: str = "raft proposal dropped") -> None:
        super().__init__(why)


class StepError(RaftError):
    """A message the caller must not step (a local message from the network, ...)."""


class LogInvariantError(RaftError):
    """An invariant of the log or of the protocol is broken (etcd-raft panics here)."""
