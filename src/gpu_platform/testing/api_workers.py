"""`worker_pids`: the API worker processes of a server (`api_workers`), from /proc (Linux)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["worker_pids"]


def worker_pids(server_pid: int, mark: str = "") -> list[int]:
    """The live API workers whose parent is `server_pid` (and whose command line holds `mark`,
    e.g. the server's socket path, when given), in pid order. A worker that has exited and not
    been reaped has no command line, so it is not counted."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == server_pid and b"api_worker_main" in cmd and mark.encode() in cmd:
            found.append(int(entry.name))
    return sorted(found)
