"""Audit records: who did what to which target, when and why."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AuditRecord"]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One operator action. `at` is seconds since the Unix epoch; `target` names the GPU
    (`node:index`), node, or `inject`; `outcome` is "ok" or the refusal's message."""

    at: float
    actor: str
    action: str
    target: str
    reason: str
    outcome: str = "ok"
