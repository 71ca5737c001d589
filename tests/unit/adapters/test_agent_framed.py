"""The framed agent protocol's frames and trailers (`agent_wire.framed`)."""

from __future__ import annotations

import asyncio

import pytest

from gpu_platform.adapters.agent_wire.framed import (
    TRAILER,
    FrameError,
    Trailer,
    frame,
    parse_trailer,
    read_frame,
    trailer_frame,
)


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def _read_all(data: bytes, limit: int = 1 << 20) -> list[bytes | None]:
    async def run() -> list[bytes | None]:
        reader, out = _reader(data), []
        while (payload := await read_frame(reader, limit)) is not None:
            out.append(payload)
        return [*out, None]

    return asyncio.run(run())


def test_frames_come_back_in_order_and_a_clean_end_is_none() -> None:
    assert _read_all(frame(b"one") + frame(b"") + frame(b"three")) == [b"one", b"", b"three", None]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (frame(b"whole")[:2], "inside a frame's length"),
        (frame(b"whole")[:-1], "inside a frame"),
        (frame(b"x" * 11), "more than the 10 allowed"),
    ],
    ids=["cut-in-length", "cut-in-payload", "too-long"],
)
def test_a_broken_stream_raises_frame_error(data: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        _read_all(data, limit=10)


def test_a_trailer_round_trips_with_and_without_a_leader() -> None:
    for trailer in (Trailer("OK"), Trailer("FAILED_PRECONDITION", "not the leader", "h:1")):
        (payload, _) = _read_all(trailer_frame(trailer))
        assert payload is not None and payload[0] == TRAILER
        assert parse_trailer(payload[1:]) == trailer


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"details": "no code"}'])
def test_a_bad_trailer_raises_frame_error(body: bytes) -> None:
    with pytest.raises(FrameError, match="bad trailer"):
        parse_trailer(body)
