"""MpsDaemonController: the MpsController port over `nvidia-cuda-mps-control`.

One control daemon per GPU, each with its own pipe and log directory
(`<pipe_root>/gpu<i>`, `<log_root>/gpu<i>`) and `CUDA_VISIBLE_DEVICES` set to that GPU (its
UUID when known, as NVIDIA recommends). `start_mps` runs `nvidia-cuda-mps-control -d` and waits
for the daemon's `nvidia-cuda-mps-control.pid` file in the pipe directory; commands are written
to the control program's stdin with the same environment (`quit`,
`set_default_active_thread_percentage <pct>`, ...). Job clients join a GPU's daemon by running
with the same `CUDA_MPS_PIPE_DIRECTORY` (`client_environment`) plus the per-share variables of
`domain.allocation.mps.mps_environment`.

A missing executable is ControllerUnavailable; a non-zero exit or a daemon that does not come
up (or go away) within `timeout_s` is MpsError with the program's stderr.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from gpu_platform.adapters.outbound.cpu_affinity import unpinned
from gpu_platform.ports.outbound.gpu_controller import ControllerUnavailable, MpsError

__all__ = ["PID_FILE", "MpsDaemonController"]

PID_FILE = "nvidia-cuda-mps-control.pid"


class MpsDaemonController:
    def __init__(
        self,
        pipe_root: Path,
        log_root: Path,
        executable: str = "nvidia-cuda-mps-control",
        gpu_ids: Mapping[int, str] | None = None,
        timeout_s: float = 10.0,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self._pipe_root = Path(pipe_root)
        self._log_root = Path(log_root)
        self._exe = executable
        self._gpu_ids = dict(gpu_ids or {})
        self._timeout = timeout_s
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._lock = threading.Lock()

    def pipe_dir(self, gpu_index: int) -> Path:
        return self._pipe_root / f"gpu{gpu_index}"

    def log_dir(self, gpu_index: int) -> Path:
        return self._log_root / f"gpu{gpu_index}"

    def client_environment(self, gpu_index: int) -> dict[str, str]:
        """Variables a job's process needs to be a client of this GPU's daemon."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir(gpu_index)),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir(gpu_index)),
        }

    def _env(self, gpu_index: int) -> dict[str, str]:
        env = dict(self._base_env)
        env["CUDA_VISIBLE_DEVICES"] = self._gpu_ids.get(gpu_index, str(gpu_index))
        env.update(self.client_environment(gpu_index))
        return env

    def _run(self, gpu_index: int, args: list[str], stdin: str = "") -> str:
        try:
            proc = subprocess.run(
                unpinned([self._exe, *args]),  # `-d` leaves the daemon: not on a pinned core
                input=stdin,
                env=self._env(gpu_index),
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
            )
        except FileNotFoundError as e:
            raise ControllerUnavailable(f"{self._exe} not found: install the NVIDIA driver") from e
        except subprocess.TimeoutExpired as e:
            raise MpsError(f"{self._exe} {' '.join(args)} timed out after {self._timeout}s") from e
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()
            raise MpsError(
                f"{self._exe} {' '.join(args) or repr(stdin.strip())} exited "
                f"{proc.returncode}: {detail}"
            )
        return proc.stdout

    def _pid(self, gpu_index: int) -> int | None:
        try:
            pid = int((self.pipe_dir(gpu_index) / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid  # alive, owned by another user (root daemon)
        return pid

    def mps_running(self, gpu_index: int) -> bool:
        return self._pid(gpu_index) is not None

    def _wait(self, gpu_index: int, running: bool) -> None:
        deadline = time.monotonic() + self._timeout
        while self.mps_running(gpu_index) != running:
            if time.monotonic() > deadline:
                state = "start" if running else "stop"
                raise MpsError(f"MPS daemon for GPU {gpu_index} did not {state} in time")
            time.sleep(0.02)

    def start_mps(self, gpu_index: int) -> None:
        with self._lock:
            if self.mps_running(gpu_index):
                return
            self.pipe_dir(gpu_index).mkdir(parents=True, exist_ok=True)
            self.log_dir(gpu_index).mkdir(parents=True, exist_ok=True)
            self._run(gpu_index, ["-d"])
            self._wait(gpu_index, True)

    def stop_mps(self, gpu_index: int) -> None:
        with self._lock:
            if not self.mps_running(gpu_index):
                return
            self._run(gpu_index, [], "quit\n")
            self._wait(gpu_index, False)

    def command(self, gpu_index: int, line: str) -> str:
        """Send one control command to the GPU's running daemon; return its output."""
        with self._lock:
            if not self.mps_running(gpu_index):
                raise MpsError(f"no MPS daemon runs for GPU {gpu_index}")
            return self._run(gpu_index, [], line.rstrip("\n") + "\n")

    def set_default_active_thread_percentage(self, gpu_index: int, percentage: int) -> None:
        if not 1 <= percentage <= 100:
            raise MpsError(f"active thread percentage must be in 1..100, got {percentage}")
        self.command(gpu_index, f"set_default_active_thread_percentage {percentage}")

    def default_active_thread_percentage(self, gpu_index: int) -> float:
        return float(self.command(gpu_index, "get_default_active_thread_percentage").strip())
