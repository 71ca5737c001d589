"""Helpers shared by the cgroup adapters: writing control files, emptying and removing groups."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from gpu_platform.ports.outbound.isolation import IsolationError

__all__ = ["cpu_list", "empty_and_remove", "members", "parse_list", "write"]


def write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise IsolationError(
            f"cannot write {value.strip()!r} to {path}: {exc.strerror or exc}"
        ) from exc


def cpu_list(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in sorted(ids))


def parse_list(text: str) -> set[int]:
    """Parse a kernel list like '0-3,8,10-11'."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def members(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


def empty_and_remove(group: Path, timeout_s: float = 5.0) -> None:
    """SIGKILL every process in `group`, wait until it is empty, then rmdir it."""
    if not group.is_dir():
        return
    deadline = time.monotonic() + timeout_s
    while pids := members(group):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise IsolationError(f"{group} still has processes {pids} after SIGKILL")
        time.sleep(0.01)
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while the kernel finishes reaping
            time.sleep(0.01)
    raise IsolationError(f"cannot remove {group}")


def remove_empty_levels(top: Path, prefix: str) -> None:
    """rmdir `top/prefix` and then each of its parents up to `top`, deepest first, stopping
    at the first that is not empty (another server's groups live there) or is gone."""
    parts = Path(prefix).parts
    for depth in range(len(parts), 0, -1):
        level = top.joinpath(*parts[:depth])
        try:
            level.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # not empty (EBUSY / ENOTEMPTY): it is in use
            return
