"""A job event's log line follows the configured level, read at each event: written at info,
nothing built or written at warning, and a level changed later is obeyed."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from gpu_platform.adapters.outbound.observability import StructlogEventPublisher
from gpu_platform.domain.events import JobSubmitted
from gpu_platform.infrastructure.logging import configure_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield io.StringIO()
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def _events(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in stream.getvalue().splitlines()]


def test_an_event_is_logged_at_info_and_dropped_at_warning(stream: io.StringIO) -> None:
    configure_logging("warning", "json", stream)
    publisher = StructlogEventPublisher()
    publisher.publish(JobSubmitted("j-1", 0))
    assert _events(stream) == []
    configure_logging("info", "json", stream)  # a level set after the publisher was made
    publisher.publish(JobSubmitted("j-2", 0))
    assert _events(stream) == ["JobSubmitted"]


def test_without_stdlib_logging_every_event_is_logged() -> None:
    structlog.reset_defaults()
    with structlog.testing.capture_logs() as lines:
        StructlogEventPublisher().publish(JobSubmitted("j-1", 0))
    assert [line["event"] for line in lines] == ["JobSubmitted"]
