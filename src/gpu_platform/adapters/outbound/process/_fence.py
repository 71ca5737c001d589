"""Lease fencer for a node's job processes: stop them when the agent's lease runs out.

Run as `python -I -S _fence.py DIR GRACE_S AGENT_PID`. The agent holds a lease from the leader
(renewed by every heartbeat the leader acknowledged) and writes its end into `DIR/lease` as a
CLOCK_MONOTONIC time; the runner names each live task in `DIR/tasks/PID-START` (START: the
process's start time in clock ticks, from /proc, so a reused pid is never signalled). This
process is separate from the agent on purpose: an agent that is stopped (SIGSTOP), hung or cut
off renews nothing, and its tasks are still stopped here — SIGTERM to each task's process
group once the lease has ended, SIGKILL `GRACE_S` later — so the leader may run the work
elsewhere once `lease + grace + margin` has passed since the node's last heartbeat, without
two copies ever running. Each fenced task is marked in `DIR/fenced/PID-START` first, so the
runner reports its end as fenced (the job is re-queued, not failed). It exits when the agent
is gone and no task is left. Standalone: stdlib only, like `_shim.py`.
"""

import contextlib
import os
import signal
import sys
import time

POLL_S = 0.05


def start_ticks(pid: int) -> str:
    """Field 22 of /proc/PID/stat (the start time), or '' if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def lease_end(path: str) -> float | None:
    try:
        with open(path) as f:
            return float(f.read().strip() or "nan")
    except (OSError, ValueError):
        return None


def running(name: str) -> bool:
    """The task named `name` (PID-START) still exists (a zombie counts as ended)."""
    pid_s, start = name.split("-", 1)
    try:
        with open(f"/proc/{pid_s}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] != "Z"


def signal_group(name: str, sig: int) -> None:
    pid_s, start = name.split("-", 1)
    pid = int(pid_s)
    if start_ticks(pid) != start:
        return  # it ended (and the pid may be someone else's now)
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


def main() -> None:
    root, grace, agent = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    tasks, fenced = os.path.join(root, "tasks"), os.path.join(root, "fenced")
    os.makedirs(tasks, exist_ok=True)
    os.makedirs(fenced, exist_ok=True)
    terminated: dict[str, float] = {}  # task -> when SIGTERM went out
    while True:
        time.sleep(POLL_S)
        try:
            names = os.listdir(tasks)
        except OSError:
            return  # the agent's state directory is gone
        end = lease_end(os.path.join(root, "lease"))
        now = time.monotonic()
        late = None if end is None else now - end
        expired = late is not None and late >= 0
        for name in names:
            if name in terminated:
                if now - terminated[name] >= grace:
                    signal_group(name, signal.SIGKILL)
                continue
            if expired:
                open(os.path.join(fenced, name), "w").close()
                sys.stderr.write(
                    f"gpu-platform fence: lease ended {late:.2f}s ago; stopping task {name}\n"
                )
                signal_group(name, signal.SIGTERM)
                terminated[name] = now
        for name in list(terminated):
            if name not in names:
                del terminated[name]
        if start_ticks(agent) == "" and not any(running(n) for n in names):
            return  # the agent is gone and nothing of its tasks runs


main()
