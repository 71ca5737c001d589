"""What each tenant sent through the gateway: requests and prompt/completion tokens.

Counted by this server process since it started (not replicated, not windowed): the
Prometheus counters carry the history. Thread-safe: the gateway records from its event loop,
`usage` reads from request threads.
"""

from __future__ import annotations

import threading

from gpu_platform.ports.inbound.usage import ServingUsage

__all__ = ["ServingLedger"]


class ServingLedger:
    def __init__(self) -> None:
        self._rows: dict[str, list[int]] = {}  # tenant -> [requests, prompt, completion]
        self._lock = threading.Lock()

    def record(self, tenant: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            row = self._rows.get(tenant)
            if row is None:
                row = self._rows[tenant] = [0, 0, 0]
            row[0] += 1
            row[1] += prompt_tokens
            row[2] += completion_tokens

    def by_tenant(self, tenant: str | None = None) -> dict[str, ServingUsage]:
        with self._lock:
            return {
                name: ServingUsage(row[0], row[1], row[2])
                for name, row in sorted(self._rows.items())
                if tenant is None or name == tenant
            }
