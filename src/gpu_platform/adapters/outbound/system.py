"""Real clock and id generator."""

from __future__ import annotations

import time
import uuid

__all__ = ["SystemClock", "UuidJobIds"]


class SystemClock:
    """Implements Clock with time.time()."""

    def now(self) -> float:
        return time.time()


class UuidJobIds:
    """Implements IdGenerator: 'j-' + 12 hex digits of a random UUID (48 bits)."""

    def new_job_id(self) -> str:
        return "j-" + uuid.uuid4().hex[:12]
