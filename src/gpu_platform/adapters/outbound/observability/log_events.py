"""StructlogEventPublisher: one structured log line per domain event."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import structlog

from gpu_platform.domain.events import DomainEvent

__all__ = ["StructlogEventPublisher"]


class StructlogEventPublisher:
    """Implements EventPublisher by logging `event=<EventName>` with the event's fields.

    A job's line also names its `node` and `gpus` (task 0's, from the allocation it binds or
    stops; a gang's line adds all its `nodes`) and,
    given `trace_ids` (job id -> trace id), the job's own `trace_id`, so lines written on the
    scheduler thread join the job's trace too."""

    def __init__(self, trace_ids: Callable[[str], str | None] | None = None) -> None:
        self._log = structlog.get_logger("gpu_platform.events")
        self._std = logging.getLogger("gpu_platform.events")  # what the stdlib factory gives
        self._trace_ids = trace_ids

    def _enabled(self) -> bool:
        # the stdlib-backed logger `configure_logging` sets up knows its level; asked
        # directly, since every attribute of the lazy proxy builds a bound logger first
        if isinstance(structlog.get_config()["logger_factory"], structlog.stdlib.LoggerFactory):
            return self._std.isEnabledFor(logging.INFO)
        try:
            return bool(self._log.isEnabledFor(logging.INFO))
        except AttributeError:  # structlog's own loggers (not configured): they print all
            return True

    def publish(self, event: DomainEvent) -> None:
        if not self._enabled():  # the level drops the line: build nothing
            return
        fields: dict[str, Any] = asdict(event)
        alloc = fields.get("allocation") or fields.get("stop")
        if isinstance(alloc, dict):
            fields.setdefault("node", alloc["node"])
            fields.setdefault("gpus", list(alloc["gpu_indices"]))
            if alloc.get("peers"):  # a gang: every task's node, rank order
                nodes = [alloc["node"], *(p["node"] for p in alloc["peers"])]
                fields.setdefault("nodes", list(dict.fromkeys(nodes)))
        job_id = fields.get("job_id")
        if self._trace_ids is not None and job_id:
            trace_id = self._trace_ids(job_id)
            if trace_id:
                fields["trace_id"] = trace_id
        self._log.info(type(event).__name__, **fields)
