"""The TCP transport's frame body (`raft_tcp.frames`): every message the core can make comes
back equal, and bytes that are not exactly one batch are refused, never half-delivered."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.raft_tcp.frames import FrameError, pack_batch, unpack_batch
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.testing.raft_strategies import U64, raft_messages

messages = raft_messages(U64)


@settings(max_examples=150, deadline=None)
@given(sender=U64, receiver=U64, batch=st.lists(messages, max_size=4))
def test_a_packed_batch_unpacks_to_the_same_messages(
    sender: int, receiver: int, batch: list[Message]
) -> None:
    assert unpack_batch(pack_batch(sender, receiver, batch)) == (sender, receiver, batch)


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(messages, min_size=1, max_size=3), cut=st.integers(min_value=1))
def test_a_cut_or_padded_batch_is_refused(batch: list[Message], cut: int) -> None:
    body = pack_batch(1, 2, batch)
    with pytest.raises(FrameError):
        unpack_batch(body[: len(body) - 1 - cut % len(body)])
    with pytest.raises(FrameError):
        unpack_batch(body + b"\0")


def test_an_unknown_message_type_is_refused() -> None:
    body = bytearray(pack_batch(1, 2, [Message(MessageType.HEARTBEAT, to=2, from_=1)]))
    body[20] = 255  # the first message's type code
    with pytest.raises(FrameError):
        unpack_batch(bytes(body))
