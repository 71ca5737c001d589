from __future__ import annotations

import io
import json
import logging
import re

import structlog

from gpu_platform.infrastructure.logging import configure_logging


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_every_line_is_json_with_bound_context() -> None:
    out = io.StringIO()
    configure_logging("info", "auto", stream=out)
    with structlog.contextvars.bound_contextvars(job_id="j-1"):
        structlog.get_logger("t").info("started", gpus=2)
    logging.getLogger("uvicorn.error").warning("from stdlib")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["event"] == "started" and lines[0]["job_id"] == "j-1" and lines[0]["gpus"] == 2
    assert lines[1]["event"] == "from stdlib" and lines[1]["level"] == "warning"


def test_on_a_terminal_lines_are_human_readable_and_levels_filter() -> None:
    out = Tty()
    configure_logging("warning", "auto", stream=out)
    structlog.get_logger("t").info("hidden")
    structlog.get_logger("t").warning("shown", n=1)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert "hidden" not in text and "shown" in text and "n=1" in text
    assert not text.lstrip().startswith("{")


def test_inside_a_span_every_line_carries_its_trace_and_span_ids() -> None:
    from gpu_platform.infrastructure.tracing import configure_tracing

    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    tracer = configure_tracing(None).get_tracer("t")
    with tracer.start_as_current_span("request") as span:
        structlog.get_logger("t").info("inside")
    structlog.get_logger("t").info("outside")
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    ctx = span.get_span_context()
    assert inside["trace_id"] == format(ctx.trace_id, "032x")
    assert inside["span_id"] == format(ctx.span_id, "016x")
    assert "trace_id" not in outside
