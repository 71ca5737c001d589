"""Raft value objects: entries, messages, hard/soft state, snapshots, configuration changes.

Everything here is a frozen, slotted dataclass or an enum, so a `Ready` handed to a driver can
never be mutated behind the core's back. Indexes and terms are non-negative ints (index 0 and
term 0 mean "none"); node ids are positive ints (0 means "no node", as in etcd-raft). Payloads
are `bytes`. Configuration changes travel inside log entries; `ConfChange.encode()` gives the
stable byte encoding stored in `Entry.data` for `EntryType.CONF_CHANGE` entries.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

__all__ = [
    "NONE",
    "CampaignType",
    "ConfChange",
    "ConfChangeSingle",
    "ConfChangeTransition",
    "ConfChangeType",
    "ConfState",
    "Entry",
    "EntryType",
    "HardState",
    "Message",
    "MessageType",
    "ReadOnlyOption",
    "ReadState",
    "Role",
    "Snapshot",
    "SnapshotMetadata",
    "SoftState",
]

NONE = 0
"""The id of no node (no leader, no vote)."""


class Role(enum.Enum):
    """A node's role; `PRE_CANDIDATE` is the pre-vote phase before a real candidacy."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class CampaignType(enum.Enum):
    """Why a node campaigns: a pre-vote round, a real election, or a leader transfer."""

    PRE_ELECTION = "pre-election"
    ELECTION = "election"
    TRANSFER = "transfer"


class EntryType(enum.Enum):
    """NORMAL entries carry application payloads; CONF_CHANGE ones an encoded ConfChange."""

    NORMAL = 0
    CONF_CHANGE = 1


class MessageType(enum.Enum):
    """Message kinds. Local ones (HUP, BEAT, PROP, ...) never cross the network as such."""

    HUP = "hup"  # local: start an election
    BEAT = "beat"  # local: leader sends heartbeats
    PROP = "prop"  # local or forwarded: propose entries
    APP = "app"
    APP_RESP = "app_resp"
    VOTE = "vote"
    VOTE_RESP = "vote_resp"
    PRE_VOTE = "pre_vote"
    PRE_VOTE_RESP = "pre_vote_resp"
    SNAP = "snap"
    HEARTBEAT = "heartbeat"
    HEARTBEAT_RESP = "heartbeat_resp"
    UNREACHABLE = "unreachable"  # local: transport reports a peer unreachable
    SNAP_STATUS = "snap_status"  # local: transport reports a snapshot's fate
    CHECK_QUORUM = "check_quorum"  # local: leader checks it still hears a quorum
    TRANSFER_LEADER = "transfer_leader"
    TIMEOUT_NOW = "timeout_now"
    READ_INDEX = "read_index"
    READ_INDEX_RESP = "read_index_resp"


RESPONSE_TYPES = frozenset(
    {
        MessageType.APP_RESP,
        MessageType.VOTE_RESP,
        MessageType.PRE_VOTE_RESP,
        MessageType.HEARTBEAT_RESP,
        MessageType.UNREACHABLE,
        MessageType.READ_INDEX_RESP,
    }
)
LOCAL_TYPES = frozenset(
    {
        MessageType.HUP,
        MessageType.BEAT,
        MessageType.UNREACHABLE,
        MessageType.SNAP_STATUS,
        MessageType.CHECK_QUORUM,
    }
)


class ReadOnlyOption(enum.Enum):
    """How ReadIndex confirms leadership: a heartbeat round (SAFE) or the leader lease."""

    SAFE = "safe"
    LEASE_BASED = "lease-based"


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry: the term of the leader that created it and its 1-based index."""

    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""

    def size(self) -> int:
        """Approximate encoded size in bytes (used for batching limits)."""
        return len(self.data) + 16


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on stable storage before any message of the same Ready is sent."""

    term: int = 0
    vote: int = NONE
    commit: int = 0

    def is_empty(self) -> bool:
        return self == EMPTY_HARD_STATE


EMPTY_HARD_STATE = HardState()


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state worth showing (not persisted): the known leader and our role."""

    lead: int = NONE
    role: Role = Role.FOLLOWER


@dataclass(frozen=True, slots=True)
class ConfState:
    """A configuration as stored in snapshots; sorted tuples of node ids."""

    voters: tuple[int, ...] = ()
    learners: tuple[int, ...] = ()
    voters_outgoing: tuple[int, ...] = ()
    learners_next: tuple[int, ...] = ()
    auto_leave: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    conf_state: ConfState = field(default_factory=ConfState)
    index: int = 0
    term: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The application state at `metadata.index`, plus the configuration at that index."""

    data: bytes = b""
    metadata: SnapshotMetadata = field(default_factory=SnapshotMetadata)

    def is_empty(self) -> bool:
        return self.metadata.index == 0


EMPTY_SNAPSHOT = Snapshot()


@dataclass(frozen=True, slots=True)
class Message:
    """One Raft message. `from_` sends to `to`; unused fields keep their zero values."""

    type: MessageType
    to: int = NONE
    from_: int = NONE
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    snapshot: Snapshot | None = None
    reject: bool = False
    reject_hint: int = 0
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the local applied index reaches `index`."""

    index: int
    request_ctx: bytes


class ConfChangeType(enum.Enum):
    """Values are etcd's datadriven tokens: v(oter), l(earner), r(emove), u(pdate)."""

    ADD_NODE = "v"
    ADD_LEARNER_NODE = "l"
    REMOVE_NODE = "r"
    UPDATE_NODE = "u"


class ConfChangeTransition(enum.Enum):
    """AUTO: simple change if possible, else joint with automatic leave (etcd semantics).

    IMPLICIT: joint consensus, left automatically; EXPLICIT: joint, left by an empty change.
    """

    AUTO = "auto"
    IMPLICIT = "implicit"
    EXPLICIT = "explicit"


@dataclass(frozen=True, slots=True)
class ConfChangeSingle:
    """One membership change of one node."""

    type: ConfChangeType
    node_id: int


@dataclass(frozen=True, slots=True)
class ConfChange:
    """An atomic set of membership changes; an empty one leaves a joint configuration."""

    changes: tuple[ConfChangeSingle, ...] = ()
    transition: ConfChangeTransition = ConfChangeTransition.AUTO
    context: bytes = b""

    def leave_joint(self) -> bool:
        """True for the empty change that asks to leave a joint configuration."""
        return not self.changes and self.transition is ConfChangeTransition.AUTO

    def enter_joint(self) -> tuple[bool, bool]:
        """(use joint consensus?, leave automatically?) as etcd's ConfChangeV2.EnterJoint."""
        if self.transition is not ConfChangeTransition.AUTO or len(self.changes) > 1:
            auto_leave = self.transition in (
                ConfChangeTransition.AUTO,
                ConfChangeTransition.IMPLICIT,
            )
            return True, auto_leave
        return False, False

    def encode(self) -> bytes:
        doc = {
            "c": [[c.type.value, c.node_id] for c in self.changes],
            "t": self.transition.value,
            "x": self.context.hex(),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> ConfChange:
        doc = json.loads(data.decode())
        return ConfChange(
            changes=tuple(ConfChangeSingle(ConfChangeType(t), int(n)) for t, n in doc["c"]),
            transition=ConfChangeTransition(doc["t"]),
            context=bytes.fromhex(doc["x"]),
        )
