"""Job logs on a node: one layout for every runner (process or container), capped copies of
a task's output, and tails for `jobs logs`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

__all__ = ["attempt_log_path", "pump_log", "read_tail", "write_capped"]


def attempt_log_path(root: Path, job_id: str, attempt: int, rank: int = 0) -> Path:
    """Where task `rank` of an attempt logs (one layout for every runner)."""
    if "/" in job_id or job_id.startswith("."):
        raise ValueError(f"bad job id {job_id!r}")
    name = f"attempt-{attempt}.log" if rank == 0 else f"attempt-{attempt}.rank-{rank}.log"
    return root / job_id / name


def read_tail(path: Path, tail_bytes: int) -> str:
    """The last `tail_bytes` of a log ('' when there is none yet)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - tail_bytes))
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def pump_log(stream: IO[bytes], path: Path, cap: int) -> None:
    """Copy the job's output to its log, up to `cap` bytes; keep draining after the cut."""
    with stream:
        write_capped(iter(lambda: stream.read1(65536), b""), path, cap)  # type: ignore[attr-defined]


def write_capped(chunks: Iterable[bytes], path: Path, cap: int) -> None:
    """Append `chunks` to `path` up to `cap` bytes, marking the cut; consume them all."""
    written = 0
    with path.open("ab") as out:
        for chunk in chunks:
            if written >= cap:
                continue
            part = chunk[: cap - written]
            out.write(part)
            written += len(part)
            if written >= cap:
                out.write(f"\n[gpu-platform: log truncated at {cap} bytes]\n".encode())
            out.flush()
