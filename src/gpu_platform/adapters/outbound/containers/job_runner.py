"""ContainerJobRunner: the JobRunner port for tasks that run in a container image.

Same promises as a bare process (ProcessJobRunner), kept by the container runtime:
- Environment: the job's variables, torchrun's rendezvous (RANK, MASTER_ADDR...), the
  attempt markers, and the vendor's visible-device masks. When GPUs are handed to the
  container (NVIDIA device requests through the container toolkit, or AMD/Intel device nodes)
  the container sees only those, numbered from 0, so its masks count 0..n-1 and
  NVIDIA_VISIBLE_DEVICES names the host GPUs for the toolkit. On a simulated node nothing is
  handed over and the masks are the bare process's.
- Limits: the task's memory cap (no swap beyond it), CPU and NUMA pinning, pids cap, and
  the account to run as (its host uid:gid) are the container's.
- Output goes to the same `<root>/<job_id>/attempt-<n>[.rank-<r>].log` as a process's, capped
  alike; the container is removed once it has exited and its output is written.
- stop / time limit: SIGTERM, SIGKILL after the grace (`docker stop`); the exit report then
  says killed by signal, timed out, or out of memory (the kernel's OOM killer hit the cap).
- Every container carries labels (owner node, job, epoch, rank): `reap` kills an attempt's
  leftovers, and `reconcile` (at start-up) stops and removes every container of this node
  that this runner does not know, so no orphan of a killed agent keeps running.
"""

from __future__ import annotations

import contextlib
import pwd
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from gpu_platform.adapters.outbound.process.accounts import check_outside
from gpu_platform.adapters.outbound.process.runner import (
    attempt_log_path,
    master_port,
    read_tail,
    task_environment,
    write_capped,
)
from gpu_platform.ports.outbound.container_runtime import (
    OWNER_LABEL,
    ContainerError,
    ContainerRuntime,
    ContainerSpec,
    GpuRequest,
    Mount,
)
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec

__all__ = ["ContainerJobRunner", "gpu_device_nodes"]

log = structlog.get_logger(__name__)
JOB_LABEL, EPOCH_LABEL, RANK_LABEL = (
    "io.gpu-platform.job",
    "io.gpu-platform.epoch",
    "io.gpu-platform.rank",
)
_MASK_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
)


def gpu_device_nodes(
    vendor: str, indices: tuple[int, ...], dev: Path = Path("/dev")
) -> tuple[str, ...]:
    """Host device nodes of GPUs `indices` (AMD, Intel; NVIDIA without device requests) and
    their vendor's control nodes, those that exist: a simulated node has none."""
    if not indices:
        return ()
    if vendor == "nvidia":
        names = [f"nvidia{i}" for i in indices] + ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    else:
        names = [f"dri/card{i}" for i in indices] + [f"dri/renderD{128 + i}" for i in indices]
        names += ["kfd"] if vendor == "amd" else []
    return tuple(str(dev / n) for n in names if (dev / n).exists())


@dataclass
class _Task:
    spec: LaunchSpec
    container_id: str
    pump: threading.Thread
    waiter: threading.Thread | None = None
    limit_timer: threading.Timer | None = None
    stopping: bool = False
    timed_out: bool = False
    handed: tuple[str, ...] = field(default=())


