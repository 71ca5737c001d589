"""Conversion between the consensus core's `Message` and the wire `raft_pb2.Message`.

The mapping is field for field (see `v1/raft.proto`), so `decode(encode(m)) == m` for every
message the core produces.
"""

from __future__ import annotations

from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.domain.consensus import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)

__all__ = ["decode_message", "encode_message"]


def _conf_pb(cs: ConfState) -> pb.ConfState:
    return pb.ConfState(
        voters=cs.voters,
        learners=cs.learners,
        voters_outgoing=cs.voters_outgoing,
        learners_next=cs.learners_next,
        auto_leave=cs.auto_leave,
    )


def _conf(p: pb.ConfState) -> ConfState:
    return ConfState(
        voters=tuple(p.voters),
        learners=tuple(p.learners),
        voters_outgoing=tuple(p.voters_outgoing),
        learners_next=tuple(p.learners_next),
        auto_leave=p.auto_leave,
    )


def _entry_pb(e: Entry) -> pb.Entry:
    return pb.Entry(term=e.term, index=e.index, type=e.type.value, data=e.data)


def encode_message(m: Message) -> pb.Message:
    out = pb.Message(
        type=m.type.value,
        to=m.to,
        from_id=m.from_,
        term=m.term,
        log_term=m.log_term,
        index=m.index,
        entries=[_entry_pb(e) for e in m.entries],
        commit=m.commit,
        reject=m.reject,
        reject_hint=m.reject_hint,
        context=m.context,
    )
    if m.snapshot is not None:
        md = m.snapshot.metadata
        out.snapshot.CopyFrom(
            pb.Snapshot(
                data=m.snapshot.data,
                conf_state=_conf_pb(md.conf_state),
                index=md.index,
                term=md.term,
            )
        )
    return out


def decode_message(p: pb.Message) -> Message:
    snap = None
    if p.HasField("snapshot"):
        s = p.snapshot
        snap = Snapshot(s.data, SnapshotMetadata(_conf(s.conf_state), s.index, s.term))
    return Message(
        type=MessageType(p.type),
        to=p.to,
        from_=p.from_id,
        term=p.term,
        log_term=p.log_term,
        index=p.index,
        entries=tuple(Entry(e.term, e.index, EntryType(e.type), e.data) for e in p.entries),
        commit=p.commit,
        snapshot=snap,
        reject=p.reject,
        reject_hint=p.reject_hint,
        context=p.context,
    )
