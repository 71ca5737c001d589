"""What the runner does to processes it may no longer hold a handle to: an attempt's
leftovers found by their environment marker (`reap`, a restart's clean-up), a process group
signalled that may already be gone, and the launch refusals that keep a job off the bare host.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from gpu_platform.adapters.outbound.process.environment import MARKER, TASK_MARKER
from gpu_platform.ports.outbound.job_runner import LaunchError, LaunchSpec

__all__ = ["kill_marked", "require_mig_instance", "signal_group"]


def kill_marked(job_id: str, epoch: int, rank: int | None = None) -> int:
    """SIGKILL every process whose environment carries this attempt's marker, or only this
    task's (`rank`; other tasks of a gang may run on this host under another agent): those
    that left its process group and session too. The number killed."""
    if rank is None:
        needle = f"{MARKER}={job_id}:{epoch}".encode()
    else:
        needle = f"{TASK_MARKER}={job_id}:{epoch}:{rank}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


def require_mig_instance(spec: LaunchSpec) -> None:
    """A MIG job must come with its MIG device: never run it on the whole GPU instead; an
    image job must run in its container: never run its command bare on the host."""
    if spec.image is not None:
        raise LaunchError(
            f"the job runs in image {spec.image!r} but this node has no container runtime "
            "(setting container_runtime)"
        )
    if spec.mig_profile is not None and not spec.mig_uuids:
        raise LaunchError(
            f"the job asks for MIG profile {spec.mig_profile} but no MIG instance was "
            "assigned: this node has no MIG controller (setting mig_controller)"
        )


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
