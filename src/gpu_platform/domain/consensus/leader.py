"""The leader side of Raft: proposals, replication with flow control, commit, reads, transfer.

Theory of operation. The leader appends proposals to its own log, then streams them to each
peer according to the peer's `Progress` (see `tracker.py`): one probe at a time while the
follower's log end is unknown, a window of up to `max_inflight_msgs` appends once it is known,
a snapshot when the needed entries were compacted. Appends carry up to `max_size_per_msg`
bytes of entries (batching; 0 means one entry per message). A rejected append moves `next`
back using the follower's hint (fast back-off, `RaftLog.find_conflict_by_term`).

The commit index advances when a quorum's `match` reaches an index *and* that entry is of the
leader's current term (§5.4.2, Figure 8); earlier entries are then committed indirectly.
A configuration change is accepted only when no other is pending (`pending_conf_index`).
Read-index requests are answered once a heartbeat round confirms leadership (or at once under a
lease); they wait until an entry of the current term is committed.

These are functions over `Raft` (not methods) to keep each module on one concept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.consensus.errors import (
    CompactedError,
    LogInvariantError,
    ProposalDroppedError,
    UnavailableError,
)
from gpu_platform.domain.consensus.quorum import VoteResult
from gpu_platform.domain.consensus.tracker import ProgressState
from gpu_platform.domain.consensus.types import (
    NONE,
    ConfChange,
    Entry,
    EntryType,
    Message,
    MessageType,
    ReadOnlyOption,
    ReadState,
    Role,
)

if TYPE_CHECKING:
    from gpu_platform.domain.consensus.raft import Raft

__all__ = [
    "append_entry",
    "bcast_append",
    "bcast_heartbeat",
    "maybe_commit",
    "maybe_send_append",
    "step_down_removed",
    "step_leader",
]

MT = MessageType


def append_entry(r: Raft, entries: list[Entry]) -> None:
    """Stamp `entries` with our term and the next indexes, append, and try to commit."""
    li = r.raft_log.last_index()
    term = r.term
    stamped = [Entry(term, li + 1 + i, e.type, e.data) for i, e in enumerate(entries)]
    li = r.raft_log.append(stamped)
    r.prs.progress[r.id].maybe_update(li)
    maybe_commit(r)


def maybe_commit(r: Raft) -> bool:
    """Advance the commit index to what a quorum holds, if that entry is of our term."""
    if r.raft_log.maybe_commit(r.prs.committed(), r.term):
        _release_pending_read_index(r)
        return True
    return False


def bcast_append(r: Raft) -> None:
    for i in sorted(r.prs.progress):
        if i != r.id:
            maybe_send_append(r, i, send_if_empty=True)


def bcast_heartbeat(r: Raft, ctx: bytes = b"") -> None:
    """Heartbeat every peer; with `lean_replication`, a periodic round (no read-index `ctx`)
    skips a peer streaming appends (REPLICATE, room in flight) that got one since the last
    round and was sent the commit index a heartbeat would carry (`Config.lean_replication`)."""
    committed = r.raft_log.committed
    quiet = r.lean_replication and not ctx
    for i, pr in r.prs.visit():
        if i == r.id:
            continue
        appended, pr.appended = pr.appended, False
        commit = min(pr.match, committed)
        if (
            quiet
            and appended
            and pr.sent_commit >= commit
            and pr.state is ProgressState.REPLICATE
            and not pr.inflights.full()
        ):
            continue
        pr.sent_commit = max(pr.sent_commit, commit)
        r.send(r.msg(MT.HEARTBEAT, i, commit=commit, context=ctx))


def maybe_send_append(r: Raft, to: int, send_if_empty: bool) -> bool:
    """Send `to` the entries it lacks (or a snapshot); False when nothing was sent."""
    pr = r.prs.progress[to]
    if pr.is_paused():
        return False
    log = r.raft_log
    try:
        prev_term = log.term(pr.next - 1)
        ents = log.entries(pr.next, r.max_msg_size)
    except (CompactedError, UnavailableError):
        if not pr.recent_active:
            return False  # do not ship a snapshot to a peer that may be down
        snap = log.snapshot()
        if snap.is_empty():
            raise LogInvariantError("need non-empty snapshot") from None
        pr.become_snapshot(snap.metadata.index)
        r.send(r.msg(MT.SNAP, to, snapshot=snap))
        return True
    if not ents and not send_if_empty:
        return False
    if ents:
        if pr.state is ProgressState.REPLICATE:
            last = ents[-1].index
            pr.optimistic_update(last)
            pr.inflights.add(last)
        elif pr.state is ProgressState.PROBE:
            pr.probe_sent = True
        else:
            raise LogInvariantError(f"sending append in unhandled state {pr.state}")
    pr.appended = True
    pr.sent_commit = log.committed
    r.send(
        Message(
            MT.APP,
            to,
            r.id,
            r.term,
            prev_term,
            pr.next - 1 if not ents else ents[0].index - 1,
            tuple(ents),
            log.committed,
        )
    )
    return True


def step_down_removed(r: Raft) -> None:
    """We lead but were removed (or demoted): hand over to the most caught-up voter."""
    best, best_match = NONE, -1
    for i, pr in r.prs.visit():
        if i in r.prs.config.voters.ids() and pr.match > best_match:
            best, best_match = i, pr.match
    if best != NONE and best_match == r.raft_log.last_index():
        r.send(r.msg(MT.TIMEOUT_NOW, best))
    r.become_follower(r.term, NONE)


def step_leader(r: Raft, m: Message) -> None:  # noqa: PLR0915 - one dispatch, kept together
    t = m.type
    if t is MT.BEAT:
        bcast_heartbeat(r, r.read_only.last_pending_request_ctx())
        return
    if t is MT.CHECK_QUORUM:
        if not r.prs.quorum_active():
            r.become_follower(r.term, NONE)  # we cannot hear a quorum: step down
        for i, peer in r.prs.progress.items():
            if i != r.id:
                peer.recent_active = False
        return
    if t is MT.PROP:
        _propose(r, m)
        return
    if t is MT.READ_INDEX:
        _read_index(r, m)
        return

    pr = r.prs.progress.get(m.from_)
    if pr is None:
        return  # a peer no longer in the configuration
    if t is MT.APP_RESP:
        pr.recent_active = True
        if m.reject:
            next_probe = m.reject_hint
            if m.log_term > 0:
                next_probe = r.raft_log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decr_to(m.index, next_probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                maybe_send_append(r, m.from_, send_if_empty=True)
            return
        old_paused = pr.is_paused()
        if not pr.maybe_update(m.index):
            return
        if pr.state is ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
            pr.become_probe()
            pr.become_replicate()
        elif pr.state is ProgressState.REPLICATE:
            pr.inflights.free_le(m.index)
        if maybe_commit(r):
            if not r.lean_replication:  # lean: the index goes with the next append or beat
                bcast_append(r)
        elif old_paused:
            maybe_send_append(r, m.from_, send_if_empty=True)
        while maybe_send_append(r, m.from_, send_if_empty=False):
            pass
        if m.from_ == r.lead_transferee and pr.match == r.raft_log.last_index():
            r.send(r.msg(MT.TIMEOUT_NOW, m.from_))
    elif t is MT.HEARTBEAT_RESP:
        pr.recent_active = True
        pr.probe_sent = False
        if pr.state is ProgressState.REPLICATE and pr.inflights.full():
            pr.inflights.free_first_one()
        if pr.match < r.raft_log.last_index():
            maybe_send_append(r, m.from_, send_if_empty=True)
        if r.read_only_option is not ReadOnlyOption.SAFE or not m.context:
            return
        acks = r.read_only.recv_ack(m.from_, m.context)
        if acks is None or r.prs.config.voters.vote_result(acks) is not VoteResult.WON:
            return
        for rs in r.read_only.advance(m.context):
            _answer_read(r, rs.req, rs.index)
    elif t is MT.SNAP_STATUS:
        if pr.state is not ProgressState.SNAPSHOT:
            return
        if m.reject:
            pr.pending_snapshot = 0
        pr.become_probe()
        pr.probe_sent = True  # wait for a heartbeat response before probing again
    elif t is MT.UNREACHABLE:
        if pr.state is ProgressState.REPLICATE:
            pr.become_probe()
    elif t is MT.TRANSFER_LEADER:
        _transfer_leader(r, m.from_)


def _propose(r: Raft, m: Message) -> None:
    if not m.entries:
        raise ProposalDroppedError("stepped empty proposal")
    if r.id not in r.prs.progress:
        raise ProposalDroppedError("leader was removed from the configuration")
    if r.lead_transferee != NONE:
        raise ProposalDroppedError("leader transfer in progress")
    entries = list(m.entries)
    for i, e in enumerate(entries):
        if e.type is not EntryType.CONF_CHANGE:
            continue
        cc = ConfChange.decode(e.data)
        already_pending = r.pending_conf_index > r.raft_log.applied
        already_joint = r.prs.config.voters.is_joint()
        wants_leave = cc.leave_joint()
        if already_pending or already_joint != wants_leave:
            entries[i] = Entry(0, 0)  # refused: keep the batch's indexes, drop the change
        else:
            r.pending_conf_index = r.raft_log.last_index() + i + 1
    append_entry(r, entries)
    bcast_append(r)


def _committed_in_current_term(r: Raft) -> bool:
    log = r.raft_log
    try:
        return log.term(log.committed) == r.term
    except CompactedError:
        return False


def _read_index(r: Raft, m: Message) -> None:
    if r.prs.is_singleton():
        _answer_read(r, m, r.raft_log.committed)
        return
    if not _committed_in_current_term(r):
        r.pending_read_index.append(m)  # answered once our first entry commits
        return
    _send_read_index(r, m)


def _send_read_index(r: Raft, m: Message) -> None:
    if r.read_only_option is ReadOnlyOption.SAFE:
        r.read_only.add_request(r.raft_log.committed, m)
        r.read_only.recv_ack(r.id, m.context)
        bcast_heartbeat(r, m.context)
    else:
        _answer_read(r, m, r.raft_log.committed)


def _release_pending_read_index(r: Raft) -> None:
    if r.state is not Role.LEADER or not r.pending_read_index:
        return
    if not _committed_in_current_term(r):
        return
    pending, r.pending_read_index = r.pending_read_index, []
    for m in pending:
        _send_read_index(r, m)


def _answer_read(r: Raft, req: Message, index: int) -> None:
    if req.from_ in (NONE, r.id):
        r.read_states.append(ReadState(index, req.context))
    else:
        r.send(r.msg(MT.READ_INDEX_RESP, req.from_, index=index, context=req.context))


def _transfer_leader(r: Raft, transferee: int) -> None:
    pr = r.prs.progress[transferee]
    if pr.is_learner:
        return
    if r.lead_transferee != NONE:
        if r.lead_transferee == transferee:
            return  # already transferring to it
        r.lead_transferee = NONE
    if transferee == r.id:
        return
    r.election_elapsed = 0  # the transfer must finish within one election timeout
    r.lead_transferee = transferee
    if pr.match == r.raft_log.last_index():
        r.send(r.msg(MT.TIMEOUT_NOW, transferee))
    else:
        maybe_send_append(r, transferee, send_if_empty=True)
