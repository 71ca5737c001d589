"""The server's CPU priority (`cpu_priority = "high"` or `"realtime"`, issue 21: no elections
while the cluster is loaded; docs/raft.md, "CPU priority").

Theory of operation. A follower campaigns after 150-300 ms without its leader's heartbeat (the
server's defaults). On a shared 2-core machine at load 8-26, leaders went that long without a
heartbeat although alive: their Raft loop ticked 100-1,000 ms late. Measured with the loop and
the keeper already under a real-time policy, the stalls came from the GIL: a thread of normal
priority holding it (a garbage collection of 20-100 ms of CPU, or any Python code) was taken
off its core by the machine's other processes and held it for 120-600 ms of wall time, and
the Raft threads waited behind it. So priority has to be raised for the whole process, as
etcd's tuning guide does with `renice` (and `ionice`) for etcd on a shared machine, with the
threads that keep leadership above the rest of the process:

* `raise_process_priority(nice)` (`high` and `realtime`): every thread of the process gets
  `nice` (threads started later inherit it from the thread that starts them); where the
  kernel groups processes by session (autogroups, `sched_autogroup_enabled`), nice values
  only order threads of one session, so a server that leads its own session (a systemd
  service, `setsid`, the test clusters) also sets its autogroup's nice. A server sharing its
  session (started from a shell) says so in one line: its priority then counts only within
  that session.
* `RealtimeThreadPriority.raise_current` (`realtime` only): the calling thread (the Raft
  loop, the heartbeat keeper, the Raft transport's thread) runs under `SCHED_RR`, ahead of
  every normal thread, and takes the GIL first among its waiters (the kernel wakes waiters by
  priority). With `SCHED_RESET_ON_FORK` what such a thread starts does not inherit the
  policy. Bounded: these threads block on queues and sockets between bursts, a process runs
  Python on one core at a time, and the kernel caps real-time threads at
  `sched_rt_runtime_us` (95%) of each second. What it cost, measured in one throughput run:
  the leader's transport thread and Raft loop took 3.7 and 2.7 s of CPU, where no thread but
  the main one took more than ~1.1 s at normal priority (presumably each message now wakes
  its thread at once instead of several waiting together; not separated).

Privilege: a negative nice and `SCHED_RR` need CAP_SYS_NICE (root), or `RLIMIT_NICE` /
`RLIMIT_RTPRIO` (`LimitNICE=` / `LimitRTPRIO=` in a systemd unit). Refused (EPERM), each says
so in one warning line, once per process, and the server runs on at normal priority.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

__all__ = ["HIGH_NICE", "RealtimeThreadPriority", "raise_process_priority"]

log = logging.getLogger(__name__)

HIGH_NICE = -10  # the process's nice value at high/realtime (weight 9,548 against 1,024)
_COMM_MAX = 15  # bytes of a thread's OS name (TASK_COMM_LEN - 1)
_PRIVILEGE = "needs CAP_SYS_NICE, or RLIMIT_NICE / RLIMIT_RTPRIO (LimitNICE= / LimitRTPRIO=)"


def raise_process_priority(nice: int = HIGH_NICE) -> bool:
    """Give every thread of this process (and its autogroup, when it leads its session) the
    nice value `nice`; False (and one warning) when the OS refuses."""
    try:
        for tid in os.listdir("/proc/self/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
    except PermissionError:
        log.warning(
            "cpu_priority high: could not set nice %d: not permitted (%s)", nice, _PRIVILEGE
        )
        return False
    except (FileNotFoundError, ProcessLookupError):  # no /proc, or a thread that just ended
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    autogroup = Path("/proc/self/autogroup")
    if not autogroup.exists() or _read("/proc/sys/kernel/sched_autogroup_enabled") != "1":
        return True
    if os.getsid(0) != os.getpid():
        log.info(
            "cpu_priority high: this server shares its session's autogroup, so its nice value "
            "orders it only within that session (start it in a session of its own: a service, "
            "setsid)"
        )
        return True
    try:
        autogroup.write_text(str(nice))
    except OSError as exc:
        log.warning("cpu_priority high: could not set the autogroup's nice %d: %s", nice, exc)
        return False
    return True


class RealtimeThreadPriority:
    """`raise_current` puts the calling thread under `SCHED_RR` at `priority` (1-99)."""

    def __init__(self, priority: int = 1) -> None:
        if not 1 <= priority <= 99:
            raise ValueError(f"priority must be in 1..99, got {priority}")
        self.priority = priority
        self._refused = False
        self._lock = threading.Lock()

    def raise_current(self, name: str) -> None:
        tid = threading.get_native_id()
        _name_thread(tid, name)
        policy = getattr(os, "SCHED_RR", None)
        if policy is None:  # not Linux
            self._refuse(name, "this OS has no SCHED_RR")
            return
        try:
            os.sched_setscheduler(
                tid, policy | getattr(os, "SCHED_RESET_ON_FORK", 0), os.sched_param(self.priority)
            )
        except PermissionError:
            self._refuse(name, f"not permitted ({_PRIVILEGE})")
        except OSError as exc:  # e.g. a cgroup with no real-time budget
            self._refuse(name, str(exc))

    def _refuse(self, name: str, why: str) -> None:
        with self._lock:
            first, self._refused = not self._refused, True
        if first:
            log.warning(
                "cpu_priority high: could not run thread %s under SCHED_RR %d: %s; the Raft "
                "threads run at normal priority",
                name,
                self.priority,
                why,
            )


def _name_thread(tid: int, name: str) -> None:
    """Give thread `tid` of this process the OS name `name` (best effort: `top -H`, /proc)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/self/task/{tid}/comm").write_text(name[:_COMM_MAX])


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""