class ContainerJobRunner:
    """Implements JobRunner with a ContainerRuntime. Thread-safe.

    `owner` names this node in the containers' labels (agents sharing one daemon leave each
    other's containers alone); `gpu_requests` hands NVIDIA GPUs over as device requests (the
    container toolkit) instead of device nodes."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        log_root: str | Path,
        *,
        owner: str,
        visible_devices: Literal["index", "uuid"] = "index",
        log_max_bytes: int = 100 << 20,
        pids_max: int | None = None,
        gpu_requests: bool = False,
        device_root: Path = Path("/dev"),
        default_user: str | None = None,
        protected: tuple[Path, ...] = (),
    ) -> None:
        """`default_user`: the account of a job naming none (None: the image's own);
        `protected`: host directories no bind mount may expose (besides `log_root`)."""
        self.runtime = runtime
        self.log_root = Path(log_root)
        self.log_root.mkdir(parents=True, exist_ok=True)
        self._owner = owner
        self._visible = visible_devices
        self._log_max = log_max_bytes
        self._pids_max = pids_max
        self._gpu_requests = gpu_requests
        self._dev = device_root
        self._default_user = default_user
        self._protected = (*protected, self.log_root)
        self._lock = threading.Lock()
        self._live: dict[tuple[str, int, int], _Task] = {}
        self._ports: dict[tuple[str, int], int] = {}

    # -- JobRunner -------------------------------------------------------------------------

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        if spec.image is None:
            raise LaunchError("the container runner runs only tasks that name an image")
        if spec.mig_profile is not None and not spec.mig_uuids:
            raise LaunchError(
                f"the job asks for MIG profile {spec.mig_profile} but no MIG instance was assigned"
            )
        box = self.container_spec(spec)
        path = self.log_path(spec.job_id, spec.attempt, spec.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            cid = self.runtime.run(box)
        except ContainerError as exc:
            raise LaunchError(str(exc)) from exc
        pump = threading.Thread(
            target=self._pump, args=(cid, path), name=f"log-{spec.job_id}", daemon=True
        )
        task = _Task(spec, cid, pump)
        task.waiter = threading.Thread(
            target=self._wait, args=(task, on_exit), name=f"wait-{spec.job_id}", daemon=True
        )
        if spec.time_limit_s is not None:
            task.limit_timer = threading.Timer(spec.time_limit_s, self._time_up, (task,))
            task.limit_timer.daemon = True
        with self._lock:
            self._live[(spec.job_id, spec.epoch, spec.rank)] = task
        pump.start()
        task.waiter.start()
        if task.limit_timer is not None:
            task.limit_timer.start()
        log.info(
            "container started",
            job_id=spec.job_id,
            epoch=spec.epoch,
            rank=spec.rank,
            image=spec.image,
            container=cid[:12],
            runtime=self.runtime.name,
            gpus=list(spec.gpu_indices),
        )

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        with self._lock:
            tasks = [t for (j, e, _), t in self._live.items() if (j, e) == (job_id, epoch)]
            fresh = [t for t in tasks if not t.stopping]
            for task in fresh:
                task.stopping = True
        for task in fresh:  # docker stop blocks for the grace: never on the caller's thread
            threading.Thread(
                target=self._stop_quietly, args=(task.container_id, grace_s), daemon=True
            ).start()
        if fresh:
            log.info("stopping containers", job_id=job_id, epoch=epoch, tasks=len(fresh))
        return bool(tasks)

    def stop_all(self, grace_s: float) -> None:
        with self._lock:
            keys = {(j, e) for j, e, _ in self._live}
        for job_id, epoch in sorted(keys):
            self.stop(job_id, epoch, grace_s)
        with self._lock:
            waiters = [t.waiter for t in self._live.values() if t.waiter is not None]
        for waiter in waiters:
            waiter.join(timeout=grace_s + 30)

    def close(self, grace_s: float = 10.0) -> None:
        self.stop_all(grace_s)

    def reap(self, job_id: str, epoch: int) -> int:
        labels = {OWNER_LABEL: self._owner, JOB_LABEL: job_id, EPOCH_LABEL: str(epoch)}
        return self._remove_unknown(labels)

    def reconcile(self) -> int:
        """Stop and remove every container of this node that this runner did not start (an
        earlier agent's, killed with its tasks still running); return how many."""
        return self._remove_unknown({OWNER_LABEL: self._owner})

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        try:
            with self.log_path(job_id, attempt, rank).open("rb") as f:
                f.seek(offset)
                return f.read(max_bytes)
        except FileNotFoundError:
            return b""

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        return read_tail(self.log_path(job_id, attempt, rank), tail_bytes)

    # -- internals ---------------------------------------------------------------------------

    def log_path(self, job_id: str, attempt: int, rank: int = 0) -> Path:
        """The same layout as ProcessJobRunner's: either runner reads the other's logs."""
        return attempt_log_path(self.log_root, job_id, attempt, rank)

    def container_spec(self, spec: LaunchSpec) -> ContainerSpec:
        """The container one task runs in (see the module docstring for what it promises)."""
        assert spec.image is not None
        env = task_environment(spec, self._visible, self._port_of(spec))
        gpus, devices = None, gpu_device_nodes(spec.vendor, spec.gpu_indices, self._dev)
        if spec.vendor == "nvidia" and spec.gpu_indices and self._gpu_requests:
            ids = spec.mig_uuids or spec.gpu_uuids or tuple(map(str, spec.gpu_indices))
            gpus, devices = GpuRequest("nvidia", ids), ()
        if gpus is not None or devices:  # the container sees only these GPUs, from 0
            count = len(spec.mig_uuids or spec.gpu_indices)
            for name in _MASK_NAMES:
                if env.get(name) and not spec.mig_uuids:
                    env[name] = ",".join(map(str, range(count)))
        if gpus is not None:
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(gpus.device_ids)
        return ContainerSpec(
            name=_container_name(self._owner, spec),
            image=spec.image,
            argv=spec.argv,
            env=env,
            labels={
                OWNER_LABEL: self._owner,
                JOB_LABEL: spec.job_id,
                EPOCH_LABEL: str(spec.epoch),
                RANK_LABEL: str(spec.rank),
            },
            mounts=self._mounts(spec),
            devices=devices,
            gpus=gpus,
            memory_bytes=spec.memory_bytes,
            cpus=spec.cpus,
            mems=spec.mems,
            pids_max=self._pids_max,
            user=_account(spec.user or self._default_user),
            workdir=spec.cwd,
        )

    def _mounts(self, spec: LaunchSpec) -> tuple[Mount, ...]:
        """The job's bind mounts; none may expose the node's data (secrets, other jobs' logs)."""
        mounts = tuple(Mount.parse(m) for m in spec.mounts)
        for mount in mounts:
            check_outside(Path(mount.source), self._protected, "mount")
        return mounts

    def _port_of(self, spec: LaunchSpec) -> int:
        with self._lock:
            return master_port(spec, self._ports)

    def _pump(self, container_id: str, path: Path) -> None:
        try:
            write_capped(self.runtime.logs(container_id), path, self._log_max)
        except ContainerError as exc:
            log.warning("container log stream ended", container=container_id[:12], error=str(exc))

    def _stop_quietly(self, container_id: str, grace_s: float) -> None:
        try:
            self.runtime.stop(container_id, grace_s)
        except ContainerError as exc:
            log.error("could not stop container", container=container_id[:12], error=str(exc))

    def _time_up(self, task: _Task) -> None:
        task.timed_out = True
        log.warning("time limit reached", job_id=task.spec.job_id, limit_s=task.spec.time_limit_s)
        self.stop(task.spec.job_id, task.spec.epoch, grace_s=10.0)  # the whole gang

    def _wait(self, task: _Task, on_exit: Callable[[ExitReport], None]) -> None:
        spec = task.spec
        try:
            exit_ = self.runtime.wait(task.container_id)
            code, oom = exit_.exit_code, exit_.oom_killed
        except ContainerError as exc:
            code, oom = None, False
            log.error("container lost", job_id=spec.job_id, error=str(exc))
        if task.limit_timer is not None:
            task.limit_timer.cancel()
        task.pump.join(timeout=30)
        try:
            self.runtime.remove(task.container_id)
        except ContainerError as exc:
            log.error(
                "could not remove container", container=task.container_id[:12], error=str(exc)
            )
        with self._lock:
            self._live.pop((spec.job_id, spec.epoch, spec.rank), None)
            if not any((j, e) == (spec.job_id, spec.epoch) for j, e, _ in self._live):
                self._ports.pop((spec.job_id, spec.epoch), None)
        report = _report(spec, code, oom, task.timed_out)
        try:
            on_exit(report)
        except Exception:
            log.exception("exit callback failed", job_id=spec.job_id, epoch=spec.epoch)

    def _remove_unknown(self, labels: dict[str, str]) -> int:
        try:
            found = self.runtime.list_ours(labels)
        except ContainerError as exc:
            log.error("cannot list containers", error=str(exc))
            return 0
        with self._lock:
            known = {t.container_id for t in self._live.values()}
        removed = 0
        for info in found:
            if info.id in known:
                continue
            with contextlib.suppress(ContainerError):
                self.runtime.kill(info.id)
                self.runtime.remove(info.id)
                removed += 1
                log.warning("removed leftover container", name=info.name, running=info.running)
        return removed


def _report(spec: LaunchSpec, code: int | None, oom: bool, timed_out: bool) -> ExitReport:
    limit = spec.time_limit_s if timed_out else None
    if code is None:
        return ExitReport(spec.job_id, spec.epoch, None, rank=spec.rank, detail="container lost")
    detail = ""
    if oom:
        detail = f"out of memory: the container's memory limit is {spec.memory_bytes} bytes"
    if code > 128:  # the runtimes' 128+N: killed by signal N
        return ExitReport(spec.job_id, spec.epoch, None, signal=code - 128,
                          timed_out_after_s=limit, rank=spec.rank, detail=detail)  # fmt: skip
    return ExitReport(
        spec.job_id, spec.epoch, code, timed_out_after_s=limit, rank=spec.rank, detail=detail
    )


def _container_name(owner: str, spec: LaunchSpec) -> str:
    """gpu-platform-<node>-<job>-<epoch>-<rank>, in the characters Docker accepts (agents of
    several simulated nodes may share one daemon)."""
    name = f"gpu-platform-{owner}-{spec.job_id}-{spec.epoch}-{spec.rank}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _account(user: str | None) -> str | None:
    """The host account's uid:gid (the image need not know the name)."""
    if user is None:
        return None
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"cannot run as user {user!r}: no such user") from None
    return f"{account.pw_uid}:{account.pw_gid}"
