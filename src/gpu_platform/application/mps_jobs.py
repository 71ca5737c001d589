"""MpsJobRunner: runs a share of one GPU under its GPU's MPS control daemon.

Theory of operation: an attempt whose `LaunchSpec.sharing` is "mps" (the control plane fills
`mps`, its `MpsShare`) is a client of the MPS daemon of its GPU. The first client of a GPU
starts that GPU's daemon (`MpsController.start_mps`); every client gets the share's limits
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, from
`domain.allocation.mps.mps_environment`) and the daemon's pipe and log directories
(`client_environment`); when the last client of a GPU has ended (its exit is reported here
before it is passed on), the daemon is stopped. A time-sliced share ("timeslice") and whole
GPUs pass through untouched: no daemon.

Clients are counted per GPU index under one lock, so concurrent starts and exits of sharers
start the daemon once and stop it once. A daemon that cannot be started is a LaunchError (the
attempt fails with the reason); a daemon that cannot be stopped is logged (the next first
client finds it running: `start_mps` is idempotent).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

import structlog

from gpu_platform.domain.allocation.mps import mps_environment
from gpu_platform.ports.outbound.gpu_controller import GpuControlError, MpsController
from gpu_platform.ports.outbound.job_runner import (
    ExitReport,
    JobRunner,
    JobRunnerWrapper,
    LaunchError,
    LaunchSpec,
)

__all__ = ["MpsClientController", "MpsJobRunner"]

log = structlog.get_logger(__name__)


class MpsClientController(MpsController, Protocol):
    """An MpsController that also says how a client joins a GPU's daemon."""

    def client_environment(self, gpu_index: int) -> dict[str, str]: ...


class MpsJobRunner(JobRunnerWrapper):
    """A JobRunner that makes MPS shares clients of their GPU's daemon, then delegates to
    `inner` (every other method is `inner`'s)."""

    def __init__(self, inner: JobRunner, controller: MpsClientController) -> None:
        super().__init__(inner)
        self._ctl = controller
        self._lock = threading.Lock()
        self._clients: dict[int, set[tuple[str, int, int]]] = {}  # gpu -> (job, epoch, rank)

    def clients(self) -> Mapping[int, int]:
        """Live MPS clients per GPU index (for reports and tests)."""
        with self._lock:
            return {gpu: len(c) for gpu, c in self._clients.items()}

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        if spec.sharing != "mps" or spec.mps is None:
            self._inner.start(spec, on_exit)
            return
        if len(spec.gpu_indices) != 1:
            raise LaunchError(f"an MPS share is of one GPU, not {len(spec.gpu_indices)}")
        gpu = spec.gpu_indices[0]
        key = (spec.job_id, spec.epoch, spec.rank)
        self._join(gpu, key)
        env = dict(spec.env)
        env.update(self._ctl.client_environment(gpu))
        env.update(mps_environment(spec.mps))  # one visible device: ordinal 0

        def ended(report: ExitReport) -> None:
            self._leave(gpu, key)
            on_exit(report)

        try:
            self._inner.start(replace(spec, env=tuple(sorted(env.items()))), ended)
        except BaseException:
            self._leave(gpu, key)
            raise

    def _join(self, gpu: int, key: tuple[str, int, int]) -> None:
        with self._lock:
            clients = self._clients.setdefault(gpu, set())
            if not clients:
                try:
                    self._ctl.start_mps(gpu)
                except GpuControlError as exc:
                    del self._clients[gpu]
                    raise LaunchError(f"GPU {gpu}: MPS daemon did not start: {exc}") from exc
                log.info("mps daemon started", gpu=gpu)
            clients.add(key)

    def _leave(self, gpu: int, key: tuple[str, int, int]) -> None:
        with self._lock:
            clients = self._clients.get(gpu)
            if clients is None or key not in clients:
                return
            clients.discard(key)
            if clients:
                return
            del self._clients[gpu]
            try:
                self._ctl.stop_mps(gpu)
                log.info("mps daemon stopped", gpu=gpu)
            except GpuControlError as exc:
                log.warning("mps daemon did not stop", gpu=gpu, error=str(exc))
