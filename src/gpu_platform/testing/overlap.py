"""`AttemptWatcher`: polls the process table for a job's tasks and counts attempts that ran
at the same instant — "never run one job twice" checked from the outside.

Every task the process runner starts carries `GPU_PLATFORM_ATTEMPT=<job>:<epoch>` in its
environment. The watcher scans /proc every `interval` seconds (all nodes of a test cluster share
this machine's process table), keeps the live (not zombie) processes whose command line has
`needle`, and records, per poll, the distinct epochs of each job it sees alive. `overlaps()`
lists the polls at which one job had two epochs alive.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AttemptWatcher", "Overlap"]

MARKER = b"GPU_PLATFORM_ATTEMPT="


@dataclass(frozen=True, slots=True)
class Overlap:
    at: float  # time.monotonic() of the poll
    job_id: str
    epochs: tuple[int, ...]


def live_attempts(needle: bytes) -> dict[str, set[int]]:
    """Job id -> epochs with a live process whose command line contains `needle`."""
    found: dict[str, set[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "cmdline").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for var in environ.split(b"\0"):
            if var.startswith(MARKER):
                job, _, epoch = var[len(MARKER) :].decode().rpartition(":")
                found.setdefault(job, set()).add(int(epoch))
    return found


class AttemptWatcher(threading.Thread):
    """Polls until `stop()`; `polls` counts the scans made."""

    def __init__(self, needle: str, interval: float = 0.02) -> None:
        super().__init__(name="attempt-watcher", daemon=True)
        self._needle = needle.encode()
        self._interval = interval
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._overlaps: list[Overlap] = []
        self.polls = 0

    def run(self) -> None:
        while not self._halt.is_set():
            now = time.monotonic()
            for job, epochs in live_attempts(self._needle).items():
                if len(epochs) > 1:
                    with self._lock:
                        self._overlaps.append(Overlap(now, job, tuple(sorted(epochs))))
            self.polls += 1
            self._halt.wait(self._interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def overlaps(self) -> list[Overlap]:
        with self._lock:
            return list(self._overlaps)
