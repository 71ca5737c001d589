"""`RealtimeThreadPriority`: the threads that keep a Raft leader's leadership run under the
real-time round-robin policy (`SCHED_RR`), ahead of every normal thread on the machine
(issue 21: no elections while the cluster is loaded; docs/raft.md, "CPU priority").

Theory of operation. A follower campaigns after 150-300 ms without its leader's heartbeat (the
server's defaults). On a shared 2-core machine at load 10-30 the leader's Raft loop, or the
transport thread that writes its heartbeats, was measured waiting 126-650 ms for a core: the
followers then elect another leader although this one is alive. etcd's tuning guide answers
the same problem by raising etcd's priority with `renice`/`ionice`. Here `nice` does not do
it: with the kernel's autogroups (the default on desktop and many server distributions) nice
values only order threads of one session, and each server is a session of its own; a
real-time policy is above all of them. With `SCHED_RESET_ON_FORK` the threads and processes
such a thread starts do not inherit the policy.

The GIL: a real-time thread still needs the GIL, so it may wait for the thread holding it
(at most the switch interval, 5 ms, once that thread runs); what the policy removes is the
wait for a core, measured in docs/raft.md. What is bounded: the Raft loop, the keeper and the
transport thread block on queues and sockets between bursts of work, and a process runs
Python on one core at a time (the GIL), so they cannot take both cores; the kernel also caps
real-time threads at `sched_rt_runtime_us` (95% by default) of each second.

Privilege: `SCHED_RR` needs CAP_SYS_NICE (root) or an `RLIMIT_RTPRIO` at least the
priority (`LimitRTPRIO=` in a systemd unit, `rtprio` in limits.conf). Without it the OS
refuses (EPERM): one warning line, once per process, and the thread runs on as before.
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["RealtimeThreadPriority"]

log = logging.getLogger(__name__)

_COMM_MAX = 15  # bytes of a thread's OS name (TASK_COMM_LEN - 1)


class RealtimeThreadPriority:
    """`raise_current` puts the calling thread under `SCHED_RR` at `priority` (1-99)."""

    def __init__(self, priority: int) -> None:
        if not 1 <= priority <= 99:
            raise ValueError(f"priority must be in 1..99, got {priority}")
        self.priority = priority
        self.raised: list[str] = []  # the names of the threads raised (for logs and tests)
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
            self._refuse(
                name,
                "not permitted (needs CAP_SYS_NICE, or RLIMIT_RTPRIO >= the priority: "
                "LimitRTPRIO= in a systemd unit)",
            )
            return
        except OSError as exc:  # e.g. a cgroup with no real-time budget
            self._refuse(name, str(exc))
            return
        with self._lock:
            self.raised.append(name)
        log.debug("thread %s (%d) runs under SCHED_RR %d", name, tid, self.priority)

    def _refuse(self, name: str, why: str) -> None:
        with self._lock:
            first, self._refused = not self._refused, True
        if first:
            log.warning(
                "raft_realtime_priority %d: could not raise thread %s to SCHED_RR: %s; "
                "the Raft threads run at normal priority",
                self.priority,
                name,
                why,
            )


def _name_thread(tid: int, name: str) -> None:
    """Give thread `tid` of this process the OS name `name` (best effort)."""
    try:
        with open(f"/proc/self/task/{tid}/comm", "w") as f:
            f.write(name[:_COMM_MAX])
    except OSError:
        pass
