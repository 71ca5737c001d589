"""`ProcessLeaseFence`: the agent's side of the lease fencer (`_fence.py`, its own process).

The agent renews the lease with the CLOCK_MONOTONIC time it ends (`renew`); the runner
`register`s each task's process (its process group) when it starts and `unregister`s it when
it has ended, and asks `fenced` whether the fencer stopped it. While no lease was ever granted
(`renew` not called yet) nothing is fenced. Files are written atomically (rename); the fencer
reads them every 50 ms. Thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["ProcessLeaseFence"]

_FENCER = str(Path(__file__).with_name("_fence.py"))


def _start_ticks(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


class ProcessLeaseFence:
    """`root` holds the lease and task files; `grace_s` is the wait between SIGTERM and
    SIGKILL once the lease has ended."""

    def __init__(self, root: str | Path, grace_s: float) -> None:
        self.root = Path(root)
        self.grace_s = grace_s
        (self.root / "tasks").mkdir(parents=True, exist_ok=True)
        (self.root / "fenced").mkdir(parents=True, exist_ok=True)
        for stale in (*self.root.glob("tasks/*"), *self.root.glob("fenced/*")):
            stale.unlink(missing_ok=True)  # an earlier incarnation's; its tasks are reaped
        (self.root / "lease").unlink(missing_ok=True)
        self._lock = threading.Lock()
        self._names: dict[int, str] = {}  # pid -> task file name
        self._until: float | None = None  # the lease's end (None: never granted)
        self._lapsed: float | None = None  # the latest end that passed before a renewal
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", _FENCER, str(self.root), str(grace_s), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a signal to the agent's group does not reach it
        )

    @property
    def tasks(self) -> Path:
        """The folder of task files (`PID-START`); a task may name itself there first."""
        return self.root / "tasks"

    def renew(self, until_monotonic: float) -> None:
        """The lease now ends at `until_monotonic` (time.monotonic() seconds)."""
        tmp = self.root / "lease.tmp"
        tmp.write_text(f"{until_monotonic:.6f}\n")
        tmp.replace(self.root / "lease")
        with self._lock:
            if self._until is not None and self._until <= time.monotonic():
                self._lapsed = self._until  # it had run out: the fencer may have acted
            self._until = until_monotonic

    def ended(self, since: float | None = None) -> bool:
        """The lease was granted and has run out — now, or (with `since`, a monotonic time)
        at any moment after `since` even if renewed since. Nothing may start then: the leader
        may already run the work elsewhere (a launch read late, after a freeze, is stale)."""
        with self._lock:
            until, lapsed = self._until, self._lapsed
        if until is not None and time.monotonic() >= until:
            return True
        return since is not None and lapsed is not None and lapsed >= since

    def register(self, pid: int) -> None:
        """Task process `pid` (a process-group leader) runs under the lease from now on."""
        name = f"{pid}-{_start_ticks(pid)}"
        with self._lock:
            self._names[pid] = name
        (self.root / "tasks" / name).touch()

    def unregister(self, pid: int) -> bool:
        """Task `pid` has ended; True if the fencer had stopped it."""
        with self._lock:
            name = self._names.pop(pid, None)
        if name is None:
            return False
        (self.root / "tasks" / name).unlink(missing_ok=True)
        marker = self.root / "fenced" / name
        fenced = marker.exists()
        marker.unlink(missing_ok=True)
        return fenced

    def close(self) -> None:
        """Stop the fencer (the agent is going away and stops its tasks itself)."""
        self._proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def alive(self) -> bool:
        return self._proc.poll() is None
