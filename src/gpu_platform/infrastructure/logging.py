"""structlog set-up: pretty on a TTY, JSON lines otherwise; stdlib logging routed through it.

Context (job_id, request ids) is bound with `structlog.contextvars.bind_contextvars` and appears
on every line logged in that context; inside an OpenTelemetry span every line also carries
`trace_id` and `span_id` (hex, as exporters show them), so logs and traces join up.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog
from opentelemetry import trace

__all__ = ["add_trace_ids", "configure_logging"]


def add_trace_ids(
    _logger: object, _method: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    """structlog processor: the current span's trace and span ids, when there is one."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event.setdefault("trace_id", format(ctx.trace_id, "032x"))
        event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event


def configure_logging(
    level: str = "info", fmt: Literal["auto", "console", "json"] = "auto", stream: object = None
) -> None:
    out = stream if stream is not None else sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and getattr(out, "isatty", lambda: False)())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.add_logger_name,
    ]
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # first: a dropped line costs no formatting
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)  # type: ignore[arg-type]
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
