"""Hypothesis strategies for Raft messages (public: any transport's wire codec must carry each
one back equal; the gRPC codec and the TCP frames are tested with them)."""

from __future__ import annotations

from hypothesis import strategies as st

from gpu_platform.domain.consensus import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)

__all__ = ["U64", "raft_messages"]

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def raft_messages(numbers: st.SearchStrategy[int] = U64) -> st.SearchStrategy[Message]:
    """Any message the core can make: every type, entries of every kind, a snapshot with a
    joint configuration or none; node ids, terms and indexes drawn from `numbers`."""
    group = st.lists(numbers, max_size=3).map(tuple)
    entries = st.builds(
        Entry,
        term=numbers,
        index=numbers,
        type=st.sampled_from(EntryType),
        data=st.binary(max_size=64),
    )
    conf_states = st.builds(
        ConfState,
        voters=st.lists(numbers, max_size=5).map(tuple),
        learners=group,
        voters_outgoing=group,
        learners_next=group,
        auto_leave=st.booleans(),
    )
    snapshots = st.builds(
        Snapshot,
        data=st.binary(max_size=256),
        metadata=st.builds(SnapshotMetadata, conf_state=conf_states, index=numbers, term=numbers),
    )
    return st.builds(
        Message,
        type=st.sampled_from(MessageType),
        to=numbers,
        from_=numbers,
        term=numbers,
        log_term=numbers,
        index=numbers,
        entries=st.lists(entries, max_size=4).map(tuple),
        commit=numbers,
        snapshot=st.none() | snapshots,
        reject=st.booleans(),
        reject_hint=numbers,
        context=st.binary(max_size=16),
    )
