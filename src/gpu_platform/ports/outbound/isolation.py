"""Isolation: confine one job attempt (CPUs, NUMA memory, memory, pids, device nodes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["DeviceRule", "Isolation", "IsolationError", "IsolationSpec", "WrapsCommand"]


class IsolationError(Exception):
    """The attempt could not be confined as asked (the message says which limit and why)."""


@dataclass(frozen=True, slots=True)
class DeviceRule:
    """One allowed device: `kind` c(har)/b(lock), `major`, `minor` (None = all minors)."""

    kind: Literal["c", "b"]
    major: int
    minor: int | None
    access: str = "rwm"

    def v1(self) -> str:
        """The cgroup v1 `devices.allow` line."""
        minor = "*" if self.minor is None else str(self.minor)
        return f"{self.kind} {self.major}:{minor} {self.access}"


@dataclass(frozen=True, slots=True)
class IsolationSpec:
    """What to confine. `name` is unique per attempt. Empty `cpus`/`mems` = not pinned;
    None limits = unlimited; `devices` None = no device filtering, a tuple = the allow-list
    (everything else denied)."""

    name: str
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()
    memory_bytes: int | None = None
    pids_max: int | None = None
    devices: tuple[DeviceRule, ...] | None = None
    cpu_milli: int = 0  # CPU time cap in milli-cores (the CFS quota); 0 = none


@runtime_checkable
class Isolation(Protocol):
    """Creates and removes per-attempt confinement.

    `prepare` creates it and returns the files the job's process must write its pid into
    before exec (so it starts confined); raises IsolationError. `release` kills whatever is
    still inside and removes it; idempotent. `sweep` releases everything this adapter created
    in an earlier life (after a crash) and returns the names. Thread-safe.
    """

    name: str

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]: ...

    def release(self, name: str) -> None: ...

    def sweep(self) -> list[str]: ...


@runtime_checkable
class WrapsCommand(Protocol):
    """An Isolation that confines by running the job under a wrapper program (systemd-run):
    `command_prefix` is the argv to put before the job's, after `prepare(spec)` for `name`;
    the wrapper also switches to `uid`/`gid` when given (it must start as root)."""

    def command_prefix(self, name: str, uid: int | None, gid: int | None) -> tuple[str, ...]: ...
