"""Domain errors.

DomainError
├── InvalidRequest        a request can never be satisfied or is malformed (names the field)
├── NotFound              an id that the cluster does not know
├── IllegalTransition     a state machine got an input its table does not allow
└── Conflict              a command that contradicts current state (e.g. a stale bind)
"""

from __future__ import annotations

__all__ = ["Conflict", "DomainError", "IllegalTransition", "InvalidRequest", "NotFound"]


class DomainError(Exception):
    """Base of every error the domain raises."""


class InvalidRequest(DomainError):
    """The request is malformed or can never be satisfied; `field` names the culprit."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(DomainError):
    """No entity of `kind` has id `ident`."""

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} not found")
        self.kind = kind
        self.ident = ident


class IllegalTransition(DomainError):
    """A state machine was given an input that is not legal in its current state."""

    def __init__(self, machine: str, state: object, event: object) -> None:
        super().__init__(f"{machine}: input {event} is illegal in state {state}")
        self.machine = machine
        self.state = state
        self.event = event


class Conflict(DomainError):
    """The command contradicts the current state (stale epoch, GPU already taken, ...)."""
